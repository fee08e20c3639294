import Foundation

/// A network namespace of its own for a service process under test, joined
/// to this host by a veth pair (`10.213.<n>.1` here, `10.213.<n>.2` inside),
/// with `socat` on the host side forwarding chosen ports of `10.213.<n>.1`
/// to the same ports on 127.0.0.1 — where the test broker and PostgreSQL
/// listen. To the broker and PostgreSQL the process is a loopback client
/// (the forwarder's), so their loopback-only users and `pg_hba` rules hold;
/// to the process they are another host, and taking the link down is a
/// real network partition: nothing of its traffic gets through, in either
/// direction, until the link is up again.
///
/// Needs root, `ip` (iproute2) and `socat`. ``remove()`` (also on
/// failure) deletes the namespace, which deletes the veth pair.
public final class NetworkNamespace: Sendable {
    public let name: String
    /// The host's end of the link, as the process inside sees it.
    public let hostAddress: String
    let hostLink: String
    private let forwarders: LockedBox<[Process]>

    /// Creates the namespace and the link, and forwards `ports`.
    public init(ports: [Int]) throws {
        let n = Int.random(in: 1...250)
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        name = "rbns-\(tag)"
        hostLink = "rbh\(tag.prefix(8))"
        let inner = "rbn\(tag.prefix(8))"
        hostAddress = "10.213.\(n).1"
        forwarders = LockedBox([])
        do {
            try Self.ip(["netns", "add", name])
            try Self.ip(["link", "add", hostLink, "type", "veth", "peer", "name", inner])
            try Self.ip(["link", "set", inner, "netns", name])
            try Self.ip(["addr", "add", "\(hostAddress)/30", "dev", hostLink])
            try Self.ip(["link", "set", hostLink, "up"])
            try Self.ip(["netns", "exec", name, "ip", "addr", "add", "10.213.\(n).2/30", "dev", inner])
            try Self.ip(["netns", "exec", name, "ip", "link", "set", inner, "up"])
            try Self.ip(["netns", "exec", name, "ip", "link", "set", "lo", "up"])
            for port in ports {
                let socat = Process()
                socat.executableURL = URL(fileURLWithPath: "/usr/bin/socat")
                socat.arguments = ["TCP-LISTEN:\(port),bind=\(hostAddress),reuseaddr,fork", "TCP:127.0.0.1:\(port)"]
                socat.standardOutput = FileHandle.nullDevice
                socat.standardError = FileHandle.nullDevice
                try socat.run()
                forwarders.withLock { $0.append(socat) }
            }
            // Listening once a connection from inside gets through.
            for port in ports { try waitForForwarder(port) }
        } catch {
            remove()
            throw error
        }
    }

    /// The command line that runs `executable` inside the namespace.
    public func wrap(_ executable: String) -> (executable: String, arguments: [String]) {
        ("/usr/sbin/ip", ["netns", "exec", name, executable])
    }

    /// `url` (of a server on 127.0.0.1) as the process inside must use it.
    public func rewrite(_ url: String) -> String {
        url.replacingOccurrences(of: "@127.0.0.1:", with: "@\(hostAddress):")
            .replacingOccurrences(of: "@localhost:", with: "@\(hostAddress):")
    }

    /// Cuts the link (the partition) or restores it.
    public func setLink(up: Bool) throws {
        try Self.ip(["link", "set", hostLink, up ? "up" : "down"])
    }

    public func remove() {
        for socat in forwarders.withLock({ $0 }) where socat.isRunning {
            // SIGKILL: a child of the test process may inherit SIGTERM
            // blocked (seen here: socat ignored terminate()).
            kill(socat.processIdentifier, SIGKILL)
            // Reaped here, not with waitUntilExit(): Foundation's wait was
            // seen to spin for good on a killed child left a zombie. If
            // Foundation reaped it first, waitpid answers ECHILD at once.
            var status: Int32 = 0
            _ = waitpid(socat.processIdentifier, &status, 0)
        }
        _ = try? Self.ip(["netns", "del", name])
        _ = try? Self.ip(["link", "del", hostLink])
    }

    private func waitForForwarder(_ port: Int) throws {
        for _ in 0..<100 {
            if (try? Self.ip(["netns", "exec", name, "bash", "-c", "exec 3<>/dev/tcp/\(hostAddress)/\(port)"])) != nil { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw NodeError("no forwarder on \(hostAddress):\(port) after 5 s")
    }

    @discardableResult
    static func ip(_ arguments: [String]) throws -> String {
        try Command.run("/usr/sbin/ip", arguments)
    }
}
