import AMQPClient
import BookingContracts
import BrokerObjects
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
    /// CPU µs per call of the booking-shaped echo's pipelined run: the
    /// broker's (nil without its pid: a broker this run did not start) and
    /// this process's (the load generator and the echo server's threads).
    var shapedPipelinedCPU: (broker: Double?, echo: Double?) = (nil, nil)
    /// The same for its one-at-a-time run.
    var shapedSingleCPU: (broker: Double?, echo: Double?) = (nil, nil)
    /// The booking-shaped echo again with its events consumed: two durable
    /// quorum queues bound to `booking.events` with the pass sender's and
    /// the projector's binding keys (so one takes `booking.confirmed`, the
    /// other both events), each drained by a consumer that only acks
    /// (``Raw/DrainConsumer``). Without them the echo's events route to no
    /// queue and the broker confirms them without a write; with them it
    /// writes, delivers and settles them as it does for the set (the set's
    /// public copies, `pass.delivered` and `availability.changed` are not
    /// in it, nor the service queues' delivery limit and dead-lettering).
    /// `cpu` is the pipelined run's, until every event was acked; `singleCPU`
    /// the one-at-a-time run's. Nil unless asked for.
    var consumed: (pipelined: Run, single: Run, cpu: (broker: Double?, echo: Double?), singleCPU: (broker: Double?, echo: Double?))?
    /// The echo with its events consumed again, in an open loop at each of
    /// the set's paced rates (request i due i / rate seconds after the
    /// start): what one call costs when the machine is not saturated, the
    /// baseline of a paced phase. Keyed by bookings/s; empty unless asked for.
    var consumedPaced: [Int: Run] = [:]

    static func measure(_ client: AMQPConnection, url: AMQPURL, pipelined: Int, single: Int, inFlight: Int,
                        brokerPID: Int32? = nil, withConsumedEvents: Bool = false,
                        pacedRates: [Int] = [], pacedCount: Int = 0) async throws -> BrokerBaseline {
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
        defer { shapedServer.stop() }
        let before = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, echo: CPUTime.of(pid: getpid()))
        let shapedPipelined = Raw.rpc(url: url, queue: quorumQueue, count: pipelined, inFlight: inFlight, body: body)
        let after = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, echo: CPUTime.of(pid: getpid()))
        let shapedSingle = Raw.rpc(url: url, queue: quorumQueue, count: single, inFlight: 1, body: body)
        let last = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, echo: CPUTime.of(pid: getpid()))
        var consumed: (pipelined: Run, single: Run, cpu: (broker: Double?, echo: Double?),
                       singleCPU: (broker: Double?, echo: Double?))?
        var pacedRuns: [Int: Run] = [:]
        if withConsumedEvents {
            // Bound as the set's queues are: the pass sender's takes
            // `booking.confirmed`, the projector's both events.
            let eventQueues = [("bench.events.as-pass-sender", Topology.passSenderEventsBindingKeys),
                               ("bench.events.as-projector", Topology.projectorEventsBindingKeys)]
            for (q, _) in eventQueues { _ = try? await client.deleteQueue(q) }  // a run that was killed left it
            try await client.declare(eventQueues.flatMap { q, keys in
                [.queue(QueueDeclaration(q, type: .quorum))]
                    + keys.map { .binding(QueueBinding(queue: q, exchange: Topology.eventsExchange, routingKey: $0)) }
            })
            let drains = eventQueues.map { Raw.DrainConsumer(url: url, queue: $0.0) }
            let from = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, echo: CPUTime.of(pid: getpid()))
            let p = Raw.rpc(url: url, queue: quorumQueue, count: pipelined, inFlight: inFlight, body: body)
            // Its events still on their way to the consumers belong to the
            // run, as the set's drain belongs to its phase: one per call to
            // the pass sender's queue, two to the projector's.
            let drained = drains[0].waitUntilAcked(pipelined) && drains[1].waitUntilAcked(2 * pipelined)
            let to = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, echo: CPUTime.of(pid: getpid()))
            let s = Raw.rpc(url: url, queue: quorumQueue, count: single, inFlight: 1, body: body)
            let drainedSingle = drains[0].waitUntilAcked(pipelined + single) && drains[1].waitUntilAcked(2 * (pipelined + single))
            let last = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, echo: CPUTime.of(pid: getpid()))
            var calls = pipelined + single, drainedPaced = true
            for rate in pacedRates where pacedCount > 0 {
                let run = Raw.rpc(url: url, exchange: "", routingKey: quorumQueue, count: pacedCount, inFlight: 1,
                                  rate: Double(rate), body: { _ in body })
                pacedRuns[rate] = (run.0, run.1)
                calls += pacedCount
                // Drained before the next rate, so each starts on a quiet broker as the set's paced phases do.
                drainedPaced = drainedPaced && drains[0].waitUntilAcked(calls) && drains[1].waitUntilAcked(2 * calls)
            }
            if !drained || !drainedSingle || !drainedPaced {
                print("warning: the echo's event consumers did not get every event within 30 s")
            }
            for d in drains { d.stop() }
            for (q, _) in eventQueues { _ = try? await client.deleteQueue(q) }
            consumed = ((p.0, p.1), (s.0, s.1),
                        (CPUTime.micros(from: from.broker, to: to.broker, per: pipelined),
                         CPUTime.micros(from: from.echo, to: to.echo, per: pipelined)),
                        (CPUTime.micros(from: to.broker, to: last.broker, per: single),
                         CPUTime.micros(from: to.echo, to: last.echo, per: single)))
        }
        _ = try? await client.deleteQueue(quorumQueue)
        var baseline = BrokerBaseline(raw: raw, quorum: quorum,
                                      shaped: ((shapedPipelined.0, shapedPipelined.1), (shapedSingle.0, shapedSingle.1)))
        baseline.shapedPipelinedCPU = (CPUTime.micros(from: before.broker, to: after.broker, per: pipelined),
                                       CPUTime.micros(from: before.echo, to: after.echo, per: pipelined))
        baseline.shapedSingleCPU = (CPUTime.micros(from: after.broker, to: last.broker, per: single),
                                    CPUTime.micros(from: after.echo, to: last.echo, per: single))
        baseline.consumed = consumed
        baseline.consumedPaced = pacedRuns
        return baseline
    }
}
