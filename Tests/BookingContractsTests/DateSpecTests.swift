import BookingContracts
import Foundation
import Testing

private struct Holder: Codable, Equatable {
    var date: DateSpec
}

private struct QueryHolder: Codable, Equatable {
    var date: AvailabilityDate
}

private func decodeDate(_ json: String) throws -> DateSpec {
    try ContractJSON.decode(Holder.self, from: Data(#"{"date":\#(json)}"#.utf8)).date
}

@Suite("DateSpec")
struct DateSpecTests {
    @Test func acceptsTheThreeForms() throws {
        #expect(try decodeDate(#""2026-11-23""#) == .calendarDate("2026-11-23"))
        #expect(try decodeDate(#""today""#) == .today)
        #expect(try decodeDate("1763800000") == .unixSeconds(1_763_800_000))
        #expect(try decodeDate("0") == .unixSeconds(0))
    }

    @Test(arguments: ["true", "false", "[]", "{}", "null", "1.5", #""tomorrow""#, #""2026-1-1""#,
                      #""1763800000""#, #""Today""#, #""""#, #"["2026-11-23"]"#])
    func rejectsOtherValues(json: String) {
        #expect(throws: DecodingError.self) { try decodeDate(json) }
    }

    @Test func encodesAsReceived() throws {
        #expect(try encodedJSON(Holder(date: .calendarDate("2026-11-23"))) == JSONValue.object(["date": .string("2026-11-23")]))
        #expect(try encodedJSON(Holder(date: .today)) == JSONValue.object(["date": .string("today")]))
        #expect(try encodedJSON(Holder(date: .unixSeconds(1_763_800_000))) == JSONValue.object(["date": .number(1_763_800_000)]))
    }

    @Test func invalidDateInCommandNamesTheField() throws {
        let body = #"{"room":"Berlin","date":true,"start":"09:00","end":"10:00","title":"t","attendees":[]}"#
        do {
            _ = try ContractJSON.decode(CreateBooking.self, from: Data(body.utf8))
            Issue.record("decoding should fail")
        } catch let error as DecodingError {
            #expect(ContractJSON.fieldPath(of: error) == "date")
            let reply = ContractJSON.replyError(for: error)
            #expect(reply.code == .invalidField)
            #expect(reply.field == "date")
        }
    }

    @Test func validityAndResolution() {
        #expect(DateSpec.calendarDate("2026-02-30").isValid == false)
        #expect(DateSpec.calendarDate("2028-02-29").isValid)
        #expect(DateSpec.today.isValid)
        #expect(DateSpec.calendarDate("2026-11-23").resolve(in: "Europe/Berlin") == "2026-11-23")
        // 2026-11-22T23:30:00Z is already the 23rd in Berlin, still the 22nd in New York.
        let instant = Date(timeIntervalSince1970: 1_795_390_200)
        #expect(DateSpec.unixSeconds(1_795_390_200).resolve(in: "Europe/Berlin") == "2026-11-23")
        #expect(DateSpec.unixSeconds(1_795_390_200).resolve(in: "America/New_York") == "2026-11-22")
        #expect(DateSpec.today.resolve(in: "Europe/Berlin", now: instant) == "2026-11-23")
        #expect(DateSpec.today.resolve(in: "No/Such_Zone", now: instant) == nil)
    }

    @Test func queryValues() {
        #expect(DateSpec(queryValue: "today") == .today)
        #expect(DateSpec(queryValue: "2026-11-23") == .calendarDate("2026-11-23"))
        #expect(DateSpec(queryValue: "1763800000") == .unixSeconds(1_763_800_000))
        #expect(DateSpec(queryValue: "now") == nil)
        #expect(DateSpec(queryValue: "-5") == nil)
        #expect(AvailabilityDate(queryValue: "now") == .now)
        #expect(AvailabilityDate(queryValue: "today") == .date(.today))
        #expect(AvailabilityDate(queryValue: "x") == nil)
    }

    @Test func availabilityDateAcceptsNow() throws {
        func decode(_ json: String) throws -> AvailabilityDate {
            try ContractJSON.decode(QueryHolder.self, from: Data(#"{"date":\#(json)}"#.utf8)).date
        }
        #expect(try decode(#""now""#) == .now)
        #expect(try decode(#""today""#) == .date(.today))
        #expect(try decode(#""2026-11-23""#) == .date(.calendarDate("2026-11-23")))
        #expect(try decode("1763800000") == .date(.unixSeconds(1_763_800_000)))
        #expect(throws: DecodingError.self) { try decode("true") }
        #expect(throws: DecodingError.self) { try decode("{}") }
        #expect(try encodedJSON(QueryHolder(date: .now)) == JSONValue.object(["date": .string("now")]))
        // "now" is not a booking date.
        #expect(throws: DecodingError.self) { try decodeDate(#""now""#) }
    }
}
