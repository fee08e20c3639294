import CRabbitMQ
import Testing
@testable import AMQPClient

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Fixtures

enum Fixtures {
    /// Bytes that are not valid UTF-8 (0xFF never occurs in UTF-8, 0xC3 is
    /// a truncated sequence), so they stay `.bytes` after decoding.
    static let binary: [UInt8] = [0xFF, 0xFE, 0x00, 0x80, 0xC3]

    /// Every `AMQPFieldValue` kind, nested tables and arrays, non-ASCII and
    /// empty strings, an empty table and an empty array.
    static var everyKind: AMQPTable {
        var inner: AMQPTable = [:]
        inner["n"] = .int32(7)
        inner["list"] = .array([.int8(1), .string("two"), .table(["three": .uint16(3)])])
        inner["empty"] = .table([:])

        var nested: AMQPTable = [:]
        nested["inner-string"] = .string("x")
        nested["deeper"] = .table(inner)
        nested["bin"] = .bytes([0xFF])

        var array: [AMQPFieldValue] = []
        array.append(.int64(1))
        array.append(.string("b"))
        array.append(.bool(false))
        array.append(.array([.void, .array([])]))
        array.append(.table(["k": .bytes(binary)]))
        array.append(.timestamp(0))
        array.append(.double(0.5))
        array.append(.string(""))

        var t: AMQPTable = [:]
        t["bool-true"] = .bool(true)
        t["bool-false"] = .bool(false)
        t["i8"] = .int8(-128)
        t["u8"] = .uint8(255)
        t["i16"] = .int16(-32768)
        t["u16"] = .uint16(65535)
        t["i32"] = .int32(Int32.min)
        t["u32"] = .uint32(UInt32.max)
        t["i64"] = .int64(Int64.min)
        t["i64-max"] = .int64(Int64.max)
        t["u64"] = .uint64(UInt64.max)
        t["f32"] = .float(-3.25)
        t["f64"] = .double(2.718281828459045)
        t["f64-tiny"] = .double(Double.leastNonzeroMagnitude)
        t["decimal"] = .decimal(scale: 2, value: 12345)
        t["string"] = .string("Grüße aus Zürich — 東京 🚀")
        t["empty-string"] = .string("")
        t["bytes"] = .bytes(binary)
        t["timestamp"] = .timestamp(1_700_000_000)
        t["void"] = .void
        t["empty-table"] = .table([:])
        t["empty-array"] = .array([])
        t["table"] = .table(nested)
        t["array"] = .array(array)
        t["ключ-🔑"] = .string("non-ASCII key")
        return t
    }

    /// Every property set (including headers with every field kind).
    static var allProperties: AMQPProperties {
        AMQPProperties(
            contentType: "application/json", contentEncoding: "gzip", headers: everyKind,
            deliveryMode: .persistent, priority: 9, correlationID: "corr-42", replyTo: "amq.rabbitmq.reply-to",
            expiration: "60000", messageID: "msg-ü-1", timestamp: 1_700_000_123, type: "booking.created",
            userID: "guest", appID: "booking-handler", clusterID: "cluster-a")
    }
}

// MARK: - rabbitmq-c wire helpers

/// Encodes `table` with `amqp_encode_table` and returns the wire bytes.
private func encodeTable(_ table: AMQPTable) throws -> [UInt8] {
    let arena = CArena()
    var cTable: amqp_table_t = arena.table(table)
    let capacity: Int = 16 << 20
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
    defer { buffer.deallocate() }
    var offset: Int = 0
    let status: Int32 = amqp_encode_table(crabbitmq_bytes(buffer.baseAddress, capacity), &cTable, &offset)
    try #require(status == 0, "amqp_encode_table failed: \(String(cString: amqp_error_string2(status)))")
    return Array(buffer[0..<offset])
}

/// Decodes wire bytes with `amqp_decode_table` into a pool and copies the
/// result out with `CDecode.table`.
private func decodeTable(_ wire: [UInt8]) throws -> AMQPTable {
    // The decoded table points into the encoded buffer (keys, strings), so
    // keep one stable copy alive until CDecode has copied everything out.
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, wire.count), alignment: 8)
    defer { buffer.deallocate() }
    buffer.copyBytes(from: wire)
    var pool = amqp_pool_t()
    init_amqp_pool(&pool, 4096)
    defer { empty_amqp_pool(&pool) }
    var decoded = amqp_table_t()
    var offset: Int = 0
    let status: Int32 = amqp_decode_table(crabbitmq_bytes(buffer.baseAddress, wire.count), &pool, &decoded, &offset)
    try #require(status == 0, "amqp_decode_table failed: \(String(cString: amqp_error_string2(status)))")
    #expect(offset == wire.count)
    return CDecode.table(decoded)
}

private func wireRoundTrip(_ table: AMQPTable) throws -> AMQPTable {
    try decodeTable(try encodeTable(table))
}

/// Encodes properties with `amqp_encode_properties` and decodes them with
/// `amqp_decode_properties`, then `CDecode.properties`.
private func wireRoundTrip(_ properties: AMQPProperties) throws -> AMQPProperties {
    let arena = CArena()
    var c: amqp_basic_properties_t = arena.properties(properties)
    let capacity: Int = 1 << 20
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
    defer { buffer.deallocate() }
    let basicClass: UInt16 = 60
    let length: Int32 = amqp_encode_properties(basicClass, &c, crabbitmq_bytes(buffer.baseAddress, capacity))
    try #require(length > 0, "amqp_encode_properties failed: \(length)")
    // The C structure is no longer needed: free it before decoding, so the
    // decoded copy cannot be reading the arena by accident.
    arena.reset()

    var pool = amqp_pool_t()
    init_amqp_pool(&pool, 4096)
    defer { empty_amqp_pool(&pool) }
    var decodedPointer: UnsafeMutableRawPointer? = nil
    let status: Int32 = amqp_decode_properties(
        basicClass, &pool, crabbitmq_bytes(buffer.baseAddress, Int(length)), &decodedPointer)
    try #require(status == 0, "amqp_decode_properties failed: \(status)")
    let raw: UnsafeMutableRawPointer = try #require(decodedPointer)
    let decoded: amqp_basic_properties_t = raw.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee
    return CDecode.properties(decoded)
}

private func kind(_ value: amqp_field_value_t) -> Character {
    Character(Unicode.Scalar(value.kind))
}

// MARK: - In-memory (CArena → CDecode)

@Suite("CArena and CDecode")
struct CArenaTests {
    @Test func everyKindRoundTripsInMemory() {
        let arena = CArena()
        let input: AMQPTable = Fixtures.everyKind
        let c: amqp_table_t = arena.table(input)
        #expect(Int(c.num_entries) == input.count)
        let output: AMQPTable = CDecode.table(c)
        #expect(output == input)
        #expect(output.count == input.count)
    }

    @Test(arguments: Fixtures.everyKind.sorted { $0.key < $1.key }.map { KeyedValue(key: $0.key, value: $0.value) })
    func eachValueRoundTripsInMemory(_ item: KeyedValue) {
        let arena = CArena()
        let c: amqp_field_value_t = arena.fieldValue(item.value)
        #expect(CDecode.fieldValue(c) == item.value)
    }

    @Test func emptyTableIsNullEntries() {
        let arena = CArena()
        let c: amqp_table_t = arena.table([:])
        #expect(c.num_entries == 0)
        #expect(c.entries == nil)
        #expect(CDecode.table(c).isEmpty)
    }

    @Test func emptyArrayIsNullEntries() {
        let arena = CArena()
        let c: amqp_field_value_t = arena.fieldValue(.array([]))
        #expect(kind(c) == "A")
        #expect(c.value.array.num_entries == 0)
        #expect(c.value.array.entries == nil)
        #expect(CDecode.fieldValue(c) == .array([]))
    }

    @Test func kindsMatchTheAMQPWireTypes() {
        let arena = CArena()
        let expected: [(AMQPFieldValue, Character)] = [
            (.bool(true), "t"), (.int8(1), "b"), (.uint8(1), "B"), (.int16(1), "s"), (.uint16(1), "u"),
            (.int32(1), "I"), (.uint32(1), "i"), (.int64(1), "l"), (.uint64(1), "L"), (.float(1), "f"),
            (.double(1), "d"), (.decimal(scale: 1, value: 1), "D"), (.string("s"), "S"), (.bytes([0xFF]), "x"),
            (.timestamp(1), "T"), (.void, "V"), (.table([:]), "F"), (.array([]), "A"),
        ]
        for (value, k) in expected {
            #expect(kind(arena.fieldValue(value)) == k, "\(value)")
        }
    }

    @Test func stringBytesAreCopiedAsUTF8WithoutTerminator() {
        let arena = CArena()
        let text: String = "päss"
        let b: amqp_bytes_t = arena.bytes(text)
        #expect(b.len == 5)
        #expect(b.array == Array(text.utf8))
        #expect(b.string == text)
        let empty: amqp_bytes_t = arena.bytes("")
        #expect(empty.len == 0)
        #expect(empty.array == [])
        #expect(empty.string == "")
        let raw: amqp_bytes_t = arena.bytes(Fixtures.binary)
        #expect(raw.array == Fixtures.binary)
    }

    @Test func cStringIsNulTerminated() {
        let arena = CArena()
        let p: UnsafePointer<CChar> = arena.cString("vhost/ü")
        #expect(String(cString: p) == "vhost/ü")
        #expect(strlen(p) == 8)
    }

    @Test func tableKeysAreSortedForADeterministicWireForm() {
        let arena = CArena()
        let c: amqp_table_t = arena.table(["b": .int8(2), "c": .int8(3), "a": .int8(1), "B": .int8(0)])
        let keys: [String] = (0..<Int(c.num_entries)).map { c.entries[$0].key.string }
        #expect(keys == ["B", "a", "b", "c"])
    }

    /// Documented asymmetry: AMQP long strings and byte arrays are both
    /// decoded by content, so bytes that happen to be valid UTF-8 come back
    /// as `.string`.
    @Test func utf8BytesDecodeAsString() {
        let arena = CArena()
        #expect(CDecode.fieldValue(arena.fieldValue(.bytes(Array("abc".utf8)))) == .string("abc"))
        #expect(CDecode.fieldValue(arena.fieldValue(.bytes([]))) == .string(""))
        #expect(CDecode.fieldValue(arena.fieldValue(.bytes([0xFF]))) == .bytes([0xFF]))
    }

    @Test func unknownKindDecodesAsVoid() {
        var v = amqp_field_value_t()
        v.kind = UInt8(ascii: "?")
        #expect(CDecode.fieldValue(v) == .void)
    }

    @Test func resetAndReuse() {
        let arena = CArena()
        let first: AMQPTable = CDecode.table(arena.table(["a": .string("one")]))
        arena.reset()
        let second: AMQPTable = CDecode.table(arena.table(["b": .bytes(Fixtures.binary)]))
        #expect(first == ["a": .string("one")])
        #expect(second == ["b": .bytes(Fixtures.binary)])
    }

    // MARK: Arena allocation

    /// Allocations of every size class (bump-allocated small ones, chunk
    /// crossings, individually allocated large ones) are aligned and never
    /// overlap, also after `reset` reuses the memory.
    @Test func allocationsAreAlignedAndDisjoint() {
        let arena = CArena()
        for round in 0..<3 {
            var ranges: [(start: UInt, end: UInt)] = []
            let sizes: [Int] = [1, 3, 8, 17, 100, 1000, 4000, 4096, 4097, 5000, 16 * 1024, 20_000, 7, 2]
            for i in 0..<400 {
                let count: Int = sizes[(i + round) % sizes.count]
                let bytes: UnsafeMutablePointer<UInt8> = arena.allocate(UInt8.self, count: count)
                let start = UInt(bitPattern: bytes)
                #expect(start % 8 == 0)
                bytes.initialize(repeating: UInt8(truncatingIfNeeded: i), count: count)
                ranges.append((start, start + UInt(count)))
                let entries: UnsafeMutablePointer<amqp_table_entry_t> = arena.allocate(amqp_table_entry_t.self, count: 3)
                let entriesStart = UInt(bitPattern: entries)
                #expect(entriesStart % UInt(MemoryLayout<amqp_table_entry_t>.alignment) == 0)
                ranges.append((entriesStart, entriesStart + UInt(3 * MemoryLayout<amqp_table_entry_t>.stride)))
            }
            ranges.sort { $0.start < $1.start }
            var overlaps: Int = 0
            for i in 1..<ranges.count where ranges[i].start < ranges[i - 1].end { overlaps += 1 }
            #expect(overlaps == 0, "round \(round)")
            arena.reset()
        }
    }

    /// A table far bigger than one arena chunk, with strings of every size
    /// class, survives the trip; and so does a different one built after
    /// `reset` in the same (reused) memory.
    @Test func bigTablesRoundTripAcrossChunksAndResets() throws {
        let arena = CArena()
        for round in 0..<3 {
            var input: AMQPTable = [:]
            for i in 0..<2_000 {
                let length: Int = (i * 37 + round * 11) % 5_000
                let text: String = String(repeating: Character(Unicode.Scalar(UInt8(65 + (i + round) % 26))), count: length)
                input["key-\(round)-\(i)"] = i % 5 == 0 ? .bytes([0xFF] + Array(text.utf8)) : .string(text)
            }
            input["nested"] = .array((0..<300).map { AMQPFieldValue.table(["i": .int32(Int32($0)), "s": .string("v\($0)")]) })
            let output: AMQPTable = CDecode.table(arena.table(input))
            #expect(output == input, "round \(round)")
            #expect(try wireRoundTrip(input) == input, "round \(round)")
            arena.reset()
        }
    }

    // MARK: Properties in memory

    @Test func allPropertiesRoundTripInMemory() {
        let arena = CArena()
        let input: AMQPProperties = Fixtures.allProperties
        let c: amqp_basic_properties_t = arena.properties(input)
        let flags: [Int32] = [
            AMQP_BASIC_CONTENT_TYPE_FLAG, AMQP_BASIC_CONTENT_ENCODING_FLAG, AMQP_BASIC_HEADERS_FLAG,
            AMQP_BASIC_DELIVERY_MODE_FLAG, AMQP_BASIC_PRIORITY_FLAG, AMQP_BASIC_CORRELATION_ID_FLAG,
            AMQP_BASIC_REPLY_TO_FLAG, AMQP_BASIC_EXPIRATION_FLAG, AMQP_BASIC_MESSAGE_ID_FLAG,
            AMQP_BASIC_TIMESTAMP_FLAG, AMQP_BASIC_TYPE_FLAG, AMQP_BASIC_USER_ID_FLAG,
            AMQP_BASIC_APP_ID_FLAG, AMQP_BASIC_CLUSTER_ID_FLAG,
        ]
        let allFlags: UInt32 = flags.reduce(UInt32(0)) { $0 | UInt32($1) }
        #expect(flags.count == 14)
        #expect(allFlags.nonzeroBitCount == 14)
        #expect(c._flags == allFlags)
        #expect(c.delivery_mode == 2)
        #expect(c.priority == 9)
        #expect(c.timestamp == 1_700_000_123)
        #expect(CDecode.properties(c) == input)
    }

    @Test func noPropertiesRoundTripInMemory() {
        let arena = CArena()
        let c: amqp_basic_properties_t = arena.properties(AMQPProperties())
        #expect(c._flags == 0)
        #expect(CDecode.properties(c) == AMQPProperties())
    }

    @Test func emptyStringPropertiesArePresentNotAbsent() {
        let arena = CArena()
        let input = AMQPProperties(contentType: "", correlationID: "", messageID: "", type: "")
        let c: amqp_basic_properties_t = arena.properties(input)
        let expectedFlags: UInt32 = UInt32(AMQP_BASIC_CONTENT_TYPE_FLAG) | UInt32(AMQP_BASIC_CORRELATION_ID_FLAG)
            | UInt32(AMQP_BASIC_MESSAGE_ID_FLAG) | UInt32(AMQP_BASIC_TYPE_FLAG)
        #expect(c._flags == expectedFlags)
        let output: AMQPProperties = CDecode.properties(c)
        #expect(output == input)
        #expect(output.contentType == "")
        #expect(output.replyTo == nil)
    }

    @Test func emptyHeadersAreNotSent() {
        let arena = CArena()
        let c: amqp_basic_properties_t = arena.properties(AMQPProperties(headers: [:], deliveryMode: .transient))
        #expect(c._flags == UInt32(AMQP_BASIC_DELIVERY_MODE_FLAG))
        #expect(c.delivery_mode == 1)
        #expect(CDecode.properties(c) == AMQPProperties(deliveryMode: .transient))
    }

    // MARK: - Real wire round trip through rabbitmq-c

    @Test func everyKindRoundTripsOnTheWire() throws {
        let input: AMQPTable = Fixtures.everyKind
        let output: AMQPTable = try wireRoundTrip(input)
        #expect(output == input)
        for key in input.keys.sorted() {
            #expect(output[key] == input[key], "key \(key)")
        }
    }

    @Test func utf8BytesComeBackAsStringOnTheWire() throws {
        var input: AMQPTable = [:]
        input["ascii-bytes"] = .bytes(Array("hello".utf8))
        input["utf8-bytes"] = .bytes(Array("Grüße".utf8))
        input["empty-bytes"] = .bytes([])
        input["binary"] = .bytes(Fixtures.binary)
        input["nested"] = .array([.bytes(Array("x".utf8)), .table(["y": .bytes(Array("y".utf8))])])
        var expected: AMQPTable = [:]
        expected["ascii-bytes"] = .string("hello")
        expected["utf8-bytes"] = .string("Grüße")
        expected["empty-bytes"] = .string("")
        expected["binary"] = .bytes(Fixtures.binary)
        expected["nested"] = .array([.string("x"), .table(["y": .string("y")])])
        #expect(try wireRoundTrip(input) == expected)
    }

    @Test func emptyTableOnTheWire() throws {
        let wire: [UInt8] = try encodeTable([:])
        #expect(wire == [0, 0, 0, 0])
        #expect(try decodeTable(wire).isEmpty)
    }

    @Test func wireBytesOfASmallTable() throws {
        // Table size 7: key length, "k", kind 'I', 4-byte big-endian value.
        #expect(try encodeTable(["k": .int32(1)]) == [0, 0, 0, 7, 1, 0x6B, 0x49, 0, 0, 0, 1])
        // Long string: 'S', 4-byte length, UTF-8 bytes.
        #expect(try encodeTable(["s": .string("é")]) == [0, 0, 0, 9, 1, 0x73, 0x53, 0, 0, 0, 2, 0xC3, 0xA9])
        // Byte array: 'x'.
        #expect(try encodeTable(["x": .bytes([0xFF])]) == [0, 0, 0, 8, 1, 0x78, 0x78, 0, 0, 0, 1, 0xFF])
        // Keys in sorted order.
        #expect(try encodeTable(["b": .void, "a": .bool(true)]) == [0, 0, 0, 7, 1, 0x61, 0x74, 1, 1, 0x62, 0x56])
    }

    @Test func wireFormIsDeterministic() throws {
        let first: [UInt8] = try encodeTable(Fixtures.everyKind)
        let second: [UInt8] = try encodeTable(Fixtures.everyKind)
        #expect(first == second)
        #expect(first.count > 100)
    }

    @Test func allPropertiesRoundTripOnTheWire() throws {
        let input: AMQPProperties = Fixtures.allProperties
        let output: AMQPProperties = try wireRoundTrip(input)
        #expect(output == input)
        #expect(output.headers == Fixtures.everyKind)
    }

    @Test func noPropertiesRoundTripOnTheWire() throws {
        let output: AMQPProperties = try wireRoundTrip(AMQPProperties())
        #expect(output == AMQPProperties())
    }

    @Test func somePropertiesRoundTripOnTheWire() throws {
        let input = AMQPProperties(
            contentType: "text/plain", deliveryMode: .transient, priority: 0, replyTo: "", timestamp: 0, clusterID: "c")
        #expect(try wireRoundTrip(input) == input)
    }

    @Test func persistentJSONRoundTripsOnTheWire() throws {
        let input: AMQPProperties = AMQPProperties.persistentJSON(
            type: "booking.requested", messageID: "m-1", correlationID: "c-1", replyTo: "amq.rabbitmq.reply-to",
            headers: ["x-attempt": .int32(2)])
        #expect(input.contentType == "application/json")
        #expect(input.deliveryMode == .persistent)
        #expect(input.timestamp != nil)
        #expect(try wireRoundTrip(input) == input)
    }
}

/// A table entry as a test argument.
struct KeyedValue: Sendable, CustomTestStringConvertible {
    var key: String
    var value: AMQPFieldValue
    var testDescription: String { key }
}
