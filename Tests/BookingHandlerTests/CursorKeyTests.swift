import Foundation
import Synchronization
import Testing
@testable import BookingHandler

/// The list cursor's key kept in DATA_DIR when `LIST_CURSOR_KEY` is unset.
@Suite("List cursor key in the data directory")
struct CursorKeyTests {
    /// Handlers starting at once on one DATA_DIR each resolve the key
    /// while another may be writing it: every one must get the same whole
    /// key, none "not a cursor key" (a key created in place and written
    /// afterwards could be read empty in between).
    @Test func processesStartingAtOnceAllGetTheSameKey() throws {
        for round in 0..<100 {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cursor-key-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let results = Mutex([Result<CursorKey, any Error>?](repeating: nil, count: 8))
            DispatchQueue.concurrentPerform(iterations: 8) { i in
                let result = Result { try CursorKey.resolve(setting: nil, dataDirectory: directory.path) }
                results.withLock { $0[i] = result }
            }
            let keys = try results.withLock { $0 }.map { try #require($0).get() }
            let probe = Data("round \(round)".utf8)
            for key in keys { #expect(keys[0].open(key.seal(probe)) == probe, "round \(round): two keys") }
            // Nothing left beside the key.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["list-cursor.key"])
            // A restart reads it back.
            #expect(try CursorKey.resolve(setting: nil, dataDirectory: directory.path).open(keys[0].seal(probe)) == probe)
        }
    }
}
