/// Which channels of the current connection are open, and the generation
/// (incarnation) of each.
///
/// A delivery carries the generation of the channel it came on. A channel
/// number is reused when a channel is reopened (after a channel error or a
/// reconnect), and the broker's delivery tags restart with it, so a
/// settlement or event from an earlier generation must be ignored rather
/// than acking an unrelated message: ``isCurrent(channel:generation:)``
/// decides that. Generations are never reused, even across connections.
/// A pure value type, unit-tested on its own; the I/O loop owns one.
struct ChannelTable {
    /// What is known about one channel number.
    struct Entry: Equatable {
        /// The incarnation opened last under this number.
        var generation: UInt64
        /// False once a synchronous method on it failed with a channel error
        /// (the broker closed it); it is reopened, with a new generation,
        /// before its next use.
        var isOpen: Bool
    }

    private var entries: [UInt16: Entry] = [:]
    private var lastGeneration: UInt64 = 0

    /// Records that `channel` was (re)opened, under a new generation.
    mutating func opened(_ channel: UInt16) {
        lastGeneration += 1
        entries[channel] = Entry(generation: lastGeneration, isOpen: true)
    }

    /// The broker closed `channel` (or we gave it up): events and
    /// settlements of every earlier generation are stale from now on.
    mutating func closed(_ channel: UInt16) {
        entries[channel] = nil
    }

    /// A synchronous method on `channel` failed with a channel error: reopen
    /// it before its next use. The generation is kept until then, as the
    /// loop did before this table existed; only a reopen or ``closed(_:)``
    /// makes older settlements stale.
    mutating func needsReopen(_ channel: UInt16) {
        entries[channel]?.isOpen = false
    }

    /// Whether `channel` is open and usable.
    func isOpen(_ channel: UInt16) -> Bool {
        entries[channel]?.isOpen ?? false
    }

    /// The current generation of `channel`, if it has one.
    func generation(of channel: UInt16) -> UInt64? {
        entries[channel]?.generation
    }

    /// Whether an event or settlement stamped with `generation` still
    /// belongs to the live incarnation of `channel`.
    func isCurrent(channel: UInt16, generation: UInt64) -> Bool {
        entries[channel]?.generation == generation
    }

    /// The connection is gone: every channel with it.
    mutating func removeAll() {
        entries.removeAll()
    }
}
