import Foundation

/// The private PostgreSQL server of the tests that run beyond one machine
/// (scripts/postgres.sh: Debian's postgresql on loopback, in a temp dir).
///
/// Started once per test run: scripts/test.sh starts it and passes
/// `POSTGRES_TEST_DIR`; without that (a developer running one test) the
/// first use starts one that is stopped when the test process exits. Tests
/// share it and keep apart by schema (``url(schema:)``).
public enum TestPostgres {
    private static let shared: Result<(directory: String, url: String), any Error> = Result {
        let dir = try RunServer.directory("POSTGRES_TEST_DIR", prefix: "pg", start: { try script(["start", "--dir", $0]) },
                                          stop: { _ = try? script(["stop", "--dir", $0]) })
        let env = try String(contentsOfFile: dir + "/env", encoding: .utf8)
        guard let line = env.split(separator: "\n").first(where: { $0.hasPrefix("DATABASE_URL=") }) else {
            throw NodeError("\(dir)/env has no DATABASE_URL:\n\(env)")
        }
        return (dir, String(line.dropFirst("DATABASE_URL=".count)))
    }

    /// `DATABASE_URL` of the shared server (the `booking` database).
    public static func databaseURL() throws -> String { try shared.get().url }

    /// `DATABASE_URL` for a schema of its own: `prefix` and a random suffix.
    public static func url(schemaPrefix prefix: String = "t") throws -> String {
        try databaseURL() + "?schema=\(prefix)_\(UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: ""))"
    }

    /// Runs `scripts/postgres.sh` (`start`, `stop`, `psql`, …) on the shared server.
    @discardableResult
    public static func control(_ command: String, _ arguments: [String] = []) throws -> String {
        try script([command, "--dir", try shared.get().directory] + arguments)
    }

    @discardableResult
    static func script(_ arguments: [String]) throws -> String {
        let path = URL(fileURLWithPath: RabbitMQNode.scriptPath).deletingLastPathComponent()
            .appendingPathComponent("postgres.sh").path
        return try RabbitMQNode.runScript(path, arguments)
    }
}
