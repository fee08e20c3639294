import AMQPClient

/// Who a consumed message must come from, by its broker-verified `user_id`.
///
/// RabbitMQ refuses a publish whose `user_id` differs from the connection's
/// user, so `user_id` is the one sender identity a consumer can trust.
/// Events are acted on only when they carry the booking handler's user:
/// without the check, any user allowed to publish to `booking.events` or
/// into a service's queue (a compromised peer service, say) could make the
/// pass sender text arbitrary numbers or the projector show made-up
/// bookings. A message without `user_id` is refused too: anyone may send
/// one.
public struct SenderCheck: Sendable, Equatable {
    /// The broker user whose messages are accepted.
    public let trustedUser: String
    /// Further users whose messages are accepted (e.g. the operators'
    /// `ADMIN_USERS` for retries they put back).
    public let alsoTrusted: Set<String>

    /// Accepts messages from `trustedUser` and `alsoTrusted`.
    public init(trustedUser: String, alsoTrusted: Set<String> = []) {
        self.trustedUser = trustedUser
        self.alsoTrusted = alsoTrusted
    }

    /// The check for events of the booking handler: `BOOKING_HANDLER_USER`
    /// when set, else `ownUser`, the consumer's own broker user — right for
    /// the one-user embedded set, where every service logs in alike.
    /// `configured` is that variable's value (blank counts as unset).
    public static func bookingHandler(configured: String?, ownUser: String) -> SenderCheck {
        let configured = configured?.trimmingCharacters(in: .whitespaces)
        return SenderCheck(trustedUser: configured.flatMap { $0.isEmpty ? nil : $0 } ?? ownUser)
    }

    /// Nil when `properties` carry the trusted `user_id`; else the reason
    /// to dead-letter the message with (names the sender it claims, which
    /// the broker verified, so it is safe to log).
    public func refusal(_ properties: AMQPProperties) -> String? {
        guard let user = properties.userID, !user.isEmpty else {
            return "message has no user_id; only messages published by '\(trustedUser)' are accepted"
        }
        if user == trustedUser || alsoTrusted.contains(user) { return nil }
        return "message published by '\(user.prefix(100))', not by '\(trustedUser)'"
    }
}
