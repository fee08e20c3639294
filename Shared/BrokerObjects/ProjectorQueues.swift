import AMQPClient
import BookingContracts
import ServiceSettings

/// The queues one projector consumes from: the shipped ones, or — for a
/// replica (`PROJECTOR_INSTANCE`) — queues of its own, so that every
/// replica sees every event and keeps a full read model of its own.
///
/// Replicas share `availability.queries` (any replica may answer a query:
/// they hold the same model) but not the events queue: two consumers of one
/// events queue would each see half the events.
public struct ProjectorQueues: Sendable, Equatable {
    /// The replica's name, or nil for the shipped single projector.
    public let instance: String?
    /// Booking events (bound like the shipped `availability-projector.events`).
    public let events: String
    /// Where the booking handler replays to when this projector rebuilds.
    public let replay: String
    /// Control RPC (`bookingctl projector rebuild`).
    public let control: String

    /// The shipped names: `availability-projector.events`, `.replay`, `.control`.
    public static let shipped = ProjectorQueues(events: Topology.projectorEventsQueue, replay: ProjectorControl.replayQueue,
                                                control: ProjectorControl.queue, instance: nil)

    private init(events: String, replay: String, control: String, instance: String?) {
        self.events = events
        self.replay = replay
        self.control = control
        self.instance = instance
    }

    /// The queues of replica `instance`: `availability-projector.events.<instance>`,
    /// `availability-projector.replay.<instance>`, `availability-projector.control.<instance>`
    /// (inside the projector user's shipped permissions, `availability-projector\..*`;
    /// the replay queue starts with the name the booking handler replays to).
    /// Names are 1–40 of `a-z`, `0-9`, `-`.
    public init(instance: String) throws {
        guard (1...40).contains(instance.count),
              instance.allSatisfy({ ($0.isASCII && ($0.isLowercase || $0.isNumber)) || $0 == "-" }) else {
            throw SettingsError("PROJECTOR_INSTANCE: '\(instance)' must be 1-40 of a-z, 0-9 and '-'")
        }
        self.init(events: "\(Topology.projectorEventsQueue).\(instance)", replay: "\(ProjectorControl.replayQueue).\(instance)",
                  control: "\(ProjectorControl.queue).\(instance)", instance: instance)
    }

    /// What this projector declares: the contract's exchanges, its events
    /// queue (with its `.dead` queue) and `availability.queries`, its replay
    /// and control queues.
    ///
    /// A replica's replay and control queues are quorum queues: a durable
    /// classic queue lives on the one node it was declared on, and while
    /// that node is down every node answers its re-declaration with 404, so
    /// the replica could not reconnect anywhere (the HA container test
    /// stopped that node). The shipped projector's stay classic: existing
    /// brokers hold them so, and a declaration with another type fails.
    public var declarations: [TopologyItem] {
        var items = ContractTopology.declarations(queues: [Topology.availabilityQueriesQueue])
        let shippedEvents = Topology.queue(named: Topology.projectorEventsQueue)!
        items += ContractTopology.queue(.service(events, bindings: shippedEvents.bindings))
        items += ContractTopology.queue(.deadLetter(of: events))
        let type: QueueDeclaration.QueueType = instance == nil ? .classic : .quorum
        items += [.queue(QueueDeclaration(replay, type: type)), .queue(QueueDeclaration(control, type: type))]
        return items
    }
}
