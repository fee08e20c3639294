import ServiceLifecycle

/// Runs `action` when the service group shuts down, at this service's
/// place in the reverse start order: put it right after what must outlive
/// the work (the AMQP connection) and before what uses the resource, and
/// the resource is released once everything using it has stopped — a
/// database's connections, for instance.
public struct OnShutdown: Service {
    let action: @Sendable () async -> Void

    public init(_ action: @escaping @Sendable () async -> Void) {
        self.action = action
    }

    public func run() async throws {
        try? await gracefulShutdown()
        await action()
    }
}
