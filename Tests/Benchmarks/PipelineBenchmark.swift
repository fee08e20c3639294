import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import Logging
import ServiceSupport
import TestSupport

/// The whole set as deployed — `booking-handler`, `pass-sender` (spool
/// gateway, or with `--pass-gateway http` a local HTTP gateway) and
/// `availability-projector` as release processes on one broker — booking `booking.create` with one attendee, 64 in flight and
/// one at a time. Per phase: commands/s and reply p50/p99, how long the
/// downstream services took to catch up (every pass spooled, the
/// projector's queue empty), and each process's CPU per booking (user and
/// system, from `/proc/<pid>/stat`, over the phase and its drain) and
/// resident memory; beside the raw RPC echo and the booking-shaped echo
/// (quorum queue, persistent reply + two persistent events, confirmed
/// before the ack) measured in the same run.
struct PipelineBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline",
        abstract: "All three services as processes: booking rate, latency, CPU per booking of each process, vs the broker alone.")

    @Option(help: "Commands for the pipelined measurement.")
    var pipelined = 10_000
    @Option(help: "Commands for the one-at-a-time measurement.")
    var single = 1_000
    @Option(help: "Requests in flight for the pipelined measurements.")
    var inFlight = 64
    @Option(help: "Rooms to spread the bookings over.")
    var rooms = 200
    @Flag(help: "Book room after room (bookings in flight together share no room-day) instead of filling one room's day at a time, where events in flight together often change the same room-day.")
    var spread = false
    @Option(help: "A paced phase at this many bookings/s (open loop; repeat for several): the projector's lag at a rate the set sustains.")
    var rate: [Int] = []
    @Option(help: "Commands per paced phase.")
    var paced = 2_000
    @Flag(help: "Search the highest paced rate the set sustains (see --probe-seconds) and report the projector's lag there.")
    var findRate = false
    @Option(help: "With --find-rate: the first rate tried (bookings/s); it doubles until the set falls behind (twice at one rate), then halves the gap three times.")
    var findFrom = 50
    @Option(help: "With --find-rate: seconds of booking per probe (at least 300 bookings).")
    var probeSeconds = 6
    @Option(help: "With --find-rate: the reply p99 (ms) above which a probe counts as fallen behind: requests queued inside the set.")
    var maxReplyP99 = 50.0
    @Option(help: "The pass sender's gateway: spool (files in its DATA_DIR, as the README runs it) or http (a local gateway in this process that always succeeds; its CPU is this process's, not the pass sender's).")
    var passGateway = "spool"
    @Flag(inversion: .prefixedNo, help: "Watch each booking's booking.created through a classic and a quorum queue of this benchmark's own (the share of the projector's lag before the projector). Off, the broker's CPU per booking leaves those out; it still carries each availability.changed to this benchmark's own classic queue (no service consumes booking.public), for the projector's lag.")
    var watchCreated = true
    @Flag(help: "Book the pipelined and one-at-a-time phases through this package's Swift client instead of a raw rabbitmq-c loop (the echo baselines and paced phases always use the raw loop).")
    var swiftClient = false

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        print("broker: \(broker.url)")
        let client = try await broker.client("bench-client")
        let brokerPID = broker.node?.pid
        let baseline = try await BrokerBaseline.measure(client, url: broker.url, pipelined: pipelined, single: single,
                                                        inFlight: inFlight, brokerPID: brokerPID, withConsumedEvents: true,
                                                        pacedRates: rate, pacedCount: paced)
        let rawPipelined = baseline.raw.pipelined, rawSingle = baseline.raw.single
        let shapedPipelined = baseline.shaped.pipelined, shapedSingle = baseline.shaped.single

        // The set.
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-pipeline-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        defer { try? FileManager.default.removeItem(at: work) }
        let directories = ["handler", "passes", "projector"].map { work.appendingPathComponent($0).path }
        for d in directories { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        let roomsFile = work.appendingPathComponent("rooms.json")
        try ContractJSON.encode((0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }).write(to: roomsFile)
        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning
        var passEnvironment = ["DATA_DIR": directories[1]]
        var gateway: LocalGateway?
        switch passGateway {
        case "spool": break
        case "http":
            let started = try await LocalGateway.start(logger: logger)
            gateway = started
            passEnvironment["PASS_GATEWAY_URL"] = started.url
            passEnvironment["PASS_NOTIFY_URL"] = started.url
        default: throw ValidationError("--pass-gateway: spool or http, not '\(passGateway)'")
        }
        defer { gateway?.stop() }
        print("pass sender's gateway: \(passGateway)")
        let common = ["AMQP_URL": broker.url.urlStringWithCredentials, "LOG_LEVEL": "warning", "HTTP_PORT": "0"]
        // The handler's /metrics: its stage timers give the breakdown of a command.
        let handlerHTTP = try freeTCPPort()
        let stages = StageTimes(metricsURL: "http://127.0.0.1:\(handlerHTTP)/metrics")
        // The projector's: how its events were settled (applied, stale:
        // a booking confirmed at once has two events of one state).
        let projectorHTTP = try freeTCPPort()
        let projectorEvents = MetricCounters(metricsURL: "http://127.0.0.1:\(projectorHTTP)/metrics",
                                             family: "projector_events_total", label: "outcome")
        // The services start from empty queues: on a broker that outlives a
        // run, the echo above has just published its dummy events into the
        // pass sender's and the projector's queues, and a benchmark that ran
        // handlers alone may have left real bookings of the same rooms and
        // slots there (this set's lag wait then never ended).
        for queue in [Topology.handlerCommandsQueue, Topology.passSenderEventsQueue, Topology.projectorEventsQueue] {
            if let stale = try? await client.purgeQueue(queue), stale > 0 {
                print("purged \(stale) stale messages from \(queue)")
            }
        }
        let services: [(name: String, queue: String, process: Process)] = try [
            ("booking-handler", Topology.handlerCommandsQueue,
             launch("booking-handler", common.merging(["DATA_DIR": directories[0], "ROOMS_FILE": roomsFile.path,
                                                       "HTTP_PORT": "\(handlerHTTP)"]) { $1 })),
            ("pass-sender", Topology.passSenderEventsQueue, launch("pass-sender", common.merging(passEnvironment) { $1 })),
            ("availability-projector", Topology.projectorEventsQueue,
             launch("availability-projector", common.merging(["DATA_DIR": directories[2],
                                                             "HTTP_PORT": "\(projectorHTTP)"]) { $1 })),
        ]
        defer { for s in services where s.process.isRunning { s.process.terminate(); s.process.waitUntilExit() } }
        for s in services {
            while (try? await client.queueInfo(s.queue).consumerCount) != 1 { try await Task.sleep(for: .milliseconds(100)) }
        }
        // Projector lag: from a booking's reply to the first
        // `availability.changed` of its room and date that shows its slot taken.
        let lag = ProjectorLag()
        let changes = "bench.availability.changed"
        try await client.declare([.queue(QueueDeclaration(changes, type: .classic)),
                                  .binding(QueueBinding(queue: changes, exchange: Topology.publicExchange,
                                                        routingKey: EventType.availabilityChanged.rawValue))])
        let changeConsumer = try await client.consume(queue: changes, prefetch: 500)
        let watcher = Task {
            // Ends when the client closes.
            for try await delivery in changeConsumer {
                let arrived = monotonicNow()
                if let change = try? ContractJSON.decode(AvailabilityChanged.self, from: delivery.body) {
                    lag.changed(change, at: arrived)
                }
                try? await delivery.ack()
            }
        }
        defer { watcher.cancel() }
        // Where that lag goes: from the reply to the booking's
        // `booking.created` reaching this process, through a classic queue
        // (the handler's commit → the relay's publish → the broker's
        // routing → here) and through a quorum queue like the projector's
        // own (adding the queue's durable write before delivery). The rest
        // of the projector lag is the projector's (its transaction, its
        // publish) and the `availability.changed`'s trip here.
        let createdQueues: [(name: String, type: QueueDeclaration.QueueType, lag: EventLag)] = watchCreated ? [
            ("bench.booking.created.classic", .classic, EventLag()),
            ("bench.booking.created.quorum", .quorum, EventLag()),
        ] : []
        var createdWatchers: [Task<Void, any Error>] = []
        for q in createdQueues {
            _ = try? await client.deleteQueue(q.name)  // a run that was killed left it
            try await client.declare([.queue(QueueDeclaration(q.name, type: q.type)),
                                      .binding(QueueBinding(queue: q.name, exchange: Topology.eventsExchange,
                                                            routingKey: EventType.bookingCreated.rawValue))])
            let consumer = try await client.consume(queue: q.name, prefetch: 500)
            createdWatchers.append(Task {
                for try await delivery in consumer {
                    let arrived = monotonicNow()
                    if let event = try? ContractJSON.decode(BookingEvent.self, from: delivery.body) {
                        q.lag.event(event.booking.id, at: arrived)
                    }
                    try? await delivery.ack()
                }
            })
        }
        defer { for w in createdWatchers { w.cancel() } }
        let spool = URL(fileURLWithPath: directories[1]).appendingPathComponent("outbox")
        let slots = SlotSequence(rooms: rooms, spread: spread)
        var booked = 0

        /// One phase: book `count`, then wait until every pass is spooled
        /// (or received by the local gateway) and the projector's queue is empty; CPU of each process over both.
        func phase(_ name: String, count: Int, inFlight: Int, rate: Double? = nil) async throws -> PhaseResult {
            let before = services.map { CPUTime.of(pid: $0.process.processIdentifier) }
            let othersBefore = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, own: CPUTime.of(pid: getpid()))
            let stagesBefore = try await stages.read()
            let eventsBefore = try await projectorEvents.read()
            let started = monotonicNow()
            lag.startPhase()
            for q in createdQueues { q.lag.startPhase() }
            let onReply: @Sendable (CommandReply, UInt64) -> Void = { reply, at in
                if let booking = reply.bookingValue {
                    lag.replied(booking, at: at)
                    for q in createdQueues { q.lag.replied(booking.id, at: at) }
                }
            }
            let result = swiftClient && rate == nil
                ? try await BookingBenchmark.book(client, slots: slots, count: count, inFlight: inFlight, onReply: onReply)
                : await Self.rawBook(url: broker.url, slots: slots, count: count, inFlight: inFlight, rate: rate, onReply: onReply)
            let replied = monotonicNow()
            let stagesAfter = try await stages.read()
            booked += count - result.failures
            // A set that stops making progress fails the run with what it
            // still waits for, instead of hanging it.
            var lastProgress = (state: [Int](), at: monotonicNow())
            while true {
                let passes = gateway?.passesReceived
                    ?? (try? FileManager.default.contentsOfDirectory(atPath: spool.path))?.filter { $0.hasSuffix(".eml") }.count ?? 0
                let projectorBacklog = try await client.queueInfo(Topology.projectorEventsQueue).messageCount
                let passBacklog = try await client.queueInfo(Topology.passSenderEventsQueue).messageCount
                let waiting = lag.waiting
                if passes >= booked && projectorBacklog == 0 && passBacklog == 0 && waiting == 0
                    && createdQueues.allSatisfy({ $0.lag.waiting == 0 }) { break }
                let state = [passes, projectorBacklog, passBacklog, waiting]
                if state != lastProgress.state {
                    lastProgress = (state, monotonicNow())
                } else if monotonicNow() - lastProgress.at > 60_000_000_000 {
                    throw ValidationError("\(name): no progress for 60 s: \(passes) of \(booked) passes delivered, "
                        + "\(passBacklog) events queued for the pass sender, \(projectorBacklog) for the projector, "
                        + "\(waiting) replied bookings without their availability.changed")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            let drained = monotonicNow()
            let eventsAfter = try await projectorEvents.read()
            let after = services.map { CPUTime.of(pid: $0.process.processIdentifier) }
            let othersAfter = (broker: brokerPID.flatMap { CPUTime.of(pid: $0) }, own: CPUTime.of(pid: getpid()))
            let cpu = zip(before, after).map { b, a -> (user: Double, system: Double) in
                guard let b, let a else { return (.nan, .nan) }
                return ((a.user - b.user) / Double(count) * 1e6, (a.system - b.system) / Double(count) * 1e6)
            }
            return PhaseResult(name: name, result: result, replySeconds: Double(replied - started) / 1e9,
                               drainSeconds: Double(drained - replied) / 1e9, cpuMicros: cpu,
                               otherCPUMicros: (CPUTime.micros(from: othersBefore.broker, to: othersAfter.broker, per: count),
                                                CPUTime.micros(from: othersBefore.own, to: othersAfter.own, per: count)),
                               projectorLag: lag.phaseLatencies,
                               eventLag: watchCreated ? (createdQueues[0].lag.phaseLatencies, createdQueues[1].lag.phaseLatencies)
                                                      : (Latencies(), Latencies()),
                               stageMicros: StageTimes.meanMicros(from: stagesBefore, to: stagesAfter),
                               projectorEvents: eventsAfter.reduce(into: [:]) { $0[$1.key] = Int($1.value - (eventsBefore[$1.key] ?? 0)) },
                               pacedRate: rate.map { Int($0) })
        }
        let pipelinedResult = try await phase("\(inFlight) in flight", count: pipelined, inFlight: inFlight)
        let singleResult = try await phase("one at a time", count: single, inFlight: 1)
        var pacedResults: [PhaseResult] = []
        for r in rate { pacedResults.append(try await phase("paced at \(r)/s", count: paced, inFlight: 0, rate: Double(r))) }
        var sustained: (rate: Int, phase: PhaseResult)?
        if findRate {
            print("")
            let search = SustainedRate(from: findFrom, maxReplyP99: maxReplyP99)
            print("searching the highest rate the set sustains (\(search.criterion)):")
            while let r = search.next() {
                let p = try await phase("paced at \(r)/s", count: max(300, r * probeSeconds), inFlight: 0, rate: Double(r))
                let kept = search.keptUp(p, rate: r)
                search.record(r, keptUp: kept)
                if kept && r >= (sustained?.rate ?? 0) { sustained = (r, p) }
                print(String(format: "  %5d/s: achieved %.0f/s, %d failed, reply p99 %.2f ms, downstream caught up %.2f s after"
                             + " the last reply, projector lag p50 %.2f / p99 %.2f ms: %@",
                             r, p.result.rate, p.result.failures, p.result.latencies.percentile(99), p.drainSeconds,
                             p.projectorLag.percentile(50), p.projectorLag.percentile(99), kept ? "kept up" : "fell behind"))
            }
            if let sustained { pacedResults.append(sustained.phase) }
        }
        let memory = services.map { currentRSSMiB(pid: $0.process.processIdentifier) ?? .nan }
        for s in services {
            s.process.terminate()
            s.process.waitUntilExit()
        }
        for w in createdWatchers { w.cancel() }
        for q in createdQueues { _ = try? await client.deleteQueue(q.name) }
        await client.close()

        print("")
        for p in [pipelinedResult, singleResult] + pacedResults {
            let shapedRate = p.name == "one at a time" ? shapedSingle : shapedPipelined
            let raw = p.name == "one at a time" ? rawSingle : rawPipelined
            print(String(format: "%@: %.0f bookings/s (p50 %.2f ms, p99 %.2f ms), %d failed; downstream caught up %.2f s after the last reply",
                         p.name, p.result.rate, p.result.latencies.percentile(50), p.result.latencies.percentile(99),
                         p.result.failures, p.drainSeconds))
            if !p.name.hasPrefix("paced") { print(String(format: "  vs booking-shaped echo %.0f calls/s (p50 %.2f ms): rate ratio %.2f, p50 ratio %.2f;"
                         + " vs raw echo %.0f calls/s (p50 %.2f ms)",
                         shapedRate.0, shapedRate.1.percentile(50), p.result.rate / shapedRate.0,
                         p.result.latencies.percentile(50) / shapedRate.1.percentile(50), raw.0, raw.1.percentile(50))) }
            if !p.name.hasPrefix("paced"), let consumed = baseline.consumed {
                let echo = p.name == "one at a time" ? consumed.single : consumed.pipelined
                print(String(format: "  vs the same echo with its events consumed (quorum queues bound as the set's) %.0f calls/s (p50 %.2f ms):"
                             + " rate ratio %.2f, p50 ratio %.2f", echo.rate, echo.latencies.percentile(50),
                             p.result.rate / echo.rate, p.result.latencies.percentile(50) / echo.latencies.percentile(50)))
            }
            if let r = p.pacedRate, let echo = baseline.consumedPaced[r] {
                print(String(format: "  vs the same echo with its events consumed, paced at %d/s as well: p50 %.2f ms, p99 %.2f ms:"
                             + " p50 ratio %.2f", r, echo.latencies.percentile(50), echo.latencies.percentile(99),
                             p.result.latencies.percentile(50) / echo.latencies.percentile(50)))
            }
            print(String(format: "  projector lag, reply → availability.changed showing the slot taken: p50 %.2f ms, p99 %.2f ms (%d bookings)",
                         p.projectorLag.percentile(50), p.projectorLag.percentile(99), p.projectorLag.samples.count))
            if watchCreated { print(String(format: "    reply → its booking.created here: via a classic queue p50 %.2f ms, p99 %.2f ms;"
                         + " via a quorum queue (as the projector's) p50 %.2f ms, p99 %.2f ms",
                         p.eventLag.classic.percentile(50), p.eventLag.classic.percentile(99),
                         p.eventLag.quorum.percentile(50), p.eventLag.quorum.percentile(99))) }
            print("  projector events: " + p.projectorEvents.filter { $0.value > 0 }.sorted { $0.key < $1.key }
                .map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            let st = p.stageMicros
            if let dispatch = st["dispatch"], let process = st["process"], let store = st["store"],
               let queued = st["store_queued"], let transaction = st["store_transaction"], let reply = st["reply"],
               let ack = st["ack"] {
                let p50 = p.result.latencies.percentile(50) * 1000, mean = p.result.latencies.mean * 1000
                print(String(format: "  inside the handler, mean µs: I/O thread → task %.0f; process %.0f (validate + encode %.0f,"
                             + " store %.0f = queued %.0f + transaction %.0f + hop back %.0f); reply published → confirmed %.0f;"
                             + " ack %.0f", dispatch, process, process - store, store, queued, transaction,
                             store - queued - transaction, reply, ack))
                print(String(format: "  client's reply latency: mean %.0f µs (p50 %.0f µs), of which delivery → reply handed over %.0f µs"
                             + " in the handler; the rest (%.0f µs) is client → broker → handler and reply → broker → client",
                             mean, p50, dispatch + process, mean - dispatch - process))
            }
            for (s, cpu) in zip(services, p.cpuMicros) {
                print(String(format: "  %-23@ CPU per booking: user %.0f µs, system %.0f µs, total %.0f µs",
                             s.name, cpu.user, cpu.system, cpu.user + cpu.system))
            }
            let pipelinedPhase = p.name == "\(inFlight) in flight"
            printBudget(p, throughputBound: pipelinedPhase, echoRate: pipelinedPhase ? shapedPipelined.rate : nil,
                        consumed: baseline.consumed?.cpu)
        }
        if findRate {
            if let sustained {
                print(String(format: "highest rate the set sustains: %d bookings/s (probes of %d s); projector lag there p50 %.2f ms,"
                             + " p99 %.2f ms (target p99 < 20 ms)", sustained.rate, probeSeconds,
                             sustained.phase.projectorLag.percentile(50), sustained.phase.projectorLag.percentile(99)))
            } else {
                print("the set did not keep up even at \(findFrom) bookings/s (try a lower --find-from)")
            }
        }
        for (s, rss) in zip(services, memory) {
            print(String(format: "%-23@ RSS after %d bookings: %.1f MiB; exit status %d", s.name, booked, rss, s.process.terminationStatus))
        }
        print("(CPU from /proc/<pid>/stat in clock ticks of 1/\(CPUTime.ticksPerSecond) s, over the phase and the drain after it)")
        for (name, cpu) in [("\(inFlight) in flight", baseline.shapedPipelinedCPU), ("one at a time", baseline.shapedSingleCPU)] {
            guard let broker = cpu.broker, let echo = cpu.echo else { continue }
            print(String(format: "booking-shaped echo, %@: broker %.0f µs + echo process %.0f µs of CPU per call"
                         + " (its events reach no queue: the services' queues do not exist yet)", name, broker, echo))
        }
        if let consumed = baseline.consumed {
            for (name, rate, cpu) in [("\(inFlight) in flight", consumed.pipelined.rate, consumed.cpu),
                                      ("one at a time", consumed.single.rate, consumed.singleCPU)] {
                guard let broker = cpu.broker, let echo = cpu.echo else { continue }
                print(String(format: "booking-shaped echo with its events consumed, %@: %.0f calls/s; broker %.0f µs + echo process"
                             + " (load generator, echo server and its two event consumers) %.0f µs of CPU per call", name, rate, broker, echo))
            }
        }
    }

    /// The search for the highest paced rate the set sustains: doubling
    /// from a start until a probe falls behind, then three halvings of the
    /// gap between the highest rate kept up with and the lowest one not.
    /// A rate falls behind only when two probes of it did.
    final class SustainedRate {
        private var highestKept: Int?
        private var lowestMissed: Int?
        private var halvings = 0
        /// A rate that fell behind once is probed again before it counts
        /// (one noisy minute of this shared machine should not end the search).
        private var retry: Int?
        private var retried: Set<Int> = []
        private let start: Int
        private let maxReplyP99: Double

        init(from start: Int, maxReplyP99: Double) {
            self.start = max(1, start)
            self.maxReplyP99 = maxReplyP99
        }

        var criterion: String {
            String(format: "kept up = no failed booking, replies at >= 97 %% of the paced rate with p99 <= %.0f ms, and every"
                   + " pass delivered and the pass sender's and projector's queues empty within 0.25 s of the last reply",
                   maxReplyP99)
        }

        /// Whether a probe at `rate` kept up (see ``criterion``): a set that
        /// cannot carry the rate queues work, which shows as replies coming
        /// slower or later than requests, or a backlog left downstream at
        /// the end.
        func keptUp(_ p: PhaseResult, rate: Int) -> Bool {
            p.result.failures == 0 && p.result.rate >= 0.97 * Double(rate)
                && p.result.latencies.percentile(99) <= maxReplyP99 && p.drainSeconds <= 0.25
        }

        /// The next rate to probe, or nil when the search is over.
        func next() -> Int? {
            if let retry { return retry }
            switch (highestKept, lowestMissed) {
            case (nil, nil): return start
            case (let kept?, nil): return kept >= 20_000 ? nil : kept * 2
            case (nil, _?): return nil
            case (let kept?, let missed?):
                guard halvings < 3, missed - kept > 1 else { return nil }
                return (kept + missed) / 2
            }
        }

        func record(_ rate: Int, keptUp: Bool) {
            retry = nil
            if !keptUp && retried.insert(rate).inserted {
                retry = rate
                return
            }
            if highestKept != nil && lowestMissed != nil { halvings += 1 }
            if keptUp {
                highestKept = max(highestKept ?? rate, rate)
            } else {
                lowestMissed = min(lowestMissed ?? rate, rate)
            }
        }
    }

    struct PhaseResult {
        var name: String
        var result: BookingBenchmark.Result
        var replySeconds: Double
        var drainSeconds: Double
        var cpuMicros: [(user: Double, system: Double)]
        /// The broker's and this process's CPU µs per booking (nil: not measured).
        var otherCPUMicros: (broker: Double?, own: Double?)
        var projectorLag: Latencies
        /// Reply → the booking's `booking.created` here, through a classic
        /// and through a quorum queue: the share of ``projectorLag`` before
        /// the projector.
        var eventLag: (classic: Latencies, quorum: Latencies)
        /// Mean µs per command of each ``StageTimes`` stage over the phase.
        var stageMicros: [String: Double]
        /// The projector's events by outcome over the phase.
        var projectorEvents: [String: Int]
        /// Bookings/s of an open-loop phase; nil for the closed loops.
        var pacedRate: Int?
    }

    /// Books `count` slots through a raw rabbitmq-c loop (``Raw/rpc(url:exchange:routingKey:type:count:inFlight:body:onReply:)``)
    /// on a thread of its own, as the echo baselines are measured: the
    /// load generator's own cost is then the same on both sides of a
    /// ratio. Each reply is decoded in the loop (for `onReply`).
    static func rawBook(url: AMQPURL, slots: SlotSequence, count: Int, inFlight: Int, rate: Double? = nil,
                        onReply: @escaping @Sendable (CommandReply, UInt64) -> Void) async -> BookingBenchmark.Result {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                var failures = 0
                let (achieved, latencies) = Raw.rpc(
                    url: url, exchange: Topology.commandsExchange, routingKey: "booking.create", type: "booking.create",
                    count: count, inFlight: inFlight, rate: rate, body: { _ in slots.next(limit: count) ?? [] },
                    onReply: { body, at in
                        guard let reply = try? ContractJSON.decode(CommandReply.self, from: Array(body)), reply.isOK else {
                            failures += 1
                            return
                        }
                        onReply(reply, at)
                    })
                slots.resetLimit()
                continuation.resume(returning: BookingBenchmark.Result(rate: achieved, latencies: latencies, failures: failures))
            }
            thread.start()
        }
    }

    /// A release service executable beside this one, output discarded.
    func launch(_ name: String, _ environment: [String: String]) throws -> Process {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw ValidationError("build the services first: swift build -c release")
        }
        let process = Process()
        process.executableURL = binary
        // The set runs on SQLite files of its own, whatever the shell exported.
        process.environment = ServiceProcess.inheritedEnvironment.merging(environment) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }
}

/// The whole machine's CPU per booking in a phase: the services, the
/// broker, and this process (the load generator, the watchers and, with
/// `--pass-gateway http`, the gateway); kernel threads and other jobs on
/// the machine are not counted. For a phase that books as fast as it can
/// (`throughputBound`), what that implies: no set that spends so much can
/// book faster than cores / CPU per booking on this machine. Beside it,
/// with `echoRate`, the budget for half the booking-shaped echo's rate
/// (the set's pipelined target, docs/performance.md) and what of it is left once the broker and C loops
/// that only answer and ack have carried the set's messages (the echo with
/// its events consumed, `consumed`).
private func printBudget(_ p: PipelineBenchmark.PhaseResult, throughputBound: Bool, echoRate: Double?,
                         consumed: (broker: Double?, echo: Double?)?) {
    guard let broker = p.otherCPUMicros.broker, let own = p.otherCPUMicros.own else { return }
    let services = p.cpuMicros.reduce(0) { $0 + $1.user + $1.system }
    let total = services + broker + own
    let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
    print(String(format: "  rabbitmq broker         CPU per booking: %.0f µs; this process (load generator, watchers, any HTTP gateway): %.0f µs",
                 broker, own))
    print(String(format: "  services + broker + this process: %.0f µs of CPU per booking (services %.0f)", total, services)
          + (throughputBound ? String(format: "; on %.0f cores that allows at most %.0f bookings/s", cores, cores * 1e6 / total) : ""))
    guard throughputBound, let echoRate else { return }
    let budget = cores * 1e6 / (echoRate / 2)
    var line = String(format: "  half the booking-shaped echo's rate (%.0f/s) allows %.0f µs of CPU per booking for all of it", echoRate / 2, budget)
    if let consumed, let b = consumed.broker, let e = consumed.echo {
        line += String(format: "; the echo with its events consumed took %.0f (broker %.0f + echo process %.0f), leaving %.0f µs"
                       + " for the three services (they took %.0f)", b + e, b, e, budget - b - e, services)
    }
    print(line)
}


/// Matches bookings to the `availability.changed` that first shows their
/// slot taken. A change may arrive before the reply (the projector is
/// fed by the relay, the reply by the handler): then the lag is 0.
final class ProjectorLag: @unchecked Sendable {  // all state behind `lock`
    private let lock = NSLock()
    /// Per "room|date": start minute → reply time, for slots not yet seen taken.
    private var pending: [String: [Int: UInt64]] = [:]
    /// Per "room|date": start minutes a change showed taken before the reply came.
    private var seenTaken: [String: Set<Int>] = [:]
    private var latencies = Latencies()

    var waiting: Int { lock.withLock { pending.values.reduce(0) { $0 + $1.count } } }
    var phaseLatencies: Latencies { lock.withLock { latencies } }
    func startPhase() { lock.withLock { latencies = Latencies() } }

    func replied(_ booking: Booking, at time: UInt64) {
        guard let start = Self.minutes(booking.start) else { return }
        let key = booking.room + "|" + booking.date
        lock.withLock {
            if seenTaken[key]?.remove(start) != nil { latencies.add(0); return }
            pending[key, default: [:]][start] = time
        }
    }

    func changed(_ change: AvailabilityChanged, at time: UInt64) {
        let key = change.room + "|" + change.date
        let free: [(Int, Int)] = change.avail.compactMap { range in
            let parts = range.split(separator: "-").map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, let a = Self.minutes(parts[0]), let b = Self.minutes(parts[1]) else { return nil }
            return (a, b)
        }
        func taken(_ start: Int) -> Bool { !free.contains { $0.0 <= start && start + 15 <= $0.1 } }
        lock.withLock {
            for (start, replied) in pending[key] ?? [:] where taken(start) {
                latencies.add(time >= replied ? time - replied : 0)
                pending[key]?[start] = nil
            }
            // The benchmark's slots: 07:00 on, 48 quarters.
            for quarter in 0..<48 where taken(7 * 60 + quarter * 15) && pending[key]?[7 * 60 + quarter * 15] == nil {
                seenTaken[key, default: []].insert(7 * 60 + quarter * 15)
            }
        }
    }

    static func minutes(_ hhmm: some StringProtocol) -> Int? {
        let p = hhmm.split(separator: ":")
        guard p.count == 2, let h = Int(p[0]), let m = Int(p[1]) else { return nil }
        return h * 60 + m
    }
}

/// Matches bookings' replies to their `booking.created` by booking id. An
/// event that arrives before the reply (the relay is fed by the commit, the
/// reply sent after it) counts as 0.
final class EventLag: @unchecked Sendable {  // all state behind `lock`
    private let lock = NSLock()
    /// Booking id → reply time, for replies whose event has not arrived.
    private var pending: [String: UInt64] = [:]
    /// Booking ids whose event arrived before their reply.
    private var early: Set<String> = []
    private var latencies = Latencies()

    var waiting: Int { lock.withLock { pending.count } }
    var phaseLatencies: Latencies { lock.withLock { latencies } }
    func startPhase() { lock.withLock { latencies = Latencies() } }

    func replied(_ id: String, at time: UInt64) {
        lock.withLock {
            if early.remove(id) != nil { latencies.add(0) } else { pending[id] = time }
        }
    }

    func event(_ id: String, at time: UInt64) {
        lock.withLock {
            if let replied = pending.removeValue(forKey: id) {
                latencies.add(time >= replied ? time - replied : 0)
            } else {
                early.insert(id)
            }
        }
    }
}

/// One counter family of a service's /metrics, by one label's value.
struct MetricCounters {
    let metricsURL: String
    let family: String
    let label: String

    /// label value → count.
    func read() async throws -> [String: Double] {
        Self.parse(try await metricsText(metricsURL), family: family, label: label)
    }

    /// The samples of `family` in a Prometheus text `body`, by the value
    /// of `label` (summed over any other labels).
    static func parse(_ body: String, family: String, label: String) -> [String: Double] {
        var result: [String: Double] = [:]
        let prefix = family + "{"
        for line in body.split(separator: "\n") where line.hasPrefix(prefix) {
            // projector_events_total{outcome="applied"} 12
            guard let start = line.range(of: label + "=\""), let end = line[start.upperBound...].firstIndex(of: "\""),
                  let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            result[String(line[start.upperBound..<end]), default: 0] += value
        }
        return result
    }
}

/// A service's /metrics text.
func metricsText(_ url: String) async throws -> String {
    let (status, body) = try await httpGet(url)
    guard status == 200 else { throw ValidationError("GET \(url): \(status)") }
    return body
}

/// The handler's `booking_command_stage_seconds{stage}` timers, read from
/// its /metrics (sum and count per stage), for the mean of each stage over
/// a phase.
struct StageTimes {
    let metricsURL: String

    /// stage → (sum of seconds, count).
    func read() async throws -> [String: (sum: Double, count: Double)] {
        let body = try await metricsText(metricsURL)
        let sums = MetricCounters.parse(body, family: "booking_command_stage_seconds_sum", label: "stage")
        let counts = MetricCounters.parse(body, family: "booking_command_stage_seconds_count", label: "stage")
        var result: [String: (sum: Double, count: Double)] = [:]
        for (stage, sum) in sums { result[stage] = (sum, counts[stage] ?? 0) }
        return result
    }

    static func meanMicros(from a: [String: (sum: Double, count: Double)],
                           to b: [String: (sum: Double, count: Double)]) -> [String: Double] {
        var means: [String: Double] = [:]
        for (stage, after) in b {
            let before = a[stage] ?? (0, 0)
            let n = after.count - before.count
            if n > 0 { means[stage] = (after.sum - before.sum) / n * 1e6 }
        }
        return means
    }
}
