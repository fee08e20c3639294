import Tracing

/// W3C trace context in AMQP header tables, and the spans the layer makes
/// for messages (OpenTelemetry messaging semantic conventions).
///
/// Everything here runs in the caller's task, before a message is handed
/// to the I/O thread or after a delivery left it: the loop and the session
/// only ever see the header values. With no tracer bootstrapped
/// (swift-distributed-tracing's no-op), every function costs a few
/// calls and changes no header.
public enum MessageTracing {
    /// The header carrying the W3C `traceparent`.
    public static let traceParentHeader = "traceparent"
    /// The header carrying the W3C `tracestate`.
    public static let traceStateHeader = "tracestate"

    /// The context a message carries in its headers (empty: none, or no
    /// tracer that reads it).
    public static func extract(from headers: AMQPTable,
                               tracer: any Tracer = InstrumentationSystem.tracer) -> ServiceContext {
        var context = ServiceContext.topLevel
        tracer.extract(headers, into: &context, using: AMQPHeadersExtractor())
        return context
    }

    /// Writes `context` (its span's `traceparent`, `tracestate`) into `headers`.
    public static func inject(_ context: ServiceContext, into headers: inout AMQPTable,
                              tracer: any Tracer = InstrumentationSystem.tracer) {
        tracer.inject(context, into: &headers, using: AMQPHeadersInjector())
    }

    /// Starts the producer span of a publish and writes its context into
    /// the message's headers; the caller ends it once the broker answered.
    ///
    /// Its parent is the current task's context when there is one (a
    /// reply, an event or a retry made while handling a delivery), else the
    /// `traceparent` the message already carries (an event the outbox
    /// stored with its command's context, a dead letter sent back), else
    /// none: a new trace.
    ///
    /// `tracer` is the process's (tests give their own).
    public static func startPublishSpan(_ message: inout OutgoingMessage, operation: String = "publish",
                                        tracer: any Tracer = InstrumentationSystem.tracer) -> any Tracing.Span {
        let parent = ServiceContext.current ?? extract(from: message.properties.headers, tracer: tracer)
        let span = tracer.startSpan("\(operation) \(spanDestination(exchange: message.exchange, routingKey: message.routingKey))",
                                    context: parent, ofKind: .producer)
        if span.isRecording {
            span.attributes = messagingAttributes(operation: operation, kind: "send", exchange: message.exchange,
                                                  routingKey: message.routingKey, properties: message.properties)
        }
        inject(span.context, into: &message.properties.headers, tracer: tracer)
        if message.traceState == .drop { message.properties.headers[traceStateHeader] = nil }
        return span
    }

    /// Runs `body` in the consumer span of `delivery`, whose parent is the
    /// context the message carries (none: a new trace).
    static func withConsumeSpan(_ delivery: AMQPDelivery, queue: String,
                                _ body: @Sendable (AMQPDelivery) async -> Void) async {
        let parent = extract(from: delivery.properties.headers)
        await withSpan("process \(queue)", context: parent, ofKind: .consumer) { span in
            if span.isRecording {
                var attributes = messagingAttributes(operation: "process", kind: "process", exchange: delivery.exchange,
                                                     routingKey: delivery.routingKey, properties: delivery.properties)
                attributes["messaging.destination.subscription.name"] = queue
                attributes["messaging.rabbitmq.message.delivery_tag"] = Int(truncatingIfNeeded: delivery.deliveryTag)
                if delivery.redelivered { attributes["messaging.rabbitmq.redelivered"] = true }
                span.attributes = attributes
            }
            await body(delivery)
        }
    }

    /// The destination in a span's name: the exchange, or for the default
    /// exchange the queue — `(temporary)` for the broker's names (direct
    /// reply-to, server-named queues), so span names stay few.
    static func spanDestination(exchange: String, routingKey: String) -> String {
        if !exchange.isEmpty { return exchange }
        return routingKey.hasPrefix("amq.") ? "(temporary)" : routingKey
    }

    /// The attributes of OpenTelemetry's messaging conventions for RabbitMQ.
    static func messagingAttributes(operation: String, kind: String, exchange: String, routingKey: String,
                                    properties: AMQPProperties) -> SpanAttributes {
        var attributes = SpanAttributes()
        attributes["messaging.system"] = "rabbitmq"
        attributes["messaging.operation.name"] = operation
        attributes["messaging.operation.type"] = kind
        // RabbitMQ's destination is the exchange; the default exchange
        // routes by queue name, which is the better name for it.
        attributes["messaging.destination.name"] = exchange.isEmpty ? routingKey : exchange
        attributes["messaging.rabbitmq.destination.routing_key"] = routingKey
        if let id = properties.messageID { attributes["messaging.message.id"] = id }
        if let id = properties.correlationID { attributes["messaging.message.conversation_id"] = id }
        if let type = properties.type { attributes["messaging.message.type"] = type }
        return attributes
    }
}

/// Reads W3C trace headers from an AMQP header table (string values; a
/// byte array that is UTF-8 is read too).
public struct AMQPHeadersExtractor: Extractor {
    public init() {}

    public func extract(key: String, from carrier: AMQPTable) -> String? {
        switch carrier[key] {
        case .string(let value)?: value
        case .bytes(let bytes)?: String(validating: bytes, as: UTF8.self)
        default: nil
        }
    }
}

/// Writes W3C trace headers into an AMQP header table, as long strings.
public struct AMQPHeadersInjector: Injector {
    public init() {}

    public func inject(_ value: String, forKey key: String, into carrier: inout AMQPTable) {
        carrier[key] = .string(value)
    }
}
