import BookingContracts
import Foundation
import Hummingbird
import Logging
import Synchronization
import TestSupport

/// A local sendpass + `/notify` gateway (Hummingbird, in the benchmark's
/// own process) that always succeeds: the pass sender measured without
/// the spool's files, whose cost on this machine's disk is more the disk's
/// than the pass sender's (docs/performance.md).
struct LocalGateway {
    /// `http://127.0.0.1:<port>`, for `PASS_GATEWAY_URL` / `PASS_NOTIFY_URL`.
    let url: String
    private let server: Task<Void, any Error>
    private let received: Counter

    /// Passes received on `/sendpass` so far (each answered as sent).
    var passesReceived: Int { received.value.load(ordering: .relaxed) }

    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    static func start(logger: Logger) async throws -> LocalGateway {
        let router = Router()
        let received = Counter()
        for path in ["sendpass", "notify"] {
            router.post(RouterPath(stringLiteral: path)) { request, _ -> Response in
                let body = try await request.body.collect(upTo: 1 << 24)
                if path == "sendpass", let sent = try? ContractJSON.decode(SendPassRequest.self, from: Data(buffer: body)) {
                    received.value.add(sent.passes.count, ordering: .relaxed)
                }
                return Response(status: .ok, headers: [.contentType: "application/json"],
                                body: .init(byteBuffer: ByteBuffer(string: #"{"success":true}"#)))
            }
        }
        let port = try freeTCPPort()
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), logger: logger)
        let server = Task { try await app.runService(gracefulShutdownSignals: []) }
        try await Task.sleep(for: .milliseconds(300))  // let the listener bind (benchmark only)
        return LocalGateway(url: "http://127.0.0.1:\(port)", server: server, received: received)
    }

    func stop() { server.cancel() }
}
