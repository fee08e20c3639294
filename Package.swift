// swift-tools-version: 6.1
import PackageDescription

/// Room booking on RabbitMQ: three services, an operators' CLI and the
/// shared AMQP layer they stand on. See README.md for the picture.
let package = Package(
    name: "room-booking",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "AMQPClient", targets: ["AMQPClient"]),
        .library(name: "BookingContracts", targets: ["BookingContracts"]),
        .executable(name: "booking-handler", targets: ["booking-handler"]),
        .executable(name: "pass-sender", targets: ["pass-sender"]),
        .executable(name: "availability-projector", targets: ["availability-projector"]),
        .executable(name: "bookingctl", targets: ["bookingctl"]),
        .executable(name: "benchmarks", targets: ["Benchmarks"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Already in the graph through postgres-nio; named for the list
        // cursor's HMAC.
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3" ..< "5.0.0"),
        // Spans and W3C propagation: the API the AMQP layer and the services use.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // The exporter, linked only by TraceExport (the executables): OTLP/HTTP
        // alone, since its default traits also build gRPC.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // MARK: Shared

        /// rabbitmq-c from Debian (librabbitmq-dev), plus static inline shims.
        .systemLibrary(
            name: "CRabbitMQ",
            path: "Shared/CRabbitMQ",
            pkgConfig: "librabbitmq",
            providers: [.apt(["librabbitmq-dev"])]
        ),
        /// A write buffer under rabbitmq-c's socket, so that a run of frames
        /// leaves in one system call (C: it implements the library's socket
        /// interface).
        .target(
            name: "CAMQPWriteBuffer",
            dependencies: ["CRabbitMQ"],
            path: "Shared/CAMQPWriteBuffer"
        ),
        /// Why a TLS connection failed, in words: the broker certificate's
        /// verification as rabbitmq-c's OpenSSL context saw it, and checks of
        /// the CA, client certificate and key files (C: OpenSSL).
        .target(
            name: "CAMQPTLS",
            dependencies: ["CRabbitMQ"],
            path: "Shared/CAMQPTLS",
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]
        ),
        /// The Swift AMQP layer: one I/O thread per connection, confirms,
        /// consumers, RPC, recovery.
        .target(
            name: "AMQPClient",
            dependencies: [
                "CRabbitMQ",
                "CAMQPWriteBuffer",
                "CAMQPTLS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Shared/AMQPClient"
        ),
        /// Wire contract v1: topology names, messages, error codes.
        .target(
            name: "BookingContracts",
            dependencies: [],
            path: "Shared/BookingContracts"
        ),
        /// libphonenumber (C++, Debian libphonenumber-dev) behind a C interface.
        .target(
            name: "CPhoneNumber",
            path: "Shared/CPhoneNumber",
            linkerSettings: [.linkedLibrary("phonenumber"), .linkedLibrary("stdc++")]
        ),
        /// Swift face of CPhoneNumber: E.164 normalisation.
        .target(
            name: "PhoneNumbers",
            dependencies: ["CPhoneNumber"],
            path: "Shared/PhoneNumbers"
        ),
        /// `SettingsError` and the parsing of setting values: below
        /// everything that reads settings (no dependencies).
        .target(
            name: "ServiceSettings",
            dependencies: [],
            path: "Shared/ServiceSettings"
        ),
        /// Every broker object of the set in one place: the contract's
        /// exchanges and queues, the projector's and the pass sender's own
        /// queues, the headers of retry and failed-pass messages. Light (no
        /// server libraries), so `bookingctl` declares and inspects them
        /// without linking a service.
        .target(
            name: "BrokerObjects",
            dependencies: ["AMQPClient", "BookingContracts", "ServiceSettings"],
            path: "Shared/BrokerObjects"
        ),
        /// What every service needs at start-up: environment config,
        /// logging, metrics, health, graceful shutdown.
        .target(
            name: "ServiceSupport",
            dependencies: [
                "AMQPClient", "BookingContracts", "BrokerObjects", "ServiceSettings",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Shared/ServiceSupport"
        ),
        /// The OpenTelemetry exporter behind `ServiceRunner`'s tracing hook:
        /// swift-otel's OTLP/HTTP exporter when `OTEL_EXPORTER_OTLP_ENDPOINT`
        /// is set. Only the executables link it (swift-otel is a long build).
        .target(
            name: "TraceExport",
            dependencies: [
                "ServiceSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Shared/TraceExport"
        ),

        /// PostgreSQL plumbing the services share: `DATABASE_URL` parsing,
        /// TLS, blocking statements for a store's writer queue with a
        /// statement timeout, and a reconnecting read connection.
        .target(
            name: "PostgresSupport",
            dependencies: [
                "ServiceSettings",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            path: "Shared/PostgresSupport"
        ),

        // MARK: Services

        /// The booking handler's logic: validation rules, SQLite storage
        /// (inbox, outbox), the command pipeline and the outbox relay.
        .target(
            name: "BookingHandler",
            dependencies: [
                "AMQPClient", "BookingContracts", "BrokerObjects", "PhoneNumbers", "PostgresSupport", "ServiceSettings",
                "ServiceSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Services/BookingHandler"
        ),
        .executableTarget(
            name: "booking-handler",
            dependencies: ["AMQPClient", "BookingContracts", "BookingHandler", "ServiceSupport", "TraceExport"],
            path: "Services/booking-handler"
        ),
        /// The pass sender's logic: gateways (HTTP sendpass, spool), the
        /// delivery ledger, per-attendee retry through delay queues, and the
        /// operators' view of `passes.failed`.
        .target(
            name: "PassSender",
            dependencies: [
                "AMQPClient", "BookingContracts", "BrokerObjects", "PostgresSupport", "ServiceSettings", "ServiceSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Services/PassSender"
        ),
        .executableTarget(
            name: "pass-sender",
            dependencies: ["AMQPClient", "BookingContracts", "BrokerObjects", "PassSender", "ServiceSupport", "TraceExport"],
            path: "Services/pass-sender"
        ),
        /// The availability projector's logic: the read model of free slots,
        /// queries over AMQP and HTTP, the time-bar page, rebuild.
        .target(
            name: "AvailabilityProjector",
            dependencies: [
                "AMQPClient", "BookingContracts", "BrokerObjects", "ServiceSettings", "ServiceSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Services/AvailabilityProjector"
        ),
        .executableTarget(
            name: "availability-projector",
            dependencies: ["AMQPClient", "AvailabilityProjector", "BookingContracts", "ServiceSupport", "TraceExport"],
            path: "Services/availability-projector"
        ),
        /// The operators' console over every failed message of the set
        /// (dead-letter queues, passes.failed): list, retry, discard, archive.
        .target(
            name: "FailedMessages",
            dependencies: ["AMQPClient", "BookingContracts", "BrokerObjects"],
            path: "Services/FailedMessages"
        ),
        /// The operators' CLI: commands, availability queries, failed passes,
        /// projector rebuild, topology.
        .executableTarget(
            name: "bookingctl",
            dependencies: [
                "AMQPClient", "BookingContracts", "BrokerObjects", "FailedMessages",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/bookingctl"
        ),

        // MARK: Tests and benchmarks

        /// A private RabbitMQ for tests (start/stop a real broker node).
        .target(
            name: "TestSupport",
            dependencies: ["AMQPClient", "PostgresSupport", .product(name: "Logging", package: "swift-log"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "AMQPClientTests",
            dependencies: ["AMQPClient", "CAMQPWriteBuffer", "CRabbitMQ"],
            path: "Tests/AMQPClientTests"
        ),
        .testTarget(
            name: "BookingContractsTests",
            dependencies: ["BookingContracts", "TestSupport"],
            path: "Tests/BookingContractsTests"
        ),
        .testTarget(
            name: "PhoneNumbersTests",
            dependencies: ["PhoneNumbers"],
            path: "Tests/PhoneNumbersTests"
        ),
        .testTarget(
            name: "ServiceSupportTests",
            dependencies: ["ServiceSettings", "ServiceSupport", "AMQPClient", .product(name: "MetricsTestKit", package: "swift-metrics"),
                           .product(name: "Tracing", package: "swift-distributed-tracing")],
            path: "Tests/ServiceSupportTests"
        ),
        .testTarget(
            name: "BookingHandlerTests",
            dependencies: ["ServiceSettings", "BookingHandler", "BookingContracts", "PostgresSupport", "ServiceSupport", "TestSupport", .product(name: "GRDB", package: "GRDB.swift"),
                           .product(name: "Logging", package: "swift-log"), "AMQPClient",
                           .product(name: "MetricsTestKit", package: "swift-metrics"),
                           .product(name: "Tracing", package: "swift-distributed-tracing")],
            path: "Tests/BookingHandlerTests"
        ),
        .testTarget(
            name: "BookingIntegrationTests",
            dependencies: ["BrokerObjects", "BookingHandler", "BookingContracts", "AMQPClient", "TestSupport", "ServiceSupport",
                           .product(name: "GRDB", package: "GRDB.swift")],
            path: "Tests/BookingIntegrationTests"
        ),
        .testTarget(
            name: "PassSenderTests",
            dependencies: ["BrokerObjects", 
                "PassSender", "BookingContracts", "PostgresSupport", "TestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            path: "Tests/PassSenderTests"
        ),
        .testTarget(
            name: "PassSenderIntegrationTests",
            dependencies: ["BrokerObjects", 
                "PassSender", "BookingContracts", "AMQPClient", "PostgresSupport", "TestSupport", "ServiceSupport",
                "FailedMessages", .product(name: "Hummingbird", package: "hummingbird"),
            ],
            path: "Tests/PassSenderIntegrationTests"
        ),
        .testTarget(
            name: "AvailabilityProjectorTests",
            dependencies: ["ServiceSettings", "AvailabilityProjector", "BookingContracts", "ServiceSupport",
                           .product(name: "Logging", package: "swift-log")],
            path: "Tests/AvailabilityProjectorTests"
        ),
        .testTarget(
            name: "ProjectorIntegrationTests",
            dependencies: ["BrokerObjects", "ServiceSettings", 
                "AvailabilityProjector", "BookingHandler", "BookingContracts", "AMQPClient", "TestSupport",
                "ServiceSupport", "PostgresSupport",
            ],
            path: "Tests/ProjectorIntegrationTests"
        ),
        .testTarget(
            name: "BookingctlTests",
            dependencies: ["BookingHandler", "BookingContracts", "AMQPClient", "TestSupport", "ServiceSupport",
                           "BrokerObjects", "FailedMessages", "PassSender"],
            path: "Tests/BookingctlTests"
        ),
        .testTarget(
            name: "FailedMessagesTests",
            dependencies: ["FailedMessages", "AMQPClient", "BookingContracts", "BrokerObjects"],
            path: "Tests/FailedMessagesTests"
        ),
        .testTarget(
            name: "AMQPIntegrationTests",
            dependencies: ["BrokerObjects", "AMQPClient", "TestSupport", "BookingContracts", "ServiceSupport"],
            path: "Tests/AMQPIntegrationTests"
        ),
        .executableTarget(
            name: "Benchmarks",
            dependencies: ["BrokerObjects", 
                "AMQPClient", "AvailabilityProjector", "BookingContracts", "BookingHandler", "CRabbitMQ",
                "PassSender", "TestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            path: "Tests/Benchmarks"
        ),
    ]
)
