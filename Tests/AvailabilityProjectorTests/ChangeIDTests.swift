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

    /// A redelivered event must get the id its first delivery got, also
    /// when a newer projector applies it: the id's text may not change.
    @Test func theIDKeepsItsFormat() {
        let days = [DayChange(day: RoomDay(room: "Berlin", date: "2026-11-23"), timeZone: "Europe/Berlin", avail: ["07:00-09:00"]),
                    DayChange(day: RoomDay(room: "Zoë 🎉", date: "2027-01-01"), timeZone: "UTC", avail: []),
                    DayChange(day: RoomDay(room: "", date: ""), timeZone: "UTC", avail: ["00:00-24:00", "a"])]
        for (index, day) in days.enumerated() {
            for cause in ["", "ev-1", "bk-1:3", String(repeating: "x", count: 300)] {
                let text = Array("\(cause)\u{0}\(day.day.room)\u{0}\(day.day.date)\u{0}\(day.avail.joined(separator: ","))".utf8)
                let hex = String(format: "%016llx%016llx", FNV1a64.hash(text), FNV1a64.hash(text, seed: 0x84222325_cbf29ce4))
                let chars = Array(hex)
                let expected = [chars[0..<8], chars[8..<12], chars[12..<16], chars[16..<20], chars[20..<32]]
                    .map { String($0) }.joined(separator: "-")
                #expect(ChangePublisher.eventID(cause: cause, day) == expected, "day \(index), cause \(cause.prefix(10))")
            }
        }
    }

    @Test func aRoomChangeKeepsItsEventsID() {
        let room = Room(name: "Berlin", capacity: 8)
        #expect(EventConsumer.cause(of: .room(room, occurredAt: "2026-11-22T10:00:00Z"), messageID: "ev-room") == "ev-room")
    }
}
