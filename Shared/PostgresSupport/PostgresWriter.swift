import Dispatch
import Foundation
import Logging
import PostgresNIO

/// One PostgreSQL connection owned by a serial queue: statements block that
/// queue on postgres-nio's futures — never an event loop, never the
/// cooperative pool — so a transaction is plain straight-line code.
///
/// Ownership: the connection is only touched on `queue`; it is connected on
/// first use, and again on the next use after it broke (PostgreSQL
/// restarted, the network dropped). A transaction cut off that way fails;
/// the caller's message is redelivered and tried again.
public final class PostgresWriter: @unchecked Sendable {  // `connection` is confined to `queue`
    public let settings: PostgresSettings
    public let logger: Logger
    private let configuration: PostgresConnection.Configuration
    private let queue: DispatchQueue
    private var connection: PostgresConnection?

    public init(settings: PostgresSettings, label: String, logger: Logger) throws {
        self.settings = settings
        self.logger = logger
        configuration = try settings.connectionConfiguration()
        queue = DispatchQueue(label: label)
    }

    deinit {
        if let connection { PostgresConnection.closeInBackground(connection) }
    }

    /// Runs `work` on the queue (which owns the connection).
    public func enqueue(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    /// Runs `body` on the queue with the connection.
    public func onConnection<T: Sendable>(_ body: @Sendable @escaping (PostgresConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result {
                    do {
                        return try body(try self.connectionOnQueue())
                    } catch {
                        self.dropIfBroken(error)
                        throw error
                    }
                })
            }
        }
    }

    /// Runs `body` in one READ COMMITTED transaction on the queue (see
    /// ``transactionOnQueue(_:lockKey:_:)``).
    public func transaction<T: Sendable>(lockKey: String?, _ body: @Sendable @escaping (PostgresConnection) throws -> T) async throws -> T {
        try await onConnection { connection in
            try self.transactionOnQueue(connection, lockKey: lockKey) { try body(connection) }
        }
    }

    /// The connection, (re)connected when needed. On the queue only.
    public func connectionOnQueue() throws -> PostgresConnection {
        dispatchPrecondition(condition: .onQueue(queue))
        if let connection, !connection.isClosed { return connection }
        if let stale = connection { PostgresConnection.closeInBackground(stale) }
        connection = nil
        let fresh = try PostgresConnection.connect(failingFast: configuration, logger: logger).wait()
        connection = fresh
        return fresh
    }

    /// Runs `body` in one transaction on `connection`: READ COMMITTED
    /// whatever the server's default (each statement after the lock must
    /// see the previous holder's commit), after taking the
    /// transaction-level advisory lock `lockKey` when given. A holder that
    /// does not let go within 20 s fails this transaction (55P03) instead
    /// of holding the connection for ever. On the queue only.
    public func transactionOnQueue<T>(_ connection: PostgresConnection, lockKey: String?, _ body: () throws -> T) throws -> T {
        dispatchPrecondition(condition: .onQueue(queue))
        try connection.run("BEGIN ISOLATION LEVEL READ COMMITTED", logger)
        do {
            if let lockKey {
                // `lock_timeout` (20 s) is a startup parameter of every
                // connection (``PostgresSettings``).
                try connection.run("SELECT pg_advisory_xact_lock(hashtext(\(lockKey)))", logger)
            }
            let result = try body()
            try connection.commit(logger)
            return result
        } catch {
            if !connection.isClosed { _ = try? connection.run("ROLLBACK", logger) }
            throw error
        }
    }

    /// Closes the connection (after whatever the queue is running).
    public func close() async {
        let connection: PostgresConnection? = await withCheckedContinuation { continuation in
            queue.async {
                let connection = self.connection
                self.connection = nil
                continuation.resume(returning: connection)
            }
        }
        try? await connection?.close()
    }

    /// Calls `body` until the server is reachable: refused connections and
    /// "starting up" (57P03) are retried every second for `waitSeconds`
    /// (services and database starting together in a compose file);
    /// refusals by the server itself (bad password, no such database) fail
    /// at once.
    public func whenReachable<T: Sendable>(waitSeconds: Double,
                                           _ body: @Sendable @escaping (PostgresConnection) throws -> T) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(waitSeconds)
        while true {
            do {
                return try await onConnection(body)
            } catch let error as PSQLError
                        where (error.code == .connectionError || error.serverInfo?[.sqlState] == "57P03") && ContinuousClock.now < deadline {
                logger.warning("PostgreSQL not reachable yet; retrying",
                               metadata: ["database": "\(settings)", "error": .string(PostgresFailure.describe(error))])
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// After a failure of the connection itself (not of a statement), the
    /// next use connects afresh instead of writing to a closing channel.
    /// On the queue only.
    public func dropIfBroken(_ error: any Error) {
        guard PostgresFailure.isConnectionFailure(error), let connection else { return }
        self.connection = nil
        PostgresConnection.closeInBackground(connection)
    }
}

/// Reading postgres-nio's errors.
public enum PostgresFailure {
    /// Whether `error` says the connection is unusable (as opposed to a
    /// statement the server refused).
    public static func isConnectionFailure(_ error: any Error) -> Bool {
        if error is PostgresConnectionGone { return true }
        guard let error = error as? PSQLError else { return false }
        return error.code != .server
    }

    /// An error for the log: the SQLSTATE and message of a server error
    /// (postgres-nio's own description hides both), never the statement's
    /// parameters (they can hold personal data).
    public static func describe(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let state = error.serverInfo?[.sqlState] {
            return "SQLSTATE \(state): \(error.serverInfo?[.message] ?? "")"
        }
        return "PSQLError \(error.code)"
    }
}
