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

    /// This process's environment for a service it starts, without
    /// `DATABASE_URL`: a developer's shell that has one (a sourced
    /// `scripts/postgres.sh` env file) would otherwise move the service to
    /// PostgreSQL while its caller reads its SQLite file, or run a
    /// benchmark's "SQLite" row on that server. Callers that want
    /// PostgreSQL pass it themselves.
    public static var inheritedEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["DATABASE_URL"] = nil
        return environment
    }

    /// Starts `binary` with ``inheritedEnvironment`` plus `environment`,
    /// its output appended to `log` (kept for the failure's story). When
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
        process.environment = inheritedEnvironment.merging(environment) { _, new in new }
        if !FileManager.default.fileExists(atPath: log.path) { FileManager.default.createFile(atPath: log.path, contents: nil) }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }
}
