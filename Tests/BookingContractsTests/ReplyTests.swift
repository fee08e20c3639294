import BookingContracts
import Foundation
import Testing

/// The contract's own texts (docs: contract-v1 "Replies" and "Events"), with
/// the "…" placeholders filled in.
private enum ContractText {
    static let booking = """
        {"id": "\(Fixtures.bookingId)", "room": "Berlin", "date": "2026-11-23",
           "start": "09:00", "end": "10:30", "timeZone": "Europe/Berlin",
           "startsAt": "2026-11-23T08:00:00Z", "endsAt": "2026-11-23T09:30:00Z",
           "title": "Sprint review", "description": "Q4 demo", "status": "confirmed",
           "attendees": [{"name": "Ada Lovelace", "email": "ada@example.com", "phone": "+491701234567"}],
           "requestedBy": "calendar-app", "version": 2}
        """
    static let okReply = #"{"ok": true, "booking": \#(booking)}"#
    static let errorReply = """
        {"ok": false, "error": {"code": 2000, "text": "Berlin is already booked 09:00-10:00",
                                "field": "start", "conflicts": ["\(Fixtures.otherBookingId)"]}}
        """
    static let bookingEvent = #"{"eventId": "ev-1", "occurredAt": "2026-11-22T10:00:00Z", "booking": \#(booking)}"#
}

@Suite("Replies")
struct ReplyTests {
    @Test func okReplyMatchesContractText() throws {
        let reply = CommandReply.booking(Fixtures.booking)
        #expect(try encodedJSON(reply) == JSONValue(parsing: ContractText.okReply))
        #expect(try ContractJSON.decode(CommandReply.self, from: Data(ContractText.okReply.utf8)) == reply)
        #expect(reply.isOK)
    }

    @Test func errorReplyMatchesContractText() throws {
        let reply = CommandReply.failure(.overlap, "Berlin is already booked 09:00-10:00", field: "start",
                                         conflicts: [Fixtures.otherBookingId])
        #expect(try encodedJSON(reply) == JSONValue(parsing: ContractText.errorReply))
        #expect(try ContractJSON.decode(CommandReply.self, from: Data(ContractText.errorReply.utf8)) == reply)
        #expect(!reply.isOK)
    }

    @Test func errorWithoutFieldOrConflictsOmitsThem() throws {
        let reply = CommandReply.failure(.bookingNotFound, "no booking b1")
        #expect(try encodedJSON(reply)
                    == JSONValue(parsing: #"{"ok":false,"error":{"code":2001,"text":"no booking b1"}}"#))
    }

    @Test func roomReply() throws {
        let reply = CommandReply.room(Fixtures.minimalRegisterRoom.resolved())
        let expected = """
            {"ok":true,"room":{"name":"Hamburg","capacity":4,"equipment":[],"images":[],
             "timeZone":"Europe/Berlin","opens":"07:00","closes":"19:00","requiresApproval":false}}
            """
        #expect(try encodedJSON(reply) == JSONValue(parsing: expected))
        #expect(try ContractJSON.decode(CommandReply.self, from: Data(expected.utf8)) == reply)
    }

    @Test func bookingEventMatchesContractText() throws {
        let event = BookingEvent(eventId: "ev-1", occurredAt: "2026-11-22T10:00:00Z", booking: Fixtures.booking)
        #expect(try encodedJSON(event) == JSONValue(parsing: ContractText.bookingEvent))
        #expect(try ContractJSON.decode(BookingEvent.self, from: Data(ContractText.bookingEvent.utf8)) == event)
    }

    @Test func okReplyWithoutPayloadIsRejected() {
        #expect(throws: DecodingError.self) {
            try ContractJSON.decode(CommandReply.self, from: Data(#"{"ok":true}"#.utf8))
        }
    }

    @Test func gatewayAnswers() throws {
        #expect(try ContractJSON.decode(SendPassResponse.self, from: Data(#"{"success": true}"#.utf8)) == .success)
        let failure = try ContractJSON.decode(
            SendPassResponse.self,
            from: Data(#"{"error": {"text": "unreachable", "code": 4002, "index": 1, "detail": "x"}}"#.utf8))
        #expect(failure == .failure(SendPassError(text: "unreachable", code: 4002, index: 1)))
        if case .failure(let error) = failure { #expect(error.code.isPassDeliveryFailure) }
        #expect(throws: DecodingError.self) {
            try ContractJSON.decode(SendPassResponse.self, from: Data(#"{"success": false}"#.utf8))
        }
        #expect(try encodedJSON(SendPassResponse.success) == JSONValue(parsing: #"{"success":true}"#))
    }

    @Test func sendPassRequestUsesSnakeCase() throws {
        let expected = """
            {"booking": {"date": 1795388400, "time_start": 1795420800, "time_end": 1795426200,
                         "title": "Sprint review", "description": "Q4 demo", "room": "Berlin"},
             "passes": [{"name": "Ada Lovelace", "email": "ada@example.com", "number": "+491701234567"}]}
            """
        #expect(try encodedJSON(Fixtures.sendPassRequest) == JSONValue(parsing: expected))
    }

    @Test func decodingErrorsMapToReplyErrors() throws {
        func reply(_ body: String) -> ReplyError {
            do {
                _ = try ContractJSON.decode(CreateBooking.self, from: Data(body.utf8))
                return ReplyError(code: 0, text: "decoded")
            } catch {
                return ContractJSON.replyError(for: error)
            }
        }
        #expect(reply("not json").code == .invalidJSON)
        #expect(reply("[1,2]").code == .invalidJSON)
        #expect(reply("[1,2]").field == nil)
        let missing = reply(#"{"room":"Berlin","date":"today","end":"10:00","title":"t","attendees":[]}"#)
        #expect(missing.code == .invalidField)
        #expect(missing.field == "start")
        let nested = reply(#"{"room":"Berlin","date":"today","start":"09:00","end":"10:00","title":"t","#
                           + #""attendees":[{"name":"A","email":"a@b.c","phone":"1"},{"name":"B","phone":"2"}]}"#)
        #expect(nested.code == .invalidField)
        #expect(nested.field == "attendees[1].email")
    }
}
