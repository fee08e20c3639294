import AsyncHTTPClient
import BookingContracts
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Tracing

/// The HTTP gateways through one shared AsyncHTTPClient with a
/// whole-request timeout: passes to `POST <PASS_GATEWAY_URL>/sendpass`,
/// notices to `POST <PASS_NOTIFY_URL>/notify` (contract v1.1).
public final class HTTPPassGateway: PassGateway {
    public let channel = PassChannel.gateway
    private let client: HTTPClient
    private let passEndpoint: String?
    private let notifyEndpoint: String?
    private let timeout: Duration
    private let logger: Logger

    /// - Parameters:
    ///   - baseURL: `PASS_GATEWAY_URL` (`/sendpass` is appended); nil when
    ///     only notices go over HTTP.
    ///   - notifyURL: `PASS_NOTIFY_URL` (`/notify` is appended).
    ///   - timeout: `PASS_GATEWAY_TIMEOUT`, for connect + request + answer.
    ///   - connectionsPerHost: `PASS_GATEWAY_CONCURRENCY`: as many
    ///     connections as calls may be in flight (``GatewaySlots``), so a
    ///     call never waits for a connection inside its own timeout.
    public init(baseURL: String?, notifyURL: String? = nil, timeout: Duration,
                connectionsPerHost: Int = PassSenderSettings.defaultGatewayConcurrency, logger: Logger) {
        func endpoint(_ base: String?, _ path: String) -> String? {
            guard var base else { return nil }
            while base.hasSuffix("/") { base.removeLast() }
            return base + path
        }
        passEndpoint = endpoint(baseURL, "/sendpass")
        notifyEndpoint = endpoint(notifyURL, "/notify")
        self.timeout = timeout
        self.logger = logger
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .milliseconds(min(Self.milliseconds(timeout), 5000)),
                                      read: .milliseconds(Self.milliseconds(timeout)))
        configuration.redirectConfiguration = .disallow
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(1, connectionsPerHost)
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Whether notices have an HTTP gateway (`PASS_NOTIFY_URL`).
    public var notifiesOverHTTP: Bool { notifyEndpoint != nil }

    public func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        guard let passEndpoint else { return .transient(code: nil, text: "no PASS_GATEWAY_URL") }
        return await post(passEndpoint, request, batch: batch, count: request.passes.count).outcome
    }

    public func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome {
        await notifyAnswer(request, batch: batch).outcome
    }

    /// `POST /notify` with the HTTP status besides the outcome, so the
    /// caller can tell "this gateway has no notices" (404/405) apart.
    public func notifyAnswer(_ request: NotifyRequest, batch: PassBatch) async -> (status: Int?, outcome: GatewayOutcome) {
        guard let notifyEndpoint else { return (nil, .transient(code: nil, text: "no PASS_NOTIFY_URL")) }
        return await post(notifyEndpoint, request, batch: batch, count: request.recipients.count)
    }

    /// One gateway call in a span of its own ("gateway /sendpass",
    /// "gateway /notify"), the HTTP client's span under it; the request
    /// carries the trace in its `traceparent` header (AsyncHTTPClient
    /// injects it with the process's tracer).
    private func post(_ endpoint: String, _ request: some Encodable, batch: PassBatch,
                      count: Int) async -> (status: Int?, outcome: GatewayOutcome) {
        let path = endpoint.hasSuffix("/notify") ? "/notify" : "/sendpass"
        return await withSpan("gateway \(path)", ofKind: .client) { span in
            let answer = await call(endpoint, request, batch: batch, count: count)
            if span.isRecording {
                var attributes = SpanAttributes()
                attributes["booking.id"] = batch.bookingId
                attributes["booking.version"] = batch.version
                attributes["pass.kind"] = batch.kind.rawValue
                attributes["pass.count"] = count
                if let status = answer.status { attributes["http.response.status_code"] = status }
                attributes["pass.outcome"] = answer.outcome.label
                span.attributes = attributes
                if answer.outcome != .success { span.setStatus(SpanStatus(code: .error)) }
            }
            return answer
        }
    }

    private func call(_ endpoint: String, _ request: some Encodable, batch: PassBatch,
                      count: Int) async -> (status: Int?, outcome: GatewayOutcome) {
        let body: [UInt8]
        if let pass = request as? SendPassRequest {
            body = pass.jsonBytes  // the per-booking call: written directly (MessageJSON.swift)
        } else {
            do {
                body = [UInt8](try ContractJSON.encode(request))
            } catch {
                return (nil, .transient(code: nil, text: "could not encode the request: \(error)"))
            }
        }
        var http = HTTPClientRequest(url: endpoint)
        http.method = .POST
        http.headers.add(name: "Content-Type", value: "application/json")
        http.headers.add(name: "Accept", value: "application/json")
        http.headers.add(name: "X-Pass-Batch", value: "\(batch.bookingId):\(batch.version):\(batch.attendeeIndexes.map(String.init).joined(separator: ","))")
        if batch.kind != .pass { http.headers.add(name: "X-Notice-Kind", value: batch.kind.rawValue) }
        http.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(http, timeout: .milliseconds(Self.milliseconds(timeout)))
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
                return (status, .transient(code: nil, text: "gateway answered HTTP \(status) with an unreadable body: \(error)"))
            }
            return (status, GatewayOutcome.classify(status: status, body: Array(buffer: bytes), passCount: count))
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return (nil, .transient(code: nil, text: "gateway timed out after \(timeout)"))
        } catch {
            return (nil, .transient(code: nil, text: "gateway unreachable: \(error)"))
        }
    }

    private static func milliseconds(_ d: Duration) -> Int64 {
        Int64(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
    }

    public func shutdown() async {
        do {
            try await client.shutdown()
        } catch {
            logger.warning("HTTP client shutdown failed", metadata: ["error": "\(error)"])
        }
    }
}

/// Routes passes and notices to their gateways: passes to `passes`
/// (HTTP `/sendpass` or the spool); notices to `/notify` when
/// `PASS_NOTIFY_URL` is set and that gateway knows notices, else — unset,
/// or it answered 404/405 — to the spool, counted in
/// `notices_spooled_total{reason}`.
public struct NoticeRoutingGateway: PassGateway {
    public let passes: any PassGateway
    public let http: HTTPPassGateway?
    public let spool: SpoolPassGateway
    let metrics: PassSenderMetrics

    public init(passes: any PassGateway, http: HTTPPassGateway?, spool: SpoolPassGateway) {
        self.init(passes: passes, http: http, spool: spool, metrics: .shared)
    }

    /// A router counting in `metrics` (tests: a table on a test factory).
    init(passes: any PassGateway, http: HTTPPassGateway?, spool: SpoolPassGateway, metrics: PassSenderMetrics) {
        self.passes = passes
        self.http = http
        self.spool = spool
        self.metrics = metrics
    }

    public var channel: PassChannel { passes.channel }

    public func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        await passes.send(request, batch: batch)
    }

    public func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome {
        guard let http, http.notifiesOverHTTP else {
            metrics.noticesSpooled.increment("unset", by: request.recipients.count)
            return await spool.notify(request, batch: batch)
        }
        let (status, outcome) = await http.notifyAnswer(request, batch: batch)
        if status == 404 || status == 405 {
            metrics.noticesSpooled.increment("unsupported", by: request.recipients.count)
            return await spool.notify(request, batch: batch)
        }
        return outcome
    }

    public func shutdown() async {
        await passes.shutdown()
        if let http, http !== (passes as? HTTPPassGateway) { await http.shutdown() }
    }
}
