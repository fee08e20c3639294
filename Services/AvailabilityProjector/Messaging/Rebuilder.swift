import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import Metrics
import ServiceSupport
import Synchronization

/// Rebuilds the read model from the booking handler's data:
/// 1. starts a rebuild into fresh tables (live events now go to both);
/// 2. sends `booking.replay` naming `availability-projector.replay` and a
///    fresh replay id; the handler answers it only after the whole replay;
/// 3. applies the replayed rooms and bookings (version rules as for live
///    events) until the end marker `booking.replay.done`;
/// 4. checks the counts against the marker and swaps the tables in one
///    transaction, publishing `availability.changed` for any room-day that
///    differs.
/// Live events are never paused: before the swap they reach both models,
/// after it the new one; a replayed state older than a live event loses by
/// version.
///
/// A rebuild has no time limit as a whole — a million bookings take as
/// long as they take. It fails when the replay stalls: nothing of it
/// arrives for ``stallTimeout`` (the handler never got the request, died
/// and nothing redelivered it, or the broker lost the stream). An operator
/// may cancel it (``cancel()``); either way the new tables are dropped and
/// the live model stays as it was.
public final class Rebuilder: Sendable {
    let connection: AMQPConnection
    let store: ProjectorStore
    let publisher: ChangePublisher
    let logger: Logger
    /// How long the replay may deliver nothing before the rebuild fails
    /// (`REBUILD_STALL_TIMEOUT`).
    let stallTimeout: Duration
    /// Bookings per replayed message the rebuild asks for
    /// (`REPLAY_PAGE_SIZE`; 1 = one event per booking).
    let replayPageSize: Int
    /// The replay and control queues (``ProjectorQueues``).
    let queues: ProjectorQueues
    /// Replayed state counts only when the booking handler's user sent it.
    let sender: SenderCheck
    /// Applies replayed changes a batch per transaction (``ReplayBatcher``).
    private let batcher: ReplayBatcher
    private let waiting = Mutex<[String: CheckedContinuation<ReplaySummary, any Error>]>([:])
    /// Outcomes that arrived before their waiter registered (end marker,
    /// failed request, cancel).
    private let ended = Mutex<[String: Result<ReplaySummary, ReplyError>]>([:])
    /// The running rebuild, for progress and cancel.
    private let running = Mutex<Running?>(nil)
    /// The rebuild a control request started, while it runs (see ``controlRebuild(redelivered:)``).
    private let controlRebuilds = Mutex<Task<ProjectorControl.RebuildResult, any Error>?>(nil)

    private struct Running {
        let replayId: String
        let started: ContinuousClock.Instant
        var lastProgress: ContinuousClock.Instant
        let expectedRooms: Int?
        let expectedBookings: Int?
    }

    /// The default ``stallTimeout``: two minutes without a replayed message.
    public static let defaultStallTimeout = Duration.seconds(120)
    /// The default ``replayPageSize``: a page of 500 bookings is one
    /// message of about 300 KB, and the replay runs at about four times the
    /// rate of one event per booking (docs/performance.md).
    public static let defaultReplayPageSize = 500
    /// How long the projector waits for the handler's answer to
    /// `booking.replay`, which comes only after the whole replay; the
    /// rebuild does not wait for it (the end marker decides), so this only
    /// bounds how long a lost answer is remembered.
    static let replayAnswerWait = Duration.seconds(86_400)

    public init(connection: AMQPConnection, store: ProjectorStore, publisher: ChangePublisher, logger: Logger,
                stallTimeout: Duration = Rebuilder.defaultStallTimeout, replayPageSize: Int = Rebuilder.defaultReplayPageSize,
                sender: SenderCheck? = nil, queues: ProjectorQueues = .shipped) {
        self.replayPageSize = min(max(1, replayPageSize), ReplayStream.maxBookingsPerMessage)
        self.sender = sender ?? SenderCheck(trustedUser: connection.user)
        self.queues = queues
        self.connection = connection
        self.store = store
        self.publisher = publisher
        self.logger = logger
        self.stallTimeout = stallTimeout
        self.batcher = ReplayBatcher(store: store, logger: logger)
    }

    /// The control and replay consumers. The control queue takes a few
    /// requests at once, so that status and cancel are answered while a
    /// rebuild runs (a second rebuild is refused by the store). The replay
    /// consumer's prefetch is 25,000 bookings' worth (at most 500
    /// messages, at least 4): 500 single events, 50 pages of 500 — enough
    /// to batch, and with pages of at most ``ReplayStream/maxPageBytes``
    /// a bounded amount in this process. (A handler that ignores the page
    /// size sends single events; then fewer are in flight, slower but
    /// correct.)
    public func services() -> [AMQPConsumerService] {
        [AMQPConsumerService(connection: connection, queue: queues.replay,
                             prefetch: UInt16(min(500, max(4, 25_000 / replayPageSize))), concurrency: 1,
                             logger: logger) { [self] delivery in await handleReplayed(delivery) },
         AMQPConsumerService(connection: connection, queue: queues.control, prefetch: 8, concurrency: 8,
                             logger: logger) { [self] delivery in await handleControl(delivery) }]
    }

    /// Runs one rebuild.
    public func rebuild() async throws -> ProjectorControl.RebuildResult {
        let started = ContinuousClock.now
        let replayId = "rebuild-" + RandomID.uuidString()
        // What the replay should bring, for progress: the live model's counts.
        let expected = try? await store.counts()
        guard try await store.beginRebuild(replayId: replayId) else {
            throw ReplyError(code: .statusChangeNotAllowed, text: "a rebuild is already running")
        }
        running.withLock {
            $0 = Running(replayId: replayId, started: started, lastProgress: started, expectedRooms: expected?.rooms,
                         expectedBookings: expected?.bookings)
        }
        defer { running.withLock { if $0?.replayId == replayId { $0 = nil } } }
        logger.notice("rebuild started", metadata: ["replay.id": .string(replayId),
                                                    "stall_timeout_seconds": "\(stallTimeout.components.seconds)"])
        do {
            // Not a child task: `connection.call` cannot be cancelled, and a
            // task group would wait for it after the end marker. Its failure
            // ends the rebuild through ``finish(_:with:)``.
            Task { [self] in
                do {
                    try await requestReplay(replayId)
                } catch let error as AMQPError where error.code == .connectionLost {
                    // Only the answer is lost with the connection: the
                    // replay goes on into the durable replay queue, and what
                    // was delivered but not acked comes again after the
                    // reconnect (applied once: versions and the seen keys).
                    // The end marker still ends the rebuild; the stall bound
                    // still ends one whose replay never started.
                    logger.warning("lost the connection while booking.replay ran; waiting for its end marker",
                                   metadata: ["replay.id": .string(replayId), "error": "\(error)"])
                } catch {
                    let failure = error as? ReplyError
                        ?? ReplyError(code: ProjectorControl.rebuildFailed, text: "booking.replay failed: \(error)")
                    finish(replayId, with: .failure(failure))
                }
            }
            let summary = try await withThrowingTaskGroup(of: ReplaySummary.self) { group in
                group.addTask { try await self.waitForEnd(replayId) }
                group.addTask { try await self.watchForStall(replayId) }
                defer { group.cancelAll() }
                guard let first = try await group.next() else {
                    throw ReplyError(code: ProjectorControl.rebuildFailed, text: "the replay ended without its end marker")
                }
                return first
            }
            // `closures` is absent from a handler before v1.2 (then none came).
            guard let progress = store.rebuildProgress, progress.rooms == summary.rooms, progress.bookings == summary.bookings,
                  progress.closures == summary.closures ?? 0 else {
                let got = store.rebuildProgress
                throw ReplyError(code: ProjectorControl.rebuildFailed, text: "replay incomplete: expected \(summary.rooms) rooms and \(summary.bookings) bookings, got \(got?.rooms ?? -1) and \(got?.bookings ?? -1)")
            }
            let publisher = self.publisher
            let finishing = ContinuousClock.now
            let box = TicketBox()
            guard let finished = try await store.finishRebuild(replayId: replayId, onCommit: { box.ticket = publisher.enqueue($0) }) else {
                // A cancel accepted after the end marker, before the swap.
                if store.rebuildProgress?.cancelRequested == true {
                    throw ReplyError(code: ProjectorControl.rebuildCancelled, text: "the rebuild was cancelled")
                }
                throw ReplyError(code: ProjectorControl.rebuildFailed, text: "the rebuild was abandoned")
            }
            // The rebuilt model answers from here on. Its corrections go out
            // through the publisher's queue in commit order (before any later
            // change of the same days) while the caller already has its
            // answer: from an empty model that is every room-day, two
            // messages each — 11 s of a 16 s rebuild of 200,000 bookings when
            // the answer waited for them. Waiting would not make them safer:
            // the swap has committed either way.
            let announced = box.ticket, log = self.logger, count = finished.changes.count
            Task {
                do {
                    try await announced.wait()
                } catch {
                    log.error("the rebuild's availability.changed were not confirmed; followers of those days are stale until their next change",
                                 metadata: ["replay.id": .string(replayId), "changed_days": "\(count)", "error": "\(error)"])
                }
            }
            let (final, changes) = (finished.progress, finished.changes)
            let now = ContinuousClock.now
            let seconds = Self.seconds(now - started), finishSeconds = Self.seconds(now - finishing)
            logger.notice("rebuild finished", metadata: ["replay.id": .string(replayId), "rooms": "\(final.rooms)",
                                                         "bookings": "\(final.bookings)", "changed_days": "\(changes.count)",
                                                         "seconds": "\(Int(seconds))",
                                                         "finish_seconds": .string(String(format: "%.2f", finishSeconds))])
            return ProjectorControl.RebuildResult(replayId: replayId, rooms: final.rooms, bookings: final.bookings,
                                                  liveEvents: final.liveEvents, changedDays: changes.count, seconds: seconds,
                                                  finishSeconds: finishSeconds)
        } catch {
            _ = waiting.withLock { $0.removeValue(forKey: replayId) }
            _ = ended.withLock { $0.removeValue(forKey: replayId) }
            try? await store.abortRebuild(replayId: replayId)
            let cancelled = (error as? ReplyError)?.code == ProjectorControl.rebuildCancelled
            logger.log(level: cancelled ? .notice : .error, "\(cancelled ? "rebuild cancelled" : "rebuild failed")",
                       metadata: ["replay.id": .string(replayId), "error": "\(error)"])
            throw error
        }
    }

    /// The running rebuild's progress (or ``ProjectorControl/RebuildStatus/idle(stallTimeoutSeconds:)``).
    public func status() -> ProjectorControl.RebuildStatus {
        let now = ContinuousClock.now
        guard let current = running.withLock({ $0 }), let progress = store.rebuildProgress,
              progress.replayId == current.replayId else {
            return .idle(stallTimeoutSeconds: Self.seconds(stallTimeout))
        }
        return ProjectorControl.RebuildStatus(
            running: true, replayId: current.replayId, rooms: progress.rooms, bookings: progress.bookings,
            liveEvents: progress.liveEvents, expectedRooms: current.expectedRooms, expectedBookings: current.expectedBookings,
            seconds: Self.seconds(now - current.started), secondsSinceProgress: Self.seconds(now - current.lastProgress),
            stallTimeoutSeconds: Self.seconds(stallTimeout))
    }

    /// Cancels the running rebuild, if any: it fails with
    /// ``ProjectorControl/rebuildCancelled``, its tables are dropped, the
    /// rest of its replay stream is dropped as it arrives. Answers the
    /// status it had (not running when there was nothing to cancel), or an
    /// error when the rebuild has begun swapping its tables in: then it
    /// finishes, and saying "cancelled" would be false.
    @discardableResult
    public func cancel() -> ProjectorControl.Reply {
        let status = status()
        guard let replayId = status.replayId else { return .init(status: status) }
        guard store.requestRebuildCancel(replayId: replayId) else {
            logger.notice("rebuild cancel came too late: the rebuilt model is being swapped in",
                          metadata: ["replay.id": .string(replayId)])
            return .init(error: ReplyError(code: .statusChangeNotAllowed,
                                           text: "too late to cancel: the rebuilt model is being swapped in (replay \(replayId))"))
        }
        logger.notice("rebuild cancel requested", metadata: ["replay.id": .string(replayId)])
        finish(replayId, with: .failure(ReplyError(code: ProjectorControl.rebuildCancelled, text: "the rebuild was cancelled")))
        return .init(status: status)
    }

    /// `duration` in seconds.
    public static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Hands `result` to the rebuild waiting for `replayId` (or keeps it
    /// until it waits, as long as that rebuild runs).
    private func finish(_ replayId: String, with result: Result<ReplaySummary, ReplyError>) {
        let waiter = waiting.withLock { waiters -> CheckedContinuation<ReplaySummary, any Error>? in
            guard let c = waiters.removeValue(forKey: replayId) else {
                if running.withLock({ $0?.replayId == replayId }) { ended.withLock { $0[replayId] = result } }
                return nil
            }
            return c
        }
        waiter?.resume(with: result.mapError { $0 as any Error })
    }

    /// Throws once the replay delivered nothing for ``stallTimeout``.
    private func watchForStall(_ replayId: String) async throws -> ReplaySummary {
        while true {
            guard let last = running.withLock({ $0?.replayId == replayId ? $0?.lastProgress : nil }) else {
                throw CancellationError()
            }
            let due = last + stallTimeout
            if ContinuousClock.now >= due {
                throw ReplyError(code: ProjectorControl.rebuildFailed,
                                 text: "the replay delivered nothing for \(stallTimeout.components.seconds) s (REBUILD_STALL_TIMEOUT)")
            }
            try await Task.sleep(until: due, clock: .continuous)
        }
    }

    /// The `booking.replay` a rebuild sends: pages of `pageSize` bookings,
    /// or (1) the field left out, so that the handler sends one event per
    /// booking exactly as a handler before pages does.
    static func replayRequest(queue: String, replayId: String, pageSize: Int) -> ReplayBookings {
        ReplayBookings(queue: queue, replayId: replayId, bookingsPerMessage: pageSize == 1 ? nil : pageSize)
    }

    private func requestReplay(_ replayId: String) async throws {
        let body = [UInt8](try ContractJSON.encode(Self.replayRequest(queue: queues.replay, replayId: replayId,
                                                                      pageSize: replayPageSize)))
        var properties = AMQPProperties.persistentJSON(type: CommandType.replayBookings.rawValue,
                                                       messageID: RandomID.uuidString())
        properties.appID = "availability-projector"
        // The handler replays only for REPLAY_USERS and ADMIN_USERS.
        properties.userID = connection.user
        let message = try await connection.call(body, exchange: Topology.commandsExchange,
                                                routingKey: CommandType.replayBookings.rawValue,
                                                properties: properties, timeout: Self.replayAnswerWait)
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
        running.withLock { if $0?.replayId == replayId { $0?.lastProgress = .now } }
        let type = delivery.properties.type ?? delivery.routingKey
        if type == ReplayStream.endType {
            let result: Result<ReplaySummary, ReplyError> =
                (try? ContractJSON.decode(ReplaySummary.self, from: delivery.body)).map { .success($0) }
                ?? .failure(ReplyError(code: ProjectorControl.rebuildFailed, text: "unreadable end marker"))
            // Every change before the marker applied first: the rebuild
            // compares what it applied with the marker's counts.
            await batcher.idle()
            try? await delivery.ack()
            finish(replayId, with: result)
            return
        }
        if type == ReplayStream.pageType {
            guard let changes = EventReader.readPage(delivery.body) else {
                // Acked, not applied: the counts against the end marker
                // fail the rebuild, which is what an unreadable page means.
                logger.error("unreadable replay page dropped", metadata: ["replay.id": .string(replayId),
                                                                          "bytes": "\(delivery.body.count)"])
                try? await delivery.ack()
                return
            }
            batcher.add(changes, replayId: replayId, delivery: delivery)
            return
        }
        switch EventReader.read(type: type, body: delivery.body) {
        case .change(let change):
            batcher.add([change], replayId: replayId, delivery: delivery)
        case .unknownStatus(let bookingId, let status):
            UnknownStatus.note(status, bookingId: bookingId, logger: logger)
            batcher.add([.keepBooking(id: bookingId)], replayId: replayId, delivery: delivery)
        case .ignored, .poison, .untrusted:
            try? await delivery.ack()
        }
    }

    /// Runs the rebuild a control request asks for. A redelivered request
    /// while a rebuild it may have started runs (this connection was lost
    /// and the request came back unacked) joins that rebuild and answers
    /// with its result, instead of "a rebuild is already running".
    private func controlRebuild(redelivered: Bool) async throws -> ProjectorControl.RebuildResult {
        let task = controlRebuilds.withLock { current -> Task<ProjectorControl.RebuildResult, any Error> in
            if redelivered, let current { return current }
            let task = Task { try await self.rebuild() }
            if current == nil { current = task }
            return task
        }
        defer { controlRebuilds.withLock { if $0 == task { $0 = nil } } }
        return try await task.value
    }

    func handleControl(_ delivery: AMQPDelivery) async {
        let reply: ProjectorControl.Reply
        let type = delivery.properties.type ?? ""
        if type == ProjectorControl.statusType {
            reply = .init(status: status())
        } else if type == ProjectorControl.cancelType {
            reply = cancel()
        } else if type != ProjectorControl.rebuildType {
            reply = .init(error: ReplyError(code: .unknownCommand, text: "unknown projector command '\(type.prefix(100))'"))
        } else {
            do {
                reply = .init(rebuild: try await controlRebuild(redelivered: delivery.redelivered))
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
