import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import ServiceLifecycle
import ServiceSupport

/// Assembles the pass sender; `main` and the integration tests both call
/// ``build(connection:settings:dataDirectory:httpPort:httpHost:gateway:logger:observer:now:)``.
public struct PassSenderApp: Sendable {
    public let ledger: PassLedger
    public let dispatcher: PassDispatcher
    public let consumer: PassConsumer
    public let gateway: any PassGateway
    /// In start order; shutdown runs in reverse: consumers stop and finish
    /// their deliveries, the gateway's HTTP client shuts down, then the
    /// connection closes (and the ops server last).
    public let services: [any Service]

    /// Opens the ledger (PostgreSQL when `settings.database` names it, else
    /// SQLite in `dataDirectory`), declares the topology, publishes
    /// what the outbox still holds from a previous run, and wires the two
    /// consumers. `gateway` overrides the one chosen from `settings`.
    /// Builds the pass sender from its settings as ``ServiceRunner`` read
    /// them: the shape every service's App shares,
    /// `build(settings:connection:)` (`main.swift` calls it; tests call the
    /// one below with what they vary).
    public static func build(settings start: ServiceRunner.Startup<PassSenderSettings>,
                             connection: AMQPConnection) async throws -> PassSenderApp {
        try await build(connection: connection, settings: start.settings, dataDirectory: try start.common.ensureDataDirectory(),
                        httpPort: start.common.httpPort, httpHost: start.common.httpBind, logger: start.logger)
    }

    public static func build(connection: AMQPConnection, settings: PassSenderSettings, dataDirectory: String,
                             httpPort: Int? = nil, httpHost: String = CommonSettings.defaultBindAddress,
                             gateway: (any PassGateway)? = nil, logger: Logger,
                             observer: (@Sendable (PassConsumer.Settled) -> Void)? = nil,
                             now: @escaping @Sendable () -> Date = { Date() }) async throws -> PassSenderApp {
        let database: any LedgerDatabase = if let postgres = settings.database {
            try await PostgresLedgerDatabase.open(settings: postgres, logger: logger)
        } else {
            try SQLiteLedgerDatabase(path: dataDirectory + "/pass-sender.sqlite")
        }
        // Instances on several hosts compare each other's leases: they read
        // them by the database server's clock, not their own.
        let clock: LedgerClock? = settings.database == nil ? nil : LedgerClock(database: database, logger: logger)
        if let clock {
            do {
                try await clock.start()
            } catch {
                await database.close()
                throw error
            }
        }
        let ledgerNow: @Sendable () -> Date
        if let clock { ledgerNow = { clock.now() } } else { ledgerNow = { Date() } }
        let ledger = PassLedger(database: database, claimLease: settings.claimLease, now: ledgerNow)
        let chosen: any PassGateway
        if let gateway {
            chosen = gateway
        } else {
            // The spool is always there: it writes passes without
            // PASS_GATEWAY_URL and notices without a /notify gateway.
            let spool = try SpoolPassGateway(directory: URL(fileURLWithPath: dataDirectory).appendingPathComponent("outbox"),
                                             now: now, series: { try await ledger.seriesOccurrences(seriesId: $0) })
            let http = settings.gatewayURL != nil || settings.notifyURL != nil
                ? HTTPPassGateway(baseURL: settings.gatewayURL, notifyURL: settings.notifyURL, timeout: settings.gatewayTimeout,
                                  connectionsPerHost: settings.gatewayConcurrency, logger: logger)
                : nil
            let passes: any PassGateway = settings.gatewayURL != nil ? http! : spool
            chosen = NoticeRoutingGateway(passes: passes, http: http, spool: spool)
        }
        try await connection.declare(PassQueues.declarations(delays: settings.retryDelays))
        let dispatcher = PassDispatcher(ledger: ledger, gateway: chosen, settings: settings, logger: logger, now: now)
        let consumer = PassConsumer(connection: connection, dispatcher: dispatcher, ledger: ledger, logger: logger,
                                    eventSender: SenderCheck.bookingHandler(configured: settings.bookingHandlerUser, ownUser: connection.user),
                                    retryOperators: settings.administrators,
                                    observer: observer)
        try await consumer.flush(bookingId: nil)
        // Published outbox rows are only kept a while for inspection.
        try await ledger.prunePublished(olderThan: 7 * 86_400)
        let prefetch = UInt16(min(1000, settings.concurrency * 4))
        let events = AMQPConsumerService.preparing(connection: connection, queue: Topology.passSenderEventsQueue, prefetch: prefetch,
                                                   concurrency: settings.concurrency, logger: logger) { await consumer.prepareEvent($0) }
        let retries = AMQPConsumerService(connection: connection, queue: PassQueues.retry, prefetch: prefetch,
                                          concurrency: settings.concurrency, logger: logger) { await consumer.handleRetry($0) }
        let sweep = OutboxSweep(consumer: consumer, interval: settings.outboxSweep, logger: logger)
        var services: [any Service] = [connection, OnShutdown { await ledger.close() }, GatewayService(gateway: chosen), events, retries,
                                       sweep]
        if let clock { services.append(clock) }
        if let httpPort {
            services.insert(OpsServer(host: httpHost, port: httpPort, checks: [
                ReadinessCheck("amqp") { connection.isConnected },
                ReadinessCheck("events-consumer") { events.status.isConsuming },
                ReadinessCheck("retry-consumer") { retries.status.isConsuming },
                ReadinessCheck("database") { (try? await ledger.statusCounts()) != nil },
            ], logger: logger), at: 0)
        }
        let clockOffset = clock.map { String(format: "%.3fs", $0.offset) } ?? "none (one host)"
        logger.info("pass sender assembled", metadata: [
            "ledger": .string(settings.database.map { "\($0)" } ?? "sqlite"),
            "ledger.clock.offset": .string(clockOffset),
            "gateway": .string(chosen.channel == .gateway ? (settings.gatewayURL.map(Redaction.url) ?? "custom") : "spool"),
            "notify": .string(settings.notifyURL.map(Redaction.url) ?? "spool"),
            "retry.delays": .string(settings.retryDelays.map(\.label).joined(separator: ",")),
            "max.attempts": "\(settings.maxAttempts)",
            "claim.lease": "\(settings.claimLease)s", "outbox.sweep": "\(settings.outboxSweep)",
            "concurrency": "\(settings.concurrency)", "gateway.concurrency": "\(settings.gatewayConcurrency)",
        ])
        return PassSenderApp(ledger: ledger, dispatcher: dispatcher, consumer: consumer, gateway: chosen, services: services)
    }
}

/// Shuts the gateway (its HTTP client) down gracefully after the consumers
/// have stopped.
struct GatewayService: Service {
    let gateway: any PassGateway

    func run() async throws {
        try? await gracefulShutdown()
        await gateway.shutdown()
    }
}
