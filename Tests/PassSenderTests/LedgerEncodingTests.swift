import BookingContracts
import Foundation
import GRDB
import Testing
import TestSupport
@testable import PassSender

/// What the ledger writes and reads without a coder: the outbox's header
/// column and result rows by column name.
@Suite("Ledger encoding")
struct LedgerEncodingTests {
    /// A header value with what JSON must escape, slashes, non-ASCII
    /// text, or an integer at the ends of its range.
    static func value(_ rng: inout SplitMix) -> OutboxMessage.HeaderValue {
        let pieces = ["a", "/", "\"", "\\", "\n", "\t", "\r", "\u{08}", "\u{0C}", "\u{01}", "\u{1F}", "é", "日本", "🙂", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", " "]
        switch rng.next() % 4 {
        case 0: return .int([Int64.min, Int64.max, 0, -1][Int(rng.next() % 4)])
        case 1: return .int(Int64(bitPattern: rng.next()))
        default:
            return .string((0..<Int(rng.next() % 6)).map { _ in pieces[Int(rng.next() % UInt64(pieces.count))] }.joined())
        }
    }

    @Test("the outbox's header column is the encoder's JSON byte for byte, and decodes to the same headers")
    func headersAreTheEncodersJSON() throws {
        var rng = SplitMix(seed: 0x1ed9e4)
        for round in 0..<500 {
            var message = OutboxMessage(exchange: "booking.events", routingKey: "pass.delivered", messageID: "m",
                                        type: "pass.delivered", body: [])
            message.headers = [:]
            for _ in 0..<Int(rng.next() % 5) {
                let keys = ["traceparent", "tracestate", "x-attempt", "X-a", "x-10", "x-9", "k/\"ey\"", "ünï", "Zz", ""]
                let key = keys[Int(rng.next() % UInt64(keys.count))]
                message.headers[key] = Self.value(&rng)
            }
            let written = Data(message.headersJSON)
            // The contract's encoder (keys sorted, slashes as they are)
            // writes the same bytes.
            let encoded = try ContractJSON.encode(message.headers)
            #expect(written == encoded, "round \(round): \(String(decoding: written, as: UTF8.self))")
            // The outbox's readers (JSONDecoder) read it, and rows written
            // before, by a plain JSONEncoder (keys in any order, `\/`), alike.
            let read = try JSONDecoder().decode([String: OutboxMessage.HeaderValue].self, from: written)
            #expect(read == message.headers, "round \(round)")
            let older = try JSONDecoder().decode([String: OutboxMessage.HeaderValue].self,
                                                 from: try JSONEncoder().encode(message.headers))
            #expect(older == message.headers, "round \(round)")
        }
    }

    @Test("SQLite rows keep each value under its own column, NULLs and blobs included, in every row")
    func sqliteRowsKeepValuesWithTheirColumns() throws {
        let queue = try DatabaseQueue()
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE t (id INTEGER PRIMARY KEY, bookingId TEXT, body BLOB, at REAL, flag INTEGER)")
            let sql = GRDBLedgerSQL(db: db)
            for n in 1...3 {
                try sql.execute("INSERT INTO t (bookingId, body, at, flag) VALUES (?, ?, ?, ?)",
                                [.text("b-\(n)"), n == 2 ? .null : .blob(Data([UInt8(n), 0])), .double(Double(n) + 0.5), .bool(n == 3)])
            }
            // The same statement again (cached), and names in another case.
            for _ in 0..<2 {
                let rows = try sql.rows("SELECT flag, at, body, bookingId AS \"BookingID\", id FROM t WHERE id >= ? ORDER BY id", [.int(1)])
                #expect(rows.map { $0.string("bookingid") } == ["b-1", "b-2", "b-3"])
                #expect(rows.map { $0.data("BODY") } == [Data([1, 0]), nil, Data([3, 0])])
                #expect(rows.map { $0.double("At") } == [1.5, 2.5, 3.5])
                #expect(rows.map { $0.bool("flag") } == [false, false, true])
                #expect(rows.map { $0.int("id") } == [1, 2, 3])
            }
            #expect(try sql.rows("SELECT id FROM t WHERE id > ?", [.int(9)]).isEmpty)
        }
    }

    @Test("a row's columns are found without regard to ASCII case; the first of equal names wins")
    func rowColumnsIgnoreCase() {
        let row = SQLRow([("bookingId", .text("first")), ("BOOKINGID", .text("second")), ("n", .int(7)), ("Zé", .int(1))])
        #expect(row.string("bookingId") == "first")
        #expect(row.string("bookingid") == "first")
        #expect(row.string("BookingID") == "first")
        #expect(row.int("N") == 7)
        #expect(row.value("bookingI") == .null)
        #expect(row.value("bookingIdx") == .null)
        #expect(row.value("m") == .null)
        // Only ASCII letters fold; other characters match only themselves.
        #expect(row.int("zé") == 1)
        #expect(row.value("ZÉ") == .null)
        #expect(SQLRow.fold("outboxId") == "outboxid")
        #expect(SQLRow.fold("plain") == "plain")
    }
}
