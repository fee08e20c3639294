/// The RPC calls waiting for a reply on one connection, keyed by correlation
/// id, with their deadlines.
///
/// RPC requests go out on the publish channel with `reply_to` set to
/// `amq.rabbitmq.reply-to` (direct reply-to), so every reply arrives through
/// one consumer on that channel; the correlation id is the only thing that
/// ties a reply (or a `basic.return`) to its caller. A pure value type, generic
/// over what waits, so matching, expiry and fail-all are unit-tested without
/// a broker; the I/O loop keeps one and resumes the waiters it hands back.
struct RPCRegistry<Waiter> {
    private struct Pending {
        var waiter: Waiter
        var deadline: UInt64
    }

    private var pending: [String: Pending] = [:]
    /// Lower bound of every pending deadline, so the loop need not scan all
    /// pending calls on every iteration (it may be stale-low after replies).
    private var earliestDeadline: UInt64 = .max
    /// Numbers the correlation ids this registry makes up.
    private var counter: UInt64 = 0
    /// The consumer tag of the direct reply-to consumer on the current
    /// publish channel, once one was started; `nil` after the channel or
    /// connection went away (the next RPC starts a new one).
    private(set) var replyConsumerTag: String?

    var isEmpty: Bool { pending.isEmpty }
    var count: Int { pending.count }

    /// The earliest time a pending call may expire, or `nil` with none pending.
    var nextDeadline: UInt64? {
        pending.isEmpty || earliestDeadline == .max ? nil : earliestDeadline
    }

    /// Records the reply consumer started on the publish channel.
    mutating func replyConsumerStarted(tag: String) {
        replyConsumerTag = tag
    }

    /// Whether a delivery with this consumer tag is an RPC reply.
    func isReplyConsumer(_ tag: String) -> Bool {
        tag == replyConsumerTag
    }

    /// Registers a call about to be published and returns the correlation id
    /// it must carry: the caller's own, or a new `rpc-<n>` one.
    /// The caller checks ``isPending(_:)`` for an id of its own first; a
    /// made-up id skips any a caller chose.
    mutating func register(_ waiter: Waiter, correlationID: String?, deadline: UInt64) -> String {
        counter += 1
        var id = correlationID ?? "rpc-\(counter)"
        while correlationID == nil && pending[id] != nil {
            counter += 1
            id = "rpc-\(counter)"
        }
        precondition(pending[id] == nil, "correlation id \(id) registered twice")
        pending[id] = Pending(waiter: waiter, deadline: deadline)
        earliestDeadline = min(earliestDeadline, deadline)
        return id
    }

    /// Whether a call with this correlation id waits for its reply.
    func isPending(_ correlationID: String) -> Bool { pending[correlationID] != nil }

    /// Removes and returns the waiter of `correlationID`: its reply came, or
    /// it failed (returned, nacked). `nil` for a late or unknown id.
    mutating func resolve(_ correlationID: String) -> Waiter? {
        guard let call = pending.removeValue(forKey: correlationID) else { return nil }
        if pending.isEmpty { earliestDeadline = .max }
        return call.waiter
    }

    /// Removes and returns the waiters whose deadline is at or before `now`.
    mutating func expire(now: UInt64) -> [Waiter] {
        guard !pending.isEmpty else {
            earliestDeadline = .max
            return []
        }
        guard earliestDeadline <= now else { return [] }
        var expired: [Waiter] = []
        var earliest = UInt64.max
        for (id, call) in pending {
            if call.deadline <= now {
                pending[id] = nil
                expired.append(call.waiter)
            } else {
                earliest = min(earliest, call.deadline)
            }
        }
        earliestDeadline = earliest
        return expired
    }

    /// Removes and returns every waiter, and forgets the reply consumer: the
    /// publish channel (or the whole connection) is gone, so no reply can
    /// arrive any more.
    mutating func reset() -> [Waiter] {
        let all = pending.values.map(\.waiter)
        pending.removeAll()
        earliestDeadline = .max
        replyConsumerTag = nil
        return all
    }
}
