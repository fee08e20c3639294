import AsyncHTTPClient
import BookingContracts
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// The sendpass gateway over HTTP (`PASS_GATEWAY_URL`): `POST <url>/sendpass`
/// through one shared AsyncHTTPClient, with a whole-request timeout.
public final class HTTPPassGateway: PassGateway {
    public let channel = PassChannel.gateway
    private let client: HTTPClient
    private let endpoint: String
    private let timeout: Duration
    private let logger: Logger

    /// - Parameters:
    ///   - baseURL: `PASS_GATEWAY_URL` (`/sendpass` is appended).
    ///   - timeout: `PASS_GATEWAY_TIMEOUT`, for connect + request + answer.
    public init(baseURL: String, timeout: Duration, logger: Logger) {
        var base = baseURL
        while base.hasSuffix("/") { base.removeLast() }
        endpoint = base + "/sendpass"
        self.timeout = timeout
        self.logger = logger
        let ms = Int64(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .milliseconds(min(ms, 5000)), read: .milliseconds(ms))
        configuration.redirectConfiguration = .disallow
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    public func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        let body: Data
        do {
            body = try ContractJSON.encode(request)
        } catch {
            return .transient(code: nil, text: "could not encode the request: \(error)")
        }
        var http = HTTPClientRequest(url: endpoint)
        http.method = .POST
        http.headers.add(name: "Content-Type", value: "application/json")
        http.headers.add(name: "Accept", value: "application/json")
        http.headers.add(name: "X-Pass-Batch", value: "\(batch.bookingId):\(batch.version):\(batch.attendeeIndexes.map(String.init).joined(separator: ","))")
        http.body = .bytes(ByteBuffer(bytes: body))
        let ms = Int64(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        do {
            let response = try await client.execute(http, timeout: .milliseconds(ms))
            let status = Int(response.status.code)
            let bytes: ByteBuffer
            do {
                bytes = try await response.body.collect(upTo: 1 << 20)
            } catch {
                // The gateway may have sent some passes; nothing tells which.
                // Retrying is the only way not to lose one (see docs/pass-sender.md).
                if (200..<300).contains(status) {
                    logger.warning("gateway answered 2xx with an unreadable body; its passes will be retried and may arrive twice",
                                   metadata: ["booking.id": .string(batch.bookingId), "http.status": "\(status)",
                                              "error": "\(error)"])
                }
                return .transient(code: nil, text: "gateway answered HTTP \(status) with an unreadable body: \(error)")
            }
            return GatewayOutcome.classify(status: status, body: Array(buffer: bytes), passCount: request.passes.count)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return .transient(code: nil, text: "gateway timed out after \(timeout)")
        } catch {
            return .transient(code: nil, text: "gateway unreachable: \(error)")
        }
    }

    public func shutdown() async {
        do {
            try await client.shutdown()
        } catch {
            logger.warning("HTTP client shutdown failed", metadata: ["error": "\(error)"])
        }
    }
}
