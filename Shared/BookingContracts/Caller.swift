/// Who sent a command or query, as far as the broker vouches for it.
///
/// The only identity the handler trusts is the AMQP `user_id` property:
/// RabbitMQ refuses a message whose `user_id` differs from the user the
/// connection logged in as, so a present `user_id` is the broker user that
/// published it. A message without one is anonymous — any user may send it.
public enum Caller: Sendable, Hashable, CustomStringConvertible {
    /// No `user_id` (or an empty one).
    case anonymous
    /// A broker-verified user.
    case user(String)

    /// The caller of a message with `userID` (empty counts as absent).
    public init(userID: String?) {
        if let userID, !userID.isEmpty { self = .user(userID) } else { self = .anonymous }
    }

    /// The user name, nil when anonymous.
    public var name: String? {
        if case .user(let name) = self { return name }
        return nil
    }

    /// `user 'x'` or `an anonymous caller`, for reply texts and logs.
    public var description: String {
        switch self {
        case .anonymous: "an anonymous caller"
        case .user(let name): "user '\(name)'"
        }
    }
}

/// Where a command's or query's reply may go (contract v1.1): direct reply-to, a
/// server-named `amq.gen-*` queue, or a queue named `<user>.…` of the
/// sending user. Anything else would let a caller make the handler publish
/// into another party's queue (e.g. the operators' `passes.failed`).
public enum ReplyAddress {
    /// Queue-name prefixes that belong to the services (contract v1 and the
    /// services' own queues): never a reply address.
    public static let reservedPrefixes = [
        "booking.", "booking-handler.", "pass-sender.", "passes.", "availability.", "availability-projector.",
    ]

    /// Nil when replying to `replyTo` is allowed for `caller` (or there is
    /// no `reply_to`); else the reason, for the dead-letter header and log.
    public static func refusal(_ replyTo: String?, caller: Caller) -> String? {
        guard let replyTo, !replyTo.isEmpty else { return nil }
        if replyTo.hasPrefix(MessageProperties.directReplyTo) || replyTo.hasPrefix("amq.gen-") { return nil }
        // The set's own queues are never a reply address, whatever a broker
        // user happens to be called (a user `passes` owns no `passes.failed`).
        if reservedPrefixes.contains(where: { replyTo.hasPrefix($0) }) {
            return "reply_to '\(String(replyTo.prefix(100)))' names a queue of the booking services"
        }
        if let name = caller.name, replyTo.count > name.count + 1, replyTo.hasPrefix(name + ".") { return nil }
        let shown = String(replyTo.prefix(100))
        switch caller {
        case .anonymous:
            return "reply_to '\(shown)' is not allowed without user_id: use direct reply-to or a server-named amq.gen-* queue"
        case .user(let name):
            return "reply_to '\(shown)' is not allowed: use direct reply-to, a server-named amq.gen-* queue or a queue named '\(name).…'"
        }
    }
}
