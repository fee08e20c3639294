/// Messages that reach a queue of the set but are not meant for it
/// (contract v1.2, "Foreign routing into the set's queues is ignored").
///
/// An outside user may bind an exchange it can read (`booking.public`,
/// `booking.events`) into `booking.commands`, or the query queue
/// `booking.queries` (which shares the exchange's name) to such an
/// exchange: an exchange-to-exchange or queue binding needs only write on
/// the destination and read on the source. Every event copied in that way
/// names an event of the contract in its `type` (or, without one, in its
/// routing key), which no command or query ever does, so such a message is
/// recognised by its name alone and acked without being executed,
/// answered or dead-lettered.
public enum ForeignRouting {
    /// Every event name of the contract: the types of ``EventType``, the
    /// replay stream's end marker and pages, and the v1.2 events.
    public static let eventNames: Set<String> = Set(EventType.allCases.map(\.rawValue)).union([
        ReplayStream.endType, ReplayStream.pageType, "availability.changed", "booking.submitted", "room.closed", "room.reopened",
    ])

    /// Whether a delivery with this `type` property and routing key is an
    /// event routed into a command or query queue: the `type` when it has
    /// one, else the routing key, names an event of the contract.
    public static func isEvent(typeProperty: String?, routingKey: String) -> Bool {
        eventNames.contains(EventType.name(typeProperty: typeProperty, routingKey: routingKey))
    }

    /// The `type` of every reply the set sends: command replies, booking
    /// and availability query replies, the projector's control replies.
    public static let replyTypes: Set<String> = [
        MessageProperties.replyType, MessageProperties.bookingReplyType, MessageProperties.availabilityReplyType, ProjectorControl.replyType,
    ]

    /// Whether a delivery is not meant for a command or query queue: an
    /// event (``isEvent(typeProperty:routingKey:)``), or one of the set's
    /// own replies. An outside user can send a reply back in: its reply
    /// queue, declared with `booking.commands` as its dead-letter exchange
    /// (which its write on that exchange allows), dead-letters the reply
    /// there under the replying service's `user_id` — exempt from
    /// `CALLER_RATE`, and poison the handler would copy to its dead-letter
    /// queue, as often as the outside user fans it out.
    public static func isForeign(typeProperty: String?, routingKey: String) -> Bool {
        if let type = typeProperty, replyTypes.contains(type) { return true }
        return isEvent(typeProperty: typeProperty, routingKey: routingKey)
    }
}
