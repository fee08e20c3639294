import Foundation

/// A service's executable run as a child process, as tests that crash,
/// partition or scale services need (the in-process harnesses cannot be
/// `kill -9`ed).
public enum ServiceProcess {
    private static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The built executable `name` (`booking-handler`, `pass-sender`, …):
    /// in `SERVICE_BIN_DIR` when set, else the debug build of this checkout.
    public static func binary(_ name: String) -> URL {
        if let dir = ProcessInfo.processInfo.environment["SERVICE_BIN_DIR"] {
            return URL(fileURLWithPath: dir).appendingPathComponent(name)
        }
        return repositoryRoot.appendingPathComponent(".build/debug/\(name)")
    }

    /// Starts `binary` with this process's environment plus `environment`,
    /// its output appended to `log` (kept for the failure's story). An
    /// inherited `DATABASE_URL` is dropped: a developer's shell that has one
    /// (a sourced `scripts/postgres.sh` env file) would otherwise move a
    /// test's service to PostgreSQL while the test reads its SQLite file;
    /// tests that want PostgreSQL pass it in `environment`. When
    /// `wrapper` is given (a network namespace's `ip netns exec`, `setpriv`),
    /// that runs instead, with the binary among its arguments.
    public static func launch(_ binary: URL, environment: [String: String], log: URL,
                              wrapper: (executable: String, arguments: [String])? = nil) throws -> Process {
        let process = Process()
        if let wrapper {
            process.executableURL = URL(fileURLWithPath: wrapper.executable)
            process.arguments = wrapper.arguments
        } else {
            process.executableURL = binary
        }
        var inherited = ProcessInfo.processInfo.environment
        inherited["DATABASE_URL"] = nil
        process.environment = inherited.merging(environment) { _, new in new }
        if !FileManager.default.fileExists(atPath: log.path) { FileManager.default.createFile(atPath: log.path, contents: nil) }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }
}
