import BookingContracts
import Foundation
import Testing

/// docs/contract/examples/*.json decode into the Swift types and encode back
/// to the same JSON: the types and the documented examples agree.
@Suite("Contract examples")
struct ExampleTests {
    private static func exampleFiles() throws -> [URL] {
        try FileManager.default.contentsOfDirectory(at: Repo.examplesDir, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "json" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    private static func reencode<T: Codable>(_ type: T.Type, _ data: Data) throws -> JSONValue {
        try encodedJSON(try ContractJSON.decode(type, from: data))
    }

    @Test func everyExampleRoundTripsThroughItsSwiftType() throws {
        let files = try Self.exampleFiles()
        #expect(files.count >= 20, "examples missing in \(Repo.examplesDir.path)")
        for file in files {
            let schema = file.deletingPathExtension().lastPathComponent.components(separatedBy: "--")[0]
            let data = try Data(contentsOf: file)
            let original = try JSONValue(parsing: data)
            let reencoded: JSONValue
            switch schema {
            case "room.register": reencoded = try Self.reencode(RegisterRoom.self, data)
            case "booking.create": reencoded = try Self.reencode(CreateBooking.self, data)
            case "booking.confirm": reencoded = try Self.reencode(ConfirmBooking.self, data)
            case "booking.cancel":
                // By booking or (v1.1) by series: the command decoder picks.
                reencoded = try JSONValue(parsing: Data(try Command.decode(type: .cancelBooking, body: [UInt8](data)).encodedBody()))
            case "booking.reject": reencoded = try Self.reencode(RejectBooking.self, data)
            case "booking.update": reencoded = try Self.reencode(UpdateBooking.self, data)
            case "booking.checkin": reencoded = try Self.reencode(CheckinBooking.self, data)
            case "booking.get": reencoded = try Self.reencode(GetBooking.self, data)
            case "booking.list": reencoded = try Self.reencode(ListBookings.self, data)
            case "booking.reply": reencoded = try Self.reencode(BookingQueryReply.self, data)
            case "public.booking-event": reencoded = try Self.reencode(PublicBookingEvent.self, data)
            case "booking.reschedule": reencoded = try Self.reencode(RescheduleBooking.self, data)
            case "booking.replay": reencoded = try Self.reencode(ReplayBookings.self, data)
            case "booking.replay.done": reencoded = try Self.reencode(ReplaySummary.self, data)
            case "booking.replay.page": reencoded = try Self.reencode(ReplayPage.self, data)
            case "reply": reencoded = try Self.reencode(CommandReply.self, data)
            case "room.registered": reencoded = try Self.reencode(RoomRegistered.self, data)
            case "room.close": reencoded = try Self.reencode(CloseRoom.self, data)
            case "room.reopen": reencoded = try Self.reencode(ReopenRoom.self, data)
            case "room.closed", "room.reopened": reencoded = try Self.reencode(RoomClosureEvent.self, data)
            case "room.closures": reencoded = try Self.reencode(ListClosures.self, data)
            case "booking.created", "booking.confirmed", "booking.cancelled", "booking.rescheduled", "booking.rejected",
                 "booking.updated", "booking.started", "booking.completed", "booking.submitted":
                reencoded = try Self.reencode(BookingEvent.self, data)
            case "pass.delivered": reencoded = try Self.reencode(PassDelivered.self, data)
            case "pass.failed": reencoded = try Self.reencode(PassFailedEvent.self, data)
            case "availability.changed": reencoded = try Self.reencode(AvailabilityChanged.self, data)
            case "availability.query": reencoded = try Self.reencode(AvailabilityQuery.self, data)
            case "availability.reply": reencoded = try Self.reencode(AvailabilityReply.self, data)
            case "availability.suggest": reencoded = try Self.reencode(SuggestQuery.self, data)
            case "availability.suggestions": reencoded = try Self.reencode(SuggestReply.self, data)
            case "sendpass.request": reencoded = try Self.reencode(SendPassRequest.self, data)
            case "sendpass.response": reencoded = try Self.reencode(SendPassResponse.self, data)
            case "passes.failed": reencoded = try Self.reencode(FailedPass.self, data)
            case "notify.request": reencoded = try Self.reencode(NotifyRequest.self, data)
            case "notify.response": reencoded = try Self.reencode(SendPassResponse.self, data)
            default:
                Issue.record("no Swift type for example \(file.lastPathComponent)")
                continue
            }
            #expect(reencoded == original, "\(file.lastPathComponent) changed through the Swift type")
        }
    }

    @Test func decodedExamplesHaveTheDocumentedValues() throws {
        let create = try ContractJSON.decode(
            CreateBooking.self, from: Data(contentsOf: Repo.examplesDir.appendingPathComponent("booking.create.json")))
        #expect(create == Fixtures.createBooking)
        let room = try ContractJSON.decode(
            RegisterRoom.self, from: Data(contentsOf: Repo.examplesDir.appendingPathComponent("room.register.json")))
        #expect(room == Fixtures.registerRoom)
        let event = try ContractJSON.decode(
            BookingEvent.self, from: Data(contentsOf: Repo.examplesDir.appendingPathComponent("booking.confirmed.json")))
        #expect(event.booking == Fixtures.booking)
        let request = try ContractJSON.decode(
            SendPassRequest.self, from: Data(contentsOf: Repo.examplesDir.appendingPathComponent("sendpass.request.json")))
        #expect(request == Fixtures.sendPassRequest)
    }

    @Test func validatorPassesOnTheRepository() async throws {
        let (status, output) = try await runValidator([])
        #expect(status == 0, "validate_contract.py exit \(status):\n\(output)")
    }
}
