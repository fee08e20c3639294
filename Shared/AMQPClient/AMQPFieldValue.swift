import Foundation

/// A table of AMQP field values (message headers, queue arguments).
public typealias AMQPTable = [String: AMQPFieldValue]

/// One value in an AMQP field table, mirroring the AMQP 0-9-1 field types
/// RabbitMQ understands.
public indirect enum AMQPFieldValue: Sendable, Hashable {
    case bool(Bool)
    case int8(Int8)
    case uint8(UInt8)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case float(Float)
    case double(Double)
    case decimal(scale: UInt8, value: UInt32)
    /// A long string that is valid UTF-8 (RabbitMQ's `S`).
    case string(String)
    /// A long string or byte array that is not valid UTF-8.
    case bytes([UInt8])
    /// Seconds since the UNIX epoch (`T`).
    case timestamp(UInt64)
    case array([AMQPFieldValue])
    case table(AMQPTable)
    case void

    /// The value as a string, if it is one.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The value as an integer, if it is any integer kind.
    public var intValue: Int64? {
        switch self {
        case .int8(let v): return Int64(v)
        case .uint8(let v): return Int64(v)
        case .int16(let v): return Int64(v)
        case .uint16(let v): return Int64(v)
        case .int32(let v): return Int64(v)
        case .uint32(let v): return Int64(v)
        case .int64(let v): return v
        case .uint64(let v): return v <= UInt64(Int64.max) ? Int64(v) : nil
        case .timestamp(let v): return v <= UInt64(Int64.max) ? Int64(v) : nil
        default: return nil
        }
    }
}

extension AMQPFieldValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int64(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

/// One entry of RabbitMQ's `x-death` header: how often and why a message was
/// dead-lettered from one queue.
public struct XDeathEntry: Sendable, Equatable {
    /// The queue the message was dead-lettered from.
    public var queue: String
    /// `rejected`, `expired`, `maxlen` or `delivery_limit`.
    public var reason: String
    /// How many times this happened for this queue and reason.
    public var count: Int64
    /// The exchange the message had been published to.
    public var exchange: String
    /// The routing keys the message had been published with.
    public var routingKeys: [String]
    /// When it last happened (seconds since the epoch), if the broker said.
    public var time: UInt64?

    init?(_ value: AMQPFieldValue) {
        guard case .table(let t) = value, let queue = t["queue"]?.stringValue,
              let reason = t["reason"]?.stringValue else { return nil }
        self.queue = queue
        self.reason = reason
        self.count = t["count"]?.intValue ?? 1
        self.exchange = t["exchange"]?.stringValue ?? ""
        if case .array(let keys)? = t["routing-keys"] {
            self.routingKeys = keys.compactMap(\.stringValue)
        } else {
            self.routingKeys = []
        }
        if case .timestamp(let ts)? = t["time"] { self.time = ts } else { self.time = nil }
    }
}
