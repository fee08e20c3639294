/// 64-bit FNV-1a: the one hash behind the set's stable ids and keys — the
/// inbox's fingerprint of a command, `availability.changed` event ids, the
/// spool's series file names, the ids of failed messages. Stable across
/// runs and machines (Swift's `Hasher` is seeded per process); not a secret,
/// only equality matters.
public struct FNV1a64: Sendable, Equatable {
    /// The standard offset basis.
    public static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    static let prime: UInt64 = 0x0000_0100_0000_01b3

    public private(set) var value: UInt64

    /// Starts from `seed` (the standard offset basis unless told otherwise).
    public init(seed: UInt64 = FNV1a64.offsetBasis) {
        value = seed
    }

    /// Mixes in `bytes` as they are.
    public mutating func combine(_ bytes: some Sequence<UInt8>) {
        for byte in bytes {
            value = (value ^ UInt64(byte)) &* Self.prime
        }
    }

    /// Mixes in one byte.
    public mutating func combine(byte: UInt8) {
        value = (value ^ UInt64(byte)) &* Self.prime
    }

    /// Mixes in one field followed by a NUL, so that the fields ("ab", "c")
    /// and ("a", "bc") differ.
    public mutating func add(field bytes: some Sequence<UInt8>) {
        combine(bytes)
        combine(byte: 0)
    }

    public mutating func add(field text: String) { add(field: text.utf8) }

    /// The hash of `bytes` from `seed`.
    public static func hash(_ bytes: some Sequence<UInt8>, seed: UInt64 = offsetBasis) -> UInt64 {
        var h = FNV1a64(seed: seed)
        h.combine(bytes)
        return h.value
    }

    /// 16 lower-case hex digits.
    public var hex: String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
