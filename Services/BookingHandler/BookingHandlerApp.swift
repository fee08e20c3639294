import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import PostgresSupport
import ServiceLifecycle
import ServiceSettings
import ServiceSupport

/// Assembles the booking handler from its parts; `main` and the
/// integration tests both call it, so tests run what production runs.
public struct BookingHandlerApp: Sendable {
    /// The database.
    public let store: any BookingStore
    /// Command handling.
    public let processor: CommandProcessor
    /// The outbox relay.
    public let relay: OutboxRelay
    /// The durable timers (start, end, release, expiry).
    public let timers: BookingTimers
    /// The services to run, in start order (shutdown runs in reverse:
    /// the consumer stops first, then the timers, the relay makes its last
    /// round, then the connection closes).
    public let services: [any Service]

    /// Opens the database — PostgreSQL when `database` is given, else the
    /// SQLite file in `dataDirectory` — upserts `roomsFile` (if any),
    /// declares the handler's topology on `connection`. A `policy` without
    /// replayers gets the connection's own user as the one replayer.
    /// Builds the handler from its settings as ``ServiceRunner`` read them:
    /// the shape every service's App shares, `build(settings:connection:)`
    /// (`main.swift` calls it; tests call the one below with what they vary).
    public static func build(settings start: ServiceRunner.Startup<HandlerSettings>,
                             connection: AMQPConnection) async throws -> BookingHandlerApp {
        let (common, settings) = (start.common, start.settings)
        let dataDirectory = try common.ensureDataDirectory()
        return try await build(
            connection: connection, dataDirectory: dataDirectory, roomsFile: settings.roomsFile,
            policy: settings.policy, replayRate: settings.replayRate, httpPort: common.httpPort, httpHost: common.httpBind,
            retentionDays: settings.retentionDays, database: settings.database, callerRate: settings.callerRate,
            cursorKey: try CursorKey.resolve(setting: settings.listCursorKey, dataDirectory: dataDirectory),
            logger: start.logger)
    }

    public static func build(
        connection: AMQPConnection, dataDirectory: String, roomsFile: String? = nil,
        policy: CallerPolicy = CallerPolicy(), replayRate: Int = ReplayPacer.defaultRate,
        prefetch: UInt16 = 64, concurrency: Int = 64, httpPort: Int? = nil, httpHost: String = CommonSettings.defaultBindAddress,
        retentionDays: Int = 7, database: PostgresSettings? = nil, callerRate: CallerRate? = nil,
        cursorKey: CursorKey = .random(), logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }, timerInterval: Duration = .seconds(1)
    ) async throws -> BookingHandlerApp {
        let store: any BookingStore
        if let database {
            store = try await PostgresBookingStore.open(settings: database, logger: logger)
            logger.info("store: PostgreSQL", metadata: ["database": "\(database)"])
        } else {
            store = try SQLiteBookingStore(path: dataDirectory + "/booking-handler.sqlite")
        }
        var policy = policy
        // No REPLAY_USERS: the handler's own user, right for the one-user
        // embedded set (the projector logs in alike, so its rebuild works).
        if policy.replayUsers.isEmpty { policy.replayUsers = [connection.user] }
        let processor = CommandProcessor(store: store, policy: policy, now: now)
        if let roomsFile {
            guard let data = FileManager.default.contents(atPath: roomsFile) else {
                throw SettingsError("ROOMS_FILE: cannot read \(roomsFile)")
            }
            let rooms = try await processor.upsertRooms(fileContents: data)
            logger.info("rooms upserted from ROOMS_FILE", metadata: ["rooms": "\(rooms.count)", "file": .string(roomsFile)])
        }
        try await connection.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue,
                                                                            Topology.bookingQueriesQueue]))
        let relay = OutboxRelay(store: store, connection: connection, logger: logger,
                                retention: TimeInterval(retentionDays) * 86_400)
        // One bucket per caller for commands and booking queries alike.
        // Admins and the set's services (our own user, the replayers) are
        // never limited.
        let limiter = CallerRateLimiter(rate: callerRate,
                                        exempt: policy.administrators.union(policy.replayUsers).union([connection.user]))
        let consumer = CommandConsumer(connection: connection, processor: processor, relay: relay, logger: logger,
                                       replayRate: replayRate, limiter: limiter)
        let consumerService = consumer.service(prefetch: prefetch, concurrency: concurrency)
        let timers = BookingTimers(processor: processor, relay: relay, logger: logger, interval: timerInterval)
        let queries = QueryResponder(connection: connection, reader: BookingReader(store: store, policy: policy, now: now, cursorKey: cursorKey),
                                     logger: logger, limiter: limiter).service()
        // The store closes after the relay, timers and consumers stopped.
        var services: [any Service] = [connection, OnShutdown { await store.close() }, relay, timers, queries, consumerService]
        if let httpPort {
            // First in the group, so it is shut down last: /healthz keeps
            // answering while the consumer drains.
            services.insert(OpsServer(host: httpHost, port: httpPort, checks: [
                ReadinessCheck("amqp") { connection.isConnected },
                ReadinessCheck("consumer") { consumerService.status.isConsuming },
                ReadinessCheck("queries") { queries.status.isConsuming },
                ReadinessCheck("database") { (try? await store.counts()) != nil },
            ], logger: logger), at: 0)
        }
        return BookingHandlerApp(store: store, processor: processor, relay: relay, timers: timers, services: services)
    }
}
