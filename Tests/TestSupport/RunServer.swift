import Foundation

/// Where a server that the whole test run shares lives: the directory
/// scripts/test.sh started it in (named by an environment variable), or,
/// without one (a developer running one test), a directory of this
/// process's own that the server is started in on first use and that is
/// stopped and removed when the test process exits.
enum RunServer {
    /// Servers this process started: their directory and how to stop them.
    private static let owned = LockedBox<[(directory: String, stop: @Sendable (String) -> Void)]>([])
    /// Stops them at exit; registered once, with the first.
    private static let stopAtExit: Void = {
        atexit { RunServer.stopOwned() }
    }()

    /// `environment[variable]` when set and not empty; else a new directory
    /// named after `prefix` in which `start` starts a server that
    /// `stop` stops at exit.
    static func directory(_ variable: String, prefix: String, start: (String) throws -> Void,
                          stop: @escaping @Sendable (String) -> Void) throws -> String {
        if let dir = ProcessInfo.processInfo.environment[variable], !dir.isEmpty { return dir }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName(prefix)).path
        try start(dir)
        owned.withLock { $0.append((dir, stop)) }
        _ = stopAtExit
        return dir
    }

    private static func stopOwned() {
        for server in owned.withLock({ $0 }) {
            server.stop(server.directory)
            try? FileManager.default.removeItem(atPath: server.directory)
        }
    }
}
