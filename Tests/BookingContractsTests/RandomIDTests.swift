import BookingContracts
import Foundation
import Testing

@Suite("Random ids")
struct RandomIDTests {
    @Test func areLowercaseVersion4UUIDs() throws {
        let pattern = try Regex("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        for _ in 0..<1_000 {
            let id = RandomID.uuidString()
            #expect(id.wholeMatch(of: pattern) != nil, "\(id)")
            #expect(UUID(uuidString: id) != nil)
        }
    }

    /// Across several refills of the 4 KiB pool and from many tasks at once.
    @Test func doNotRepeat() async {
        let ids = await withTaskGroup(of: [String].self) { group in
            for _ in 0..<8 { group.addTask { (0..<2_000).map { _ in RandomID.uuidString() } } }
            var all: [String] = []
            for await chunk in group { all += chunk }
            return all
        }
        #expect(Set(ids).count == 16_000)
    }
}
