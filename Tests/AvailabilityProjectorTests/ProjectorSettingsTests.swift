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
}
