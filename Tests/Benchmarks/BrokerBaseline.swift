import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport

/// What the broker alone carries, measured before a benchmark's services
/// run, in the same run: RPC round trips to raw rabbitmq-c echo servers
/// with no work — through a classic queue (the transport's ceiling), a
/// durable quorum queue (the handler's queue type), and booking-shaped
/// (the quorum queue, and per request a persistent reply plus two
/// persistent events, each confirmed before the request is acked: the
/// broker's own share of a booking). Each pipelined (`inFlight`) and one
/// at a time.
struct BrokerBaseline {
    typealias Run = (rate: Double, latencies: Latencies)
    var raw: (pipelined: Run, single: Run)
    var quorum: (pipelined: Run, single: Run)
    var shaped: (pipelined: Run, single: Run)

    static func measure(_ client: AMQPConnection, url: AMQPURL, pipelined: Int, single: Int, inFlight: Int) async throws -> BrokerBaseline {
        let body = Array(#"{"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:30"}"#.utf8)
        func both(_ queue: String) -> (pipelined: Run, single: Run) {
            let p = Raw.rpc(url: url, queue: queue, count: pipelined, inFlight: inFlight, body: body)
            let s = Raw.rpc(url: url, queue: queue, count: single, inFlight: 1, body: body)
            return ((p.0, p.1), (s.0, s.1))
        }
        let rpcQueue = "bench.rpc", quorumQueue = "bench.rpc.quorum"
        try await client.declare(ContractTopology.declarations(queues: []) + [
            .queue(QueueDeclaration(rpcQueue, type: .classic)), .queue(QueueDeclaration(quorumQueue, type: .quorum)),
        ])
        let echo = Raw.EchoServer(url: url, queue: rpcQueue)
        let raw = both(rpcQueue)
        echo.stop()
        let quorumEcho = Raw.EchoServer(url: url, queue: quorumQueue)
        let quorum = both(quorumQueue)
        quorumEcho.stop()
        let shapedServer = Raw.HandlerShapedServer(url: url, queue: quorumQueue, eventsExchange: Topology.eventsExchange)
        let shaped = both(quorumQueue)
        shapedServer.stop()
        _ = try? await client.deleteQueue(quorumQueue)
        return BrokerBaseline(raw: raw, quorum: quorum, shaped: shaped)
    }
}
