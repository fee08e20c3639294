import ArgumentParser
import BookingContracts
import BookingHandler
import Foundation

/// The booking handler's command path without the broker: decode, rules,
/// one SQLite transaction with inbox and outbox. Shows how much of the
/// end-to-end time is the handler's own work.
struct StoreBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store", abstract: "CommandProcessor.process for booking.create, sequential and 16 concurrent, no broker.")

    @Option(help: "Commands per measurement.")
    var count = 5_000

    func run() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-store-\(getpid())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let store = try SQLiteBookingStore(path: work.appendingPathComponent("db.sqlite").path)
        let processor = CommandProcessor(store: store)
        _ = try await processor.upsertRooms(fileContents: try ContractJSON.encode((0..<200).map { RegisterRoom(name: "Room \($0)", capacity: 10) }))
        let slots = SlotSequence(rooms: 200)

        for (label, concurrency) in [("sequential", 1), ("16 concurrent", 16)] {
            let start = monotonicNow()
            let samples = try await withThrowingTaskGroup(of: [UInt64].self) { group in
                for _ in 0..<concurrency {
                    group.addTask {
                        var samples: [UInt64] = []
                        while let body = slots.next(limit: count) {
                            let t0 = monotonicNow()
                            let result = try await processor.process(IncomingCommand(
                                body: body, typeProperty: "booking.create", routingKey: "booking.create",
                                messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: nil))
                            samples.append(monotonicNow() - t0)
                            guard case .handled(let reply, _, _, _) = result, reply.isOK else { throw ValidationError("command failed: \(result)") }
                        }
                        return samples
                    }
                }
                var all: [UInt64] = []
                for try await s in group { all += s }
                return all
            }
            slots.resetLimit()
            var latencies = Latencies()
            latencies.add(contentsOf: samples)
            let rate = Double(samples.count) / (Double(monotonicNow() - start) / 1e9)
            print(String(format: "process(booking.create) %@: %.0f cmd/s, p50 %.3f ms, p99 %.3f ms",
                         label as NSString, rate, latencies.percentile(50), latencies.percentile(99)))
        }
    }
}
