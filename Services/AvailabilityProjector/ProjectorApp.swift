import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import ServiceLifecycle
import ServiceSettings
import ServiceSupport
import Synchronization

/// Assembles the availability projector; `main` and the integration tests
/// both call it.
public struct ProjectorApp: Sendable {
    public let store: ProjectorStore
    public let engine: QueryEngine
    public let publisher: ChangePublisher
    public let rebuilder: Rebuilder
    let filler: ModelFiller
    /// False while a replica fills its read model at start (``ProjectorQueues``).
    public var modelFilled: Bool { filler.isFilled }
    /// In start order; shutdown runs in reverse (consumers stop first, then
    /// the change publisher drains, then the connection closes, the HTTP
    /// server last).
    public let services: [any Service]

    /// Builds the projector from its settings as ``ServiceRunner`` read
    /// them: the shape every service's App shares,
    /// `build(settings:connection:)` (`main.swift` calls it; tests call the
    /// one below with what they vary).
    public static func build(settings start: ServiceRunner.Startup<ProjectorSettings>,
                             connection: AMQPConnection) async throws -> ProjectorApp {
        let (common, settings) = (start.common, start.settings)
        var pageConnection: AMQPConnection?
        if let page = settings.pageBooking {
            // The projector's own user is exempt from rate limits; the page must not be.
            guard page.user != connection.user else {
                throw SettingsError("PAGE_USER: \(page.user) is the projector's own broker user; use a user of its own")
            }
            var configuration = common.amqpConfiguration(connectionName: "availability-projector-page")
            configuration.url.user = page.user
            configuration.url.password = page.password
            configuration.failoverURLs = configuration.failoverURLs.map { url in
                var url = url
                url.user = page.user
                url.password = page.password
                return url
            }
            pageConnection = try await AMQPConnection.connect(configuration: configuration, logger: start.logger)
        }
        return try await build(
            connection: connection, dataDirectory: try common.ensureDataDirectory(), httpPort: common.httpPort,
            httpHost: common.httpBind, logger: start.logger, rebuildStallTimeout: settings.rebuildStallTimeout,
            replayPageSize: settings.replayPageSize,
            eventSender: settings.eventSender(ownUser: connection.user), requireUserID: settings.requireUserID,
            queues: settings.queues, callerRate: settings.callerRate, rateExempt: settings.rateExempt(ownUser: connection.user),
            pageConnection: pageConnection, pageHosts: PageHosts(bind: common.httpBind, extra: settings.pageHosts))
    }

    public static func build(
        connection: AMQPConnection, dataDirectory: String, httpPort: Int? = nil,
        httpHost: String = CommonSettings.defaultBindAddress, logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }, rebuildStallTimeout: Duration = Rebuilder.defaultStallTimeout,
        replayPageSize: Int = Rebuilder.defaultReplayPageSize, eventConcurrency: Int = 32, eventSender: SenderCheck? = nil, requireUserID: Bool = false,
        queues: ProjectorQueues = .shipped, callerRate: CallerRate? = nil, rateExempt: Set<String> = [],
        pageConnection: AMQPConnection? = nil, pageHosts: PageHosts? = nil
    ) async throws -> ProjectorApp {
        // Events and replay streams are trusted only from the booking
        // handler's broker user (default: ours, the one-user embedded set).
        let sender = eventSender ?? SenderCheck(trustedUser: connection.user)
        let store = try ProjectorStore(path: dataDirectory + "/availability-projector.sqlite")
        let engine = QueryEngine(index: store.index, now: now)
        try await connection.declare(queues.declarations)
        let publisher = ChangePublisher(connection: connection, logger: logger, now: now)
        let events = EventConsumer(connection: connection, store: store, publisher: publisher, logger: logger,
                                   sender: sender)
            .service(queue: queues.events, concurrency: eventConcurrency)
        let queries = QueryResponder(connection: connection, engine: engine, logger: logger,
                                     requireUserID: requireUserID,
                                     limiter: CallerRateLimiter(rate: callerRate, exempt: rateExempt.union([connection.user])))
            .service()
        let rebuilder = Rebuilder(connection: connection, store: store, publisher: publisher, logger: logger,
                                  stallTimeout: rebuildStallTimeout, replayPageSize: replayPageSize, sender: sender,
                                  queues: queues)
        var services: [any Service] = [connection, publisher, events, queries]
        // The page's own connection (PAGE_USER), closed just before the HTTP server.
        let hosts = pageHosts ?? PageHosts(bind: httpHost)
        let booker = pageConnection.map { PageBooker(connection: $0, logger: logger, hosts: hosts) }
        if let pageConnection { services.insert(pageConnection, at: 0) }
        services += rebuilder.services().map { $0 as any Service }
        // A replica starts empty and fills itself from a replay before it
        // reports ready (the shipped single projector keeps its file and
        // is rebuilt by an operator).
        let filler = ModelFiller(rebuilder: rebuilder, store: store, logger: logger, enabled: queues.instance != nil)
        services.append(filler)
        if let httpPort {
            services.insert(OpsServer(host: httpHost, port: httpPort, checks: [
                ReadinessCheck("amqp") { connection.isConnected },
                ReadinessCheck("events") { events.status.isConsuming },
                ReadinessCheck("queries") { queries.status.isConsuming },
                ReadinessCheck("database") { (try? await store.counts()) != nil },
                ReadinessCheck("model") { filler.isFilled },
            ], logger: logger) { router in
                ProjectorRoutes.add(to: router, engine: engine, booker: booker)
            }, at: 0)
        }
        return ProjectorApp(store: store, engine: engine, publisher: publisher, rebuilder: rebuilder, filler: filler,
                            services: services)
    }
}

/// Fills an empty replica's read model once at start: a rebuild (the
/// booking handler's replay, as fast as this replica takes it), retried with
/// back-off until it succeeds or the service stops. Readiness waits for it,
/// so a load balancer sends no query to a replica that knows nothing yet.
final class ModelFiller: Service, Sendable {
    let rebuilder: Rebuilder
    let store: ProjectorStore
    let logger: Logger
    private let filled: Atomic<Bool>

    init(rebuilder: Rebuilder, store: ProjectorStore, logger: Logger, enabled: Bool) {
        self.rebuilder = rebuilder
        self.store = store
        self.logger = logger
        filled = Atomic(!enabled)
    }

    var isFilled: Bool { filled.load(ordering: .acquiring) }

    func run() async throws {
        if !isFilled {
            var delay = Duration.seconds(1)
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                do {
                    // Not "has rooms": live events write rooms into an empty
                    // model before (or while) it is filled, and a replica
                    // must not report ready on those alone.
                    if try await store.hasBeenFilled() {
                        logger.info("read model kept from the last run; not replaying")
                    } else {
                        let result = try await rebuilder.rebuild()
                        logger.notice("read model filled from a replay", metadata: [
                            "rooms": "\(result.rooms)", "bookings": "\(result.bookings)", "seconds": "\(result.seconds)"])
                    }
                    filled.store(true, ordering: .releasing)
                    break
                } catch {
                    logger.warning("could not fill the read model yet; retrying", metadata: [
                        "error": "\(error)", "retry.in_seconds": "\(delay.components.seconds)"])
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(30))
                }
            }
        }
        try? await gracefulShutdown()
    }
}
