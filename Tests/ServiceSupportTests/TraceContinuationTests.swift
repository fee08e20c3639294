import AMQPClient
import ServiceSupport
import Testing

/// ``MessageTracing/continueTrace(in:)``: what `bookingctl failed retry`
/// writes into a dead letter it sends again — the same trace, a span id
/// of its own — and what it leaves alone.
@Suite("Trace continuation")
struct TraceContinuationTests {
    static let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func aRetryGetsANewSpanIDInTheSameTrace() throws {
        var headers: AMQPTable = ["traceparent": .string(Self.traceParent), "tracestate": .string("vendor=1")]
        #expect(MessageTracing.continueTrace(in: &headers))
        let written = try #require(headers["traceparent"]?.stringValue)
        let original = try #require(W3CSpanContext(traceParent: Self.traceParent))
        let child = try #require(W3CSpanContext(traceParent: written), "\(written) is a valid traceparent")
        #expect(child.traceIDHex == original.traceIDHex && child.flags == original.flags)
        #expect(child.spanID != original.spanID)
        #expect(headers["tracestate"]?.stringValue == "vendor=1")
    }

    /// Unsampled stays unsampled; a byte-array header is read too.
    @Test func keepsFlagsAndReadsByteArrays() throws {
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        var headers: AMQPTable = ["traceparent": .bytes(Array(unsampled.utf8))]
        #expect(MessageTracing.continueTrace(in: &headers))
        let written = try #require(headers["traceparent"]?.stringValue)
        #expect(written.hasPrefix("00-4bf92f3577b34da6a3ce929d0e0e4736-") && written.hasSuffix("-00"))
        #expect(written != unsampled)
    }

    /// Every retry of one message is a span of its own.
    @Test func repeatedRetriesAreDistinct() {
        let ids = Set((0..<1000).compactMap { _ in MessageTracing.childTraceParent(of: Self.traceParent) })
        #expect(ids.count == 1000)
    }

    @Test(arguments: [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero span id
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // not version 00
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // version 00 with more
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
        "",
    ])
    func leavesAnythingElseAlone(_ header: String) {
        var headers: AMQPTable = ["traceparent": .string(header)]
        #expect(!MessageTracing.continueTrace(in: &headers))
        #expect(headers["traceparent"]?.stringValue == header)
    }

    @Test func noHeaderNoTrace() {
        var headers: AMQPTable = [:]
        #expect(!MessageTracing.continueTrace(in: &headers))
        #expect(headers.isEmpty)
    }
}
