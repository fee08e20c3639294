import Foundation
import Hummingbird
import Logging
import Metrics
import Prometheus
import ServiceLifecycle

/// One check behind `/readyz` (broker connected, consumer running,
/// database open, …).
public struct ReadinessCheck: Sendable {
    public let name: String
    public let check: @Sendable () async -> Bool

    public init(_ name: String, _ check: @escaping @Sendable () async -> Bool) {
        self.name = name
        self.check = check
    }
}

/// The operations endpoints of a service on `HTTP_BIND`:`HTTP_PORT`:
/// - `GET /healthz` — 200 `ok` while the process serves requests;
/// - `GET /readyz` — 200 when every ``ReadinessCheck`` passes, else 503,
///   with a JSON body naming each check;
/// - `GET /metrics` — Prometheus text format.
/// `configure` may add service-specific routes (the projector's API).
public struct OpsServer: Service {
    private let application: Application<RouterResponder<BasicRequestContext>>

    /// - Parameter host: the address to listen on (`HTTP_BIND`); loopback
    ///   by default, so nothing is reachable from other hosts by accident.
    public init(host: String = CommonSettings.defaultBindAddress, port: Int, checks: [ReadinessCheck], logger: Logger,
                configure: (Router<BasicRequestContext>) -> Void = { _ in }) {
        let router = Router()
        router.get("healthz") { _, _ in "ok\n" }
        router.get("readyz") { _, _ -> Response in
            var results: [String: Bool] = [:]
            for check in checks { results[check.name] = await check.check() }
            let ready = results.values.allSatisfy { $0 }
            let body = (try? JSONSerialization.data(withJSONObject: ["ready": ready, "checks": results], options: [.sortedKeys])) ?? Data()
            return Response(status: ready ? .ok : .serviceUnavailable,
                            headers: [.contentType: "application/json"],
                            body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        router.get("metrics") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                     body: .init(byteBuffer: ByteBuffer(bytes: Observability.registry.emitToBuffer())))
        }
        configure(router)
        application = Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            logger: logger)
    }

    public func run() async throws {
        try await application.run()
    }
}
