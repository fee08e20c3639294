import Foundation
import PostgresSupport
import ServiceSettings
import ServiceSupport

/// The booking handler's own settings (docs/configuration.md); the common ones
/// (`AMQP_URL`, `DATA_DIR`, …) are ``CommonSettings``. A bad value throws a
/// ``SettingsError`` naming the variable: the service exits 2.
public struct HandlerSettings: Sendable, Equatable {
    /// The caller model: `ADMIN_USERS`, `ROOM_MANAGERS`, `REPLAY_USERS`,
    /// `REQUIRE_USER_ID`.
    public var policy: CallerPolicy
    /// `REPLAY_MAX_RATE`: messages per second one replay publishes at most;
    /// 0 (the default) sets no fixed rate (``ReplayPacer``).
    public var replayRate: Int
    /// `INBOX_RETENTION_DAYS`, default 7.
    public var retentionDays: Int
    /// `ROOMS_FILE`: rooms to upsert at start-up.
    public var roomsFile: String?
    /// `DATABASE_URL`: PostgreSQL shared by several handler instances; unset
    /// keeps the embedded SQLite file in `DATA_DIR`.
    public var database: PostgresSettings?
    /// `CALLER_RATE`: deliveries per second and burst per caller on this
    /// instance (commands and booking queries); nil: no limit. Default
    /// ``CallerRate/standard``.
    public var callerRate: CallerRate?
    /// `LIST_CURSOR_KEY`: the key that signs `booking.list` cursors; unset:
    /// a key kept in `DATA_DIR` (``CursorKey``).
    public var listCursorKey: String?

    /// Reads the settings. `REPLAY_USERS` unset leaves the policy's
    /// replayers empty, which ``BookingHandlerApp/build`` turns into the
    /// handler's own broker user.
    public init(environment: [String: String]) throws {
        func value(_ name: String) -> String? {
            guard let v = environment[name]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        policy = CallerPolicy(
            administrators: CommonSettings.userList(value("ADMIN_USERS")),
            roomManagers: CommonSettings.userList(value("ROOM_MANAGERS")),
            replayUsers: CommonSettings.userList(value("REPLAY_USERS")),
            requireUserID: try CommonSettings.boolean(value("REQUIRE_USER_ID"), name: "REQUIRE_USER_ID", default: false))
        replayRate = try CommonSettings.integer(value("REPLAY_MAX_RATE"), name: "REPLAY_MAX_RATE",
                                                default: ReplayPacer.defaultRate, range: 0...1_000_000)
        retentionDays = try CommonSettings.integer(value("INBOX_RETENTION_DAYS"), name: "INBOX_RETENTION_DAYS",
                                                   default: 7, range: 1...3650)
        roomsFile = value("ROOMS_FILE")
        // Checked with or without DATABASE_URL: a typo must not wait for the
        // day the database is switched on.
        let timeouts = try PostgresTimeouts(environment: environment)
        database = try value("DATABASE_URL").map { url in
            var settings = try PostgresSettings(url: url)
            settings.timeouts = timeouts
            return settings
        }
        callerRate = try CallerRate.parse(value("CALLER_RATE"))
        listCursorKey = value("LIST_CURSOR_KEY")
        if let listCursorKey, listCursorKey.count < CursorKey.minimumLength {
            throw SettingsError("LIST_CURSOR_KEY: at least \(CursorKey.minimumLength) characters (e.g. openssl rand -hex 32)")
        }
    }
}
