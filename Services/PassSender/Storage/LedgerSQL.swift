import Foundation

/// A value bound to, or read from, a ledger statement: the few types the
/// ledger's columns hold, the same on SQLite and PostgreSQL.
public enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob(Data)
    case bool(Bool)
}

/// Something that can be bound to a `?` placeholder.
public protocol SQLBindable: Sendable {
    var sqlValue: SQLValue { get }
}

extension Int: SQLBindable { public var sqlValue: SQLValue { .int(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .int(self) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .double(self) } }
extension String: SQLBindable {
    /// U+0000 becomes U+FFFD: PostgreSQL's text cannot hold it and SQLite
    /// (through GRDB) reads a string back only up to it. Keys never contain
    /// it (booking ids are the handler's, e-mails validated); a gateway's
    /// error text might, and must not fail the transaction that records it.
    ///
    /// The check looks for the byte 0 in the UTF-8 view (U+0000 is the only
    /// scalar that encodes to it): `contains("\u{0}")` went through
    /// Foundation's `NSString` search, 1.5 % of the pass sender's CPU.
    public var sqlValue: SQLValue {
        .text(utf8.contains(0) ? replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : self)
    }
}
extension Data: SQLBindable { public var sqlValue: SQLValue { .blob(self) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .bool(self) } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// One result row, by column name without regard to case (PostgreSQL folds
/// unquoted names to lower case, SQLite keeps them as declared).
///
/// The columns are kept in order and searched one by one, compared without
/// regard to ASCII case: the ledger's rows have a few columns, and a
/// dictionary with lower-cased keys per row (and a lower-cased copy of the
/// name per lookup) cost more than the search.
public struct SQLRow: Sendable {
    /// Column names, ASCII lower case (``fold(_:)``); shared by the rows of
    /// one query.
    let columns: [String]
    let values: [SQLValue]

    /// A row from `(column, value)` pairs; the first of equal names wins.
    init(_ pairs: [(String, SQLValue)]) {
        self.init(foldedColumns: pairs.map { Self.fold($0.0) }, values: pairs.map { $0.1 })
    }

    /// A row whose `foldedColumns` went through ``fold(_:)``.
    init(foldedColumns: [String], values: [SQLValue]) {
        precondition(foldedColumns.count == values.count, "one value per column")
        self.columns = foldedColumns
        self.values = values
    }

    /// `name` with ASCII capitals in lower case (other characters as they
    /// are: the ledger's column names are ASCII).
    static func fold(_ name: String) -> String {
        guard name.utf8.contains(where: isCapital) else { return name }
        return String(decoding: name.utf8.map { isCapital($0) ? $0 + 32 : $0 }, as: UTF8.self)
    }

    private static func isCapital(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") }

    func value(_ name: String) -> SQLValue {
        for (index, column) in columns.enumerated() where Self.matches(folded: column, name) {
            return values[index]
        }
        return .null
    }

    /// Whether `name` equals the folded column `folded` in ASCII lower case.
    private static func matches(folded: String, _ name: String) -> Bool {
        guard folded.utf8.count == name.utf8.count else { return false }
        for (a, b) in zip(folded.utf8, name.utf8) where a != b {
            guard isCapital(b), a == b + 32 else { return false }
        }
        return true
    }

    func int(_ name: String) -> Int? {
        switch value(name) {
        case .int(let v): Int(v)
        case .double(let v): Int(v)
        case .bool(let v): v ? 1 : 0
        default: nil
        }
    }

    func double(_ name: String) -> Double? {
        switch value(name) {
        case .double(let v): v
        case .int(let v): Double(v)
        default: nil
        }
    }

    func string(_ name: String) -> String? {
        if case .text(let v) = value(name) { return v }
        return nil
    }

    func data(_ name: String) -> Data? {
        switch value(name) {
        case .blob(let v): v
        case .text(let v): Data(v.utf8)
        default: nil
        }
    }

    /// SQLite stores booleans as integers.
    func bool(_ name: String) -> Bool? {
        switch value(name) {
        case .bool(let v): v
        case .int(let v): v != 0
        default: nil
        }
    }
}

/// The statements of one ledger transaction, on whichever engine holds the
/// ledger. The ledger's SQL is written once, in the dialect both engines
/// accept: `?` placeholders (PostgreSQL's are numbered by the adapter),
/// `INSERT … ON CONFLICT`, unquoted column names.
///
/// Threads: a value is only valid inside the transaction closure that
/// received it, on the thread that called it.
public protocol LedgerSQL {
    /// Runs a statement that returns no rows. An engine may send it without
    /// waiting for its answer (PostgreSQL): its error, if any, is thrown by
    /// the next ``rows(_:_:)`` or ``flush()``, and statements after it see
    /// its effect either way.
    func execute(_ sql: String, _ arguments: [SQLValue]) throws
    /// Runs a query and collects its rows (after every statement before it
    /// has been answered).
    func rows(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow]
    /// Waits for the statements ``execute(_:_:)`` sent; throws the first
    /// one's error. The group commit flushes after each write, before it
    /// decides whether that write succeeded.
    func flush() throws
}

extension LedgerSQL {
    public func flush() throws {}

    func execute(_ sql: String, _ arguments: any SQLBindable...) throws {
        try execute(sql, arguments.map(\.sqlValue))
    }

    func rows(_ sql: String, _ arguments: any SQLBindable...) throws -> [SQLRow] {
        try rows(sql, arguments.map(\.sqlValue))
    }

    func row(_ sql: String, _ arguments: any SQLBindable...) throws -> SQLRow? {
        try rows(sql, arguments.map(\.sqlValue)).first
    }
}

/// Where the ledger lives: SQLite in `DATA_DIR` (one host) or PostgreSQL
/// (`DATABASE_URL`, instances on several hosts).
/// One reading of a database server's clock (``LedgerDatabase/readServerClock(_:)``):
/// the server read `server` at some instant between this host's `sent` and `received`.
public struct ServerClockReading: Sendable {
    public var sent: Date
    public var server: Date
    public var received: Date
}

public protocol LedgerDatabase: Sendable {
    /// Runs `body` in one write transaction. `lockKey` names what the
    /// transaction must be alone with (a booking): on PostgreSQL a
    /// transaction-level advisory lock on it, so two instances never read
    /// and claim the same booking's rows at the same time; SQLite has one
    /// writer anyway. Throwing rolls everything back.
    func write<T: Sendable>(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T
    /// Queues a write like ``write(lockKey:_:)`` and returns at once;
    /// `settle` gets nil after its commit, else the error. Writes are run in
    /// the order they were queued, so one queued after this sees it.
    func submit(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> Void,
                settle: @escaping @Sendable ((any Error)?) -> Void)
    /// Runs `body` on a consistent read view.
    func read<T: Sendable>(_ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T
    /// Reads the database server's clock, which instances on several hosts
    /// read claims and leases by (``LedgerClock``), between two readings
    /// of `local`; nil for a ledger on this host (SQLite), whose instances
    /// share this host's clock.
    func readServerClock(_ local: @escaping @Sendable () -> Date) async throws -> ServerClockReading?
    /// Closes connections (PostgreSQL); nothing for SQLite.
    func close() async
    /// `db.system.name` in the ledger's spans (``StoreSpans``).
    var systemName: String { get }
}
