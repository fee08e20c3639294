import PostgresSupport

/// Reading a store's errors in tests, on SQLite and PostgreSQL alike.
public enum StoreErrors {
    /// What a log would say of `error`: PostgreSQL's SQLSTATE and message
    /// (postgres-nio's own description hides both), else the error itself.
    public static func describe(_ error: any Error) -> String {
        let postgres = PostgresFailure.describe(error)
        return postgres.hasPrefix("SQLSTATE") ? postgres : "\(error)"
    }

    /// Whether `error` is a duplicate key: SQLSTATE 23505 on PostgreSQL,
    /// SQLite's "UNIQUE constraint failed".
    public static func isUniqueViolation(_ error: any Error) -> Bool {
        let text = describe(error)
        return text.contains("SQLSTATE 23505") || text.contains("UNIQUE constraint failed")
    }
}
