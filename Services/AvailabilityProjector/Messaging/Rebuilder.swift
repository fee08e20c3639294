import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport
import Synchronization

/// Rebuilds the read model from the booking handler's data:
/// 1. starts a rebuild into fresh tables (live events now go to both);
/// 2. sends `booking.replay` naming `availability-projector.replay` and a
///    fresh replay id, and waits for the handler's reply;
/// 3. applies the replayed rooms and bookings (version rules as for live
///    events) until the end marker `booking.replay.done`;
/// 4. checks the counts against the marker and swaps the tables in one
///    transaction, publishing `availability.changed` for any room-day that
///    differs.
/// Live events are never paused: before the swap they reach both models,
/// after it the new one; a replayed state older than a live event loses by
/// version.
public final class Rebuilder: Sendable {
    let connection: AMQPConnection
    let store: ProjectorStore
    let publisher: ChangePublisher
    let logger: Logger
    let replayTimeout: Duration
    /// The replay and control queues (``ProjectorQueues``).
    let queues: ProjectorQueues
    /// Replayed state counts only when the booking handler's user sent it.
    let sender: SenderCheck
    private let waiting = Mutex<[String: CheckedContinuation<ReplaySummary, any Error>]>([:])
    /// End markers that arrived before their waiter registered.
    private let ended = Mutex<[String: Result<ReplaySummary, ReplyError>]>([:])

    public init(connection: AMQPConnection, store: ProjectorStore, publisher: ChangePublisher, logger: Logger,
                replayTimeout: Duration = .seconds(600), sender: SenderCheck? = nil, queues: ProjectorQueues = .shipped) {
        self.sender = sender ?? SenderCheck(trustedUser: connection.user)
        self.queues = queues
        self.connection = connection
        self.store = store
        self.publisher = publisher
        self.logger = logger
        self.replayTimeout = replayTimeout
    }

    /// The control and replay consumers.
    public func services() -> [AMQPConsumerService] {
        [AMQPConsumerService(connection: connection, queue: queues.replay, prefetch: 500, concurrency: 1,
                             logger: logger) { [self] delivery in await handleReplayed(delivery) },
         AMQPConsumerService(connection: connection, queue: queues.control, prefetch: 1, concurrency: 1,
                             logger: logger) { [self] delivery in await handleControl(delivery) }]
    }

    /// Runs one rebuild.
    public func rebuild() async throws -> ProjectorControl.RebuildResult {
        let started = ContinuousClock.now
        let replayId = "rebuild-" + RandomID.uuidString()
        guard try await store.beginRebuild(replayId: replayId) else {
            throw ReplyError(code: .statusChangeNotAllowed, text: "a rebuild is already running")
        }
        logger.notice("rebuild started", metadata: ["replay.id": .string(replayId)])
        do {
            let summary = try await withThrowingTaskGroup(of: ReplaySummary?.self) { group in
                group.addTask { try await self.waitForEnd(replayId) }
                group.addTask {
                    try await self.requestReplay(replayId)
                    return nil
                }
                group.addTask {
                    try await Task.sleep(for: self.replayTimeout)
                    throw ReplyError(code: ProjectorControl.rebuildFailed, text: "the replay did not finish in time")
                }
                defer { group.cancelAll() }
                while let next = try await group.next() {
                    if let summary = next { return summary }
                }
                throw ReplyError(code: ProjectorControl.rebuildFailed, text: "the replay ended without its end marker")
            }
            guard let progress = store.rebuildProgress, progress.rooms == summary.rooms, progress.bookings == summary.bookings else {
                let got = store.rebuildProgress
                throw ReplyError(code: ProjectorControl.rebuildFailed, text: "replay incomplete: expected \(summary.rooms) rooms and \(summary.bookings) bookings, got \(got?.rooms ?? -1) and \(got?.bookings ?? -1)")
            }
            let publisher = self.publisher
            let box = TicketBox()
            guard let finished = try await store.finishRebuild(replayId: replayId, onCommit: { box.ticket = publisher.enqueue($0) }) else {
                throw ReplyError(code: ProjectorControl.rebuildFailed, text: "the rebuild was abandoned")
            }
            try await box.ticket.wait()
            let (final, changes) = (finished.progress, finished.changes)
            let seconds = Double((ContinuousClock.now - started).components.attoseconds) / 1e18
                + Double((ContinuousClock.now - started).components.seconds)
            logger.notice("rebuild finished", metadata: ["replay.id": .string(replayId), "rooms": "\(final.rooms)",
                                                         "bookings": "\(final.bookings)", "changed_days": "\(changes.count)"])
            return ProjectorControl.RebuildResult(replayId: replayId, rooms: final.rooms, bookings: final.bookings,
                                                  liveEvents: final.liveEvents, changedDays: changes.count, seconds: seconds)
        } catch {
            _ = waiting.withLock { $0.removeValue(forKey: replayId) }
            _ = ended.withLock { $0.removeValue(forKey: replayId) }
            try? await store.abortRebuild(replayId: replayId)
            logger.error("rebuild failed", metadata: ["replay.id": .string(replayId), "error": "\(error)"])
            throw error
        }
    }

    private func requestReplay(_ replayId: String) async throws {
        let body = [UInt8](try ContractJSON.encode(ReplayBookings(queue: queues.replay, replayId: replayId)))
        var properties = AMQPProperties.persistentJSON(type: CommandType.replayBookings.rawValue,
                                                       messageID: RandomID.uuidString())
        properties.appID = "availability-projector"
        // The handler replays only for REPLAY_USERS and ADMIN_USERS.
        properties.userID = connection.user
        let message = try await connection.call(body, exchange: Topology.commandsExchange,
                                                routingKey: CommandType.replayBookings.rawValue,
                                                properties: properties, timeout: replayTimeout)
        let reply = try ContractJSON.decode(CommandReply.self, from: message.body)
        if case .error(let error) = reply { throw error }
    }

    private func waitForEnd(_ replayId: String) async throws -> ReplaySummary {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ReplaySummary, any Error>) in
                let early = waiting.withLock { waiters -> Result<ReplaySummary, any Error>? in
                    if let result = ended.withLock({ $0.removeValue(forKey: replayId) }) {
                        return result.mapError { $0 as any Error }
                    }
                    // Cancelled before we got here: `onCancel` already ran and
                    // found nothing to resume, so registering would wait forever.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    waiters[replayId] = continuation
                    return nil
                }
                if let early { continuation.resume(with: early) }
            }
        } onCancel: {
            let c = waiting.withLock { $0.removeValue(forKey: replayId) }
            c?.resume(throwing: CancellationError())
        }
    }

    func handleReplayed(_ delivery: AMQPDelivery) async {
        if let reason = sender.refusal(delivery.properties) {
            // Someone else writing into the replay queue: never applied.
            logger.warning("replayed message from an untrusted sender dropped", metadata: ["reason": .string(reason)])
            ProjectorMetrics.events.increment("untrusted-sender")
            try? await delivery.ack()
            return
        }
        guard case .string(let replayId)? = delivery.properties.headers[ReplayStream.replayIdHeader],
              store.rebuildProgress?.replayId == replayId else {
            // A stream nobody waits for (an abandoned rebuild): drop it.
            try? await delivery.ack()
            return
        }
        let type = delivery.properties.type ?? delivery.routingKey
        if type == ReplayStream.endType {
            let result: Result<ReplaySummary, ReplyError> =
                (try? ContractJSON.decode(ReplaySummary.self, from: delivery.body)).map { .success($0) }
                ?? .failure(ReplyError(code: ProjectorControl.rebuildFailed, text: "unreadable end marker"))
            try? await delivery.ack()
            let waiter = waiting.withLock { waiters -> CheckedContinuation<ReplaySummary, any Error>? in
                guard let c = waiters.removeValue(forKey: replayId) else {
                    ended.withLock { $0[replayId] = result }
                    return nil
                }
                return c
            }
            waiter?.resume(with: result.mapError { $0 as any Error })
            return
        }
        switch EventReader.read(type: type, body: delivery.body) {
        case .change(let change):
            do {
                _ = try await store.applyReplayed(change, replayId: replayId)
                try? await delivery.ack()
            } catch {
                logger.error("replayed change failed; the rebuild will report missing items", metadata: ["error": "\(error)"])
                try? await delivery.ack()
            }
        case .ignored, .poison, .untrusted:
            try? await delivery.ack()
        }
    }

    func handleControl(_ delivery: AMQPDelivery) async {
        let reply: ProjectorControl.Reply
        if (delivery.properties.type ?? "") != ProjectorControl.rebuildType {
            reply = .init(error: ReplyError(code: .unknownCommand, text: "unknown projector command '\((delivery.properties.type ?? "").prefix(100))'"))
        } else {
            do {
                reply = .init(rebuild: try await rebuild())
            } catch let error as ReplyError {
                reply = .init(error: error)
            } catch {
                reply = .init(error: ReplyError(code: ProjectorControl.rebuildFailed, text: "rebuild failed: \(error)"))
            }
        }
        if let body = try? ContractJSON.encode(reply) {
            do {
                // Mandatory like every reply (this copy used to leave it out).
                try await ReplySender(connection: connection, appID: "availability-projector")
                    .reply([UInt8](body), type: ProjectorControl.replyType, to: delivery.properties, logger: logger)
            } catch {
                // The rebuild itself is done (or failed and said so); only the
                // requester misses the answer, and bookingctl reports a timeout.
                logger.warning("rebuild reply could not be published", metadata: ["error": "\(error)"])
            }
        }
        try? await delivery.ack()
    }
}
