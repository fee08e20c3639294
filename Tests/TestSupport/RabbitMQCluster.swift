import AMQPClient
import Foundation

/// A private three-node RabbitMQ cluster on loopback (scripts/rabbitmq-cluster.sh),
/// the test host for running beyond one machine.
///
/// Started once per test run: scripts/test.sh starts it and passes
/// `RABBITMQ_CLUSTER_DIR`; without that (a developer running one test) the
/// first use starts one that is stopped when the test process exits.
public enum TestCluster {
    /// One node of the cluster.
    public struct Node: Sendable {
        public let url: AMQPURL
        public let name: String
        /// The node's `--dir` for scripts/rabbitmq.sh.
        public let directory: String

        /// Runs `rabbitmqctl` against this node.
        @discardableResult
        public func ctl(_ arguments: [String]) throws -> String {
            try RabbitMQNode.script(["ctl", "--dir", directory, "--"] + arguments)
        }
    }

    private static let shared: Result<[Node], any Error> = Result {
        let dir = try RunServer.directory("RABBITMQ_CLUSTER_DIR", prefix: "rmq-cluster",
                                          start: { try script(["start", "--dir", $0]) },
                                          stop: { _ = try? script(["stop", "--dir", $0]) })
        let env = try String(contentsOfFile: dir + "/env", encoding: .utf8)
        func value(_ key: String) -> [String] {
            env.split(separator: "\n").first { $0.hasPrefix(key + "=") }
                .map { $0.dropFirst(key.count + 1).split(separator: ",").map(String.init) } ?? []
        }
        let urls = try value("AMQP_URLS").map { try AMQPURL($0) }
        let names = value("RABBITMQ_CLUSTER_NODES"), dirs = value("RABBITMQ_CLUSTER_DIRS")
        guard urls.count == names.count, urls.count == dirs.count, urls.count >= 3 else {
            throw NodeError("\(dir)/env does not describe a cluster of three nodes:\n\(env)")
        }
        return (0..<urls.count).map { Node(url: urls[$0], name: names[$0], directory: dirs[$0]) }
    }

    /// The cluster's nodes, node 1 (the one the others joined) first.
    public static func nodes() throws -> [Node] { try shared.get() }

    /// `scripts/rabbitmq-cluster.sh` beside scripts/rabbitmq.sh.
    @discardableResult
    static func script(_ arguments: [String]) throws -> String {
        let path = URL(fileURLWithPath: RabbitMQNode.scriptPath).deletingLastPathComponent()
            .appendingPathComponent("rabbitmq-cluster.sh").path
        return try RabbitMQNode.runScript(path, arguments)
    }
}
