import Logging
import ServiceLifecycle

extension ServiceGroup {
    /// `services` as one group in this test process, as a service's `main`
    /// runs them but without signal handling (the test runner owns the
    /// signals): started, with the task that ends when the group has.
    /// Stop it with `triggerGracefulShutdown()` and await the task.
    public static func startInProcess(_ services: [any Service], logger: Logger) -> (group: ServiceGroup, running: Task<Void, any Error>) {
        var configuration = ServiceGroupConfiguration(
            services: services.map { ServiceGroupConfiguration.ServiceConfiguration(service: $0) }, logger: logger)
        configuration.gracefulShutdownSignals = []
        let group = ServiceGroup(configuration: configuration)
        return (group, Task { try await group.run() })
    }
}
