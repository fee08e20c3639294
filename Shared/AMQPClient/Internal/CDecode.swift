import CRabbitMQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Copies rabbitmq-c's decoded tables and properties into Swift values.
///
/// Why a depth limit: field tables nest (a table or array inside a table or
/// array, to any depth the frame allows), and decoding them is recursive.
/// This runs on the connection's I/O thread for every delivery, so a
/// message whose headers nest some ten thousand levels (about 50 KiB, well
/// inside the 128 KiB frame_max we ask for) would overflow that thread's
/// stack and kill the whole service, for every consumer of the connection.
/// rabbitmq-c itself decodes such frames without crashing (C frames are
/// small; measured: 26,000 nested arrays in one 128 KiB frame fit in its
/// 8 MiB stack), so the guard belongs here.
///
/// What happens beyond the limit: a table or array that would sit deeper
/// than ``maxDepth`` levels (the headers table itself is level 1) decodes
/// as `.void`, and the decode reports how many values it cut
/// (``properties(_:truncated:)``); the I/O loop logs that and counts it in
/// `amqp_header_values_truncated_total`. The delivery itself goes on to its
/// consumer unchanged otherwise: no header the services read nests at all,
/// and RabbitMQ's own deepest (`x-death`: headers → array → table → array
/// of routing keys) uses 4 levels, so only values nobody reads are lost,
/// and dropping the whole message on our side would lose a command that is
/// otherwise fine. Simplest safe choice; nothing recurses without bound.
///
/// Entry counts need no limit of their own: rabbitmq-c has already
/// allocated every entry from one frame of at most frame_max (128 KiB)
/// bytes, at least one byte each, and copying them is linear.
enum CDecode {
    /// Deepest nesting of tables and arrays that is decoded, counting the
    /// headers table as level 1.
    static let maxDepth = 16

    static func table(_ t: amqp_table_t) -> AMQPTable {
        var truncated = 0
        return table(t, level: 1, truncated: &truncated)
    }

    /// Decodes `t`, which sits at `level` (1 for a headers table); adds to
    /// `truncated` one for each nested table or array cut to `.void`.
    static func table(_ t: amqp_table_t, level: Int, truncated: inout Int) -> AMQPTable {
        var out: AMQPTable = [:]
        guard t.num_entries > 0, let entries = t.entries else { return out }
        for i in 0..<Int(t.num_entries) {
            out[entries[i].key.string] = fieldValue(entries[i].value, level: level + 1, truncated: &truncated)
        }
        return out
    }

    static func fieldValue(_ v: amqp_field_value_t) -> AMQPFieldValue {
        var truncated = 0
        return fieldValue(v, level: 1, truncated: &truncated)
    }

    /// Decodes `v`; a table or array in it sits at `level`, and is `.void`
    /// when that is deeper than ``maxDepth``.
    static func fieldValue(_ v: amqp_field_value_t, level: Int, truncated: inout Int) -> AMQPFieldValue {
        switch amqp_field_value_kind_t(UInt32(v.kind)) {
        case AMQP_FIELD_KIND_BOOLEAN: return .bool(v.value.boolean != 0)
        case AMQP_FIELD_KIND_I8: return .int8(v.value.i8)
        case AMQP_FIELD_KIND_U8: return .uint8(v.value.u8)
        case AMQP_FIELD_KIND_I16: return .int16(v.value.i16)
        case AMQP_FIELD_KIND_U16: return .uint16(v.value.u16)
        case AMQP_FIELD_KIND_I32: return .int32(v.value.i32)
        case AMQP_FIELD_KIND_U32: return .uint32(v.value.u32)
        case AMQP_FIELD_KIND_I64: return .int64(v.value.i64)
        case AMQP_FIELD_KIND_U64: return .uint64(v.value.u64)
        case AMQP_FIELD_KIND_F32: return .float(v.value.f32)
        case AMQP_FIELD_KIND_F64: return .double(v.value.f64)
        case AMQP_FIELD_KIND_DECIMAL: return .decimal(scale: v.value.decimal.decimals, value: v.value.decimal.value)
        case AMQP_FIELD_KIND_UTF8, AMQP_FIELD_KIND_BYTES:
            let raw = v.value.bytes.array
            if let s = String(validating: raw, as: UTF8.self) { return .string(s) }
            return .bytes(raw)
        case AMQP_FIELD_KIND_TIMESTAMP: return .timestamp(v.value.u64)
        case AMQP_FIELD_KIND_TABLE:
            guard level <= maxDepth else {
                truncated += 1
                return .void
            }
            return .table(table(v.value.table, level: level, truncated: &truncated))
        case AMQP_FIELD_KIND_ARRAY:
            guard level <= maxDepth else {
                truncated += 1
                return .void
            }
            let a = v.value.array
            guard a.num_entries > 0, let entries = a.entries else { return .array([]) }
            var items: [AMQPFieldValue] = []
            items.reserveCapacity(Int(a.num_entries))
            for i in 0..<Int(a.num_entries) {
                items.append(fieldValue(entries[i], level: level + 1, truncated: &truncated))
            }
            return .array(items)
        default: return .void
        }
    }

    static func properties(_ c: amqp_basic_properties_t) -> AMQPProperties {
        var truncated = 0
        return properties(c, truncated: &truncated)
    }

    /// The properties of a message; `truncated` is set to the number of
    /// header values cut to `.void` for nesting deeper than ``maxDepth``.
    static func properties(_ c: amqp_basic_properties_t, truncated: inout Int) -> AMQPProperties {
        let f = c._flags
        func has(_ flag: Int32) -> Bool { f & UInt32(flag) != 0 }
        var p = AMQPProperties()
        if has(AMQP_BASIC_CONTENT_TYPE_FLAG) { p.contentType = c.content_type.string }
        if has(AMQP_BASIC_CONTENT_ENCODING_FLAG) { p.contentEncoding = c.content_encoding.string }
        truncated = 0
        if has(AMQP_BASIC_HEADERS_FLAG) { p.headers = table(c.headers, level: 1, truncated: &truncated) }
        if has(AMQP_BASIC_DELIVERY_MODE_FLAG) { p.deliveryMode = .init(rawValue: c.delivery_mode) }
        if has(AMQP_BASIC_PRIORITY_FLAG) { p.priority = c.priority }
        if has(AMQP_BASIC_CORRELATION_ID_FLAG) { p.correlationID = c.correlation_id.string }
        if has(AMQP_BASIC_REPLY_TO_FLAG) { p.replyTo = c.reply_to.string }
        if has(AMQP_BASIC_EXPIRATION_FLAG) { p.expiration = c.expiration.string }
        if has(AMQP_BASIC_MESSAGE_ID_FLAG) { p.messageID = c.message_id.string }
        if has(AMQP_BASIC_TIMESTAMP_FLAG) { p.timestamp = c.timestamp }
        if has(AMQP_BASIC_TYPE_FLAG) { p.type = c.type.string }
        if has(AMQP_BASIC_USER_ID_FLAG) { p.userID = c.user_id.string }
        if has(AMQP_BASIC_APP_ID_FLAG) { p.appID = c.app_id.string }
        if has(AMQP_BASIC_CLUSTER_ID_FLAG) { p.clusterID = c.cluster_id.string }
        return p
    }
}
