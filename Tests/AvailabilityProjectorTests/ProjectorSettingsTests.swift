import AvailabilityProjector
import ServiceSettings
import ServiceSupport
import Testing

/// The projector's own settings as main reads them from the environment.
@Suite("Projector settings")
struct ProjectorSettingsTests {
    @Test func theStallBoundDefaultsToTwoMinutesAndIsSettable() throws {
        #expect(try ProjectorSettings(environment: [:]).rebuildStallTimeout == .seconds(120))
        #expect(try ProjectorSettings(environment: ["REBUILD_STALL_TIMEOUT": " 900 "]).rebuildStallTimeout == .seconds(900))
    }

    @Test(arguments: ["0", "3601", "2m", "-5"])
    func aBadStallBoundNamesTheVariable(_ value: String) {
        let error = #expect(throws: SettingsError.self) { try ProjectorSettings(environment: ["REBUILD_STALL_TIMEOUT": value]) }
        #expect("\(error.map { "\($0)" } ?? "")".hasPrefix("REBUILD_STALL_TIMEOUT"))
    }

    @Test func pageHostsAreNamesWithAnOptionalPort() throws {
        let settings = try ProjectorSettings(environment: ["PAGE_HOSTS": " rooms.example.com, rooms.example.com:8443 ,[::1]:80,"])
        #expect(settings.pageHosts == ["rooms.example.com", "rooms.example.com:8443", "[::1]:80"])
        #expect(PageHosts(bind: "0.0.0.0:8080", extra: settings.pageHosts).refusal(host: "rooms.example.com:8443", origin: nil) == nil)
    }

    /// A URL would otherwise be read as the name before its first colon
    /// (`https`), and every booking through the proxy refused with 403.
    @Test(arguments: ["https://rooms.example.com", "rooms.example.com/book", "ok.example, user@rooms.example", "rooms example"])
    func aPageHostThatIsNotANameIsRefusedAtStart(_ value: String) {
        let error = #expect(throws: SettingsError.self) { try ProjectorSettings(environment: ["PAGE_HOSTS": value]) }
        #expect("\(error.map { "\($0)" } ?? "")".hasPrefix("PAGE_HOSTS"))
    }
}

/// `REPLAY_PAGE_SIZE`: how many bookings one replayed message carries.
@Suite("Replay page size setting")
struct ReplayPageSizeSettingTests {
    @Test func defaultsToPagesOf500AndOneMeansSingleEvents() throws {
        #expect(try ProjectorSettings(environment: [:]).replayPageSize == 500)
        #expect(try ProjectorSettings(environment: ["REPLAY_PAGE_SIZE": "1"]).replayPageSize == 1)
        #expect(try ProjectorSettings(environment: ["REPLAY_PAGE_SIZE": " 1000 "]).replayPageSize == 1_000)
    }

    @Test(arguments: ["0", "1001", "many", "-1"])
    func aBadPageSizeNamesTheVariable(_ value: String) {
        let error = #expect(throws: SettingsError.self) { try ProjectorSettings(environment: ["REPLAY_PAGE_SIZE": value]) }
        #expect("\(error.map { "\($0)" } ?? "")".hasPrefix("REPLAY_PAGE_SIZE"))
    }
}
