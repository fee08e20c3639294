/// A setting the service cannot run with; the message names the variable
/// and says what is allowed. Here, not in ServiceSupport, because names of
/// the topology are settings too (`PROJECTOR_INSTANCE`, `PASS_RETRY_DELAYS`);
/// services get it through `import ServiceSupport` as before.
public struct SettingsError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
