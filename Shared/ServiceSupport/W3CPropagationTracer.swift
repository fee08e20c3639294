import Synchronization
import Tracing

/// A W3C trace context: the ids a `traceparent` header carries, and the
/// `tracestate` that goes with it.
public struct W3CSpanContext: Sendable, Hashable {
    /// The trace id (128 bits, high half first).
    public var traceID: (high: UInt64, low: UInt64) {
        get { (traceHigh, traceLow) }
        set { (traceHigh, traceLow) = newValue }
    }
    private var traceHigh: UInt64
    private var traceLow: UInt64
    /// The span id (64 bits).
    public var spanID: UInt64
    /// The trace flags (bit 0: sampled).
    public var flags: UInt8
    /// The `tracestate` header, as received.
    public var traceState: String?

    public init(traceID: (high: UInt64, low: UInt64), spanID: UInt64, flags: UInt8 = 1, traceState: String? = nil) {
        (traceHigh, traceLow) = traceID
        self.spanID = spanID
        self.flags = flags
        self.traceState = traceState
    }

    /// Parses a version-00 `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`);
    /// nil for anything else, all-zero ids included (W3C: such a header
    /// is ignored and a new trace starts).
    public init?(traceParent: String, traceState: String? = nil) {
        let bytes = Array(traceParent.utf8)
        // Later versions may append fields after a dash; version 00 may not.
        guard bytes.count == 55 || (bytes.count > 55 && bytes[55] == UInt8(ascii: "-") && bytes[0...1] != [0x30, 0x30]),
              bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-"),
              let version = Self.hex(bytes[0..<2]), version != 0xff,
              let high = Self.hex(bytes[3..<19]), let low = Self.hex(bytes[19..<35]),
              let span = Self.hex(bytes[36..<52]), let flags = Self.hex(bytes[53..<55]),
              high != 0 || low != 0, span != 0 else { return nil }
        self.init(traceID: (high, low), spanID: span, flags: UInt8(flags),
                  traceState: traceState.flatMap { $0.isEmpty ? nil : $0 })
    }

    /// The `traceparent` header value (version 00). Written into one
    /// buffer: it is made for every message a service publishes.
    public var traceParent: String {
        String(unsafeUninitializedCapacity: 55) { buffer in
            buffer[0] = UInt8(ascii: "0")
            buffer[1] = UInt8(ascii: "0")
            buffer[2] = UInt8(ascii: "-")
            Self.writeHex(traceHigh, digits: 16, into: buffer, at: 3)
            Self.writeHex(traceLow, digits: 16, into: buffer, at: 19)
            buffer[35] = UInt8(ascii: "-")
            Self.writeHex(spanID, digits: 16, into: buffer, at: 36)
            buffer[52] = UInt8(ascii: "-")
            Self.writeHex(UInt64(flags), digits: 2, into: buffer, at: 53)
            return 55
        }
    }

    /// The trace id as 32 lowercase hex digits.
    public var traceIDHex: String {
        String(unsafeUninitializedCapacity: 32) { buffer in
            Self.writeHex(traceHigh, digits: 16, into: buffer, at: 0)
            Self.writeHex(traceLow, digits: 16, into: buffer, at: 16)
            return 32
        }
    }

    /// The span id as 16 lowercase hex digits.
    public var spanIDHex: String {
        String(unsafeUninitializedCapacity: 16) { buffer in
            Self.writeHex(spanID, digits: 16, into: buffer, at: 0)
            return 16
        }
    }

    private static func writeHex(_ value: UInt64, digits: Int, into buffer: UnsafeMutableBufferPointer<UInt8>, at start: Int) {
        var value = value
        for index in stride(from: start + digits - 1, through: start, by: -1) {
            let nibble = UInt8(truncatingIfNeeded: value & 0xf)
            buffer[index] = nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
            value >>= 4
        }
    }

    private static func hex(_ digits: ArraySlice<UInt8>) -> UInt64? {
        var value: UInt64 = 0
        for digit in digits {
            let nibble: UInt8
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = digit - UInt8(ascii: "a") + 10
            default: return nil  // W3C: lowercase only
            }
            value = value << 4 | UInt64(nibble)
        }
        return value
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.traceHigh == b.traceHigh && a.traceLow == b.traceLow && a.spanID == b.spanID && a.flags == b.flags
            && a.traceState == b.traceState
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(traceHigh)
        hasher.combine(traceLow)
        hasher.combine(spanID)
    }
}

/// Where ``W3CPropagationTracer`` keeps a span's ids in a `ServiceContext`.
public enum W3CSpanContextKey: ServiceContextKey {
    public typealias Value = W3CSpanContext
}

/// The tracer of a service that exports nothing: it carries the W3C
/// trace context through the set — a span's trace id is its parent's,
/// its span id new — and records nothing.
///
/// Bootstrapped when tracing is on but `OTEL_EXPORTER_OTLP_ENDPOINT` is
/// not set (``TraceSetup``), so the contract's trace ids still reach
/// replies, events, retries and gateway calls (and log lines) at the cost
/// of two random numbers and a header per message.
public struct W3CPropagationTracer: Tracer {
    public typealias Span = PropagatingSpan
    private let ids = IDSource()

    public init() {}

    public func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> PropagatingSpan {
        var context = context()
        let parent = context[W3CSpanContextKey.self]
        let traceID = parent?.traceID ?? (ids.next(), ids.nonZero())
        let spanID = ids.nonZero()
        context[W3CSpanContextKey.self] = W3CSpanContext(traceID: traceID, spanID: spanID, flags: parent?.flags ?? 1,
                                                         traceState: parent?.traceState)
        return PropagatingSpan(context: context)
    }

    public func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let header = extractor.extract(key: "traceparent", from: carrier),
              let parent = W3CSpanContext(traceParent: header, traceState: extractor.extract(key: "tracestate", from: carrier))
        else { return }
        context[W3CSpanContextKey.self] = parent
    }

    public func inject<Carrier, Inject: Injector>(
        _ context: ServiceContext, into carrier: inout Carrier, using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let span = context[W3CSpanContextKey.self] else { return }
        injector.inject(span.traceParent, forKey: "traceparent", into: &carrier)
        if let state = span.traceState { injector.inject(state, forKey: "tracestate", into: &carrier) }
    }

    public func forceFlush() {}

    /// Ids without a system call each: SplitMix64 over an atomic counter
    /// seeded from the system's generator — unpredictable enough for ids
    /// that only have to be unique (W3C asks for randomness, not secrecy).
    final class IDSource: Sendable {
        private let state: Atomic<UInt64>

        init() {
            var generator = SystemRandomNumberGenerator()
            state = Atomic(generator.next())
        }

        func next() -> UInt64 {
            var z = state.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }

        func nonZero() -> UInt64 {
            while true {
                let value = next()
                if value != 0 { return value }
            }
        }
    }

    /// A span that only carries its context: nothing is recorded or sent.
    public struct PropagatingSpan: Tracing.Span {
        public let context: ServiceContext
        public var isRecording: Bool { false }
        public var operationName: String {
            get { "" }
            nonmutating set {}
        }
        public var attributes: SpanAttributes {
            get { [:] }
            nonmutating set {}
        }
        public func setStatus(_ status: SpanStatus) {}
        public func addLink(_ link: SpanLink) {}
        public func addEvent(_ event: SpanEvent) {}
        public func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes,
                                                        at instant: @autoclosure () -> Instant) {}
        public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {}
    }
}
