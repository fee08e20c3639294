import Foundation

/// Runs a helper program (scripts, `ip`, `iptables`) to its end.
public enum Command {
    /// Runs `path` with `arguments`, waits, and returns what it printed
    /// (standard output and error together); a non-zero exit throws with
    /// that output.
    @discardableResult
    public static func run(_ path: String, _ arguments: [String]) throws -> String {
        let (status, output) = try exitStatus(path, arguments)
        guard status == 0 else {
            throw NodeError("\(path) \(arguments.joined(separator: " ")) failed (\(status)):\n\(output)")
        }
        return output
    }

    /// Runs `path` with `arguments` (and this process's environment plus
    /// `environment`), waits, and returns its exit status and what it
    /// printed: for tests that expect some runs to fail.
    public static func exitStatus(_ path: String, _ arguments: [String],
                                  environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
