import AMQPClient
import BookingContracts
import Foundation
import Logging
import ServiceLifecycle
import ServiceSupport

/// Assembles the availability projector; `main` and the integration tests
/// both call it.
public struct ProjectorApp: Sendable {
    public let store: ProjectorStore
    public let engine: QueryEngine
    public let publisher: ChangePublisher
    public let rebuilder: Rebuilder
    /// In start order; shutdown runs in reverse (consumers stop first, then
    /// the change publisher drains, then the connection closes, the HTTP
    /// server last).
    public let services: [any Service]

    /// The projector's own queues besides the contract's: the replay target
    /// and the control queue (classic, durable).
    public static var privateQueues: [TopologyItem] {
        [.queue(QueueDeclaration(ProjectorControl.replayQueue, type: .classic)),
         .queue(QueueDeclaration(ProjectorControl.queue, type: .classic))]
    }

    public static func build(
        connection: AMQPConnection, dataDirectory: String, httpPort: Int? = nil, logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }, replayTimeout: Duration = .seconds(600),
        eventConcurrency: Int = 32, eventSender: SenderCheck? = nil, requireUserID: Bool = false
    ) async throws -> ProjectorApp {
        // Events and replay streams are trusted only from the booking
        // handler's broker user (default: ours, the one-user embedded set).
        let sender = eventSender ?? SenderCheck(trustedUser: connection.user)
        let store = try ProjectorStore(path: dataDirectory + "/availability-projector.sqlite")
        let engine = QueryEngine(index: store.index, now: now)
        try await connection.declare(
            ContractTopology.declarations(queues: [Topology.projectorEventsQueue, Topology.availabilityQueriesQueue])
                + privateQueues)
        let publisher = ChangePublisher(connection: connection, logger: logger, now: now)
        let events = EventConsumer(connection: connection, store: store, publisher: publisher, logger: logger,
                                   sender: sender)
            .service(concurrency: eventConcurrency)
        let queries = QueryResponder(connection: connection, engine: engine, logger: logger,
                                     requireUserID: requireUserID).service()
        let rebuilder = Rebuilder(connection: connection, store: store, publisher: publisher, logger: logger,
                                  replayTimeout: replayTimeout, sender: sender)
        var services: [any Service] = [connection, publisher, events, queries]
        services += rebuilder.services().map { $0 as any Service }
        if let httpPort {
            services.insert(OpsServer(port: httpPort, checks: [
                ReadinessCheck("amqp") { connection.isConnected },
                ReadinessCheck("events") { events.status.isConsuming },
                ReadinessCheck("queries") { queries.status.isConsuming },
                ReadinessCheck("database") { (try? await store.counts()) != nil },
            ], logger: logger) { router in
                ProjectorRoutes.add(to: router, engine: engine)
            }, at: 0)
        }
        return ProjectorApp(store: store, engine: engine, publisher: publisher, rebuilder: rebuilder, services: services)
    }
}
