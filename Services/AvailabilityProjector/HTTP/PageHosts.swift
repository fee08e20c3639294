import Foundation

/// The host names the page is served as, which `POST /api/book` checks
/// its `Host` (and `Origin`, when sent) against.
///
/// Why: the JSON-only rule stops a cross-site *form*, not a script on a
/// site that re-points its own name at this machine (DNS rebinding): to
/// the browser that script is same-origin, so it may send JSON, and it
/// would book as `PAGE_USER` with attendees of its choosing. After the
/// rebinding the request still names the attacker's host, so a fixed list
/// refuses it (comparing `Origin` with `Host` would not: they match).
public struct PageHosts: Sendable, Equatable {
    /// Lower-cased names without a port; IPv6 addresses in brackets.
    public let names: Set<String>

    /// Loopback names, the bind address when it is one host, and `extra`
    /// (`PAGE_HOSTS`: the names a reverse proxy passes on).
    public init(bind: String, extra: [String] = []) {
        var names: Set<String> = ["localhost", "127.0.0.1", "[::1]"]
        let bound = Self.hostPart(bind)
        if !["0.0.0.0", "[::]", ""].contains(bound) { names.insert(bound) }
        for name in extra { names.insert(Self.hostPart(name)) }
        self.names = names
    }

    /// Why a request with `host` (its `Host` header or HTTP/2 authority)
    /// and `origin` may not book, or nil when it may.
    public func refusal(host: String?, origin: String?) -> String? {
        guard let host, !host.isEmpty else { return "the request names no Host" }
        let name = Self.hostPart(host)
        guard names.contains(name) else {
            return "this page is not served as '\(name.prefix(100))' (add the name to PAGE_HOSTS if it should be)"
        }
        if let origin {
            guard let url = URL(string: origin), let originHost = url.host, ["http", "https"].contains(url.scheme ?? "") else {
                return "the request comes from origin '\(origin.prefix(100))'"
            }
            let originName = Self.hostPart(originHost.contains(":") && !originHost.hasPrefix("[") ? "[\(originHost)]" : originHost)
            guard names.contains(originName) else {
                return "the request comes from origin '\(origin.prefix(100))', not from this page"
            }
        }
        return nil
    }

    /// `name` lower-cased, without a trailing port; a bare IPv6 address
    /// (more than one colon) is put in brackets.
    static func hostPart(_ name: String) -> String {
        let text = name.trimmingCharacters(in: .whitespaces).lowercased()
        if text.hasPrefix("[") {
            guard let end = text.firstIndex(of: "]") else { return text }
            return String(text[...end])
        }
        let colons = text.filter { $0 == ":" }.count
        if colons > 1 { return "[\(text)]" }
        if colons == 1, let colon = text.firstIndex(of: ":") { return String(text[..<colon]) }
        return text
    }
}
