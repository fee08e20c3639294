import Synchronization
import Tracing

/// A message to publish: where it goes, what it carries, and whether it
/// must reach a queue. ``AMQPConnection/publish(_:)`` sends one,
/// ``AMQPConnection/publish(batch:)`` several in order.
public struct OutgoingMessage: Sendable, Equatable {
    /// The exchange (`""`: the default exchange, which routes by queue name).
    public var exchange: String
    /// The routing key.
    public var routingKey: String
    /// The body.
    public var body: [UInt8]
    /// The properties (persistence, type, ids, headers).
    public var properties: AMQPProperties
    /// Fail with `unroutable` when no queue matches, instead of the broker
    /// dropping the message silently.
    public var mandatory: Bool
    /// Whether the W3C `tracestate` goes with the `traceparent` the
    /// publish writes (``MessageTracing``).
    public var traceState: TraceStatePolicy

    public init(body: [UInt8], exchange: String = "", routingKey: String, properties: AMQPProperties = AMQPProperties(),
                mandatory: Bool = false, traceState: TraceStatePolicy = .propagate) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.body = body
        self.properties = properties
        self.mandatory = mandatory
        self.traceState = traceState
    }
}

/// What a publish does with the W3C `tracestate` of its trace.
public enum TraceStatePolicy: Sendable, Equatable {
    /// Written with the `traceparent` (vendor data of the caller's trace
    /// goes where the trace goes).
    case propagate
    /// Left out, also when the message carried one: a copy for readers
    /// outside the set, who get the trace id but not the caller's vendor
    /// data (`booking.public`).
    case drop
}

/// The broker's answers to one ``AMQPConnection/startPublishing(batch:)``:
/// one entry per message, nil when confirmed, else the error. Fulfilled
/// once, by the I/O thread; awaited by any number of tasks.
public final class PendingConfirmations: Sendable {
    let results = OneShot<[AMQPError?]>()
    /// The publish span of each message, ended by the first reader of the
    /// answers (taken out, so only once).
    private let spans: Mutex<[any Tracing.Span]>

    init(spans: [any Tracing.Span] = []) {
        self.spans = Mutex(spans)
    }

    /// Waits until every message of the batch is confirmed or failed.
    public func confirmations() async -> [AMQPError?] {
        let answers = await results.value()
        let spans = self.spans.withLock { spans in
            defer { spans = [] }
            return spans
        }
        for (span, answer) in zip(spans, answers) {
            if let answer {
                span.recordError(answer)
                span.setStatus(SpanStatus(code: .error))
            }
            span.end()
        }
        return answers
    }

    /// Whether the answers are in (without waiting).
    public var isSettled: Bool { results.isSettled }
}
