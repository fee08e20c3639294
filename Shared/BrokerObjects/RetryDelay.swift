import Foundation
import ServiceSettings

/// One back-off delay, with the text it was configured as (which names its
/// delay queue: `pass-sender.retry.delay.<label>`).
public struct RetryDelay: Sendable, Hashable, CustomStringConvertible {
    /// Milliseconds.
    public let milliseconds: Int
    /// Canonical text: `100ms`, `5s`, `2m`, `1h`.
    public var label: String {
        if milliseconds % 3_600_000 == 0 { return "\(milliseconds / 3_600_000)h" }
        if milliseconds % 60_000 == 0 { return "\(milliseconds / 60_000)m" }
        if milliseconds % 1000 == 0 { return "\(milliseconds / 1000)s" }
        return "\(milliseconds)ms"
    }
    public var description: String { label }

    /// Creates a delay of `milliseconds`.
    public init(milliseconds: Int) { self.milliseconds = milliseconds }

    /// Parses `250ms`, `5s`, `2m`, `1h` (a bare number means seconds).
    public init?(_ text: String) {
        let t = text.trimmingCharacters(in: .whitespaces).lowercased()
        let units: [(String, Int)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
        for (suffix, factor) in units where t.hasSuffix(suffix) {
            guard let n = Int(t.dropLast(suffix.count)), n >= 0 else { return nil }
            let (product, overflow) = n.multipliedReportingOverflow(by: factor)
            guard !overflow else { return nil }
            self.milliseconds = product
            return
        }
        guard let n = Int(t), n >= 0 else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: 1000)
        guard !overflow else { return nil }
        self.milliseconds = product
    }

    /// Parses a comma-separated list; each delay must be 1ms…24h.
    public static func parseList(_ text: String) throws -> [RetryDelay] {
        let parts = text.split(separator: ",").map { String($0) }
        guard !parts.isEmpty else { throw SettingsError("empty list (expected e.g. 1s,5s,30s,2m,10m)") }
        return try parts.map { part in
            guard let delay = RetryDelay(part), delay.milliseconds >= 1, delay.milliseconds <= 86_400_000 else {
                throw SettingsError("'\(part.trimmingCharacters(in: .whitespaces))' is not a delay between 1ms and 24h (units ms, s, m, h)")
            }
            return delay
        }
    }
}
