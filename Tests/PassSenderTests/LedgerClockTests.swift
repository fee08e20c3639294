import Foundation
import Logging
import MetricsTestKit
import Synchronization
import Testing
@testable import PassSender

/// The ledger's clock on scripted readings of a server's clock: the offset
/// is the server's time against the middle of the round trip, a slow
/// reading is not used, and a host far off the server is logged once per
/// change. (`SharedLedgerTests` runs it against a real PostgreSQL.)
@Suite("Ledger clock")
struct LedgerClockTests {
    /// Log lines written, by level and message.
    final class Lines: LogHandler, @unchecked Sendable {  // `written` is behind its mutex
        let written = Mutex<[(Logger.Level, String)]>([])
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
                 file: String, function: String, line: UInt) {
            written.withLock { $0.append((level, message.description)) }
        }
        var warnings: Int { written.withLock { $0.filter { $0.0 == .warning }.count } }
    }

    /// A host clock that stands still unless moved, and a server whose
    /// readings the test scripts: `(server − host at sent, round trip)`.
    final class Script: Sendable {
        let host = Mutex<TimeInterval>(1_800_000_000)
        let next = Mutex<[(ahead: TimeInterval, roundTrip: TimeInterval)]>([])

        func read(_ local: @escaping @Sendable () -> Date) throws -> ServerClockReading? {
            let step = next.withLock { $0.removeFirst() }
            let sent = local()
            host.withLock { $0 += step.roundTrip }
            // The server answers half way through the round trip.
            let server = sent.addingTimeInterval(step.ahead + step.roundTrip / 2)
            return ServerClockReading(sent: sent, server: server, received: local())
        }
    }

    static func clock(_ script: Script, lines: Lines = Lines(), metrics: TestMetrics = TestMetrics()) -> LedgerClock {
        LedgerClock(read: { try script.read($0) }, base: { Date(timeIntervalSince1970: script.host.withLock { $0 }) },
                    logger: Logger(label: "clock") { _ in lines }, metrics: PassSenderMetrics(factory: metrics))
    }

    @Test func theOffsetIsTheServersTimeAgainstTheMiddleOfTheRoundTrip() async throws {
        let script = Script()
        let metrics = TestMetrics()
        let clock = Self.clock(script, metrics: metrics)
        script.next.withLock { $0 = [(ahead: -42.5, roundTrip: 0.2)] }
        #expect(try await clock.sync())
        #expect(abs(clock.offset + 42.5) < 1e-6)
        let host = script.host.withLock { $0 }
        #expect(abs(clock.now().timeIntervalSince1970 - (host - 42.5)) < 1e-6)
        #expect(try metrics.expectGauge("pass_ledger_clock_offset_seconds").lastValue.map { abs($0 + 42.5) < 1e-6 } == true)
    }

    @Test func aReadingWithALongRoundTripIsNotUsed() async throws {
        let script = Script()
        let clock = Self.clock(script)
        script.next.withLock { $0 = [(ahead: 3, roundTrip: 0.01), (ahead: 30, roundTrip: 1.5)] }
        #expect(try await clock.sync())
        #expect(try await clock.sync() == false)
        #expect(abs(clock.offset - 3) < 1e-6, "the earlier offset stays")
    }

    @Test func startTriesAgainAfterSlowReadingsAndThenFallsBackToTheHostsClock() async throws {
        let script = Script()
        let lines = Lines()
        let clock = Self.clock(script, lines: lines)
        script.next.withLock { $0 = [(ahead: 7, roundTrip: 2), (ahead: 8, roundTrip: 0.05)] }
        try await clock.start()
        #expect(abs(clock.offset - 8) < 1e-6 && script.next.withLock { $0.isEmpty })

        let slow = Script()
        let slowLines = Lines()
        let fallback = Self.clock(slow, lines: slowLines)
        slow.next.withLock { $0 = Array(repeating: (ahead: 9, roundTrip: 3), count: 5) }
        try await fallback.start()
        #expect(fallback.offset == 0, "no reading used: the host's clock")
        #expect(slowLines.written.withLock { $0.contains { $0.0 == .warning && $0.1.contains("using this host's clock") } })
    }

    @Test func aHostFarOffTheServerIsLoggedOncePerChange() async throws {
        let script = Script()
        let lines = Lines()
        let clock = Self.clock(script, lines: lines)
        script.next.withLock {
            $0 = [(ahead: 0.3, roundTrip: 0.01), (ahead: 5, roundTrip: 0.01), (ahead: 5.2, roundTrip: 0.01),
                  (ahead: 7, roundTrip: 0.01), (ahead: 0.1, roundTrip: 0.01), (ahead: 7, roundTrip: 0.01)]
        }
        try await clock.sync()
        #expect(lines.warnings == 0, "0.3 s is within the margin")
        try await clock.sync()
        #expect(lines.warnings == 1)
        try await clock.sync()
        #expect(lines.warnings == 1, "the same offset is not logged again every 10 s")
        try await clock.sync()
        #expect(lines.warnings == 2, "a change of 2 s is")
        try await clock.sync()
        try await clock.sync()
        #expect(lines.warnings == 3, "after the clock was right again, a new skew is logged")
    }

    @Test func aLedgerOnThisHostHasNoOffset() async throws {
        let clock = LedgerClock(read: { _ in nil }, base: { Date(timeIntervalSince1970: 100) }, logger: Logger(label: "clock"),
                                metrics: PassSenderMetrics(factory: TestMetrics()))
        #expect(try await clock.sync())
        #expect(clock.offset == 0 && clock.now() == Date(timeIntervalSince1970: 100))
    }

    @Test func theSteadyClockStartsAtTheHostsTimeAndNeverGoesBack() {
        let steady = LedgerClock.steadyClock()
        let first = steady()
        #expect(abs(first.timeIntervalSinceNow) < 0.5)
        var last = first
        for _ in 0..<10_000 {
            let next = steady()
            #expect(next >= last)
            last = next
        }
        // And it moves: once the host's clock has passed it, so has it.
        while Date() <= first.addingTimeInterval(0.002) {}
        #expect(steady() > first)
    }
}
