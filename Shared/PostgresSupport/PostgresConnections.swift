import Foundation
import Logging
import NIOCore
import NIOPosix
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
            try await PostgresConnection.connect(failingFast: configuration, logger: logger).get()
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
    /// connection when it was not connected by
    /// ``connect(failingFast:logger:)`` (which sets the bound from
    /// `DATABASE_STATEMENT_TIMEOUT`). Statements here take milliseconds; the
    /// limit is for a connection that died under a statement (see ``rows(_:_:)``).
    public static let statementTimeout: TimeAmount = .seconds(30)

    /// Per open connection: how long the client waits for a statement's
    /// answer (``PostgresTimeouts``); dropped when the connection closes.
    private static let statementBounds = Mutex<[ObjectIdentifier: TimeAmount]>([:])

    /// How long the client waits for an answer on this connection.
    public var statementBound: TimeAmount {
        Self.statementBounds.withLock { $0[ObjectIdentifier(self)] } ?? Self.statementTimeout
    }

    /// Connects so that a lost server is noticed within known bounds: the
    /// TCP socket gets keepalive (idle, interval and count as the
    /// configuration's `tcp_keepalives_*` startup parameters, which the
    /// server uses for its end) and `TCP_USER_TIMEOUT` of the same total,
    /// the whole handshake is bounded by the configuration's
    /// `connectTimeout`, and every statement waits at most the server's
    /// `statement_timeout` plus ``PostgresTimeouts/statementGrace``.
    /// postgres-nio has no socket options of its own, so the TCP channel
    /// is made here and handed to it established; a configuration without
    /// a TCP host (a Unix socket) connects the plain way.
    public static func connect(failingFast configuration: Configuration, logger: Logger) -> EventLoopFuture<PostgresConnection> {
        let loop = defaultEventLoopGroup.any()
        let parameters = Dictionary(configuration.options.additionalStartupParameters) { _, last in last }
        func parameter(_ name: String, _ fallback: Int) -> Int { parameters[name].flatMap { Int($0) } ?? fallback }
        let standard = PostgresTimeouts.standard
        let statementMilliseconds = parameter("statement_timeout", standard.statement * 1000)
        let bound = TimeAmount.milliseconds(Int64(statementMilliseconds) + Int64(PostgresTimeouts.statementGrace) * 1000)
        @Sendable func remember(_ connection: PostgresConnection) -> PostgresConnection {
            let key = ObjectIdentifier(connection)
            statementBounds.withLock { $0[key] = bound }
            connection.closeFuture.whenComplete { _ in _ = statementBounds.withLock { $0.removeValue(forKey: key) } }
            return connection
        }
        guard let host = configuration.host, let port = configuration.port else {
            return connect(on: loop, configuration: configuration, id: nextID(), logger: logger).map(remember)
        }
        let idle = parameter("tcp_keepalives_idle", standard.keepalive)
        let interval = parameter("tcp_keepalives_interval", standard.keepaliveInterval)
        let count = parameter("tcp_keepalives_count", PostgresTimeouts.keepaliveProbes)
        func tcp(_ name: CInt) -> ChannelOptions.Types.SocketOption {
            ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: name))
        }
        let started = NIODeadline.now()
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(configuration.options.connectTimeout)
            .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
            .channelOption(tcp(CInt(TCP_KEEPIDLE)), value: idle)
            .channelOption(tcp(CInt(TCP_KEEPINTVL)), value: interval)
            .channelOption(tcp(CInt(TCP_KEEPCNT)), value: count)
            .channelOption(tcp(CInt(TCP_USER_TIMEOUT)), value: (idle + interval * count) * 1000)
        return bootstrap.connect(host: host, port: port).flatMap { channel in
            var established = Configuration(establishedChannel: channel, tls: configuration.tls,
                                            username: configuration.username, password: configuration.password,
                                            database: configuration.database)
            established.options = configuration.options
            // What postgres-nio does for a host it connects itself: the name
            // for SNI and verification, unless it is an address.
            if established.options.tlsServerName == nil, !isIPAddress(host) { established.options.tlsServerName = host }
            // One bound for TCP connect and handshake together.
            let left = configuration.options.connectTimeout - (NIODeadline.now() - started)
            established.options.connectTimeout = max(left, .milliseconds(1))
            return connect(on: loop, configuration: established, id: nextID(), logger: logger).map(remember)
                .flatMapErrorThrowing { error in
                    channel.close(mode: .all, promise: nil)
                    throw error
                }
        }
    }

    private static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

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
        let bound = statementBound
        let timer = loop.scheduleTask(in: bound) {
            if once.claim() {
                // Closed before the failure is seen: whoever handles it must
                // find the connection closed, not send it a ROLLBACK.
                PostgresConnection.closeInBackground(self)
                promise.fail(PostgresConnectionGone(reason: "no answer within \(bound.nanoseconds / 1_000_000_000) s"))
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

/// Statements sent on a connection without waiting for their answers, and
/// waited for together before anything depends on them.
///
/// Why: the connection's owner (a writer queue) blocks on every statement
/// it runs, so each one costs that thread a sleep and a wake-up besides the
/// round trip, and the next statement is sent only after it woke up. An
/// `INSERT` or `UPDATE` whose answer nobody reads need not wait there:
/// postgres-nio queues a connection's queries and runs them one after the
/// other in the order they were sent, so a later statement (or a query
/// whose rows are read) still sees an earlier one's effect, and the event
/// loop sends each next statement as soon as the previous one is answered.
///
/// Errors: ``settle()`` waits for every statement sent and throws the
/// first failure. After a failure PostgreSQL refuses the rest of the
/// transaction (SQLSTATE 25P02), so the first error is the one that says
/// what went wrong. Callers settle before they read rows, before a
/// savepoint decision and before `COMMIT`.
///
/// A statement's timeout (``PostgresConnection/result(_:_:)``) runs
/// from when it is sent, so it includes the time it queues behind the
/// statements sent before it: a few milliseconds here.
///
/// Ownership: confined to the thread that owns the connection, like the
/// connection's transaction itself; one instance per transaction.
public final class PendingStatements {
    private var sent: [EventLoopFuture<PostgresQueryResult>] = []

    public init() {}

    /// Sends `query` without waiting for its answer.
    public func send(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) {
        sent.append(connection.result(query, logger))
    }

    /// Waits for every statement sent so far; throws the first failure.
    /// Blocks, like ``PostgresConnection/run(_:_:)``.
    public func settle() throws {
        guard !sent.isEmpty else { return }
        let futures = sent
        sent = []
        var first: (any Error)?
        for future in futures {
            do { _ = try future.wait() } catch { first = first ?? error }
        }
        if let first { throw first }
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
