import Foundation

/// Secrets kept out of log lines and error texts.
public enum Redaction {
    /// `url` without what may be a secret: the user-info part
    /// (`user:password@`) becomes `***@`, and every query value becomes
    /// `***` (gateways often take a token as `?key=…`); scheme, host, port
    /// and path stay, so an operator still sees where the service talks to.
    /// Text that is not a URL with a host is replaced whole: it may be a
    /// secret pasted into the wrong variable.
    public static func url(_ url: String) -> String {
        guard let parsed = URLComponents(string: url), parsed.host != nil, let schemeEnd = url.range(of: "://") else {
            return "<not a URL>"
        }
        let rest = url[schemeEnd.upperBound...]
        // The authority ends at the first '/', '?' or '#'.
        let authorityEnd = rest.firstIndex { "/?#".contains($0) } ?? rest.endIndex
        var authority = String(rest[..<authorityEnd])
        if let at = authority.lastIndex(of: "@") {
            authority = "***" + authority[at...]
        }
        var tail = String(rest[authorityEnd...])
        if let hash = tail.firstIndex(of: "#") { tail = String(tail[..<hash]) }
        if let question = tail.firstIndex(of: "?") {
            let query = tail[tail.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false).map { item in
                guard let equals = item.firstIndex(of: "=") else { return String(item) }
                return item[..<equals] + "=***"
            }
            tail = tail[..<question] + "?" + query.joined(separator: "&")
        }
        return url[..<schemeEnd.upperBound] + authority + tail
    }
}
