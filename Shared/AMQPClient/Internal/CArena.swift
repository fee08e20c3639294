import CRabbitMQ

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Scratch memory for building C argument structures (tables, properties,
/// byte strings) that must outlive a single `withUnsafe…` scope but not the
/// C call they are passed to.
///
/// Ownership: everything allocated here is freed by `reset()` or `deinit`.
/// Threading: used only by the owning I/O thread, never shared.
final class CArena {
    /// Small allocations are bumped out of reusable 16 KiB chunks, so a
    /// publish costs no malloc/free pair per string; larger ones are
    /// malloc'd individually.
    private static let chunkSize = 16 * 1024
    private var chunks: [UnsafeMutableRawPointer] = []
    private var chunkIndex = 0
    private var offset = 0
    private var large: [UnsafeMutableRawPointer] = []

    deinit {
        reset()
        for chunk in chunks { free(chunk) }
    }

    /// Frees everything handed out since the last reset (chunks are kept).
    func reset() {
        for p in large { free(p) }
        large.removeAll(keepingCapacity: true)
        chunkIndex = 0
        offset = 0
    }

    func allocate<T>(_ type: T.Type, count: Int) -> UnsafeMutablePointer<T> {
        let size = max(1, MemoryLayout<T>.stride * count)
        let alignment = max(MemoryLayout<T>.alignment, 8)
        if size > Self.chunkSize / 4 {
            let raw = malloc(size)!
            large.append(raw)
            return raw.bindMemory(to: T.self, capacity: count)
        }
        offset = (offset + alignment - 1) & ~(alignment - 1)
        if chunks.isEmpty || offset + size > Self.chunkSize {
            if !chunks.isEmpty { chunkIndex += 1 }
            if chunkIndex == chunks.count { chunks.append(malloc(Self.chunkSize)!) }
            offset = 0
        }
        let raw = chunks[chunkIndex] + offset
        offset += size
        return raw.bindMemory(to: T.self, capacity: count)
    }

    /// A copy of `string`'s UTF-8 bytes as `amqp_bytes_t` (not NUL-terminated).
    func bytes(_ string: String) -> amqp_bytes_t {
        var s = string
        return s.withUTF8 { bytes($0) }
    }

    func bytes(_ buffer: UnsafeBufferPointer<UInt8>) -> amqp_bytes_t {
        if buffer.isEmpty { return crabbitmq_bytes(nil, 0) }
        let p = allocate(UInt8.self, count: buffer.count)
        p.initialize(from: buffer.baseAddress!, count: buffer.count)
        return crabbitmq_bytes(p, buffer.count)
    }

    func bytes(_ array: [UInt8]) -> amqp_bytes_t {
        array.withUnsafeBufferPointer { bytes($0) }
    }

    /// A NUL-terminated copy, for the few C APIs that take `char *`.
    func cString(_ string: String) -> UnsafePointer<CChar> {
        let utf8 = Array(string.utf8CString)
        let p = allocate(CChar.self, count: utf8.count)
        p.initialize(from: utf8, count: utf8.count)
        return UnsafePointer(p)
    }

    // MARK: Tables

    func table(_ table: AMQPTable) -> amqp_table_t {
        if table.isEmpty { return crabbitmq_empty_table() }
        let entries = allocate(amqp_table_entry_t.self, count: table.count)
        // Sorted keys make the wire form deterministic (and debuggable).
        for (i, key) in table.keys.sorted().enumerated() {
            entries[i] = amqp_table_entry_t(key: bytes(key), value: fieldValue(table[key]!))
        }
        var t = amqp_table_t()
        t.num_entries = Int32(table.count)
        t.entries = entries
        return t
    }

    func fieldValue(_ value: AMQPFieldValue) -> amqp_field_value_t {
        var v = amqp_field_value_t()
        func kind(_ k: amqp_field_value_kind_t) -> UInt8 { UInt8(k.rawValue) }
        switch value {
        case .bool(let b): v.kind = kind(AMQP_FIELD_KIND_BOOLEAN); v.value.boolean = b ? 1 : 0
        case .int8(let x): v.kind = kind(AMQP_FIELD_KIND_I8); v.value.i8 = x
        case .uint8(let x): v.kind = kind(AMQP_FIELD_KIND_U8); v.value.u8 = x
        case .int16(let x): v.kind = kind(AMQP_FIELD_KIND_I16); v.value.i16 = x
        case .uint16(let x): v.kind = kind(AMQP_FIELD_KIND_U16); v.value.u16 = x
        case .int32(let x): v.kind = kind(AMQP_FIELD_KIND_I32); v.value.i32 = x
        case .uint32(let x): v.kind = kind(AMQP_FIELD_KIND_U32); v.value.u32 = x
        case .int64(let x): v.kind = kind(AMQP_FIELD_KIND_I64); v.value.i64 = x
        case .uint64(let x): v.kind = kind(AMQP_FIELD_KIND_U64); v.value.u64 = x
        case .float(let x): v.kind = kind(AMQP_FIELD_KIND_F32); v.value.f32 = x
        case .double(let x): v.kind = kind(AMQP_FIELD_KIND_F64); v.value.f64 = x
        case .decimal(let scale, let value):
            v.kind = kind(AMQP_FIELD_KIND_DECIMAL); v.value.decimal = amqp_decimal_t(decimals: scale, value: value)
        case .string(let s): v.kind = kind(AMQP_FIELD_KIND_UTF8); v.value.bytes = bytes(s)
        case .bytes(let b): v.kind = kind(AMQP_FIELD_KIND_BYTES); v.value.bytes = bytes(b)
        case .timestamp(let t): v.kind = kind(AMQP_FIELD_KIND_TIMESTAMP); v.value.u64 = t
        case .void: v.kind = kind(AMQP_FIELD_KIND_VOID)
        case .table(let t): v.kind = kind(AMQP_FIELD_KIND_TABLE); v.value.table = table(t)
        case .array(let items):
            v.kind = kind(AMQP_FIELD_KIND_ARRAY)
            let entries = allocate(amqp_field_value_t.self, count: items.count)
            for (i, item) in items.enumerated() { entries[i] = fieldValue(item) }
            v.value.array = amqp_array_t(num_entries: Int32(items.count), entries: items.isEmpty ? nil : entries)
        }
        return v
    }

    // MARK: Properties

    func properties(_ p: AMQPProperties) -> amqp_basic_properties_t {
        var c = amqp_basic_properties_t()
        var flags: UInt32 = 0
        func set(_ s: String?, _ flag: Int32, _ field: inout amqp_bytes_t) {
            if let s { field = bytes(s); flags |= UInt32(flag) }
        }
        set(p.contentType, AMQP_BASIC_CONTENT_TYPE_FLAG, &c.content_type)
        set(p.contentEncoding, AMQP_BASIC_CONTENT_ENCODING_FLAG, &c.content_encoding)
        set(p.correlationID, AMQP_BASIC_CORRELATION_ID_FLAG, &c.correlation_id)
        set(p.replyTo, AMQP_BASIC_REPLY_TO_FLAG, &c.reply_to)
        set(p.expiration, AMQP_BASIC_EXPIRATION_FLAG, &c.expiration)
        set(p.messageID, AMQP_BASIC_MESSAGE_ID_FLAG, &c.message_id)
        set(p.type, AMQP_BASIC_TYPE_FLAG, &c.type)
        set(p.userID, AMQP_BASIC_USER_ID_FLAG, &c.user_id)
        set(p.appID, AMQP_BASIC_APP_ID_FLAG, &c.app_id)
        set(p.clusterID, AMQP_BASIC_CLUSTER_ID_FLAG, &c.cluster_id)
        if !p.headers.isEmpty { c.headers = table(p.headers); flags |= UInt32(AMQP_BASIC_HEADERS_FLAG) }
        if let m = p.deliveryMode { c.delivery_mode = m.rawValue; flags |= UInt32(AMQP_BASIC_DELIVERY_MODE_FLAG) }
        if let pr = p.priority { c.priority = pr; flags |= UInt32(AMQP_BASIC_PRIORITY_FLAG) }
        if let ts = p.timestamp { c.timestamp = ts; flags |= UInt32(AMQP_BASIC_TIMESTAMP_FLAG) }
        c._flags = flags
        return c
    }
}

// MARK: - Decoding (C → Swift copies; the C memory belongs to rabbitmq-c's pools)

extension amqp_bytes_t {
    /// Copies the bytes out; the C buffer may be recycled right after.
    var array: [UInt8] {
        guard len > 0, let p = bytes else { return [] }
        return Array(UnsafeBufferPointer(start: p.assumingMemoryBound(to: UInt8.self), count: len))
    }

    var string: String {
        guard len > 0, let p = bytes else { return "" }
        return String(decoding: UnsafeBufferPointer(start: p.assumingMemoryBound(to: UInt8.self), count: len), as: UTF8.self)
    }
}
