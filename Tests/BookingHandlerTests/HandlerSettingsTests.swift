import PostgresSupport
import Testing
@testable import BookingHandler

/// The handler's settings as main reads them from the environment.
@Suite("Handler settings")
struct HandlerSettingsTests {
    @Test func defaultsAreTheEmbeddedOneMachineSet() throws {
        let s = try HandlerSettings(environment: [:])
        #expect(s.policy == CallerPolicy())
        #expect(!s.policy.requireUserID)
        #expect(s.replayRate == ReplayPacer.defaultRate)
        #expect(s.retentionDays == 7)
        #expect(s.roomsFile == nil)
    }

    @Test func composeSettings() throws {
        let s = try HandlerSettings(environment: [
            "ADMIN_USERS": "bookingctl, ops", "ROOM_MANAGERS": "facility-desk", "REPLAY_USERS": "availability-projector",
            "REQUIRE_USER_ID": "true", "REPLAY_MAX_RATE": "200", "INBOX_RETENTION_DAYS": "30", "ROOMS_FILE": "/etc/rooms.json",
        ])
        #expect(s.policy == CallerPolicy(administrators: ["bookingctl", "ops"], roomManagers: ["facility-desk"],
                                         replayUsers: ["availability-projector"], requireUserID: true))
        #expect(s.replayRate == 200)
        #expect(s.retentionDays == 30)
        #expect(s.roomsFile == "/etc/rooms.json")
    }

    @Test func databaseTimeoutsReachTheConnectionConfiguration() throws {
        let s = try HandlerSettings(environment: [
            "DATABASE_URL": "postgres://svc@127.0.0.1/db", "DATABASE_CONNECT_TIMEOUT": "4",
            "DATABASE_STATEMENT_TIMEOUT": "7", "DATABASE_KEEPALIVE": "6",
        ])
        let timeouts = try #require(s.database?.timeouts)
        #expect(timeouts == PostgresTimeouts(connect: 4, statement: 7, keepalive: 6))
        #expect(timeouts.keepaliveInterval == 3 && timeouts.deadPeer == 15)
        let configuration = try #require(try s.database?.connectionConfiguration())
        #expect(configuration.options.connectTimeout == .seconds(4))
        let parameters = Dictionary(configuration.options.additionalStartupParameters) { _, last in last }
        #expect(parameters["statement_timeout"] == "7000")
        #expect(parameters["tcp_keepalives_idle"] == "6" && parameters["tcp_keepalives_interval"] == "3"
                && parameters["tcp_keepalives_count"] == "3")
        // Unset: the defaults, without DATABASE_URL too.
        #expect(try HandlerSettings(environment: [:]).database == nil)
        #expect(try PostgresSettings(url: "postgres://svc@127.0.0.1/db").timeouts == .standard)
    }

    @Test(arguments: [["REQUIRE_USER_ID": "maybe"], ["REPLAY_MAX_RATE": "-1"], ["INBOX_RETENTION_DAYS": "x"],
                      ["INBOX_RETENTION_DAYS": "0"], ["DATABASE_CONNECT_TIMEOUT": "0"], ["DATABASE_STATEMENT_TIMEOUT": "30s"],
                      ["DATABASE_KEEPALIVE": "3601"]])
    func badValuesNameTheVariable(_ environment: [String: String]) {
        let error = #expect(throws: (any Error).self) { try HandlerSettings(environment: environment) }
        #expect("\(error.map { "\($0)" } ?? "")".contains(environment.keys.first!))
    }
}
