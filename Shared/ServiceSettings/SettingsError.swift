/// A setting the service cannot run with; the message names the variable
/// and says what is allowed. In a module of its own, below everything that
/// reads settings — `ServiceSupport`, `PostgresSupport`, the broker objects
/// (`PROJECTOR_INSTANCE`, `PASS_RETRY_DELAYS`) — so none of them depends on
/// another just for it.
public struct SettingsError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Parsing of setting values, throwing ``SettingsError``.
public enum SettingValue {
    /// `text` as a whole number in `range`; `value` when absent.
    public static func integer(_ text: String?, name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text else { return value }
        guard let n = Int(text), range.contains(n) else {
            throw SettingsError("\(name): '\(text)' is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return n
    }
}
