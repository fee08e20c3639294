import Foundation

/// Runs a helper program (scripts, `ip`, `iptables`) to its end.
public enum Command {
    /// Runs `path` with `arguments`, waits, and returns what it printed
    /// (standard output and error together); a non-zero exit throws with
    /// that output.
    @discardableResult
    public static func run(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let output = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw NodeError("\(path) \(arguments.joined(separator: " ")) failed (\(process.terminationStatus)):\n\(output)")
        }
        return output
    }
}
