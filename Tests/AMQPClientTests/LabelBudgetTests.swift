import Testing
@testable import AMQPClient

/// The `type` dimension of the per-queue message metrics stays bounded
/// whatever routing keys strangers send.
@Suite("Metric label budget")
struct LabelBudgetTests {
    @Test func newValuesBeyondTheLimitAreCountedAsOther() {
        let budget = LabelBudget(limit: 3)
        #expect(["booking.create", "booking.get", "booking.create"].map(budget.label) == ["booking.create", "booking.get", "booking.create"])
        #expect(budget.label("k1") == "k1", "the third value still fits")
        let flood = (2...10_000).map { budget.label("k\($0)") }
        #expect(Set(flood) == ["other"])
        #expect(budget.label("booking.get") == "booking.get", "values admitted before keep their label")
    }

    /// The shared budget is left alone (other suites in this process count
    /// through it): only its truncation is checked here.
    @Test func routingKeysAreTruncatedTo64Bytes() {
        let label = MessageMetrics.typeLabel(String(repeating: "x", count: 500))
        #expect(label == String(repeating: "x", count: 64) || label == "other")
    }
}
