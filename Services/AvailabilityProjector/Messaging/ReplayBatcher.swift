import AMQPClient
import Logging
import Synchronization

/// Applies a rebuild's replayed changes in batches: the replay consumer
/// hands each change over and goes on to the next delivery at once; one
/// drain task at a time applies what has gathered, in arrival order, in
/// one transaction (``ProjectorStore/applyReplayed(_:replayId:)``), and
/// acks those deliveries after the commit. While a batch commits the next
/// one gathers, so a batch is as large as the deliveries that arrived
/// meanwhile (at most the replay consumer's prefetch).
///
/// Threading: ``add(_:replayId:delivery:)`` and ``idle()`` may be called
/// from any task; the state is behind one lock and the drain task is the
/// only writer to the store for replayed changes.
final class ReplayBatcher: Sendable {
    private struct Item: Sendable {
        /// One replayed event's change, or a page's.
        let changes: [ModelChange]
        let replayId: String
        let delivery: AMQPDelivery
    }

    private struct State {
        var pending: [Item] = []
        var draining = false
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    private let store: ProjectorStore
    private let logger: Logger

    init(store: ProjectorStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Queues the `changes` of one delivery of `replayId`; `delivery` is
    /// acked once they are applied (or failed: a failure is logged and the
    /// rebuild reports what is missing).
    func add(_ changes: [ModelChange], replayId: String, delivery: AMQPDelivery) {
        let start = state.withLock { s -> Bool in
            s.pending.append(Item(changes: changes, replayId: replayId, delivery: delivery))
            if s.draining { return false }
            s.draining = true
            return true
        }
        if start { Task { await drain() } }
    }

    /// Returns once everything added before the call has been applied.
    func idle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if !s.draining && s.pending.isEmpty { return true }
                s.idleWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    private func drain() async {
        while true {
            let batch = state.withLock { s -> [Item]? in
                if s.pending.isEmpty {
                    s.draining = false
                    let waiters = s.idleWaiters
                    s.idleWaiters = []
                    for waiter in waiters { waiter.resume() }
                    return nil
                }
                defer { s.pending = [] }
                return s.pending
            }
            guard let batch else { return }
            // One replay at a time in practice; a batch that spans an
            // abandoned replay and a new one is applied per replay.
            var start = 0
            while start < batch.count {
                let replayId = batch[start].replayId
                var end = start
                while end < batch.count && batch[end].replayId == replayId { end += 1 }
                let part = batch[start..<end]
                do {
                    _ = try await store.applyReplayed(part.flatMap(\.changes), replayId: replayId)
                } catch {
                    logger.error("replayed change failed; the rebuild will report missing items",
                                 metadata: ["error": "\(error)", "batch": "\(part.count)"])
                }
                for item in part { try? await item.delivery.ack() }
                start = end
            }
        }
    }
}
