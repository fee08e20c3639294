import Tracing

/// The one convention for the spans of database work in every service
/// (handler commands and reads, pass ledger transactions, projector
/// applies), after OpenTelemetry's database conventions: named
/// `store <what>`, kind internal — the store is in-process (SQLite) or a
/// pool behind a queue (PostgreSQL), and the span covers the wait for
/// the group commit as well as the statements, which a client span per
/// statement would not show.
public enum StoreSpans {
    /// `db.system.name` of SQLite.
    public static let sqlite = "sqlite"
    /// `db.system.name` of PostgreSQL.
    public static let postgresql = "postgresql"

    /// The attributes every store span carries: `db.system.name` and
    /// `db.operation.name` (`transaction` for writes, `read` for reads).
    public static func attributes(system: String?, operation: String) -> SpanAttributes {
        var attributes = SpanAttributes()
        if let system { attributes["db.system.name"] = system }
        attributes["db.operation.name"] = operation
        return attributes
    }
}
