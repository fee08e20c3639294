/// Checks arguments against AMQP 0-9-1 limits before they reach rabbitmq-c,
/// which would otherwise write a corrupt frame (it truncates short-string
/// lengths to one byte) and cost the whole connection.
enum AMQPLimits {
    static let shortStringMax = 255

    static func shortString(_ value: String?, _ what: String) throws(AMQPError) {
        guard let value, value.utf8.count > shortStringMax else { return }
        throw AMQPError(.invalidArgument, "\(what) is \(value.utf8.count) bytes; AMQP allows at most \(shortStringMax)")
    }

    static func table(_ table: AMQPTable, _ what: String) throws(AMQPError) {
        for (key, value) in table {
            try shortString(key, "\(what) key")
            try fieldValue(value, what)
        }
    }

    static func fieldValue(_ value: AMQPFieldValue, _ what: String) throws(AMQPError) {
        switch value {
        case .table(let t): try table(t, what)
        case .array(let items): for item in items { try fieldValue(item, what) }
        default: break
        }
    }

    static func properties(_ p: AMQPProperties) throws(AMQPError) {
        try shortString(p.contentType, "content_type")
        try shortString(p.contentEncoding, "content_encoding")
        try shortString(p.correlationID, "correlation_id")
        try shortString(p.replyTo, "reply_to")
        try shortString(p.expiration, "expiration")
        try shortString(p.messageID, "message_id")
        try shortString(p.type, "type")
        try shortString(p.userID, "user_id")
        try shortString(p.appID, "app_id")
        try shortString(p.clusterID, "cluster_id")
        try table(p.headers, "header")
        let size = encodedSize(p)
        if size > contentHeaderMax {
            // rabbitmq-c sends `basic.publish` before it finds the header
            // frame too big, and the broker then closes the connection
            // (505) for a method without its content: every unacked
            // delivery of the connection would come back.
            throw AMQPError(.invalidArgument,
                            "the message's properties and headers take \(size) bytes; one frame holds at most \(contentHeaderMax)")
        }
    }

    /// The frame size the connection asks for (`CConnection`).
    static let frameMax = 131_072
    /// What a content header frame has room for beside its fixed fields:
    /// frame_max less the frame's 8 bytes, the header's 14 (class, weight,
    /// body size, property flags) and 32 for the `x-publish-seq` header the
    /// layer adds to a mandatory publish (23 bytes).
    static let contentHeaderMax = frameMax - 8 - 14 - 32

    /// The encoded size of `p`'s properties, as AMQP 0-9-1 writes them.
    static func encodedSize(_ p: AMQPProperties) -> Int {
        func short(_ s: String?) -> Int { s.map { 1 + $0.utf8.count } ?? 0 }
        var size = short(p.contentType) + short(p.contentEncoding) + short(p.correlationID) + short(p.replyTo)
            + short(p.expiration) + short(p.messageID) + short(p.type) + short(p.userID) + short(p.appID)
            + short(p.clusterID)
        if p.deliveryMode != nil { size += 1 }
        if p.priority != nil { size += 1 }
        if p.timestamp != nil { size += 8 }
        if !p.headers.isEmpty { size += tableSize(p.headers) }
        return size
    }

    static func tableSize(_ table: AMQPTable) -> Int {
        4 + table.reduce(0) { $0 + 1 + $1.key.utf8.count + fieldSize($1.value) }
    }

    /// One field value with its type octet.
    static func fieldSize(_ value: AMQPFieldValue) -> Int {
        switch value {
        case .bool, .int8, .uint8: 2
        case .int16, .uint16: 3
        case .int32, .uint32, .float: 5
        case .int64, .uint64, .double, .timestamp: 9
        case .decimal: 6
        case .string(let s): 5 + s.utf8.count
        case .bytes(let b): 5 + b.count
        case .array(let items): 5 + items.reduce(0) { $0 + fieldSize($1) }
        case .table(let t): 1 + tableSize(t)
        case .void: 1
        }
    }

    static func message(_ m: OutgoingMessage) throws(AMQPError) {
        try shortString(m.exchange, "exchange name")
        try shortString(m.routingKey, "routing key")
        try properties(m.properties)
    }

    static func topology(_ item: TopologyItem) throws(AMQPError) {
        switch item {
        case .exchange(let e):
            try shortString(e.name, "exchange name")
            try table(e.arguments, "exchange argument")
        case .queue(let q):
            try shortString(q.name, "queue name")
            try table(q.arguments, "queue argument")
        case .binding(let b):
            try shortString(b.queue, "queue name")
            try shortString(b.exchange, "exchange name")
            try shortString(b.routingKey, "binding key")
            try table(b.arguments, "binding argument")
        }
    }
}
