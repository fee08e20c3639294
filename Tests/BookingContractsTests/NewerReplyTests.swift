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
        #expect(ReplyOutline.read(body) == ReplyOutline(bookingId: Fixtures.bookingId, status: "tentative",
                                                        unknown: [UnknownStatusBooking(id: Fixtures.bookingId, status: "tentative")]))

        // A series whose second occurrence has a newer status.
        var second = Fixtures.booking
        second.id = "occurrence-2"
        let series = CommandReply.series(SeriesBooked(id: "series-1", recurrence: Recurrence(.weekly, count: 2),
                                                      version: 1, bookings: [Fixtures.booking, second], skipped: []))
        var object = try #require(try JSONSerialization.jsonObject(with: ContractJSON.encode(series)) as? [String: Any])
        var inner = try #require(object["series"] as? [String: Any])
        var bookings = try #require(inner["bookings"] as? [[String: Any]])
        bookings[1]["status"] = "tentative"
        inner["bookings"] = bookings
        object["series"] = inner
        #expect(ReplyOutline.read([UInt8](try JSONSerialization.data(withJSONObject: object)))
                == ReplyOutline(seriesId: "series-1", unknown: [UnknownStatusBooking(id: "occurrence-2", status: "tentative")]))
    }

    /// Only an unknown status is forgiven: a failure, a reply broken in any
    /// other way, or one with nothing unknown has no outline.
    @Test func anythingElseHasNoOutline() throws {
        var broken = try #require(try JSONSerialization.jsonObject(with: Data(try Self.withStatus(
            "tentative", in: CommandReply.booking(Fixtures.booking)))) as? [String: Any])
        var booking = try #require(broken["booking"] as? [String: Any])
        booking["version"] = "two"
        broken["booking"] = booking
        for body in [#"{"ok":true}"#, #"{"ok":true,"booking":{"id":"b-1","status":"tentative"}}"#,
                     #"{"booking":{"id":"b-1","status":"tentative"}}"#,
                     #"{"ok":false,"error":{"code":2999,"text":"a newer refusal"}}"#,
                     String(decoding: try JSONSerialization.data(withJSONObject: broken), as: UTF8.self),
                     String(decoding: try ContractJSON.encode(CommandReply.booking(Fixtures.booking)), as: UTF8.self),
                     "not json"] {
            #expect(ReplyOutline.read(Array(body.utf8)) == nil, "\(body)")
        }
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
        // Without `ok`, or with nothing but the status, it is no reply.
        for body in [#"{"booking":{"id":"b-1","status":"tentative"}}"#, #"{"ok":true,"booking":{"id":"b-1","status":"tentative"}}"#] {
            #expect(throws: DecodingError.self, "\(body)") { try BookingQueryReply.decodeIgnoringUnknownStatuses(Array(body.utf8)) }
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
