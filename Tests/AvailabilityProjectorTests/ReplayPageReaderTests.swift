import BookingContracts
import Foundation
import Testing
@testable import AvailabilityProjector

/// A replay page (``ReplayPage``) gives the read model the same booking
/// states as the one-booking replay events of the same bookings, though
/// the projector decodes only the fields it keeps.
@Suite("Replay page reader")
struct ReplayPageReaderTests {
    static func booking(_ i: Int, status: BookingStatus) -> Booking {
        var booking = Booking(id: "bk-\(i)", room: i % 2 == 0 ? "Berlin" : "Zürich \"Nord\"", date: "2026-11-2\(i % 7 + 1)",
                              start: String(format: "%02d:15", 8 + i), end: String(format: "%02d:45", 9 + i),
                              timeZone: "Europe/Berlin", startsAt: "2026-11-23T08:00:00Z", endsAt: "2026-11-23T09:00:00Z",
                              title: "Weekly \\ sync \(i)", description: i == 2 ? "with \"quotes\" and ümlauts" : nil, status: status,
                              attendees: [Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567"),
                                          Attendee(name: "Grace Hopper", email: "grace@example.com", phone: "+41441234567")],
                              requestedBy: "calendar-app", version: i + 1)
        booking.cancelReason = status == .cancelled ? "moved" : nil
        return booking
    }

    static let bookings = [booking(0, status: .confirmed), booking(1, status: .pending), booking(2, status: .cancelled),
                           booking(3, status: .completed), booking(4, status: .held), booking(5, status: .waitlisted)]

    static func states(_ changes: [ModelChange]) -> [BookingState] {
        changes.compactMap { if case .booking(let state) = $0 { state } else { nil } }
    }

    @Test func aPageGivesTheStatesItsEventsWouldGive() throws {
        let body = [UInt8](try ContractJSON.encode(ReplayPage(bookings: Self.bookings)))
        let paged = try #require(EventReader.readPage(body))
        let single = try Self.bookings.map { booking -> ModelChange in
            let event = try ContractJSON.encode(BookingEvent(eventId: "e", occurredAt: "2026-11-22T10:00:00Z", booking: booking))
            guard case .change(let change) = EventReader.read(type: ReplayStream.eventType(for: booking.status).rawValue,
                                                              body: [UInt8](event)) else { throw CancellationError() }
            return change
        }
        #expect(paged.count == Self.bookings.count)
        #expect(Self.states(paged) == Self.states(single))
        #expect(Self.states(paged).map(\.startMinute) == (0..<6).map { (8 + $0) * 60 + 15 })
    }

    @Test func theSplicedBodyReadsLikeTheEncodedOne() throws {
        let spliced = ReplayPage.body(encodedBookings: try Self.bookings.map { [UInt8](try ContractJSON.encode($0)) })
        #expect(spliced == [UInt8](try ContractJSON.encode(ReplayPage(bookings: Self.bookings))),
                "the handler's page is byte for byte what the encoder writes")
        #expect(ReplayPage.body(encodedBookings: [[UInt8]]()) == Array(#"{"bookings":[]}"#.utf8))
        #expect(EventReader.readPage(ReplayPage.body(encodedBookings: [[UInt8]]())).map(\.count) == 0)
    }

    @Test func anUnreadablePageIsRefusedWhole() throws {
        var bad = Self.bookings
        bad[3].start = "25:00"
        #expect(EventReader.readPage([UInt8](try ContractJSON.encode(ReplayPage(bookings: bad)))) == nil)
        #expect(EventReader.readPage(Array("not json".utf8)) == nil)
        #expect(EventReader.readPage(Array(#"{"bookings":[{"id":"x"}]}"#.utf8)) == nil)
        #expect(EventReader.readPage(Array(#"{"rooms":[]}"#.utf8)) == nil)
    }

    /// Contract v1.1: consumers ignore unknown status values. A page with
    /// one is read whole, the booking kept in its place as "keep what you
    /// know"; an event with one is acked as unknown, not dead-lettered.
    @Test func anUnknownStatusIsIgnoredNotRefused() throws {
        var json = String(decoding: try ContractJSON.encode(ReplayPage(bookings: Self.bookings)), as: UTF8.self)
        json = json.replacingOccurrences(of: #""status":"pending""#, with: #""status":"noShow""#)
        let changes = try #require(EventReader.readPage(Array(json.utf8)))
        #expect(changes.count == Self.bookings.count)
        guard case .keepBooking(let id) = changes[1] else { Issue.record("\(changes[1])"); return }
        #expect(id == "bk-1")
        #expect(Self.states(changes).map(\.id) == ["bk-0", "bk-2", "bk-3", "bk-4", "bk-5"])

        let event = try ContractJSON.encode(BookingEvent(eventId: "e", occurredAt: "2026-11-22T10:00:00Z",
                                                         booking: Self.bookings[0]))
        let unknown = String(decoding: event, as: UTF8.self)
            .replacingOccurrences(of: #""status":"confirmed""#, with: #""status":"expired""#)
        guard case .unknownStatus(let bookingId, let status) = EventReader.read(type: "booking.updated", body: Array(unknown.utf8)) else {
            Issue.record("not read as an unknown status"); return
        }
        #expect(bookingId == "bk-0" && status == "expired")

        // A booking event type this projector does not know carries the
        // whole booking like any other: read as its state.
        guard case .change(.booking(let state)) = EventReader.read(type: "booking.expired", body: [UInt8](event)) else {
            Issue.record("a new booking event type not read as a booking state"); return
        }
        #expect(state.id == "bk-0" && state.version == 1)
        guard case .change(.booking) = EventReader.read(type: "booking.replayed", body: [UInt8](event)) else {
            Issue.record("a new booking event type starting like the replay's not read as a booking state"); return
        }
        guard case .ignored = EventReader.read(type: "booking.expired", body: Array(#"{"something":"else"}"#.utf8)),
              case .ignored = EventReader.read(type: "booking.replay.progress", body: [UInt8](event)),
              case .ignored = EventReader.read(type: "booking.replay", body: [UInt8](event)),
              case .ignored = EventReader.read(type: "room.renamed", body: [UInt8](event)) else {
            Issue.record("an unknown type that is no booking event must be ignored"); return
        }
    }

    @Test func aRebuildAsksForPagesUnlessThePageSizeIsOne() throws {
        let paged = Rebuilder.replayRequest(queue: "availability-projector.replay", replayId: "r", pageSize: 500)
        #expect(paged.bookingsPerMessage == 500)
        let single = Rebuilder.replayRequest(queue: "availability-projector.replay", replayId: "r", pageSize: 1)
        #expect(single.bookingsPerMessage == nil)
        #expect(!String(decoding: try ContractJSON.encode(single), as: UTF8.self).contains("bookingsPerMessage"),
                "a request without pages is the request a handler before pages knows")
        #expect(Rebuilder.defaultReplayPageSize == 500)
    }
}
