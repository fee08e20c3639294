import BookingContracts
import Testing

@testable import BookingHandler

private func attendee(name: String = "Ada Lovelace", email: String = "ada@example.com",
                      phone: String = "0170 1234567") -> AttendeeInput {
    AttendeeInput(name: name, email: email, phone: phone)
}

@Suite("Attendees: count")
struct AttendeeCountTests {
    @Test func noAttendees() {
        expectFailure(BookingRules.attendees([], capacity: 8), .invalidField, field: "attendees")
    }

    @Test func noAttendeesEvenWithZeroCapacity() {
        expectFailure(BookingRules.attendees([], capacity: 0), .invalidField, field: "attendees")
    }

    @Test func exactlyCapacity() throws {
        let people = Array(repeating: attendee(), count: 3)
        let result = try #require(expectSuccess(BookingRules.attendees(people, capacity: 3)))
        #expect(result.count == 3)
    }

    @Test func oneOverCapacity() throws {
        let people = Array(repeating: attendee(), count: 4)
        let error = try #require(expectFailure(BookingRules.attendees(people, capacity: 3), .overCapacity,
                                               field: "attendees"))
        #expect(error.text.contains("3"))
        #expect(error.text.contains("4"))
    }

    @Test func capacityIsCheckedBeforeEachAttendee() {
        let people = [attendee(name: ""), attendee(email: "x"), attendee(phone: "12")]
        expectFailure(BookingRules.attendees(people, capacity: 2), .overCapacity, field: "attendees")
    }
}

@Suite("Attendees: names (1110)")
struct AttendeeNameTests {
    @Test(arguments: ["", " ", "   ", "\t\n", "\u{00A0}"])
    func blankNameIsInvalid(_ name: String) {
        let people = [attendee(), attendee(name: name)]
        expectFailure(BookingRules.attendees(people, capacity: 8), .attendeeNameInvalid, field: "attendees[1].name")
    }

    @Test func namesAreTrimmed() throws {
        let result = try #require(expectSuccess(BookingRules.attendees([attendee(name: "  Ada Lovelace \n")],
                                                                      capacity: 8)))
        #expect(result == [Fixture.adaNormalised])
    }

    @Test func innerSpacesAndUnicodeAreKept() throws {
        let result = try #require(expectSuccess(BookingRules.attendees([attendee(name: "José  Müller-Łukasiewicz")],
                                                                      capacity: 8)))
        #expect(result[0].name == "José  Müller-Łukasiewicz")
    }
}

@Suite("Attendees: e-mail (1111)")
struct AttendeeEmailTests {
    @Test(arguments: [
        ("ada@example.com", "ada@example.com"),
        ("ada@Example.COM", "ada@example.com"),
        ("Ada.Lovelace@EXAMPLE.com", "Ada.Lovelace@example.com"),
        ("ada.lovelace+review@mail.example.co.uk", "ada.lovelace+review@mail.example.co.uk"),
        ("a@b.de", "a@b.de"),
        ("a_b-c@b-c.d-e.de", "a_b-c@b-c.d-e.de"),
        ("x@xn--mnchen-3ya.de", "x@xn--mnchen-3ya.de"),
        ("1234@123.45", "1234@123.45"),
        ("  ada@example.com\n", "ada@example.com"),
        ("o'brien@example.ie", "o'brien@example.ie"),
        ("jörg@example.de", "jörg@example.de"),
    ])
    func valid(_ input: String, _ normalised: String) {
        #expect(BookingRules.isValidEmail(input) == normalised)
    }

    @Test(arguments: [
        "a@b", "a b@c.de", "@x.de", "x@", "", " ", "ada", "ada.example.com", "a@@b.de", "a@b@c.de", "a@-b.de",
        "a@b-.de", "a@b..de", "a@.b.de", "a@b.de.", "a@b_c.de", "a@bü.de", "a\t@b.de", "a@b .de", "a@b.de x",
        "a\u{0}@b.de", "a\u{200B}b@c.de", "ada@exa mple.com", "ada@localhost",
    ])
    func invalid(_ input: String) {
        #expect(BookingRules.isValidEmail(input) == nil)
    }

    @Test func lengthLimits() {
        let label63 = String(repeating: "d", count: 63)
        #expect(BookingRules.isValidEmail("a@\(label63).de") == "a@\(label63).de")
        #expect(BookingRules.isValidEmail("a@\(label63)d.de") == nil)

        let local64 = String(repeating: "l", count: 64)
        #expect(BookingRules.isValidEmail("\(local64)@example.com") == "\(local64)@example.com")
        #expect(BookingRules.isValidEmail("\(local64)l@example.com") == nil)

        // 254 bytes in all is the limit: "l@" + labels.
        let domain252 = [String](repeating: String(repeating: "d", count: 62), count: 4).joined(separator: ".")
        #expect(domain252.utf8.count == 251)
        let exactly254 = "lx@" + domain252
        #expect(exactly254.utf8.count == 254)
        #expect(BookingRules.isValidEmail(exactly254) == exactly254)
        #expect(BookingRules.isValidEmail("lxy@" + domain252) == nil)
    }

    @Test func invalidEmailNamesTheAttendee() throws {
        let people = [attendee(), attendee(), attendee(email: "a@b")]
        let error = try #require(expectFailure(BookingRules.attendees(people, capacity: 8), .attendeeEmailInvalid,
                                               field: "attendees[2].email"))
        #expect(error.text.contains("attendee 2"))
    }

    @Test func emailIsNormalisedInTheResult() throws {
        let result = try #require(expectSuccess(BookingRules.attendees([attendee(email: " ada@Example.COM ")],
                                                                      capacity: 8)))
        #expect(result[0].email == "ada@example.com")
    }
}

@Suite("Attendees: phone (3000)")
struct AttendeePhoneTests {
    @Test(arguments: [
        ("0170 1234567", "+491701234567"),
        ("+49 170 1234567", "+491701234567"),
        ("0049 170 1234567", "+491701234567"),
        ("+44 20 7946 0958", "+442079460958"),
        ("+1 212 555 0123", "+12125550123"),
        ("030 1234567", "+49301234567"),
    ])
    func normalisedToE164WithGermanDefault(_ input: String, _ e164: String) throws {
        let result = try #require(expectSuccess(BookingRules.attendees([attendee(phone: input)], capacity: 8)))
        #expect(result[0].phone == e164)
    }

    @Test(arguments: ["12", "", "   ", "abc", "+999 123", "0170", "+49 170 1234567 890 123 456 789 012"])
    func invalidPhone(_ input: String) {
        let people = [attendee(), attendee(phone: input)]
        expectFailure(BookingRules.attendees(people, capacity: 8), .attendeePhoneInvalid, field: "attendees[1].phone")
    }

    @Test func phoneErrorAtIndexZero() throws {
        let error = try #require(expectFailure(BookingRules.attendees([attendee(phone: "12")], capacity: 8),
                                               .attendeePhoneInvalid, field: "attendees[0].phone"))
        #expect(error.text.hasPrefix("attendee 0: "))
        #expect(!error.text.contains("12 "))
    }
}

@Suite("Attendees: order of checks and result")
struct AttendeeOrderTests {
    @Test func nameThenEmailThenPhoneWithinOneAttendee() {
        expectFailure(BookingRules.attendees([attendee(name: " ", email: "x", phone: "12")], capacity: 8),
                      .attendeeNameInvalid, field: "attendees[0].name")
        expectFailure(BookingRules.attendees([attendee(email: "x", phone: "12")], capacity: 8),
                      .attendeeEmailInvalid, field: "attendees[0].email")
    }

    @Test func firstBadAttendeeWins() {
        let people = [attendee(), attendee(phone: "12"), attendee(name: "")]
        expectFailure(BookingRules.attendees(people, capacity: 8), .attendeePhoneInvalid, field: "attendees[1].phone")
    }

    @Test func everyAttendeeNormalisedInOrder() throws {
        let people = [
            attendee(name: " Ada Lovelace ", email: "ada@Example.COM", phone: "0170 1234567"),
            attendee(name: "Charles Babbage", email: "charles@example.co.uk", phone: "+44 20 7946 0958"),
        ]
        let result = try #require(expectSuccess(BookingRules.attendees(people, capacity: 2)))
        #expect(result == [
            Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567"),
            Attendee(name: "Charles Babbage", email: "charles@example.co.uk", phone: "+442079460958"),
        ])
    }
}
