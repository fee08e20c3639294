import Foundation
import Hummingbird
import Logging
import TestSupport

/// One span as an OTLP/HTTP export carried it.
struct ExportedSpan: Sendable, CustomStringConvertible {
    var service: String
    var traceID: String
    var spanID: String
    /// "" for a root span.
    var parentSpanID: String
    var name: String
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    var kind: Int
    var attributes: [String: String]

    var description: String {
        "\(service) \(name) [\(kind)] \(traceID)/\(spanID) ← \(parentSpanID.isEmpty ? "-" : parentSpanID)"
    }
}

/// A stand-in OpenTelemetry collector: accepts OTLP/HTTP protobuf exports
/// at `POST /v1/traces` and decodes the spans (``OTLPDecoder``).
final class OTLPReceiver: Sendable {
    /// Every span received, in arrival order.
    let spans: Observed<[ExportedSpan]>
    /// Requests it could not decode (a test fails on any).
    let undecodable: Observed<[String]>
    let url: String
    private let task: Task<Void, any Error>

    private init(url: String, spans: Observed<[ExportedSpan]>, undecodable: Observed<[String]>, task: Task<Void, any Error>) {
        self.url = url
        self.spans = spans
        self.undecodable = undecodable
        self.task = task
    }

    static func start() async throws -> OTLPReceiver {
        let spans = Observed<[ExportedSpan]>([])
        let undecodable = Observed<[String]>([])
        let router = Router()
        router.post("v1/traces") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 32 << 20)
            let type = request.headers[.contentType] ?? ""
            do {
                guard type.hasPrefix("application/x-protobuf") else { throw OTLPDecoder.Failure("content type \(type)") }
                let decoded = try OTLPDecoder.exportRequest(body.getBytes(at: body.readerIndex, length: body.readableBytes) ?? [])
                spans.update { $0 += decoded }
            } catch {
                undecodable.update { $0.append("\(error)") }
                return Response(status: .badRequest)
            }
            // An empty ExportTraceServiceResponse.
            return Response(status: .ok, headers: [.contentType: "application/x-protobuf"], body: .init(byteBuffer: ByteBuffer()))
        }
        let port = Observed<Int?>(nil)
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in port.update { $0 = channel.localAddress?.port } },
                              logger: testLogger("otlp-receiver"))
        let task = Task { try await app.runService(gracefulShutdownSignals: []) }
        try await port.wait("OTLP receiver listening") { $0 != nil }
        return OTLPReceiver(url: "http://127.0.0.1:\(port.current!)", spans: spans, undecodable: undecodable, task: task)
    }

    func stop() async {
        task.cancel()
        _ = await task.result
    }
}

/// Just enough of the protobuf wire format for OTLP's trace export
/// (`opentelemetry/proto/collector/trace/v1`): resource spans → resource
/// attributes (`service.name`) and scope spans → spans with ids, parent,
/// name, kind and attributes (string, bool, int and double values).
enum OTLPDecoder {
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// One field: its number and its value (varint or fixed as an integer,
    /// length-delimited as bytes).
    enum Value {
        case integer(UInt64)
        case bytes(ArraySlice<UInt8>)
    }

    static func fields(_ data: ArraySlice<UInt8>) throws -> [(Int, Value)] {
        var fields: [(Int, Value)] = []
        var i = data.startIndex
        func varint() throws -> UInt64 {
            var value: UInt64 = 0, shift: UInt64 = 0
            while true {
                guard i < data.endIndex, shift < 64 else { throw Failure("truncated varint") }
                let byte = data[i]
                i += 1
                value |= UInt64(byte & 0x7f) << shift
                if byte & 0x80 == 0 { return value }
                shift += 7
            }
        }
        func fixed(_ count: Int) throws -> UInt64 {
            guard data.endIndex - i >= count else { throw Failure("truncated fixed\(count * 8)") }
            var value: UInt64 = 0
            for k in 0..<count { value |= UInt64(data[i + k]) << (8 * UInt64(k)) }
            i += count
            return value
        }
        while i < data.endIndex {
            let key = try varint()
            let number = Int(key >> 3)
            switch key & 7 {
            case 0: fields.append((number, .integer(try varint())))
            case 1: fields.append((number, .integer(try fixed(8))))
            case 5: fields.append((number, .integer(try fixed(4))))
            case 2:
                let length = Int(try varint())
                guard length >= 0, data.endIndex - i >= length else { throw Failure("truncated field \(number)") }
                fields.append((number, .bytes(data[i..<(i + length)])))
                i += length
            default: throw Failure("wire type \(key & 7)")
            }
        }
        return fields
    }

    static func exportRequest(_ data: [UInt8]) throws -> [ExportedSpan] {
        var spans: [ExportedSpan] = []
        for case (1, .bytes(let resourceSpans)) in try fields(data[...]) {
            var service = ""
            var scopes: [ArraySlice<UInt8>] = []
            for field in try fields(resourceSpans) {
                switch field {
                case (1, .bytes(let resource)):
                    for case (1, .bytes(let attribute)) in try fields(resource) {
                        let (key, value) = try keyValue(attribute)
                        if key == "service.name" { service = value }
                    }
                case (2, .bytes(let scope)): scopes.append(scope)
                default: break
                }
            }
            for scope in scopes {
                for case (2, .bytes(let span)) in try fields(scope) { spans.append(try self.span(span, service: service)) }
            }
        }
        return spans
    }

    static func span(_ data: ArraySlice<UInt8>, service: String) throws -> ExportedSpan {
        var span = ExportedSpan(service: service, traceID: "", spanID: "", parentSpanID: "", name: "", kind: 0, attributes: [:])
        for field in try fields(data) {
            switch field {
            case (1, .bytes(let id)): span.traceID = hex(id)
            case (2, .bytes(let id)): span.spanID = hex(id)
            case (4, .bytes(let id)): span.parentSpanID = hex(id)
            case (5, .bytes(let name)): span.name = String(decoding: name, as: UTF8.self)
            case (6, .integer(let kind)): span.kind = Int(kind)
            case (9, .bytes(let attribute)):
                let (key, value) = try keyValue(attribute)
                span.attributes[key] = value
            default: break
            }
        }
        return span
    }

    /// A `KeyValue`, its value as text.
    static func keyValue(_ data: ArraySlice<UInt8>) throws -> (String, String) {
        var key = "", value = ""
        for field in try fields(data) {
            switch field {
            case (1, .bytes(let text)): key = String(decoding: text, as: UTF8.self)
            case (2, .bytes(let any)):
                for inner in try fields(any) {
                    switch inner {
                    case (1, .bytes(let text)): value = String(decoding: text, as: UTF8.self)
                    case (2, .integer(let flag)): value = flag != 0 ? "true" : "false"
                    case (3, .integer(let number)): value = String(Int64(bitPattern: number))
                    case (4, .integer(let bits)): value = String(Double(bitPattern: bits))
                    default: break
                    }
                }
            default: break
            }
        }
        return (key, value)
    }

    static func hex(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}
