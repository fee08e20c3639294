import BookingContracts
import Foundation
import Synchronization

/// One command waiting for its store transaction.
struct StoreJob: Sendable {
    let key: InboxKey?
    let commandType: String
    let body: @Sendable (any StoreTransaction) throws -> ReplyBody
    let promise: CheckedContinuation<StoreOutcome, any Error>
    /// The trace of its store span, for the events it queues.
    var trace: StoredTrace? = nil
    /// When it was submitted (``CommandStage/storeQueued``).
    var submitted = ContinuousClock.now
}

extension [StoreJob] {
    /// Records how long each job of a group that starts now waited, and
    /// returns the start for ``recordCommitted(startedAt:)``.
    func recordStarted() -> ContinuousClock.Instant {
        let now = ContinuousClock.now
        for job in self { CommandStage.storeQueued.record(since: job.submitted, now: now) }
        return now
    }

    /// Records the group's transaction time once per job in it (a job's
    /// ``CommandStage/storeTransaction`` is its whole group's).
    func recordCommitted(startedAt start: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        for _ in self { CommandStage.storeTransaction.record(since: start, now: now) }
    }
}

/// The queue behind group commit (``CommitEngine``): commands submitted
/// while a group is running wait here and go into the next one, so one
/// commit (and one hop to the writer) serves many.
final class GroupCommitQueue: Sendable {
    /// How many commands one transaction takes at most.
    static let maxGroup = 64

    private struct State {
        var jobs: [StoreJob] = []
        var draining = false
    }

    private let state = Mutex(State())

    /// Queues `job`; `lead` is true when the caller must start a drain
    /// (none running); `pending` is how many wait now, this one included.
    func submit(_ job: StoreJob) -> (lead: Bool, pending: Int) {
        state.withLock { state in
            state.jobs.append(job)
            if state.draining { return (false, state.jobs.count) }
            state.draining = true
            return (true, state.jobs.count)
        }
    }

    /// The next group, oldest first; empty (and the drain over) when none waits.
    func takeGroup() -> [StoreJob] {
        state.withLock { state in
            let group = Array(state.jobs.prefix(Self.maxGroup))
            state.jobs.removeFirst(group.count)
            if group.isEmpty { state.draining = false }
            return group
        }
    }
}

extension InboxKey {
    /// What a command whose key is already in the inbox gets, from the row
    /// found there: its stored reply (a repeat), or 1009 when the sender
    /// used the key for a different command. Migrated rows have no
    /// fingerprint: their stored reply stands.
    func answer(storedScope: String, storedType: String?, storedFingerprint: Int64?, storedReply: Data,
                commandType: String) throws -> StoreOutcome {
        if storedScope != InboxKey.legacyScope, let storedFingerprint,
           storedFingerprint != fingerprint || storedType != commandType {
            let reply = CommandReply.failure(
                .idempotencyKeyReused,
                "idempotency key '\(key.prefix(100))' was already used by this sender for a different command")
            return StoreOutcome(reply: reply, json: try ContractJSON.encode(reply), duplicate: false, keyReused: true)
        }
        return StoreOutcome(reply: try ContractJSON.decode(CommandReply.self, from: storedReply), json: storedReply, duplicate: true)
    }
}
