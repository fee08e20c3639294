import Synchronization
import Testing
import ServiceSupport

/// The waits an overlapping publisher builds on (the outbox relay's
/// rounds): room for a task only below the limit, and a
/// drain (the relay's before a round that reads the table, shutdown's) only
/// once every task in flight has finished.
@Suite("Tasks in flight")
struct InFlightTasksTests {
    /// A task that finishes when the test opens its gate.
    private final class Gate: Sendable {
        private let stream: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation
        init() { (stream, continuation) = AsyncStream.makeStream() }
        func open() { continuation.yield(); continuation.finish() }
        func passed() async { for await _ in stream { return } }
    }

    /// What happened, in order.
    private final class Log: Sendable {
        private let lines = Mutex<[String]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    private static func task(_ gate: Gate, _ log: Log, _ name: String) -> Task<Int, Never> {
        Task {
            await gate.passed()
            log.append("finished \(name)")
            return 1
        }
    }

    @Test func aTaskWaitsForRoomAndADrainForEveryTask() async throws {
        let tasks = InFlightTasks<Int>()
        let log = Log()
        let gates = (0..<3).map { _ in Gate() }
        for (i, gate) in gates.enumerated() { tasks.add(Self.task(gate, log, "\(i)")) }

        // Three in flight, limit 3: the next task waits for the oldest.
        let room = Task {
            await tasks.waitForRoom(3)
            log.append("room")
        }
        // Room under the limit is immediate (a limit of 4 with three in flight).
        await tasks.waitForRoom(4)
        #expect(log.all.isEmpty)
        gates[0].open()
        await room.value
        #expect(log.all == ["finished 0", "room"])

        // A drain waits for both remaining tasks, whichever ends first.
        let drained = Task {
            await tasks.drain()
            log.append("drained")
        }
        gates[2].open()
        gates[1].open()
        await drained.value
        let tail = Array(log.all.suffix(3))
        #expect(Set(tail.prefix(2)) == ["finished 1", "finished 2"])
        #expect(tail.last == "drained")
        // Nothing left: both return at once.
        await tasks.drain()
        await tasks.waitForRoom(1)
    }
}
