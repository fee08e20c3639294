import AMQPClient
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Runs a service's parts under swift-service-lifecycle: SIGTERM and
/// SIGINT trigger a graceful shutdown in reverse order of `services`, so
/// list the connection first and its consumers after it.
///
/// Signals are watched from the first moment (``start(service:defaultHTTPPort:)``),
/// not only once the group runs: a SIGTERM while the service connects or
/// migrates its database ends the process with status 0 (nothing was
/// consumed yet), and one that arrives just as the group starts is not lost.
public enum ServiceRunner {
    private enum Phase {
        case starting
        case running(ServiceGroup)
        case stopping
    }

    private static let phase = Mutex<Phase>(.starting)

    /// Runs until a signal (or a service failing), then returns; the caller
    /// exits 0 on return.
    public static func run(_ services: [any Service], logger: Logger) async throws {
        var configuration = ServiceGroupConfiguration(
            services: services.map { ServiceGroupConfiguration.ServiceConfiguration(service: $0) },
            gracefulShutdownSignals: [],  // delivered by watchSignals, which has been listening since start
            logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(30)
        let group = ServiceGroup(configuration: configuration)
        let stopAtOnce = phase.withLock { phase -> Bool in
            if case .stopping = phase { return true }
            phase = .running(group)
            return false
        }
        if stopAtOnce { await group.triggerGracefulShutdown() }
        try await group.run()
    }

    /// Common start-up: parse settings (exit 2 with a clear message when
    /// they are bad), bootstrap logging, start watching SIGTERM/SIGINT.
    public static func start(service: String, defaultHTTPPort: Int) async -> (CommonSettings, Logger) {
        let settings: CommonSettings
        do {
            settings = try CommonSettings(defaultHTTPPort: defaultHTTPPort)
        } catch {
            FileHandle.standardError.write(Data("\(service): configuration error: \(error)\n".utf8))
            exit(2)
        }
        LogSetup.bootstrap(format: settings.logFormat, level: settings.logLevel)
        Observability.bootstrap()
        var logger = Logger(label: service)
        logger[metadataKey: "service"] = .string(service)
        await watchSignals(logger: logger)
        return (settings, logger)
    }

    /// First signal: during start-up exit 0; while running, graceful
    /// shutdown. A second signal while shutting down exits at once (1).
    private static func watchSignals(logger: Logger) async {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        Task.detached {
            for await signal in signals {
                let action = phase.withLock { phase -> (ServiceGroup?, Bool) in
                    switch phase {
                    case .starting:
                        return (nil, false)
                    case .running(let group):
                        phase = .stopping
                        return (group, false)
                    case .stopping:
                        return (nil, true)
                    }
                }
                switch action {
                case (let group?, _):
                    logger.notice("shutting down gracefully", metadata: ["signal": "\(signal)"])
                    await group.triggerGracefulShutdown()
                case (nil, true):
                    logger.warning("second signal during shutdown; exiting now", metadata: ["signal": "\(signal)"])
                    exit(1)
                case (nil, false):
                    logger.notice("stopped during start-up", metadata: ["signal": "\(signal)"])
                    exit(0)
                }
            }
        }
    }
}
