import PhoneNumbers
import Testing

@Suite("E.164 normalisation")
struct NormalizeE164Tests {
    @Test(
        "German numbers, default region DE",
        arguments: [
            ("0170 1234567", "+491701234567"),
            ("+49 170 1234567", "+491701234567"),
            ("0049 170 1234567", "+491701234567"),
            ("+49 (0)170 1234567", "+491701234567"),
            ("(030) 1234567", "+49301234567"),
            ("030/1234567", "+49301234567"),
            ("  \t0170-1234567\n", "+491701234567"),
        ]
    )
    func german(input: String, expected: String) throws {
        #expect(try PhoneNumbers.normalizeE164(input) == expected)
        // The default region is DE: saying so changes nothing.
        #expect(try PhoneNumbers.normalizeE164(input, defaultRegion: "DE") == expected)
    }

    @Test("International numbers ignore the default region")
    func international() throws {
        #expect(try PhoneNumbers.normalizeE164("+44 20 7946 0958") == "+442079460958")
        #expect(try PhoneNumbers.normalizeE164("+1 650 253 0000") == "+16502530000")
        #expect(try PhoneNumbers.normalizeE164("+1 650 253 0000", defaultRegion: "GB") == "+16502530000")
        #expect(try PhoneNumbers.normalizeE164("+49 30 1234567", defaultRegion: "US") == "+49301234567")
        #expect(try PhoneNumbers.normalizeE164("+49 30 1234567", defaultRegion: "") == "+49301234567")
    }

    @Test("National numbers are read in the default region's rules")
    func otherDefaultRegions() throws {
        #expect(try PhoneNumbers.normalizeE164("020 7946 0958", defaultRegion: "GB") == "+442079460958")
        #expect(try PhoneNumbers.normalizeE164("020 7946 0958", defaultRegion: "gb") == "+442079460958")
        #expect(try PhoneNumbers.normalizeE164("(650) 253-0000", defaultRegion: "US") == "+16502530000")
        // UK's international prefix is 00 too; the US one is 011.
        #expect(try PhoneNumbers.normalizeE164("0049 170 1234567", defaultRegion: "GB") == "+491701234567")
        #expect(try PhoneNumbers.normalizeE164("011 49 170 1234567", defaultRegion: "US") == "+491701234567")
        // The same digits mean different numbers in different regions.
        #expect(try PhoneNumbers.normalizeE164("030 1234567", defaultRegion: "DE") == "+49301234567")
        #expect(throws: PhoneNumberError.self) {
            try PhoneNumbers.normalizeE164("030 1234567", defaultRegion: "GB")
        }
    }

    @Test("The number's region is reported")
    func region() throws {
        let de = try PhoneNumbers.normalize("0170 1234567")
        #expect(de == NormalizedPhoneNumber(e164: "+491701234567", regionCode: "DE"))
        let gb = try PhoneNumbers.normalize("+44 20 7946 0958")
        #expect(gb == NormalizedPhoneNumber(e164: "+442079460958", regionCode: "GB"))
        let us = try PhoneNumbers.normalize("+1 650 253 0000", defaultRegion: "GB")
        #expect(us == NormalizedPhoneNumber(e164: "+16502530000", regionCode: "US"))
    }

    @Test(
        "Invalid input throws the right reason",
        arguments: [
            ("", PhoneNumberError.Reason.empty),
            ("   \n\t ", .empty),
            (String(repeating: "1", count: 70), .tooLong),
            ("+49 " + String(repeating: "1 ", count: 33), .tooLong),
            ("abc", .notANumber),
            ("12", .invalid),
            ("0170", .invalid),
            ("+49 123", .invalid),
            ("+999 1234567", .unknownCountry),
        ]
    )
    func invalid(input: String, reason: PhoneNumberError.Reason) {
        #expect(throws: PhoneNumberError(reason)) {
            try PhoneNumbers.normalizeE164(input)
        }
    }

    @Test("An embedded NUL is rejected, not silently cut off")
    func embeddedNUL() {
        #expect(throws: PhoneNumberError(.notANumber)) {
            try PhoneNumbers.normalizeE164("0170\u{0}1234567")
        }
    }

    @Test("A national number needs a known default region")
    func unknownDefaultRegion() {
        #expect(throws: PhoneNumberError(.unknownCountry)) {
            try PhoneNumbers.normalizeE164("0170 1234567", defaultRegion: "")
        }
        #expect(throws: PhoneNumberError(.unknownCountry)) {
            try PhoneNumbers.normalizeE164("0170 1234567", defaultRegion: "XX")
        }
        #expect(throws: PhoneNumberError(.unknownCountry)) {
            try PhoneNumbers.normalizeE164("0170 1234567", defaultRegion: "Germany")
        }
    }

    @Test("64 characters are allowed, 65 are not")
    func lengthLimit() throws {
        let atLimit = "+49 170 1234567".replacingSpaces(toLength: 64)
        #expect(atLimit.count == 64)
        #expect(try PhoneNumbers.normalizeE164(atLimit) == "+491701234567")
        let overLimit = atLimit.replacingSpaces(toLength: 65)
        #expect(overLimit.count == 65)
        #expect(throws: PhoneNumberError(.tooLong)) {
            try PhoneNumbers.normalizeE164(overLimit)
        }
    }

    @Test("Errors describe the reason without echoing the input")
    func errorDescription() {
        do {
            _ = try PhoneNumbers.normalizeE164("+49 123")
            Issue.record("expected an error")
        } catch {
            #expect(error.reason == .invalid)
            #expect(error.description == "phone number is not valid for its region")
            #expect(!error.description.contains("123"))
        }
    }

    @Test("Concurrent use from many tasks")
    func concurrent() async {
        let inputs = [
            ("0170 1234567", "DE", "+491701234567"),
            ("020 7946 0958", "GB", "+442079460958"),
            ("+1 650 253 0000", "DE", "+16502530000"),
        ]
        let results = await withTaskGroup(of: Bool.self) { group in
            for task in 0..<8 {
                group.addTask {
                    (0..<200).allSatisfy { i in
                        let (input, region, expected) = inputs[(task + i) % inputs.count]
                        return (try? PhoneNumbers.normalizeE164(input, defaultRegion: region)) == expected
                    }
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results == Array(repeating: true, count: 8))
    }
}

extension String {
    /// `self` with its digits and punctuation kept and inner spaces (the
    /// ones between the digit groups) widened so that it is `length`
    /// characters long, without leading or trailing whitespace.
    fileprivate func replacingSpaces(toLength length: Int) -> String {
        let compact = split(separator: " ")
        let gaps = compact.count - 1
        let spaces = length - compact.reduce(0) { $0 + $1.count }
        precondition(gaps > 0 && spaces >= gaps)
        var result = ""
        for (i, part) in compact.enumerated() {
            result += part
            if i < gaps {
                result += String(repeating: " ", count: spaces / gaps + (i < spaces % gaps ? 1 : 0))
            }
        }
        return result
    }
}
