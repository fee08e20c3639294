import CRabbitMQ
import Testing
@testable import AMQPClient

// MARK: - Builders that never recurse

/// A chain of `depth` tables, each holding the next under key `n`, built
/// in `arena` from the inside out (a loop, not recursion: the point is a
/// depth that would overflow a recursive builder too).
private func nestedTables(depth: Int, arena: CArena) -> amqp_table_t {
    var table = crabbitmq_empty_table()
    for _ in 1..<depth {
        var value = amqp_field_value_t()
        value.kind = UInt8(ascii: "F")
        value.value.table = table
        let entry = arena.allocate(amqp_table_entry_t.self, count: 1)
        entry.initialize(to: amqp_table_entry_t(key: arena.bytes("n"), value: value))
        var outer = amqp_table_t()
        outer.num_entries = 1
        outer.entries = entry
        table = outer
    }
    return table
}

/// The wire form of basic properties whose only property is a headers
/// table holding `{"n": [[[…]]]}`, `arrays` arrays deep.
private func nestedArrayPropertiesPayload(arrays: Int) -> [UInt8] {
    func u32(_ value: Int) -> [UInt8] {
        let v = UInt32(value)
        return [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
    }
    var out: [UInt8] = [0x20, 0x00]  // property flags: headers only
    out += u32(2 + 5 * arrays)  // the table: key "n", then the arrays
    out += [1, UInt8(ascii: "n")]
    for i in 0..<arrays {
        out.append(UInt8(ascii: "A"))
        out += u32(5 * (arrays - i - 1))
    }
    return out
}

/// Decodes a basic-properties payload as a delivery's header frame is
/// decoded: `amqp_decode_properties`, then `CDecode.properties`.
private func decodeProperties(_ payload: [UInt8]) throws -> (properties: AMQPProperties, truncated: Int) {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, payload.count), alignment: 8)
    defer { buffer.deallocate() }
    buffer.copyBytes(from: payload)
    var pool = amqp_pool_t()
    init_amqp_pool(&pool, 4096)
    defer { empty_amqp_pool(&pool) }
    var decodedPointer: UnsafeMutableRawPointer? = nil
    let status: Int32 = amqp_decode_properties(60, &pool, crabbitmq_bytes(buffer.baseAddress, payload.count),
                                               &decodedPointer)
    try #require(status == 0, "amqp_decode_properties failed: \(status)")
    let raw = try #require(decodedPointer)
    var truncated = 0
    let properties = CDecode.properties(raw.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee,
                                        truncated: &truncated)
    return (properties, truncated)
}

private func isContainer(_ value: AMQPFieldValue) -> Bool {
    switch value {
    case .table, .array: true
    default: false
    }
}

/// How many tables and arrays are nested in `value` along its first
/// entries (0 for a scalar or `.void`), and what the innermost one holds.
private func nesting(of value: AMQPFieldValue) -> (levels: Int, innermost: AMQPFieldValue) {
    var levels = 0
    var current = value
    while true {
        switch current {
        case .table(let t):
            levels += 1
            guard let next = t["n"], isContainer(next) else { return (levels, current) }
            current = next
        case .array(let items):
            levels += 1
            guard let next = items.first, isContainer(next) else { return (levels, current) }
            current = next
        default:
            return (levels, current)
        }
    }
}

@Suite("Header nesting limit")
struct HeaderDepthTests {
    @Test func limitIsSixteen() {
        #expect(CDecode.maxDepth == 16)
    }

    /// 10,000 nested tables (a recursive decoder overflows its stack long
    /// before) decode without crashing: 16 tables, the 17th is `.void`.
    @Test func tenThousandNestedTablesAreCutAtTheLimit() {
        let arena = CArena()
        let deep = nestedTables(depth: 10_000, arena: arena)
        var truncated = 0
        let headers = CDecode.table(deep, level: 1, truncated: &truncated)
        let (levels, innermost) = nesting(of: .table(headers))
        #expect(levels == CDecode.maxDepth)
        #expect(innermost == .table(["n": .void]))
        #expect(truncated == 1)
        // The convenience entry points apply the same limit.
        #expect(nesting(of: .table(CDecode.table(deep))).levels == CDecode.maxDepth)
    }

    @Test func nestingAtTheLimitIsKept() {
        let arena = CArena()
        var truncated = 0
        let atLimit = CDecode.table(nestedTables(depth: CDecode.maxDepth, arena: arena), level: 1, truncated: &truncated)
        #expect(truncated == 0)
        let (levels, innermost) = nesting(of: .table(atLimit))
        #expect(levels == CDecode.maxDepth)
        #expect(innermost == .table([:]))

        let overLimit = CDecode.table(nestedTables(depth: CDecode.maxDepth + 1, arena: arena), level: 1,
                                      truncated: &truncated)
        #expect(truncated == 1)
        let cut = nesting(of: .table(overLimit))
        #expect(cut.levels == CDecode.maxDepth)
        #expect(cut.innermost == .table(["n": .void]))
    }

    /// The real path of a delivery: a header frame of about 50 KiB holding
    /// 10,000 nested arrays, decoded by rabbitmq-c and then by CDecode.
    @Test func tenThousandNestedArraysOnTheWire() throws {
        let (properties, truncated) = try decodeProperties(nestedArrayPropertiesPayload(arrays: 10_000))
        #expect(truncated == 1)
        let value = try #require(properties.headers["n"])
        // The headers table is level 1, so 15 arrays fit below it.
        let (levels, innermost) = nesting(of: value)
        #expect(levels == CDecode.maxDepth - 1)
        #expect(innermost == .array([.void]))
    }

    @Test func arraysAtTheLimitOnTheWire() throws {
        let (properties, truncated) = try decodeProperties(nestedArrayPropertiesPayload(arrays: CDecode.maxDepth - 1))
        #expect(truncated == 0)
        let value = try #require(properties.headers["n"])
        let kept = nesting(of: value)
        #expect(kept.levels == CDecode.maxDepth - 1)
        #expect(kept.innermost == .array([]))
    }

    /// RabbitMQ's own `x-death` (an array of tables holding an array) and
    /// other ordinary nesting survive unchanged.
    @Test func xDeathSurvivesUnchanged() throws {
        let death: AMQPTable = [
            "count": .int64(3), "reason": .string("rejected"), "queue": .string("booking-handler.commands"),
            "time": .timestamp(1_700_000_000), "exchange": .string("booking.commands"),
            "routing-keys": .array([.string("booking.create")]),
        ]
        let headers: AMQPTable = [
            "x-death": .array([.table(death), .table(death.merging(["reason": .string("expired")]) { $1 })]),
            "x-first-death-reason": .string("rejected"),
            "nested": .table(["a": .table(["b": .array([.table(["c": .int8(1)])])])]),
        ]
        let arena = CArena()
        var c = arena.properties(AMQPProperties(headers: headers))
        let capacity = 1 << 16
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        let length = amqp_encode_properties(60, &c, crabbitmq_bytes(buffer.baseAddress, capacity))
        try #require(length > 0)
        let (properties, truncated) = try decodeProperties(Array(buffer[0..<Int(length)]))
        #expect(truncated == 0)
        #expect(properties.headers == headers)
        #expect(properties.xDeath.count == 2)
    }
}
