import Foundation

/// A directory of a test's own under the system temp directory, named
/// `<prefix>-<8 hex digits>` (``uniqueName(_:)``) so that a leftover tells
/// which test made it.
///
/// It exists once `init` returned. It is not removed by itself (a value
/// may be released before its last use in the source): say when, usually
///
/// ```swift
/// let dir = try TemporaryDirectory("ledger")
/// defer { dir.remove() }
/// ```
public struct TemporaryDirectory: Sendable {
    /// Where the directory is.
    public let url: URL

    /// Its file-system path.
    public var path: String { url.path }

    /// Makes a new, empty directory named after `prefix`.
    public init(_ prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName(prefix))
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// `name` inside the directory.
    public func appending(_ name: String) -> URL {
        url.appendingPathComponent(name)
    }

    /// Removes the directory and all in it; a directory already gone is no error.
    public func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}
