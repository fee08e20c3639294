import AMQPClient
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Runs a service's parts under swift-service-lifecycle: SIGTERM and
/// SIGINT trigger a graceful shutdown in reverse order of `services`, so
/// list the connection first and its consumers after it.
public enum ServiceRunner {
    /// Runs until a signal (or a service failing), then returns; the caller
    /// exits 0 on return.
    public static func run(_ services: [any Service], logger: Logger) async throws {
        startupFinished.store(true, ordering: .releasing)
        var configuration = ServiceGroupConfiguration(
            services: services.map { ServiceGroupConfiguration.ServiceConfiguration(service: $0) },
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(30)
        try await ServiceGroup(configuration: configuration).run()
    }

    /// Common start-up: parse settings (exit 2 with a clear message when
    /// they are bad), bootstrap logging, return both.
    public static func start(service: String, defaultHTTPPort: Int) async -> (CommonSettings, Logger) {
        let settings: CommonSettings
        do {
            settings = try CommonSettings(defaultHTTPPort: defaultHTTPPort)
        } catch {
            FileHandle.standardError.write(Data("\(service): configuration error: \(error)\n".utf8))
            exit(2)
        }
        LogSetup.bootstrap(format: settings.logFormat, level: settings.logLevel)
        var logger = Logger(label: service)
        logger[metadataKey: "service"] = .string(service)
        await stopOnSignalDuringStartup(logger: logger)
        return (settings, logger)
    }

    private static let startupFinished = Atomic<Bool>(false)

    /// Until `run` takes over, SIGTERM/SIGINT (e.g. an orchestrator giving
    /// up while we wait for the broker) ends the process with status 0:
    /// nothing has been consumed yet, so there is nothing to finish.
    private static func stopOnSignalDuringStartup(logger: Logger) async {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        Task.detached {
            for await signal in signals where !startupFinished.load(ordering: .acquiring) {
                logger.notice("stopped during start-up", metadata: ["signal": "\(signal)"])
                exit(0)
            }
        }
    }
}
