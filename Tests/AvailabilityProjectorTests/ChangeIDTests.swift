import BookingContracts
import Foundation
import Testing
@testable import AvailabilityProjector

/// The id of an `availability.changed` is the same in every replica that
/// applies the same booking state, whichever event carried that state.
@Suite("availability.changed ids")
struct ChangeIDTests {
    func event(_ type: EventType, version: Int, messageID: String) throws -> (ModelChange, String) {
        let booking = Booking(id: "bk-1", room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:00", timeZone: "Europe/Berlin",
                              startsAt: "2026-11-23T08:00:00Z", endsAt: "2026-11-23T09:00:00Z", title: "T", description: nil,
                              status: .confirmed, attendees: [], requestedBy: nil, version: version)
        let body = try ContractJSON.encode(BookingEvent(eventId: messageID, occurredAt: "2026-11-22T10:00:00Z", booking: booking))
        guard case .change(let change) = EventReader.read(type: type.rawValue, body: [UInt8](body)) else {
            throw CancellationError()
        }
        return (change, messageID)
    }

    @Test func createdAndConfirmedOfOneVersionGiveOneIDOtherVersionsAnother() throws {
        let (created, createdID) = try event(.bookingCreated, version: 1, messageID: "ev-created")
        let (confirmed, confirmedID) = try event(.bookingConfirmed, version: 1, messageID: "ev-confirmed")
        let (changed, changedID) = try event(.bookingUpdated, version: 2, messageID: "ev-updated")
        let a = try #require(EventConsumer.cause(of: created, messageID: createdID))
        let b = try #require(EventConsumer.cause(of: confirmed, messageID: confirmedID))
        let c = try #require(EventConsumer.cause(of: changed, messageID: changedID))
        #expect(a == b, "one booking state, one cause, whichever event carried it")
        #expect(a != c)
        let day = DayChange(day: RoomDay(room: "Berlin", date: "2026-11-23"), timeZone: "Europe/Berlin", avail: ["07:00-09:00"])
        #expect(ChangePublisher.eventID(cause: a, day) == ChangePublisher.eventID(cause: b, day))
        #expect(ChangePublisher.eventID(cause: a, day) != ChangePublisher.eventID(cause: c, day))
    }

    @Test func aRoomChangeKeepsItsEventsID() {
        let room = Room(name: "Berlin", capacity: 8)
        #expect(EventConsumer.cause(of: .room(room, occurredAt: "2026-11-22T10:00:00Z"), messageID: "ev-room") == "ev-room")
    }
}
