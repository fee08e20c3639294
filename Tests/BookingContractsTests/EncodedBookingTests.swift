import BookingContracts
import Foundation
import Testing

/// The booking handler builds event and reply bodies around a booking
/// encoded once; consumers must not be able to tell.
@Suite("Pre-encoded bookings")
struct EncodedBookingTests {
    /// A booking whose texts need every kind of JSON escaping.
    static var awkward: Booking {
        var b = Fixtures.booking
        b.title = "Quote \" backslash \\ slash / tab \t newline \n bell \u{07} del \u{7F} Ümlaut 🎉"
        b.description = "line\r\nfeed\u{0C}back\u{08}"
        return b
    }

    @Test(arguments: [Fixtures.booking, Fixtures.pendingBooking, Fixtures.cancelledBooking, awkward])
    func eventIsWhatTheEncoderWrites(booking: Booking) throws {
        let encoded = EncodedBooking(booking)
        for (id, at) in [(Fixtures.bookingId, Fixtures.occurredAt), ("we\"ird\\id\u{01}", "2026-11-22T10:00:00Z")] {
            let spliced = encoded.event(eventId: id, occurredAt: at)
            let reference = try ContractJSON.encode(BookingEvent(eventId: id, occurredAt: at, booking: booking))
            #expect(String(decoding: spliced, as: UTF8.self) == String(decoding: reference, as: UTF8.self))
            #expect(try ContractJSON.decode(BookingEvent.self, from: spliced).booking == booking)
            // With `previous` (v1.1): the snapshot of another version, last.
            let previous = BookingSnapshot(Self.awkward)
            let withPrevious = encoded.event(eventId: id, occurredAt: at, previous: try ContractJSON.encode(previous))
            let referenceWithPrevious = try ContractJSON.encode(
                BookingEvent(eventId: id, occurredAt: at, booking: booking, previous: previous))
            #expect(String(decoding: withPrevious, as: UTF8.self) == String(decoding: referenceWithPrevious, as: UTF8.self))
            #expect(try ContractJSON.decode(BookingEvent.self, from: withPrevious).previous == previous)
            // With `released` (v1.1), after `previous`.
            let released = encoded.event(eventId: id, occurredAt: at, previous: try ContractJSON.encode(previous), released: true)
            let referenceReleased = try ContractJSON.encode(
                BookingEvent(eventId: id, occurredAt: at, booking: booking, previous: previous, released: true))
            #expect(String(decoding: released, as: UTF8.self) == String(decoding: referenceReleased, as: UTF8.self))
            #expect(try ContractJSON.decode(BookingEvent.self, from: released).released == true)
        }
    }

    @Test(arguments: [Fixtures.booking, awkward])
    func replyIsWhatTheEncoderWrites(booking: Booking) throws {
        let encoded = EncodedBooking(booking)
        let reference = try ContractJSON.encode(CommandReply.booking(booking))
        #expect(String(decoding: encoded.reply, as: UTF8.self) == String(decoding: reference, as: UTF8.self))
        #expect(try ContractJSON.decode(CommandReply.self, from: encoded.reply) == .booking(booking))
    }
}
