import BrokerObjects
import Foundation
import ServiceSettings
import ServiceSupport

/// The projector's own settings (the common ones are ``CommonSettings``);
/// docs/configuration.md and docs/projector.md describe them.
public struct ProjectorSettings: Sendable {
    /// `REQUIRE_USER_ID`: queries without the AMQP `user_id` are refused.
    public var requireUserID: Bool
    /// `PROJECTOR_INSTANCE`: a replica's queues of its own (filled from a
    /// replay at start); unset or empty = the shipped queues.
    public var queues: ProjectorQueues
    /// `BOOKING_HANDLER_USER`: the broker user whose events are trusted.
    public var bookingHandlerUser: String?
    /// `ADMIN_USERS`: never rate-limited.
    public var administrators: Set<String>
    /// `CALLER_RATE`: availability queries per second and burst per caller
    /// on this instance; nil: no limit. Default ``CallerRate/standard``.
    public var callerRate: CallerRate?
    /// `REBUILD_STALL_TIMEOUT` (seconds, 1–3600, default 120): a rebuild
    /// fails when its replay delivers nothing for this long; there is no
    /// limit on the rebuild as a whole.
    public var rebuildStallTimeout: Duration

    /// Reads the settings; throws ``SettingsError`` naming the variable.
    public init(environment: [String: String]) throws {
        requireUserID = try CommonSettings.boolean(environment["REQUIRE_USER_ID"], name: "REQUIRE_USER_ID", default: false)
        queues = try environment["PROJECTOR_INSTANCE"].flatMap { $0.isEmpty ? nil : $0 }.map { try ProjectorQueues(instance: $0) }
            ?? .shipped
        bookingHandlerUser = environment["BOOKING_HANDLER_USER"]
        administrators = CommonSettings.userList(environment["ADMIN_USERS"])
        callerRate = try CallerRate.parse(environment["CALLER_RATE"])
        let stall = environment["REBUILD_STALL_TIMEOUT"].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        rebuildStallTimeout = .seconds(try CommonSettings.integer(stall, name: "REBUILD_STALL_TIMEOUT", default: 120, range: 1...3600))
    }

    /// The callers never rate-limited: admins, the projector's own user and
    /// the booking handler's.
    public func rateExempt(ownUser: String) -> Set<String> {
        administrators.union([ownUser]).union(bookingHandlerUser.flatMap { $0.isEmpty ? nil : [$0] } ?? [])
    }

    /// Whose events the projector takes: `BOOKING_HANDLER_USER`, else the
    /// projector's own broker user (the one-user embedded set).
    public func eventSender(ownUser: String) -> SenderCheck {
        SenderCheck.bookingHandler(configured: bookingHandlerUser, ownUser: ownUser)
    }
}
