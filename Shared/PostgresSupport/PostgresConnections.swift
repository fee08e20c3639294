import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// The read connection: connected on first use and again after it closed.
/// postgres-nio queues concurrent queries on one connection.
public actor ReadConnection {
    private let configuration: PostgresConnection.Configuration
    private let logger: Logger
    private var connection: PostgresConnection?

    public init(configuration: PostgresConnection.Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// A connect in progress, shared by every caller that needs the
    /// connection meanwhile (an actor method may interleave at `await`:
    /// without this, two callers connected twice and one connection leaked).
    private var connecting: Task<PostgresConnection, any Error>?
    private var closed = false

    private func get() async throws -> PostgresConnection {
        if closed { throw PostgresConnectionGone(reason: "the store was closed") }
        if let connection, !connection.isClosed { return connection }
        if let connecting { return try await connecting.value }
        if let stale = connection {
            connection = nil
            PostgresConnection.closeInBackground(stale)
        }
        let configuration = self.configuration, logger = self.logger
        let task = Task {
            try await PostgresConnection.connect(
                on: PostgresConnection.defaultEventLoopGroup.any(), configuration: configuration,
                id: PostgresConnection.nextID(), logger: logger)
        }
        connecting = task
        defer { connecting = nil }
        let fresh = try await task.value
        if closed {
            PostgresConnection.closeInBackground(fresh)
            throw PostgresConnectionGone(reason: "the store was closed")
        }
        connection = fresh
        return fresh
    }

    /// Runs `query` (autocommit) and collects its rows.
    public func rows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await get().rows(query, logger).get()
    }

    public func close() async {
        closed = true
        try? await connection?.close()
        connection = nil
    }

    deinit {
        if let connection { PostgresConnection.closeInBackground(connection) }
    }
}

extension PostgresConnection {
    private static let connectionIDs = Atomic<Int>(0)

    /// A process-wide id for postgres-nio's logs.
    public static func nextID() -> Int {
        connectionIDs.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Closes `connection` without waiting, keeping it alive until closed
    /// (postgres-nio asserts that no open connection is deallocated).
    public static func closeInBackground(_ connection: PostgresConnection) {
        let closing: EventLoopFuture<Void> = connection.close()
        closing.whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    /// Runs `query` and waits for all its rows. Blocks the calling thread:
    /// only for the store's writer queue, never an event loop or the pool.
    @discardableResult
    public func run(_ query: PostgresQuery, _ logger: Logger) throws -> [PostgresRow] {
        try rows(query, logger).wait()
    }

    /// How long one statement may take before the store gives up on its
    /// connection. Statements here take milliseconds; the limit is for a
    /// connection that died under a statement (see ``rows(_:_:)``).
    public static let statementTimeout: TimeAmount = .seconds(30)

    /// `query`'s rows (see ``result(_:_:)``).
    public func rows(_ query: PostgresQuery, _ logger: Logger) -> EventLoopFuture<[PostgresRow]> {
        result(query, logger).map(\.rows)
    }

    /// Commits the open transaction, and makes sure it did: PostgreSQL
    /// answers `COMMIT` in a transaction that failed earlier with the tag
    /// `ROLLBACK` and no error, so a failure swallowed on the way would
    /// otherwise pass for a commit. Blocks, like ``run(_:_:)``.
    public func commit(_ logger: Logger) throws {
        let tag = try result("COMMIT", logger).wait().metadata.command
        guard tag == "COMMIT" else { throw PostgresCommitRefused(tag: tag) }
    }

    /// `query`'s result, failing instead of waiting forever on a connection
    /// that is gone: postgres-nio drops a query written to a channel that
    /// has just closed without completing it (seen when PostgreSQL restarts
    /// under an open transaction: the `ROLLBACK TO SAVEPOINT` after the
    /// failure never answered), so a closed connection is refused up front
    /// and a statement that gets no answer times out.
    public func result(_ query: PostgresQuery, _ logger: Logger) -> EventLoopFuture<PostgresQueryResult> {
        let loop = eventLoop
        guard !isClosed else { return loop.makeFailedFuture(PostgresConnectionGone(reason: "the connection is closed")) }
        let promise = loop.makePromise(of: PostgresQueryResult.self)
        let once = CompletionFlag()
        let timer = loop.scheduleTask(in: Self.statementTimeout) {
            if once.claim() {
                // Closed before the failure is seen: whoever handles it must
                // find the connection closed, not send it a ROLLBACK.
                PostgresConnection.closeInBackground(self)
                promise.fail(PostgresConnectionGone(reason: "no answer within \(Self.statementTimeout.nanoseconds / 1_000_000_000) s"))
            }
        }
        let future: EventLoopFuture<PostgresQueryResult> = self.query(query, logger: logger)
        future.whenComplete { result in
            timer.cancel()
            if once.claim() { promise.completeWith(result) }
        }
        return promise.futureResult
    }
}

/// `COMMIT` answered with another tag (`ROLLBACK`): the transaction had
/// failed, nothing of it was kept.
public struct PostgresCommitRefused: Error, CustomStringConvertible {
    public let tag: String
    public var description: String { "PostgreSQL did not commit (answered \(tag)): the transaction had failed" }
}

/// A statement the store sent got no answer because its connection is
/// gone; the next statement connects again.
public struct PostgresConnectionGone: Error, CustomStringConvertible {
    public let reason: String
    public init(reason: String) { self.reason = reason }
    public var description: String { "PostgreSQL connection gone: \(reason)" }
}

/// Set once, by whichever of two callbacks comes first.
private final class CompletionFlag: Sendable {
    private let done = Mutex(false)

    /// True for the first caller only.
    func claim() -> Bool {
        done.withLock { done in
            defer { done = true }
            return !done
        }
    }
}
