/// Word operations on ``SlotMask`` for suggestions: where a run of `n`
/// slots fits, first and last slot, the set slots in order.
extension SlotMask {
    /// Bit `i` of the result is bit `i + n` of this mask.
    func shiftedDown(by n: Int) -> SlotMask {
        if n <= 0 { return self }
        if n >= Self.count { return .empty }
        if n >= 64 { return SlotMask(lo: hi >> UInt64(n - 64), hi: 0) }
        return SlotMask(lo: (lo >> UInt64(n)) | (hi << UInt64(64 - n)), hi: hi >> UInt64(n))
    }

    /// The slots `s` such that `s, s+1, …, s+n-1` are all in the mask: the
    /// starts of a run of `n` slots (AND of shifted copies, doubling the
    /// covered length each step).
    func fits(_ n: Int) -> SlotMask {
        guard n > 1 else { return n == 1 ? self : .all }
        var result = self
        var covered = 1
        while covered < n {
            let take = min(covered, n - covered)
            result = result.intersection(result.shiftedDown(by: take))
            covered += take
        }
        return result
    }

    /// The slots `from..<to` (clamped to the day).
    static func slots(_ from: Int, _ to: Int) -> SlotMask {
        SlotMask(fromMinute: max(0, from) * minutes, toMinute: min(count, to) * minutes)
    }

    /// The lowest set slot, or nil.
    var firstSlot: Int? {
        if lo != 0 { return lo.trailingZeroBitCount }
        if hi != 0 { return 64 + hi.trailingZeroBitCount }
        return nil
    }

    /// The highest set slot, or nil.
    var lastSlot: Int? {
        if hi != 0 { return 127 - hi.leadingZeroBitCount }
        if lo != 0 { return 63 - lo.leadingZeroBitCount }
        return nil
    }

    /// The set slots in increasing order.
    var slotList: [Int] {
        var result: [Int] = []
        var word = lo
        while word != 0 {
            result.append(word.trailingZeroBitCount)
            word &= word - 1
        }
        word = hi
        while word != 0 {
            result.append(64 + word.trailingZeroBitCount)
            word &= word - 1
        }
        return result
    }

    /// The slots whose start minute is a multiple of `stepMinutes`.
    static func steps(of stepMinutes: Int) -> SlotMask {
        var mask = SlotMask()
        for slot in 0..<count where (slot * minutes) % stepMinutes == 0 { mask.insert(slot) }
        return mask
    }
}
