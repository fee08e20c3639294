import BookingContracts
import Foundation
import Testing

/// Replies from a newer handler: a booking status this build does not know
/// is ignored (contract v1.1), not taken for an unreadable reply.
@Suite("Replies from a newer handler")
struct NewerReplyTests {
    /// `body` with the status of the booking at `path` (a key, or `bookings`
    /// and an index) replaced by `status`.
    static func withStatus(_ status: String, in reply: some Encodable, bookingAt index: Int? = nil) throws -> [UInt8] {
        var object = try #require(try JSONSerialization.jsonObject(with: ContractJSON.encode(reply)) as? [String: Any])
        if let index {
            var list = try #require(object["bookings"] as? [[String: Any]])
            list[index]["status"] = status
            object["bookings"] = list
        } else {
            var booking = try #require(object["booking"] as? [String: Any])
            booking["status"] = status
            object["booking"] = booking
        }
        return [UInt8](try JSONSerialization.data(withJSONObject: object))
    }

    @Test func aCommandReplyWithANewerStatusIsReadInOutline() throws {
        let body = try Self.withStatus("tentative", in: CommandReply.booking(Fixtures.booking))
        #expect(throws: (any Error).self) { try ContractJSON.decode(CommandReply.self, from: body) }
        let outline = try ContractJSON.decode(ReplyOutline.self, from: body)
        #expect(outline == ReplyOutline(ok: true, bookingId: Fixtures.bookingId, status: "tentative"))

        let refused = try ContractJSON.encode(CommandReply.failure(ErrorCode(2999), "a newer refusal"))
        #expect(try ContractJSON.decode(ReplyOutline.self, from: refused)
                == ReplyOutline(ok: false, errorCode: 2999, errorText: "a newer refusal"))
        // Only `ok` is needed; anything else in another shape is left nil.
        #expect(try ContractJSON.decode(ReplyOutline.self, from: Data(#"{"ok":true,"booking":[1],"error":"x"}"#.utf8))
                == ReplyOutline(ok: true))
        #expect(throws: (any Error).self) { try ContractJSON.decode(ReplyOutline.self, from: Data(#"{"booking":{}}"#.utf8)) }
    }

    @Test func aListLeavesOutBookingsWithANewerStatusAndKeepsTheRest() throws {
        let views = [Fixtures.booking, Fixtures.pendingBooking, Fixtures.cancelledBooking].enumerated().map { index, booking in
            var booking = booking
            booking.id = "booking-\(index)"
            return BookingView(booking, contacts: true)
        }
        let body = try Self.withStatus("tentative", in: BookingQueryReply.bookings(views, nextCursor: "next-page"), bookingAt: 1)
        let read = try BookingQueryReply.decodeIgnoringUnknownStatuses(body)
        #expect(read.reply == .bookings([views[0], views[2]], nextCursor: "next-page"))
        #expect(read.leftOut == [UnknownStatusBooking(id: "booking-1", status: "tentative")])

        // A readable reply is read as ever, with nothing left out.
        let plain = try BookingQueryReply.decodeIgnoringUnknownStatuses([UInt8](try ContractJSON.encode(
            BookingQueryReply.bookings(views, nextCursor: nil))))
        #expect(plain.reply == .bookings(views, nextCursor: nil) && plain.leftOut.isEmpty)
    }

    @Test func aSingleBookingWithANewerStatusIsNamedNotDropped() throws {
        let body = try Self.withStatus("tentative", in: BookingQueryReply.booking(BookingView(Fixtures.booking, contacts: true)))
        #expect(throws: UnknownStatusBooking(id: Fixtures.bookingId, status: "tentative")) {
            try BookingQueryReply.decodeIgnoringUnknownStatuses(body)
        }
    }

    /// Leniency is for unknown status values only: a list whose bookings
    /// are broken in another way stays an error.
    @Test func aListUnreadableForAnotherReasonStaysUnreadable() throws {
        let view = BookingView(Fixtures.booking, contacts: true)
        var object = try #require(try JSONSerialization.jsonObject(
            with: ContractJSON.encode(BookingQueryReply.bookings([view], nextCursor: nil))) as? [String: Any])
        var list = try #require(object["bookings"] as? [[String: Any]])
        list[0]["version"] = "two"
        object["bookings"] = list
        #expect(throws: DecodingError.self) {
            try BookingQueryReply.decodeIgnoringUnknownStatuses([UInt8](try JSONSerialization.data(withJSONObject: object)))
        }
    }
}
