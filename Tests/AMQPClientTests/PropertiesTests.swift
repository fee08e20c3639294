import CRabbitMQ
import Testing
@testable import AMQPClient

/// What RabbitMQ puts on a message dead-lettered twice: once rejected from
/// the work queue, then expired from a retry queue (newest first), as the
/// broker encodes it (count as long 'l', time as timestamp 'T').
private func realisticXDeathHeaders() -> AMQPTable {
    var rejected: AMQPTable = [:]
    rejected["count"] = .int64(3)
    rejected["reason"] = .string("rejected")
    rejected["queue"] = .string("booking.requests")
    rejected["time"] = .timestamp(1_700_000_100)
    rejected["exchange"] = .string("booking")
    rejected["routing-keys"] = .array([.string("booking.request.create"), .string("cc.audit")])

    var expired: AMQPTable = [:]
    expired["count"] = .int64(1)
    expired["reason"] = .string("expired")
    expired["queue"] = .string("booking.retry.5s")
    expired["time"] = .timestamp(1_700_000_000)
    expired["exchange"] = .string("")
    expired["routing-keys"] = .array([.string("booking.retry.5s")])
    expired["original-expiration"] = .string("5000")

    var headers: AMQPTable = [:]
    headers["x-death"] = .array([.table(rejected), .table(expired)])
    headers["x-first-death-exchange"] = .string("")
    headers["x-first-death-queue"] = .string("booking.retry.5s")
    headers["x-first-death-reason"] = .string("expired")
    headers["x-last-death-queue"] = .string("booking.requests")
    return headers
}

private func entry(
    queue: String, reason: String, count: Int64, exchange: String, routingKeys: [String], time: UInt64?
) -> XDeathEntry? {
    var t: AMQPTable = [:]
    t["queue"] = .string(queue)
    t["reason"] = .string(reason)
    t["count"] = .int64(count)
    t["exchange"] = .string(exchange)
    t["routing-keys"] = .array(routingKeys.map { AMQPFieldValue.string($0) })
    if let time { t["time"] = .timestamp(time) }
    return XDeathEntry(.table(t))
}

/// Encodes headers through rabbitmq-c and back, as a consumer receives them.
private func overTheWire(_ headers: AMQPTable) throws -> AMQPTable {
    let arena = CArena()
    var c: amqp_table_t = arena.table(headers)
    let capacity: Int = 1 << 16
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
    defer { buffer.deallocate() }
    var offset: Int = 0
    try #require(amqp_encode_table(crabbitmq_bytes(buffer.baseAddress, capacity), &c, &offset) == 0)
    var pool = amqp_pool_t()
    init_amqp_pool(&pool, 4096)
    defer { empty_amqp_pool(&pool) }
    var decoded = amqp_table_t()
    var readOffset: Int = 0
    try #require(amqp_decode_table(crabbitmq_bytes(buffer.baseAddress, offset), &pool, &decoded, &readOffset) == 0)
    return CDecode.table(decoded)
}

@Suite("AMQPProperties.xDeath")
struct XDeathTests {
    static let expected: [XDeathEntry?] = [
        entry(queue: "booking.requests", reason: "rejected", count: 3, exchange: "booking",
              routingKeys: ["booking.request.create", "cc.audit"], time: 1_700_000_100),
        entry(queue: "booking.retry.5s", reason: "expired", count: 1, exchange: "",
              routingKeys: ["booking.retry.5s"], time: 1_700_000_000),
    ]

    @Test func parsesRealisticHeader() throws {
        let p = AMQPProperties(headers: realisticXDeathHeaders())
        let deaths: [XDeathEntry] = p.xDeath
        #expect(deaths.count == 2)
        let first: XDeathEntry = try #require(deaths.first)
        #expect(first.queue == "booking.requests")
        #expect(first.reason == "rejected")
        #expect(first.count == 3)
        #expect(first.exchange == "booking")
        #expect(first.routingKeys == ["booking.request.create", "cc.audit"])
        #expect(first.time == 1_700_000_100)
        let second: XDeathEntry = try #require(deaths.last)
        #expect(second.queue == "booking.retry.5s")
        #expect(second.reason == "expired")
        #expect(second.count == 1)
        #expect(second.exchange == "")
        #expect(second.routingKeys == ["booking.retry.5s"])
        #expect(second.time == 1_700_000_000)
        #expect(deaths.map(Optional.some) == Self.expected)
    }

    @Test func parsesAfterTheWireRoundTrip() throws {
        let headers: AMQPTable = try overTheWire(realisticXDeathHeaders())
        #expect(headers == realisticXDeathHeaders())
        let deaths: [XDeathEntry] = AMQPProperties(headers: headers).xDeath
        #expect(deaths.map(Optional.some) == Self.expected)
    }

    @Test func absentHeaderIsEmpty() {
        #expect(AMQPProperties().xDeath == [])
        #expect(AMQPProperties(headers: ["x-first-death-reason": "expired"]).xDeath == [])
    }

    @Test func wrongShapeIsEmpty() {
        #expect(AMQPProperties(headers: ["x-death": .string("rejected")]).xDeath == [])
        #expect(AMQPProperties(headers: ["x-death": .table(["queue": "q", "reason": "rejected"])]).xDeath == [])
        #expect(AMQPProperties(headers: ["x-death": .array([])]).xDeath == [])
    }

    @Test func entriesWithoutQueueOrReasonAreSkipped() {
        var noQueue: AMQPTable = [:]
        noQueue["reason"] = .string("rejected")
        var noReason: AMQPTable = [:]
        noReason["queue"] = .string("q")
        var good: AMQPTable = [:]
        good["queue"] = .string("q2")
        good["reason"] = .string("maxlen")
        var numericQueue: AMQPTable = [:]
        numericQueue["queue"] = .int32(1)
        numericQueue["reason"] = .string("rejected")
        let headers: AMQPTable = ["x-death": .array([.table(noQueue), .string("junk"), .table(noReason), .table(numericQueue), .table(good)])]
        let deaths: [XDeathEntry] = AMQPProperties(headers: headers).xDeath
        #expect(deaths.count == 1)
        #expect(deaths.first?.queue == "q2")
        #expect(deaths.first?.reason == "maxlen")
        // Defaults for the optional fields.
        #expect(deaths.first?.count == 1)
        #expect(deaths.first?.exchange == "")
        #expect(deaths.first?.routingKeys == [])
        #expect(deaths.first?.time == nil)
    }

    @Test(arguments: [
        AMQPFieldValue.int8(5), .uint8(5), .int16(5), .uint16(5), .int32(5), .uint32(5), .int64(5), .uint64(5),
    ])
    func countAcceptsAnyIntegerKind(_ count: AMQPFieldValue) {
        let headers: AMQPTable = ["x-death": .array([.table(["queue": "q", "reason": "expired", "count": count])])]
        #expect(AMQPProperties(headers: headers).xDeath.first?.count == 5)
    }

    @Test func nonStringRoutingKeysAreDropped() {
        let t: AMQPTable = ["queue": "q", "reason": "rejected", "routing-keys": .array([.string("a"), .int32(1), .string("b")])]
        #expect(AMQPProperties(headers: ["x-death": .array([.table(t)])]).xDeath.first?.routingKeys == ["a", "b"])
    }

    @Test func timeMustBeATimestamp() {
        let t: AMQPTable = ["queue": "q", "reason": "rejected", "time": .int64(1_700_000_000)]
        #expect(AMQPProperties(headers: ["x-death": .array([.table(t)])]).xDeath.first?.time == nil)
    }
}

@Suite("AMQPFieldValue")
struct FieldValueTests {
    @Test func literals() {
        let s: AMQPFieldValue = "text"
        let i: AMQPFieldValue = 42
        let b: AMQPFieldValue = true
        #expect(s == .string("text"))
        #expect(i == .int64(42))
        #expect(b == .bool(true))
    }

    @Test func stringValue() {
        #expect(AMQPFieldValue.string("x").stringValue == "x")
        #expect(AMQPFieldValue.string("").stringValue == "")
        #expect(AMQPFieldValue.bytes([0x78]).stringValue == nil)
        #expect(AMQPFieldValue.int64(1).stringValue == nil)
    }

    @Test func intValue() {
        #expect(AMQPFieldValue.int8(-8).intValue == -8)
        #expect(AMQPFieldValue.uint8(255).intValue == 255)
        #expect(AMQPFieldValue.int16(-16).intValue == -16)
        #expect(AMQPFieldValue.uint16(65535).intValue == 65535)
        #expect(AMQPFieldValue.int32(Int32.min).intValue == Int64(Int32.min))
        #expect(AMQPFieldValue.uint32(UInt32.max).intValue == Int64(UInt32.max))
        #expect(AMQPFieldValue.int64(Int64.min).intValue == Int64.min)
        #expect(AMQPFieldValue.uint64(UInt64(Int64.max)).intValue == Int64.max)
        #expect(AMQPFieldValue.uint64(UInt64(Int64.max) + 1).intValue == nil)
        #expect(AMQPFieldValue.timestamp(1_700_000_000).intValue == 1_700_000_000)
        #expect(AMQPFieldValue.timestamp(UInt64.max).intValue == nil)
        #expect(AMQPFieldValue.string("1").intValue == nil)
        #expect(AMQPFieldValue.double(1).intValue == nil)
        #expect(AMQPFieldValue.bool(true).intValue == nil)
    }
}

@Suite("AMQPError")
struct AMQPErrorTests {
    static let retryable: [AMQPError.Code] = [.connectionFailed, .connectionLost, .nacked, .timeout, .staleDelivery]
    static let permanent: [AMQPError.Code] = [.invalidURL, .tlsFailed, .accessRefused, .vhostNotAllowed, .unroutable, .closed, .invalidArgument, .protocolError]

    @Test(arguments: retryable)
    func retryableCodes(_ code: AMQPError.Code) {
        #expect(AMQPError(code, "m").isRetryable)
        #expect(AMQPError(code, "m", replyCode: 320).isRetryable)
        #expect(AMQPError(code, "m", replyCode: 404).isRetryable)
    }

    @Test(arguments: permanent)
    func permanentCodes(_ code: AMQPError.Code) {
        #expect(!AMQPError(code, "m").isRetryable)
        #expect(!AMQPError(code, "m", replyCode: 320).isRetryable)
        #expect(!AMQPError(code, "m", replyCode: 541).isRetryable)
    }

    static let channelClosedCases: [(UInt16?, Bool)] = [
        (nil, false), (320, true), (541, true), (404, false), (406, false), (403, false), (405, false), (0, false),
    ]

    @Test(arguments: channelClosedCases)
    func channelClosedDependsOnReplyCode(_ replyCode: UInt16?, _ expected: Bool) {
        #expect(AMQPError(.channelClosed, "m", replyCode: replyCode).isRetryable == expected)
    }

    @Test func everyCodeIsClassified() {
        // Guards the lists above against a code being added without a test.
        let all: [AMQPError.Code] = [
            .invalidURL, .tlsFailed, .connectionFailed, .accessRefused, .vhostNotAllowed, .connectionLost, .channelClosed,
            .nacked, .unroutable, .timeout, .staleDelivery, .closed, .invalidArgument, .protocolError,
        ]
        #expect(Set(Self.retryable).union(Self.permanent).union([.channelClosed]) == Set(all))
        #expect(Set(Self.retryable).isDisjoint(with: Self.permanent))
    }

    @Test func descriptionWithReplyCode() {
        let e = AMQPError(.channelClosed, "NOT_FOUND - no exchange 'x' in vhost '/'", replyCode: 404)
        #expect(e.description == "AMQP channelClosed (404): NOT_FOUND - no exchange 'x' in vhost '/'")
        #expect("\(e)".contains("404"))
        let refused = AMQPError(.accessRefused, "ACCESS_REFUSED", replyCode: 403)
        #expect(refused.description == "AMQP accessRefused (403): ACCESS_REFUSED")
    }

    @Test func descriptionWithoutReplyCode() {
        let e = AMQPError(.timeout, "no reply within 30 s")
        #expect(e.description == "AMQP timeout: no reply within 30 s")
        #expect(!e.description.contains("("))
    }

    @Test func equality() {
        #expect(AMQPError(.nacked, "a", replyCode: 1) == AMQPError(.nacked, "a", replyCode: 1))
        #expect(AMQPError(.nacked, "a", replyCode: 1) != AMQPError(.nacked, "a", replyCode: 2))
        #expect(AMQPError(.nacked, "a") != AMQPError(.nacked, "b"))
        #expect(AMQPError(.nacked, "a") != AMQPError(.timeout, "a"))
    }
}
