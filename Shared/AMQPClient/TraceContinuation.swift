extension MessageTracing {
    /// Gives the `traceparent` in `headers` a span id of its own, keeping
    /// its trace id and flags (`tracestate` stays as it is): the message is
    /// sent again as a child of the one it was, in the same trace.
    ///
    /// For a process that records no spans and runs no tracer — `bookingctl`
    /// sending a dead letter back (`failed retry`) — where a publish would
    /// otherwise copy the dead letter's `traceparent` unchanged and the
    /// retry would be indistinguishable from the original send. A header
    /// that is missing or not a version-00 `traceparent` is left alone (no
    /// trace to continue; the handler starts one).
    ///
    /// - Returns: whether a new `traceparent` was written.
    @discardableResult
    public static func continueTrace(in headers: inout AMQPTable) -> Bool {
        guard let parent = AMQPHeadersExtractor().extract(key: traceParentHeader, from: headers),
              let child = childTraceParent(of: parent) else { return false }
        headers[traceParentHeader] = .string(child)
        return true
    }

    /// `traceParent` (version 00: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`,
    /// neither id all zeros) with a new random span id; nil when it is not one.
    public static func childTraceParent(of traceParent: String,
                                        using generator: inout some RandomNumberGenerator) -> String? {
        let bytes = Array(traceParent.utf8)
        let dashes = [2, 35, 52]
        guard bytes.count == 55, bytes[0] == UInt8(ascii: "0"), bytes[1] == UInt8(ascii: "0"),
              dashes.allSatisfy({ bytes[$0] == UInt8(ascii: "-") }),
              bytes.indices.allSatisfy({ dashes.contains($0) || isLowerHex(bytes[$0]) }),
              bytes[3..<35].contains(where: { $0 != UInt8(ascii: "0") }),
              bytes[36..<52].contains(where: { $0 != UInt8(ascii: "0") }) else { return nil }
        var spanID: UInt64 = 0
        while spanID == 0 { spanID = generator.next() }
        let hex = String(spanID, radix: 16)
        let spanText = String(repeating: "0", count: 16 - hex.count) + hex
        return String(decoding: bytes[0..<36], as: UTF8.self) + spanText + String(decoding: bytes[52...], as: UTF8.self)
    }

    /// ``childTraceParent(of:using:)`` with the system's generator.
    public static func childTraceParent(of traceParent: String) -> String? {
        var generator = SystemRandomNumberGenerator()
        return childTraceParent(of: traceParent, using: &generator)
    }

    /// W3C writes ids in lower-case hex only.
    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}
