import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import FailedMessages
import Hummingbird
import Logging
import PassSender
import ServiceLifecycle
import ServiceSupport
import TestSupport

/// One pass as the test gateway identifies it.
struct PassKey: Hashable, Sendable, CustomStringConvertible {
    var bookingId: String
    var version: Int
    var index: Int
    var description: String { "\(bookingId):\(version):\(index)" }
}

/// One notice as the test gateway identifies it.
struct NoticeKey: Hashable, Sendable, CustomStringConvertible {
    var bookingId: String
    var version: Int
    var kind: NoticeKind
    var email: String
    var description: String { "\(bookingId):\(version):\(kind.rawValue):\(email)" }
}

/// A real HTTP sendpass gateway (Hummingbird) that fails on script.
///
/// Per request, `requestRule(call, keys)` picks an action; with `.proceed`
/// the passes are walked in order and `passRule(key, failuresSoFar)` says
/// whether that pass fails now (code 4001 at its index, passes before it
/// count as sent). It records every pass it *sent* (per the contract).
final class FaultGateway: Sendable {
    enum Action: Sendable {
        case proceed
        case reject(code: Int, index: Int?)
        case hang
        case garbage
        case status(Int, String)
        /// Blocks until ``release()``; answers 503 and sends nothing.
        case block
        /// Sends every pass, then holds the answer until ``release()``
        /// (recorded in ``State/held`` with the `Host` the caller used):
        /// a call in flight whose passes are out.
        case sendThenHold
    }

    struct State: Sendable {
        var calls = 0
        var requests: [[PassKey]] = []
        /// The `Host` header of each of ``requests``: which URL the caller used.
        var hosts: [String] = []
        var sent: [PassKey] = []
        var failures: [PassKey: Int] = [:]
        var blocked = 0
        /// `/sendpass` calls being answered now, and the most at once.
        var inFlight = 0
        var mostInFlight = 0
        /// Calls answered only after ``release()`` (``Action/sendThenHold``),
        /// by the `Host` header they came with: the passes went out.
        var held: [(host: String, keys: [PassKey])] = []
        /// `/notify` requests as received, and the notices it sent.
        var noticeRequests: [NotifyRequest] = []
        var noticesSent: [NoticeKey] = []
        var noticeFailures: [NoticeKey: Int] = [:]
        /// The `traceparent` header of each `/sendpass` request ("" without).
        var traceParents: [String] = []
    }

    let state = Observed(State())
    let url: String
    private let task: Task<Void, any Error>
    private let gate = Observed(false)

    private init(url: String, task: Task<Void, any Error>) {
        self.url = url
        self.task = task
    }

    var sentCounts: [PassKey: Int] {
        var counts: [PassKey: Int] = [:]
        for key in state.current.sent { counts[key, default: 0] += 1 }
        return counts
    }

    func release() { gate.update { $0 = true } }

    /// - Parameters:
    ///   - notices: serve `/notify` (else it is a legacy gateway: 404).
    ///   - noticeRule: whether a recipient's notice fails now (code 4001 at its index).
    static func start(
        requestRule: @escaping @Sendable (_ call: Int, _ keys: [PassKey]) -> Action = { _, _ in .proceed },
        passRule: @escaping @Sendable (_ key: PassKey, _ failuresSoFar: Int) -> Bool = { _, _ in false },
        notices: Bool = false,
        noticeRule: @escaping @Sendable (_ key: NoticeKey, _ failuresSoFar: Int) -> Bool = { _, _ in false },
        noticeRequestRule: @escaping @Sendable () -> Action = { .proceed }
    ) async throws -> FaultGateway {
        let holder = LockedBox<FaultGateway?>(nil)
        let router = Router()
        if notices {
            router.post("notify") { request, _ -> Response in
                guard let gateway = holder.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
                let body = try await request.body.collect(upTo: 1 << 20)
                let decoded = try ContractJSON.decode(NotifyRequest.self, from: Data(buffer: body))
                let batch = request.headers.first { $0.name.canonicalName == "x-pass-batch" }?.value ?? ""
                let passKeys = FaultGateway.keys(batch)
                precondition(passKeys.count == decoded.recipients.count, "X-Pass-Batch does not match the recipients")
                if case .block = noticeRequestRule() {
                    gateway.state.update { $0.blocked += 1 }
                    try? await gateway.gate.wait("gateway released", timeout: 600) { $0 }
                    return json(503, "released")
                }
                var failedAt: Int?
                gateway.state.update { s in
                    s.noticeRequests.append(decoded)
                    for (i, person) in decoded.recipients.enumerated() {
                        let key = NoticeKey(bookingId: passKeys[i].bookingId, version: passKeys[i].version, kind: decoded.kind,
                                            email: person.email)
                        if noticeRule(key, s.noticeFailures[key, default: 0]) {
                            s.noticeFailures[key, default: 0] += 1
                            failedAt = i
                            break
                        }
                        s.noticesSent.append(key)
                    }
                }
                if let failedAt {
                    return json(200, #"{"error":{"text":"mailbox unavailable","code":4001,"index":\#(failedAt)}}"#)
                }
                return json(200, #"{"success":true}"#)
            }
        }
        router.post("sendpass") { request, _ -> Response in
            guard let gateway = holder.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
            let body = try await request.body.collect(upTo: 1 << 20)
            let decoded = try ContractJSON.decode(SendPassRequest.self, from: Data(buffer: body))
            let batch = request.headers.first { $0.name.canonicalName == "x-pass-batch" }?.value ?? ""
            let keys = FaultGateway.keys(batch)
            precondition(keys.count == decoded.passes.count, "X-Pass-Batch does not match the passes")
            var call = 0
            let host = request.head.authority ?? ""
            let traceParent = request.headers.first { $0.name.canonicalName == "traceparent" }?.value ?? ""
            gateway.state.update { s in
                s.traceParents.append(traceParent)
                call = s.calls
                s.calls += 1
                s.requests.append(keys)
                s.hosts.append(host)
                s.inFlight += 1
                s.mostInFlight = max(s.mostInFlight, s.inFlight)
            }
            defer { gateway.state.update { $0.inFlight -= 1 } }
            switch requestRule(call, keys) {
            case .hang:
                try? await Task.sleep(for: .seconds(30))
                return json(200, #"{"success":true}"#)
            case .garbage:
                return json(200, "<html>this is not json")
            case .status(let code, let text):
                return json(code, text)
            case .reject(let code, let index):
                let indexPart = index.map { #","index":\#($0)"# } ?? ""
                return json(200, #"{"error":{"text":"invalid input","code":\#(code)\#(indexPart)}}"#)
            case .block:
                gateway.state.update { $0.blocked += 1 }
                try? await gateway.gate.wait("gateway released", timeout: 600) { $0 }
                return json(503, "released")
            case .sendThenHold:
                gateway.state.update { s in
                    s.sent += keys
                    s.held.append((host, keys))
                }
                try? await gateway.gate.wait("gateway released", timeout: 600) { $0 }
                return json(200, #"{"success":true}"#)
            case .proceed:
                var sentNow: [PassKey] = []
                var failedAt: Int?
                gateway.state.update { s in
                    for (i, key) in keys.enumerated() {
                        if passRule(key, s.failures[key, default: 0]) {
                            s.failures[key, default: 0] += 1
                            failedAt = i
                            break
                        }
                        sentNow.append(key)
                    }
                    s.sent += sentNow
                }
                if let failedAt {
                    return json(200, #"{"error":{"text":"mailbox unavailable","code":4001,"index":\#(failedAt)}}"#)
                }
                return json(200, #"{"success":true}"#)
            }
        }
        let port = Observed<Int?>(nil)
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in port.update { $0 = channel.localAddress?.port } },
                              logger: testLogger("fault-gateway"))
        let task = Task { try await app.runService(gracefulShutdownSignals: []) }
        try await port.wait("gateway listening") { $0 != nil }
        let gateway = FaultGateway(url: "http://127.0.0.1:\(port.current!)", task: task)
        holder.withLock { $0 = gateway }
        return gateway
    }

    func stop() async {
        release()
        task.cancel()
        _ = await task.result
    }

    static func keys(_ header: String) -> [PassKey] {
        // "<bookingId>:<version>:<i>,<j>,…" (the booking ids of the tests have no ':')
        let parts = header.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let version = Int(parts[1]) else { return [] }
        return parts[2].split(separator: ",").compactMap { Int($0) }.map { PassKey(bookingId: parts[0], version: version, index: $0) }
    }

    private static func json(_ status: Int, _ text: String) -> Response {
        Response(status: .init(code: status), headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

/// A booking with `attendees` attendees (distinct e-mails), bookable dates.
func makeBooking(id: String = uniqueName("bk"), version: Int = 1, attendees: Int = 3, status: BookingStatus = .confirmed,
                 room: String = "Berlin", title: String = "Sprint review") -> Booking {
    let date = localDate(daysFromNow: 2)
    let people = (0..<attendees).map { i in
        Attendee(name: i == 0 ? "Zoë Ünal" : "Person \(i)", email: "p\(i)@example.com",
                 phone: "+49170123\(String(format: "%04d", i))")
    }
    return Booking(id: id, room: room, date: date, start: "09:00", end: "10:30", timeZone: "Europe/Berlin",
                   startsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: "09:00", timeZone: "Europe/Berlin")!),
                   endsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: "10:30", timeZone: "Europe/Berlin")!),
                   title: title, description: "Q4 demo", status: status, attendees: people, version: version)
}

/// What `passes.failed` holds for attendee `index` of `booking` given up
/// after `attempts` attempts (gateway code 4001, "x", just now): what an
/// operator retries.
func failedPass(_ booking: Booking, index: Int, attempts: Int) -> FailedPass {
    let a = booking.attendees[index], now = ContractFormat.timestamp(Date())
    return FailedPass(bookingId: booking.id, version: booking.version, attendeeIndex: index, name: a.name, email: a.email,
                      phone: a.phone, attempts: attempts, firstFailureAt: now, lastFailureAt: now, lastErrorCode: 4001, lastErrorText: "x",
                      room: booking.room, date: booking.date, start: booking.start, end: booking.end, title: booking.title)
}

/// Publishes a booking event as the booking handler would.
func publishEvent(_ type: EventType, _ booking: Booking, previous: BookingSnapshot? = nil,
                  on connection: AMQPConnection) async throws {
    let event = BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: booking,
                             previous: previous)
    try await connection.publish([UInt8](try ContractJSON.encode(event)), exchange: Topology.eventsExchange,
                                 routingKey: type.rawValue,
                                 properties: .persistentJSON(type: type.rawValue, messageID: event.eventId,
                                                             userID: connection.user))
}

/// What the tests see of the pass sender's output events.
struct EventLog: Sendable {
    var delivered: [PassDelivered] = []
    var failed: [PassFailedEvent] = []
}

/// A pass sender running in this process (the same `PassSenderApp.build` as
/// main) against the real broker in a vhost of its own, a fault gateway,
/// and a client connection watching `pass.*` events.
final class PassHarness: Sendable {
    let url: AMQPURL
    let client: AMQPConnection
    let gateway: FaultGateway
    let dataDirectory: String
    let events: Observed<EventLog>
    /// Every delivery the pass sender settled, in order.
    let settled: Observed<[PassConsumer.Settled]>
    let app: PassSenderApp
    private let group: ServiceGroup
    private let running: Task<Void, any Error>
    private let watching: Task<Void, any Error>
    private let eventConsumer: AMQPConsumer

    static func start(gateway: FaultGateway, maxAttempts: Int = 3, delays: String = "100ms,200ms",
                      timeout: Duration = .milliseconds(500), name: String = "pass",
                      environment: [String: String] = [:], notify: Bool = false, concurrency: Int = 4,
                      gatewayConcurrency: Int = PassSenderSettings.defaultGatewayConcurrency) async throws -> PassHarness {
        let url = try TestBroker.isolatedURL(name)
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("pass-data")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let logger = testLogger(name)
        var settings = PassSenderSettings(gatewayURL: gateway.url, maxAttempts: maxAttempts,
                                          retryDelays: try RetryDelay.parseList(delays), gatewayTimeout: timeout,
                                          concurrency: concurrency, gatewayConcurrency: gatewayConcurrency)
        // Settings a deployment gives through the environment
        // (BOOKING_HANDLER_USER, ADMIN_USERS), read as main reads them.
        let fromEnvironment = try PassSenderSettings(environment: environment)
        settings.bookingHandlerUser = fromEnvironment.bookingHandlerUser
        settings.administrators = fromEnvironment.administrators
        settings.outboxSweep = fromEnvironment.outboxSweep
        if notify { settings.notifyURL = gateway.url }
        let connection = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: name),
                                                          logger: logger)
        let settled = Observed([PassConsumer.Settled]())
        let app = try await PassSenderApp.build(connection: connection, settings: settings, dataDirectory: dataDirectory,
                                                logger: logger, observer: { s in settled.update { $0.append(s) } })
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "client"),
                                                      logger: logger)
        let queue = uniqueName("pass-events")
        try await client.declare([
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: queue, exchange: Topology.eventsExchange, routingKey: "pass.#")),
        ])
        let consumer = try await client.consume(queue: queue, prefetch: 500)
        let log = Observed(EventLog())
        let watching = Task {
            for try await delivery in consumer {
                try await delivery.ack()
                if delivery.routingKey == EventType.passDelivered.rawValue {
                    let e = try ContractJSON.decode(PassDelivered.self, from: delivery.body)
                    log.update { $0.delivered.append(e) }
                } else if delivery.routingKey == EventType.passFailed.rawValue {
                    let e = try ContractJSON.decode(PassFailedEvent.self, from: delivery.body)
                    log.update { $0.failed.append(e) }
                }
            }
        }
        let (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
        return PassHarness(url: url, client: client, gateway: gateway, dataDirectory: dataDirectory, events: log,
                           settled: settled, app: app, group: group, running: running, watching: watching, eventConsumer: consumer)
    }

    private init(url: AMQPURL, client: AMQPConnection, gateway: FaultGateway, dataDirectory: String,
                 events: Observed<EventLog>, settled: Observed<[PassConsumer.Settled]>, app: PassSenderApp, group: ServiceGroup, running: Task<Void, any Error>,
                 watching: Task<Void, any Error>, eventConsumer: AMQPConsumer) {
        self.url = url
        self.client = client
        self.gateway = gateway
        self.dataDirectory = dataDirectory
        self.events = events
        self.settled = settled
        self.app = app
        self.group = group
        self.running = running
        self.watching = watching
        self.eventConsumer = eventConsumer
    }

    func publish(_ type: EventType, _ booking: Booking, previous: BookingSnapshot? = nil) async throws {
        try await publishEvent(type, booking, previous: previous, on: client)
    }

    /// Waits until settled messages of `booking` delivered `count` notices of `kind` in all.
    func waitNotices(_ booking: Booking, _ kind: NoticeKind, count: Int, timeout: Double = 60) async throws {
        try await settled.wait("\(count) \(kind.rawValue) notices of \(booking.id)", timeout: timeout) { all in
            all.filter { $0.bookingId == booking.id }.reduce(0) { $0 + ($1.summary?.notices[kind]?.count ?? 0) } >= count
        }
    }

    /// Waits for `pass.delivered` of these passes (each at least once).
    func waitDelivered(_ booking: Booking, indexes: [Int], timeout: Double = 60) async throws {
        let wanted = Set(indexes.map { PassKey(bookingId: booking.id, version: booking.version, index: $0) })
        try await events.wait("pass.delivered for \(indexes)", timeout: timeout) { log in
            wanted.isSubset(of: Set(log.delivered.map { PassKey(bookingId: $0.bookingId, version: $0.version, index: $0.attendeeIndex) }))
        }
    }

    /// Waits for `pass.failed` of these passes.
    func waitFailed(_ booking: Booking, indexes: [Int], timeout: Double = 60) async throws {
        let wanted = Set(indexes.map { PassKey(bookingId: booking.id, version: booking.version, index: $0) })
        try await events.wait("pass.failed for \(indexes)", timeout: timeout) { log in
            wanted.isSubset(of: Set(log.failed.map { PassKey(bookingId: $0.bookingId, version: $0.version, index: $0.attendeeIndex) }))
        }
    }

    /// Waits until a message of `booking` on `queue` was settled and its
    /// summary says it was dropped for `reason`.
    func waitDropped(_ booking: Booking, queue: String, reason: DropReason, timeout: Double = 60) async throws {
        try await settled.wait("\(queue) message of \(booking.id) dropped (\(reason))", timeout: timeout) { all in
            all.contains { $0.queue == queue && $0.bookingId == booking.id && $0.summary?.dropped == reason }
        }
    }

    /// Ledger statuses of a booking's passes, by (version, index).
    func statuses(_ booking: Booking) async throws -> [Int: PassStatus] {
        var out: [Int: PassStatus] = [:]
        for p in try await app.ledger.passes(bookingId: booking.id) where p.version == booking.version {
            out[p.attendeeIndex] = p.status
        }
        return out
    }

    /// `passes.failed`, read the way operators read it.
    func failedQueue() -> FailedPassQueue { FailedPassQueue(connection: client) }

    /// A graceful stop whose time limit runs out at once (as the
    /// services' 30 s do with a hanging gateway): the stop is triggered,
    /// then the group cancelled. The ledger file stays; ``stop()`` cleans up.
    func stopImpatiently() async {
        await group.triggerGracefulShutdown()
        running.cancel()
        _ = await running.result
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
        eventConsumer.stop()
        _ = await watching.result
        await client.close()
        await gateway.stop()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}
