/// Publisher-confirm bookkeeping for one channel in confirm mode: which
/// sequence numbers are waiting for `basic.ack`/`basic.nack`, and what to do
/// when they are settled.
///
/// A pure value type (no I/O) so the `multiple` and out-of-order rules are
/// unit-tested on their own. Every operation is amortised O(1): `multiple`
/// acks walk a cursor that only moves forward.
struct ConfirmTracker<Waiter> {
    /// The sequence number the next publish on the channel gets.
    private(set) var nextSequence: UInt64 = 1
    private var waiting: [UInt64: Entry] = [:]
    /// Every sequence number below this one is settled.
    private var cursor: UInt64 = 1

    struct Entry {
        var waiter: Waiter
        /// Set by `basic.return` (mandatory publish that matched no queue);
        /// the ack that follows then reports the return, not success.
        var returned: AMQPError?
    }

    var pendingCount: Int { waiting.count }
    var isEmpty: Bool { waiting.isEmpty }

    /// Registers a publish about to be sent and returns its sequence number.
    mutating func register(_ waiter: Waiter) -> UInt64 {
        let seq = nextSequence
        nextSequence += 1
        waiting[seq] = Entry(waiter: waiter, returned: nil)
        return seq
    }

    /// Records a `basic.return` for `sequence`.
    mutating func markReturned(_ sequence: UInt64, _ error: AMQPError) {
        waiting[sequence]?.returned = error
    }

    /// Removes and returns the entries settled by an ack or nack.
    mutating func settle(deliveryTag: UInt64, multiple: Bool) -> [Entry] {
        var settled: [Entry] = []
        if multiple {
            guard deliveryTag >= cursor else { return [] }
            var seq = cursor
            while seq <= deliveryTag {
                if let e = waiting.removeValue(forKey: seq) { settled.append(e) }
                seq += 1
            }
            cursor = deliveryTag + 1
        } else if let e = waiting.removeValue(forKey: deliveryTag) {
            settled.append(e)
            if deliveryTag == cursor { advanceCursor() }
        }
        return settled
    }

    /// Removes everything (channel or connection gone) and restarts numbering,
    /// as a new channel in confirm mode does.
    mutating func reset() -> [Entry] {
        let all = waiting.keys.sorted().map { waiting[$0]! }
        waiting.removeAll()
        nextSequence = 1
        cursor = 1
        return all
    }

    private mutating func advanceCursor() {
        while cursor < nextSequence && waiting[cursor] == nil { cursor += 1 }
    }
}
