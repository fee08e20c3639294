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

    /// On a budget of its own: the shared one counts for other suites in
    /// this process.
    @Test func routingKeysAreTruncatedTo64BytesAndAnEmptyOneIsADash() {
        let budget = LabelBudget(limit: 8)
        #expect(MessageMetrics.typeLabel(String(repeating: "x", count: 500), budget: budget) == String(repeating: "x", count: 64))
        #expect(MessageMetrics.typeLabel("", budget: budget) == "-")
    }
}
