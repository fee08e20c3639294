import Foundation

/// A parsed `amqp://` or `amqps://` URL.
///
/// Follows the RabbitMQ URI spec: `amqp://user:pass@host:port/vhost`, every
/// part percent-decoded, the vhost being the single path segment (`%2f` is
/// `/`; an empty path is the default vhost `/`). `description` redacts the
/// password so the value can be logged.
public struct AMQPURL: Sendable, Equatable, CustomStringConvertible {
    /// `true` for `amqps://` (TLS through rabbitmq-c's OpenSSL socket).
    public var tls: Bool
    /// Host name or IP address (IPv6 without brackets).
    public var host: String
    /// TCP port; 5672 or 5671 by default.
    public var port: Int
    /// User name (default `guest`).
    public var user: String
    /// Password (default `guest`). Never printed.
    public var password: String
    /// Virtual host (default `/`).
    public var vhost: String

    /// The documented default: `amqp://guest:guest@127.0.0.1:5672/%2f`.
    public static let `default` = try! AMQPURL("amqp://guest:guest@127.0.0.1:5672/%2f")

    /// Parses a URL, throwing ``AMQPError/Code/invalidURL`` with the reason.
    public init(_ string: String) throws(AMQPError) {
        func bad(_ why: String) -> AMQPError {
            AMQPError(.invalidURL, "invalid AMQP URL (\(why)); expected amqp://user:pass@host:port/vhost")
        }
        let trimmed = string.trimmingCharacters(in: .whitespaces)
        let rest: Substring
        if trimmed.lowercased().hasPrefix("amqp://") {
            tls = false
            rest = trimmed.dropFirst(7)
        } else if trimmed.lowercased().hasPrefix("amqps://") {
            tls = true
            rest = trimmed.dropFirst(8)
        } else {
            throw bad("scheme must be amqp:// or amqps://")
        }
        if rest.contains("?") || rest.contains("#") {
            throw bad("query parameters are not supported")
        }
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let path = authorityEnd < rest.endIndex ? rest[rest.index(after: authorityEnd)...] : ""
        if path.contains("/") { throw bad("the vhost must be one path segment; write '/' as %2f") }

        var hostPort = authority
        user = "guest"
        password = "guest"
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
            if let colon = userInfo.firstIndex(of: ":") {
                user = try Self.decode(userInfo[..<colon], bad)
                password = try Self.decode(userInfo[userInfo.index(after: colon)...], bad)
            } else {
                user = try Self.decode(userInfo, bad)
                password = ""
            }
        }
        var hostPart: Substring
        var portPart: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw bad("unterminated IPv6 address") }
            hostPart = hostPort[hostPort.index(after: hostPort.startIndex)..<close]
            let after = hostPort[hostPort.index(after: close)...]
            if after.hasPrefix(":") { portPart = after.dropFirst() } else if !after.isEmpty { throw bad("junk after IPv6 address") }
        } else if let colon = hostPort.lastIndex(of: ":") {
            hostPart = hostPort[..<colon]
            portPart = hostPort[hostPort.index(after: colon)...]
        } else {
            hostPart = hostPort
        }
        host = try Self.decode(hostPart, bad)
        if host.isEmpty { host = "localhost" }
        if let portPart {
            // The text is not echoed: with an unencoded '/' in the password
            // the "port" is really part of the password.
            guard let p = Int(portPart), (1...65535).contains(p) else {
                throw bad("the port is not a number 1-65535; percent-encode any '/', '@', ':' or '?' in the user name or password")
            }
            port = p
        } else {
            port = tls ? 5671 : 5672
        }
        vhost = path.isEmpty ? "/" : try Self.decode(path, bad)
    }

    private static func decode(_ s: Substring, _ bad: (String) -> AMQPError) throws(AMQPError) -> String {
        var bytes: [UInt8] = []
        var it = s.utf8.makeIterator()
        while let c = it.next() {
            if c == UInt8(ascii: "%") {
                guard let h = it.next(), let l = it.next(), let hv = hexValue(h), let lv = hexValue(l) else {
                    throw bad("bad percent-encoding")
                }
                bytes.append(hv << 4 | lv)
            } else {
                bytes.append(c)
            }
        }
        guard let str = String(validating: bytes, as: UTF8.self) else { throw bad("percent-encoding is not UTF-8") }
        return str
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Parses one URL or several nodes of a cluster, in either form:
    ///
    /// - a comma-separated list of whole URLs
    ///   (`amqp://u:p@node1:5672/%2f,amqp://u:p@node2:5672/%2f`);
    /// - one URL with several hosts (`amqp://u:p@node1:5672,node2,node3:5674/%2f`),
    ///   each with the same credentials and vhost.
    ///
    /// A comma inside a password needs no encoding: only a comma followed by
    /// a scheme starts a new URL, and host lists are read after the last `@`.
    public static func list(_ string: String) throws(AMQPError) -> [AMQPURL] {
        var pieces: [Substring] = []
        var rest = Substring(string.trimmingCharacters(in: .whitespaces))
        while let comma = Self.nextURLStart(in: rest) {
            pieces.append(rest[..<comma])
            rest = rest[rest.index(after: comma)...].drop(while: { $0 == " " })
        }
        pieces.append(rest)
        var urls: [AMQPURL] = []
        for piece in pieces {
            let text = String(piece)
            let schemeEnd = text.range(of: "://")?.upperBound ?? text.startIndex
            let authorityEnd = text[schemeEnd...].firstIndex(of: "/") ?? text.endIndex
            let authority = text[schemeEnd..<authorityEnd]
            let hostsStart = authority.lastIndex(of: "@").map { authority.index(after: $0) } ?? authority.startIndex
            let hosts = authority[hostsStart...]
            guard hosts.contains(",") else {
                urls.append(try AMQPURL(text))
                continue
            }
            for host in hosts.split(separator: ",", omittingEmptySubsequences: false) {
                let host = host.trimmingCharacters(in: .whitespaces)
                if host.isEmpty {
                    throw AMQPError(.invalidURL, "invalid AMQP URL (empty host in a host list); expected amqp://user:pass@host1:port,host2:port/vhost")
                }
                urls.append(try AMQPURL(String(text[..<hostsStart]) + host + String(text[authorityEnd...])))
            }
        }
        // One logical broker: a service stamps its user as `user_id` and
        // declares its topology in one vhost, whichever node it is on.
        if let first = urls.first,
           urls.contains(where: { $0.user != first.user || $0.password != first.password || $0.vhost != first.vhost }) {
            throw AMQPError(.invalidURL, "invalid AMQP URL list (the nodes of one cluster need the same user, password and vhost)")
        }
        return urls
    }

    /// The comma in `text` that starts another URL (followed by a scheme).
    private static func nextURLStart(in text: Substring) -> Substring.Index? {
        var index = text.startIndex
        while let comma = text[index...].firstIndex(of: ",") {
            let after = text[text.index(after: comma)...].drop(while: { $0 == " " }).lowercased()
            if after.hasPrefix("amqp://") || after.hasPrefix("amqps://") { return comma }
            index = text.index(after: comma)
        }
        return nil
    }

    /// The full URL including the password, percent-encoded: for handing to
    /// a child process or another client. Never log it; use `description`.
    public var urlStringWithCredentials: String {
        func enc(_ s: String) -> String {
            s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? s
        }
        let scheme = tls ? "amqps" : "amqp"
        let hostText = host.contains(":") ? "[\(host)]" : host
        return "\(scheme)://\(enc(user)):\(enc(password))@\(hostText):\(port)/\(enc(vhost))"
    }

    /// The URL with the password replaced by `***`: safe for logs.
    public var description: String {
        let scheme = tls ? "amqps" : "amqp"
        let hostText = host.contains(":") ? "[\(host)]" : host
        let vhostText = vhost == "/" ? "%2f" : vhost
        return "\(scheme)://\(user):***@\(hostText):\(port)/\(vhostText)"
    }
}
