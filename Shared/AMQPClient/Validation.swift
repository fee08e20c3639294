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
