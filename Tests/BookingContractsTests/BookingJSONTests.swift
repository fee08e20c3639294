import BookingContracts
import Foundation
import TestSupport
import Testing

/// The hand-written booking encoders (BookingJSON.swift) must write what
/// `ContractJSON` writes for the same value, byte for byte: consumers and
/// the schema tests know only the contract, and the handler stores and
/// publishes these bytes. Random values cover every optional present and
/// absent and texts that need each kind of escaping; a field added to a
/// type but not to its writer fails here.
@Suite("Hand-written booking JSON")
struct BookingJSONTests {
    /// Pieces whose encodings differ: escapes, slashes (not escaped),
    /// non-ASCII, characters JSON leaves alone (DEL, U+2028), the empty text.
    static let pieces = ["", "Ada", "Zoë", "🎉", "\"", "\\", "/", "\n", "\r", "\t", "\u{08}", "\u{0C}", "\u{01}",
                         "\u{1F}", "\u{7F}", "\u{2028}", " ", "a b", "https://example.com/x", "+491701234567", "1"]

    static func text(_ g: inout SplitMix) -> String {
        (0..<Int.random(in: 0...4, using: &g)).map { _ in pieces.randomElement(using: &g)! }.joined()
    }

    static func maybe(_ g: inout SplitMix) -> String? { Bool.random(using: &g) ? text(&g) : nil }

    static func attendees(_ g: inout SplitMix) -> [Attendee] {
        (0..<Int.random(in: 0...3, using: &g)).map { _ in Attendee(name: text(&g), email: text(&g), phone: text(&g)) }
    }

    static func booking(_ g: inout SplitMix) -> Booking {
        Booking(id: text(&g), room: text(&g), date: text(&g), start: text(&g), end: text(&g), timeZone: text(&g),
                startsAt: text(&g), endsAt: text(&g), title: text(&g), description: maybe(&g),
                status: BookingStatus.allCases.randomElement(using: &g)!, attendees: attendees(&g),
                requestedBy: maybe(&g), version: Int.random(in: -3...Int.max, using: &g), cancelReason: maybe(&g),
                series: Bool.random(using: &g)
                    ? SeriesRef(id: text(&g), index: Int.random(in: 0...500, using: &g),
                                count: Int.random(in: Int.min...Int.max, using: &g), version: Int.random(in: 1...9, using: &g))
                    : nil)
    }

    static func event(_ g: inout SplitMix) -> BookingEvent {
        var previous: BookingSnapshot?
        if Bool.random(using: &g) {
            previous = BookingSnapshot(booking(&g))
        }
        let released: Bool? = [nil, true, false].randomElement(using: &g)!
        return BookingEvent(eventId: text(&g), occurredAt: text(&g), booking: booking(&g), previous: previous, released: released)
    }

    /// Bytes, not strings: `String` equality is canonical equivalence, which
    /// would let a differently normalised text pass.
    static func same(_ written: some Collection<UInt8>, _ reference: Data, _ what: String) {
        #expect(Array(written) == Array(reference),
                "\(what): \(String(decoding: written, as: UTF8.self)) vs \(String(decoding: reference, as: UTF8.self))")
    }

    @Test func aBookingIsWhatTheEncoderWrites() throws {
        var g = SplitMix(seed: 1)
        for _ in 0..<400 {
            let b = Self.booking(&g)
            Self.same(EncodedBooking(b).json, try ContractJSON.encode(b), "booking")
            var view: [UInt8] = []
            b.appendJSON(to: &view, contacts: false)
            Self.same(view, try ContractJSON.encode(BookingView(b, contacts: false)), "booking without contacts")
            var full: [UInt8] = []
            b.appendJSON(to: &full, contacts: true)
            Self.same(full, try ContractJSON.encode(BookingView(b, contacts: true)), "booking view with contacts")
        }
    }

    @Test func aSnapshotIsWhatTheEncoderWrites() throws {
        var g = SplitMix(seed: 2)
        for _ in 0..<400 {
            let snapshot = BookingSnapshot(Self.booking(&g))
            Self.same(snapshot.json, try ContractJSON.encode(snapshot), "snapshot")
            var view: [UInt8] = []
            snapshot.appendBusyJSON(to: &view)
            Self.same(view, try ContractJSON.encode(PublicSnapshot(snapshot)), "public snapshot")
        }
    }

    @Test func thePublicCopyIsWhatTheEncoderWrites() throws {
        var g = SplitMix(seed: 3)
        var sawPrevious = false, sawReleasedFalse = false
        for _ in 0..<400 {
            let event = Self.event(&g)
            sawPrevious = sawPrevious || event.previous != nil
            sawReleasedFalse = sawReleasedFalse || event.released == false
            Self.same(event.publicJSON, try ContractJSON.encode(PublicBookingEvent(event)), "public event")
            // The busy view: nobody's title, attendees or requester reaches booking.public.
            let decoded = try ContractJSON.decode(PublicBookingEvent.self, from: Data(event.publicJSON))
            #expect(decoded.booking.isBusy && decoded.booking.attendees == nil && decoded.booking.requestedBy == nil)
            // And the busy view of a booking alone, written directly.
            Self.same(event.booking.busyJSON, try ContractJSON.encode(BookingView(busy: event.booking)), "busy view")
        }
        #expect(sawPrevious && sawReleasedFalse, "the random events cover the optional fields")
    }

    /// The fixtures the other contract tests use, spelled out once: the
    /// writers are not only self-consistent with random input.
    @Test func theFixtureBookingIsWrittenAsTheContractShowsIt() {
        let json = String(decoding: EncodedBooking(Fixtures.booking).json, as: UTF8.self)
        #expect(json.hasPrefix(#"{"attendees":[{"email":"ada@example.com","name":"Ada Lovelace","phone":"+491701234567"}],"date":"2026-11-23","#))
        #expect(json.hasSuffix(#""status":"confirmed","timeZone":"Europe/Berlin","title":"Sprint review","version":2}"#))
    }
}
