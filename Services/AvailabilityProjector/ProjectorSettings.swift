import BookingContracts
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
    /// `REPLAY_PAGE_SIZE` (1–1000, default 500): bookings per replayed
    /// message a rebuild asks the handler for; 1 = one event per booking.
    public var replayPageSize: Int
    /// `PAGE_USER` and `PAGE_PASSWORD` (or `PAGE_PASSWORD_FILE`): the page
    /// books as this broker user over a connection of its own; nil (the
    /// default): the page only reads. Never an admin or a service user.
    public var pageBooking: (user: String, password: String)?
    /// `PAGE_HOSTS` (comma-separated): host names besides loopback and
    /// `HTTP_BIND` that `POST /api/book` may be addressed to — the names
    /// a reverse proxy in front of the page passes on (``PageHosts``).
    public var pageHosts: [String]

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
        let pageSize = environment["REPLAY_PAGE_SIZE"].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        replayPageSize = try CommonSettings.integer(pageSize, name: "REPLAY_PAGE_SIZE", default: Rebuilder.defaultReplayPageSize,
                                                    range: 1...ReplayStream.maxBookingsPerMessage)
        pageBooking = try Self.pageBooking(environment, administrators: administrators, handlerUser: bookingHandlerUser)
        pageHosts = try Self.pageHosts(environment["PAGE_HOSTS"])
    }

    /// Reads `PAGE_HOSTS`: names as a `Host` header carries them (a name
    /// or address, optionally `:port`). A URL is refused rather than read
    /// as a name: `https://rooms.example` would otherwise become `https`,
    /// and the page would refuse every booking through the proxy.
    static func pageHosts(_ text: String?) throws -> [String] {
        let names = (text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        for name in names where name.contains(where: { "/@?# ".contains($0) }) || name.contains("://") {
            throw SettingsError("PAGE_HOSTS: '\(name.prefix(100))' is not a host name; write the name alone, "
                                + "without scheme or path (e.g. rooms.example.com or rooms.example.com:8443)")
        }
        return names
    }

    /// Reads `PAGE_USER` with its password. The page books as one caller
    /// whom quotas and rate limits bind: an admin (`ADMIN_USERS`) or the
    /// booking handler's user would be exempt from both, so they are refused.
    static func pageBooking(_ environment: [String: String], administrators: Set<String>,
                            handlerUser: String?) throws -> (user: String, password: String)? {
        guard let user = environment["PAGE_USER"]?.trimmingCharacters(in: .whitespaces), !user.isEmpty else {
            if environment["PAGE_PASSWORD"] != nil || environment["PAGE_PASSWORD_FILE"] != nil {
                throw SettingsError("PAGE_PASSWORD is set but PAGE_USER is not: name the broker user the page books as")
            }
            return nil
        }
        if administrators.contains(user) {
            throw SettingsError("PAGE_USER: \(user) is in ADMIN_USERS; the page must book as an ordinary user")
        }
        if let handlerUser, handlerUser == user {
            throw SettingsError("PAGE_USER: \(user) is the booking handler's user (BOOKING_HANDLER_USER); use a user of its own")
        }
        var password = environment["PAGE_PASSWORD"]
        if let file = environment["PAGE_PASSWORD_FILE"], !file.isEmpty {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw SettingsError("PAGE_PASSWORD_FILE: cannot read \(file)")
            }
            password = text.trimmingCharacters(in: .newlines)
        }
        guard let password, !password.isEmpty else {
            throw SettingsError("PAGE_USER is set without PAGE_PASSWORD or PAGE_PASSWORD_FILE")
        }
        return (user, password)
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
