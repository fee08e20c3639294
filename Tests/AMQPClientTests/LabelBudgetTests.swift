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

    /// A stranger's flood before the first real command must not take the
    /// contract's names.
    @Test func reservedValuesKeepTheirLabelAndDoNotCountTowardsTheLimit() {
        let budget = LabelBudget(limit: 2)
        #expect(budget.label("booking.get") == "booking.get")
        budget.reserve(["booking.create", "booking.get"])
        #expect((1...100).map { budget.label("k\($0)") }.prefix(2) == ["k1", "k2"],
                "reserved values, including one admitted before, leave the whole limit to others")
        #expect(budget.label("k3") == "other")
        #expect(budget.label("booking.create") == "booking.create")
        #expect(budget.label("booking.get") == "booking.get")
    }

    /// On a budget of its own: the shared one counts for other suites in
    /// this process.
    @Test func routingKeysAreTruncatedTo64BytesAndAnEmptyOneIsADash() {
        let budget = LabelBudget(limit: 8)
        #expect(MessageMetrics.typeLabel(String(repeating: "x", count: 500), budget: budget) == String(repeating: "x", count: 64))
        #expect(MessageMetrics.typeLabel("", budget: budget) == "-")
    }
}
