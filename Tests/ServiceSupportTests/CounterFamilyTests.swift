import Metrics
import MetricsTestKit
import ServiceSupport
import Testing

@Suite("Counter families")
struct CounterFamilyTests {
    /// Each combination of label values is its own counter, named by the
    /// family's label names in declaration order, and counts add up across
    /// uses (the cached counter, not a fresh one each time).
    @Test func eachCombinationCountsOnItsOwn() throws {
        let metrics = TestMetrics()
        let family = CounterFamily("booking_commands_total", labels: "type", "outcome", factory: metrics)
        family.increment("booking.create", "ok")
        family.increment("booking.create", "ok", by: 2)
        family.increment("booking.create", "rejected")
        family.increment("booking.cancel", "ok")
        #expect(try metrics.expectCounter("booking_commands_total", [("type", "booking.create"), ("outcome", "ok")]).totalValue == 3)
        #expect(try metrics.expectCounter("booking_commands_total", [("type", "booking.create"), ("outcome", "rejected")]).totalValue == 1)
        #expect(try metrics.expectCounter("booking_commands_total", [("type", "booking.cancel"), ("outcome", "ok")]).totalValue == 1)
        #expect(metrics.counters.count == 3, "one counter per combination, made once")
    }

    /// Many tasks counting at once lose no increment.
    @Test func concurrentIncrementsAllCount() async throws {
        let metrics = TestMetrics()
        let family = CounterFamily("projector_events_total", labels: "outcome", factory: metrics)
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask { for _ in 0..<1000 { family.increment(task % 2 == 0 ? "applied" : "stale") } }
            }
        }
        #expect(try metrics.expectCounter("projector_events_total", [("outcome", "applied")]).totalValue == 4000)
        #expect(try metrics.expectCounter("projector_events_total", [("outcome", "stale")]).totalValue == 4000)
    }
}
