import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Runs one service process under swift-service-lifecycle, start-up
/// included.
///
/// `main.swift` of each service is one call: settings are parsed first
/// (bad ones: a message on stderr, status 2); then a `ServiceGroup` runs
/// with one member, the start-up (``StartUp``), which connects, migrates,
/// declares topology, flushes the outbox — whatever the service's `build`
/// does — and adds the services `build` returns to the same group, in
/// order. So SIGTERM and SIGINT are the group's from the moment it runs:
///
/// - during start-up, the build is cancelled (a connect still waiting for
///   the broker gives up at once) and the process exits 0 — nothing was
///   consumed yet;
/// - while running, a graceful shutdown in reverse order of the services
///   (list the connection first and its consumers after it), at most
///   30 s before the group cancels what is left; then status 0;
/// - a service (or the build) failing: the group stops the others and the
///   process exits 1, the error logged.
///
/// The status is returned, not passed to `exit()`: `main.swift` exits
/// with it, so deferred work and the group's own clean-up run first.
public enum ServiceRunner {
    /// What the start-up of a service gets: the settings every service
    /// reads, its own, and its logger.
    public struct Startup<Settings: Sendable>: Sendable {
        public let common: CommonSettings
        public let settings: Settings
        public let logger: Logger
    }

    /// Parses settings, bootstraps logging and metrics, runs start-up and
    /// services in one group; returns the exit status (0 stopped, 1
    /// failed, 2 bad settings).
    ///
    /// - Parameters:
    ///   - service: the executable's name (logs, error messages).
    ///   - settings: the service's own settings from the environment;
    ///     throwing is a configuration error (status 2).
    ///   - traceExporter: makes the OpenTelemetry exporter, used when
    ///     `OTEL_EXPORTER_OTLP_ENDPOINT` is set (``TraceSetup``).
    ///   - build: the start-up; returns the services to run, connection first.
    public static func main<Settings: Sendable>(
        service: String, defaultHTTPPort: Int,
        settings parse: (_ environment: [String: String]) throws -> Settings,
        traceExporter: TraceExporterBootstrap? = nil,
        build: @escaping @Sendable (Startup<Settings>) async throws -> [any Service]
    ) async -> Int32 {
        let environment = ProcessInfo.processInfo.environment
        let common: CommonSettings
        let settings: Settings
        let tracing: (mode: TraceSetup.Mode, service: (any Service)?)
        do {
            common = try CommonSettings(defaultHTTPPort: defaultHTTPPort)
            settings = try parse(environment)
        } catch {
            FileHandle.standardError.write(Data("\(service): configuration error: \(error)\n".utf8))
            return 2
        }
        LogSetup.bootstrap(format: common.logFormat, level: common.logLevel, metadataProvider: TraceSetup.logMetadataProvider)
        do {
            // Before the build: clients made there (the gateway's HTTP
            // client) take the process's tracer when they are made.
            tracing = try TraceSetup.bootstrap(service: service, environment: environment, exporter: traceExporter)
        } catch {
            FileHandle.standardError.write(Data("\(service): configuration error: \(error)\n".utf8))
            return 2
        }
        Observability.bootstrap()
        AMQPMetrics.reserveTypeLabels(Topology.knownRoutingKeys + [PassQueues.retry])
        var logger = Logger(label: service)
        logger[metadataKey: "service"] = .string(service)
        logger.info("tracing", metadata: ["tracing.mode": .string(tracing.mode.rawValue)])
        let startUp = StartUp(startup: Startup(common: common, settings: settings, logger: logger), build: build)
        let group = ServiceGroup(configuration: configuration(startUp, exporter: tracing.service, logger: logger))
        startUp.group.withLock { $0 = group }
        do {
            try await group.run()
            logger.info("stopped")
            return 0
        } catch {
            logger.critical("\(service) failed", metadata: ["error": "\(error)"])
            return 1
        }
    }

    static func configuration(_ startUp: some Service, exporter: (any Service)? = nil,
                              logger: Logger) -> ServiceGroupConfiguration {
        // The span exporter first, so it stops last: it sends the spans
        // the other services ended while they drained.
        let exporting = exporter.map { [ServiceGroupConfiguration.ServiceConfiguration(service: $0)] } ?? []
        var configuration = ServiceGroupConfiguration(
            // The start-up returns once it has added the services: that
            // must not end the group.
            services: exporting + [.init(service: startUp, successTerminationBehavior: .ignore)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(30)
        return configuration
    }

    /// The group's first member: builds the service inside the group and
    /// hands it what to run.
    final class StartUp<Settings: Sendable>: Service {
        let startup: Startup<Settings>
        let build: @Sendable (Startup<Settings>) async throws -> [any Service]
        /// Set once, before the group runs.
        let group = Mutex<ServiceGroup?>(nil)

        init(startup: Startup<Settings>, build: @escaping @Sendable (Startup<Settings>) async throws -> [any Service]) {
            self.startup = startup
            self.build = build
        }

        func run() async throws {
            let logger = startup.logger
            let services: [any Service]
            do {
                services = try await cancelWhenGracefulShutdown { [startup, build] in try await build(startup) }
            } catch where Task.isShuttingDownGracefully || Task.isCancelled {
                logger.notice("stopped during start-up", metadata: ["error": "\(error)"])
                return
            }
            guard let group = group.withLock({ $0 }) else { preconditionFailure("StartUp runs only in its group") }
            // Added last, so told first: says why the process is stopping.
            for service in services + [ShutdownNotice(logger: logger)] {
                await group.addServiceUnlessShutdown(service)
            }
        }
    }

    /// Logs the start of a graceful shutdown (the group's own log of the
    /// signal is at debug level).
    struct ShutdownNotice: Service {
        let logger: Logger
        func run() async throws {
            try? await gracefulShutdown()
            if Task.isShuttingDownGracefully && !Task.isCancelled { logger.notice("shutting down gracefully") }
        }
    }
}
