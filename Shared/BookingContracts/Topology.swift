/// Names on the broker, exactly as in wire contract v1 (docs/contract/README.md,
/// docs/contract/asyncapi.yaml).
///
/// Everything is durable. Named queues are quorum queues. Every queue a
/// service consumes from dead-letters into ``deadLetterExchange`` with its own
/// name as routing key, where ``deadLetterQueue(for:)`` (`<queue>.dead`) is
/// bound with that key. Declare queues with the arguments in ``queues`` so
/// that every service declares them identically (RabbitMQ refuses a
/// re-declaration with different arguments).
public enum Topology {
    // MARK: Exchanges

    /// `booking.commands`, direct exchange: other systems publish commands
    /// here with routing key = command type (``CommandType``).
    public static let commandsExchange = "booking.commands"
    /// `booking.events`, topic exchange: every state change, routing key =
    /// event type (``EventType``).
    public static let eventsExchange = "booking.events"
    /// `booking.dead-letter`, topic exchange: poison messages from any service
    /// queue, routed to `<queue>.dead`.
    public static let deadLetterExchange = "booking.dead-letter"
    /// `booking.commands.unrouted`, internal fanout exchange: the alternate
    /// exchange of ``commandsExchange`` (contract v1.1). A command whose
    /// routing key names no command type lands here and, through the
    /// binding to ``handlerCommandsQueue``, at the booking handler, which
    /// answers 1001 and dead-letters it — instead of the broker returning
    /// it unroutable. Internal: nobody publishes to it directly.
    public static let commandsUnroutedExchange = "booking.commands.unrouted"
    /// The policy that makes ``commandsUnroutedExchange`` the alternate
    /// exchange of ``commandsExchange`` on brokers where `booking.commands`
    /// already exists without the argument (an exchange cannot be
    /// re-declared with new arguments): `deploy/rabbitmq/definitions.json`
    /// and `bookingctl topology upgrade` set it.
    public static let commandsAlternateExchangePolicy = (name: "booking-commands-unrouted",
                                                         pattern: "^booking\\.commands$")
    /// `booking.queries`, direct exchange (contract v1.1): other systems
    /// publish queries here with routing key = query type —
    /// `booking.get`/`booking.list` reach ``bookingQueriesQueue``,
    /// `availability.query` reaches ``availabilityQueriesQueue``. (The queue
    /// of the same name is another broker object; permission patterns
    /// match both.)
    public static let bookingQueriesExchange = "booking.queries"
    /// `booking.public`, topic exchange (contract v1.1): the booking events
    /// and `availability.changed`, routing key = event type, with attendee
    /// contact details removed (``PublicBookingEvent``) — what other
    /// systems may follow by binding their own queues. The booking
    /// handler's relay publishes each booking event here right after
    /// `booking.events` (same batch, confirmed together, so in order per
    /// booking); the projector does the same for `availability.changed`.
    public static let publicExchange = "booking.public"
    /// The AMQP default exchange (`""`): RPC queries, replies and `passes.failed`
    /// are published through it with the queue name as routing key.
    public static let defaultExchange = ""

    // MARK: Queues

    /// `booking-handler.commands`: bound to ``commandsExchange`` with every command type.
    public static let handlerCommandsQueue = "booking-handler.commands"
    /// `pass-sender.events`: `booking.confirmed`, `booking.rescheduled`, `booking.cancelled`
    /// (v1.1 adds `booking.rejected` and `booking.updated`).
    public static let passSenderEventsQueue = "pass-sender.events"
    /// `availability-projector.events`: `room.#`, `booking.#`.
    public static let projectorEventsQueue = "availability-projector.events"
    /// `availability.queries`: RPC queue on the default exchange, and on
    /// ``bookingQueriesExchange`` with `availability.query` (v1.1).
    public static let availabilityQueriesQueue = "availability.queries"
    /// `booking.queries` (v1.1): `booking.get` and `booking.list`, answered
    /// by the booking handler; bound to ``bookingQueriesExchange``, also
    /// reachable through the default exchange.
    public static let bookingQueriesQueue = "booking.queries"
    /// Routing key of availability queries on ``bookingQueriesExchange``.
    public static let availabilityQueryKey = "availability.query"
    /// `passes.failed`: one ``FailedPass`` per pass given up on; what operators
    /// watch. Published through the default exchange; nothing consumes it
    /// automatically.
    public static let passesFailedQueue = "passes.failed"
    /// Every name the pass sender uses for its own retry/delay queues starts
    /// with this prefix.
    public static let passSenderPrefix = "pass-sender."

    /// The dead-letter queue of `queue`: `queue + ".dead"`.
    public static func deadLetterQueue(for queue: String) -> String { queue + ".dead" }

    /// The routing key with which `queue` dead-letters into
    /// ``deadLetterExchange`` (its `x-dead-letter-routing-key`): the queue's own
    /// name, so `<queue>.dead` can be bound with it however the message was
    /// originally routed.
    public static func deadLetterRoutingKey(for queue: String) -> String { queue }

    // MARK: Binding keys

    /// Binding keys of ``handlerCommandsQueue`` on ``commandsExchange``: every
    /// command type (and, on ``commandsUnroutedExchange``, everything else).
    public static let handlerCommandsBindingKeys: [String] = CommandType.allCases.map(\.rawValue)
    /// Binding keys of ``passSenderEventsQueue`` on ``eventsExchange``.
    public static let passSenderEventsBindingKeys: [String] = [
        EventType.bookingConfirmed.rawValue,
        EventType.bookingRescheduled.rawValue,
        EventType.bookingCancelled.rawValue,
        EventType.bookingRejected.rawValue,
        // v1.1: attendees added (a pass) or removed (a notice) by booking.update.
        EventType.bookingUpdated.rawValue,
        // v1.2: a hold or waiter now awaiting approval. Acknowledged without
        // a pass (none is due before the approval's booking.confirmed).
        EventType.bookingSubmitted.rawValue,
    ]
    /// Binding keys of ``projectorEventsQueue`` on ``eventsExchange``.
    public static let projectorEventsBindingKeys: [String] = ["room.#", "booking.#"]

    // MARK: Queue arguments

    /// How many times a quorum queue redelivers a message (consumer crash,
    /// nack with requeue) before it is dead-lettered: `x-delivery-limit`.
    public static let serviceQueueDeliveryLimit = 10

    /// AMQP exchange kinds used by the contract (raw values are the AMQP names).
    public enum ExchangeKind: String, Sendable, Hashable, CaseIterable {
        /// Exact routing-key match.
        case direct
        /// Dot-separated pattern match (`*`, `#`).
        case topic
        /// Every bound queue, whatever the routing key.
        case fanout
    }

    /// An exchange of the contract.
    public struct Exchange: Sendable, Hashable {
        /// Exchange name.
        public let name: String
        /// Exchange kind; always durable, never auto-deleted.
        public let kind: ExchangeKind
        /// Internal: only reachable from other exchanges (alternate exchange).
        public let isInternal: Bool
        /// The `alternate-exchange` argument, for brokers where the exchange
        /// is created fresh (elsewhere the policy sets it).
        public let alternateExchange: String?

        /// Creates a description of a durable exchange.
        public init(name: String, kind: ExchangeKind, isInternal: Bool = false, alternateExchange: String? = nil) {
            self.name = name
            self.kind = kind
            self.isInternal = isInternal
            self.alternateExchange = alternateExchange
        }
    }

    /// One `queue.bind` of a contract queue.
    public struct Binding: Sendable, Hashable {
        /// The exchange the queue is bound to.
        public let exchange: String
        /// The binding (routing) key.
        public let key: String

        /// Creates a binding description.
        public init(exchange: String, key: String) {
            self.exchange = exchange
            self.key = key
        }
    }

    /// A queue of the contract with the arguments everybody must declare it with.
    public struct Queue: Sendable, Hashable {
        /// Queue name.
        public let name: String
        /// Bindings (none for queues reached through the default exchange).
        public let bindings: [Binding]
        /// `x-dead-letter-exchange`, or nil when the queue does not dead-letter.
        public let deadLetterExchange: String?
        /// `x-dead-letter-routing-key`, or nil when the queue does not dead-letter.
        public let deadLetterRoutingKey: String?
        /// `x-delivery-limit`, or nil for none.
        public let deliveryLimit: Int?
        /// Always true: every contract queue is a durable quorum queue (`x-queue-type: quorum`).
        public let quorum: Bool

        /// Creates a queue description.
        public init(name: String, bindings: [Binding], deadLetterExchange: String?,
                    deadLetterRoutingKey: String?, deliveryLimit: Int?, quorum: Bool = true) {
            self.name = name
            self.bindings = bindings
            self.deadLetterExchange = deadLetterExchange
            self.deadLetterRoutingKey = deadLetterRoutingKey
            self.deliveryLimit = deliveryLimit
            self.quorum = quorum
        }

        /// A queue a service consumes from: dead-letters into
        /// ``Topology/deadLetterExchange`` under its own name.
        public static func service(_ name: String, bindings: [Binding]) -> Queue {
            Queue(name: name, bindings: bindings, deadLetterExchange: Topology.deadLetterExchange,
                  deadLetterRoutingKey: Topology.deadLetterRoutingKey(for: name),
                  deliveryLimit: Topology.serviceQueueDeliveryLimit)
        }

        /// The `<queue>.dead` queue of a service queue, bound to
        /// ``Topology/deadLetterExchange``.
        public static func deadLetter(of queue: String) -> Queue {
            Queue(name: Topology.deadLetterQueue(for: queue),
                  bindings: [Binding(exchange: Topology.deadLetterExchange,
                                     key: Topology.deadLetterRoutingKey(for: queue))],
                  deadLetterExchange: nil, deadLetterRoutingKey: nil, deliveryLimit: nil)
        }
    }

    /// Every exchange of the contract.
    public static let exchanges: [Exchange] = [
        Exchange(name: commandsUnroutedExchange, kind: .fanout, isInternal: true),
        Exchange(name: commandsExchange, kind: .direct, alternateExchange: commandsUnroutedExchange),
        Exchange(name: eventsExchange, kind: .topic),
        Exchange(name: deadLetterExchange, kind: .topic),
        Exchange(name: bookingQueriesExchange, kind: .direct),
        Exchange(name: publicExchange, kind: .topic),
    ]

    /// The queues services consume from (each has a `<queue>.dead`).
    public static let serviceQueues: [Queue] = [
        .service(handlerCommandsQueue,
                 bindings: handlerCommandsBindingKeys.map { Binding(exchange: commandsExchange, key: $0) }
                     + [Binding(exchange: commandsUnroutedExchange, key: "")]),
        .service(passSenderEventsQueue,
                 bindings: passSenderEventsBindingKeys.map { Binding(exchange: eventsExchange, key: $0) }),
        .service(projectorEventsQueue,
                 bindings: projectorEventsBindingKeys.map { Binding(exchange: eventsExchange, key: $0) }),
        .service(availabilityQueriesQueue, bindings: [Binding(exchange: bookingQueriesExchange, key: availabilityQueryKey),
                                                      Binding(exchange: bookingQueriesExchange, key: SuggestContract.suggestKey)]),
        .service(bookingQueriesQueue,
                 bindings: BookingQueryType.allCases.map { Binding(exchange: bookingQueriesExchange, key: $0.rawValue) }),
    ]

    /// Every named queue of the contract: the service queues, `passes.failed`
    /// and the dead-letter queues of the service queues. (The pass sender's
    /// private `pass-sender.*` retry queues are not listed.)
    public static let queues: [Queue] =
        serviceQueues
        + [Queue(name: passesFailedQueue, bindings: [], deadLetterExchange: nil,
                 deadLetterRoutingKey: nil, deliveryLimit: nil)]
        + serviceQueues.map { Queue.deadLetter(of: $0.name) }

    /// Every routing key the contract's messages reach a service with: the
    /// command, query and event types, and the names of the queues
    /// messages are sent to through the default exchange. The services
    /// reserve them as metric labels (`AMQPMetrics.reserveTypeLabels`).
    public static let knownRoutingKeys: [String] =
        CommandType.allCases.map(\.rawValue)
        + BookingQueryType.allCases.map(\.rawValue)
        + EventType.allCases.map(\.rawValue)
        + [availabilityQueryKey, SuggestContract.suggestKey]
        + queues.map(\.name)
        + [ProjectorControl.queue, ProjectorControl.replayQueue]

    /// The queue description named `name`, if it is one of ``queues``.
    public static func queue(named name: String) -> Queue? {
        queues.first { $0.name == name }
    }
}
