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

    @Test(arguments: [["REQUIRE_USER_ID": "maybe"], ["REPLAY_MAX_RATE": "0"], ["INBOX_RETENTION_DAYS": "x"],
                      ["INBOX_RETENTION_DAYS": "0"]])
    func badValuesNameTheVariable(_ environment: [String: String]) {
        let error = #expect(throws: (any Error).self) { try HandlerSettings(environment: environment) }
        #expect("\(error.map { "\($0)" } ?? "")".contains(environment.keys.first!))
    }
}
