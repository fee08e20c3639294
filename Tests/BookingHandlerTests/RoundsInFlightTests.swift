import Synchronization
import Testing
@testable import BookingHandler

/// The waits the outbox relay builds its overlapping rounds on: room for a
/// round only below the limit, and a drain (before a round that reads the
/// table) only once every round in flight has finished.
@Suite("Relay rounds in flight")
struct RoundsInFlightTests {
    /// A round that finishes when the test opens its gate.
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

    private static func round(_ gate: Gate, _ log: Log, _ name: String) -> Task<OutboxRelay.Round, Never> {
        Task {
            await gate.passed()
            log.append("finished \(name)")
            return OutboxRelay.Round(count: 1, failed: false)
        }
    }

    @Test func aRoundWaitsForRoomAndASweepForEveryRound() async throws {
        let rounds = RoundsInFlight()
        let log = Log()
        let gates = (0..<3).map { _ in Gate() }
        for (i, gate) in gates.enumerated() { rounds.add(Self.round(gate, log, "\(i)")) }

        // Three in flight, limit 3: the next round waits for the oldest.
        let room = Task {
            await rounds.waitForRoom(3)
            log.append("room")
        }
        // Room under the limit is immediate (a limit of 4 with three in flight).
        await rounds.waitForRoom(4)
        #expect(log.all.isEmpty)
        gates[0].open()
        await room.value
        #expect(log.all == ["finished 0", "room"])

        // A sweep waits for both remaining rounds, whichever ends first.
        let drained = Task {
            await rounds.drain()
            log.append("drained")
        }
        gates[2].open()
        gates[1].open()
        await drained.value
        let tail = Array(log.all.suffix(3))
        #expect(Set(tail.prefix(2)) == ["finished 1", "finished 2"])
        #expect(tail.last == "drained")
        // Nothing left: both return at once.
        await rounds.drain()
        await rounds.waitForRoom(1)
    }
}
