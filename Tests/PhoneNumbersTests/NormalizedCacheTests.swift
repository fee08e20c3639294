import Testing
@testable import PhoneNumbers

/// The cache of numbers normalised before (``PhoneNumbers/cache``): a hit
/// must be exactly what libphonenumber answers, per input *and* region, and
/// the cache must stay bounded whatever comes in.
@Suite("Normalised numbers cache")
struct NormalizedCacheTests {
    /// Inputs whose answer differs by region, valid ones and invalid ones.
    static let inputs = [
        "0170 1234567", "020 7946 0958", "(650) 253-0000", "030 1234567", "+44 20 7946 0958",
        "0049 170 1234567", "011 49 170 1234567", "+1 650 253 0000", "12345", "0170 123",
        "+800 1234 5678", "06 12 34 56 78",
        // Canonically equivalent, so equal as Swift strings, but not the same
        // bytes: U+212A KELVIN SIGN is no letter to libphonenumber.
        "1-800-FLOWERK", "1-800-FLOWER\u{212A}",
    ]
    static let regions = ["DE", "GB", "US", "FR", "", "001"]

    @Test func aRepeatedNumberGetsWhatAParseGivesInEveryRegion() throws {
        for _ in 0..<2 {  // the second round is answered from the cache
            for input in Self.inputs {
                for region in Self.regions {
                    let parsed = Result { () throws(PhoneNumberError) in try PhoneNumbers.parse(input, region: region) }
                    let normalized = Result { () throws(PhoneNumberError) in
                        try PhoneNumbers.normalize("  \(input) ", defaultRegion: region.lowercased())
                    }
                    #expect(normalized == parsed, "\(input) in '\(region)'")
                }
            }
        }
    }

    @Test func theSameInputInAnotherRegionIsNotAHit() throws {
        // National "020 7946 0958" is London in GB and not valid in DE.
        #expect(try PhoneNumbers.normalizeE164("020 7946 0958", defaultRegion: "GB") == "+442079460958")
        #expect(throws: PhoneNumberError(.invalid)) { try PhoneNumbers.normalizeE164("020 7946 0958", defaultRegion: "DE") }
        #expect(PhoneNumbers.cache.value(for: .init(input: Array("020 7946 0958".utf8), region: "GB")) != nil, "a success is kept")
        #expect(PhoneNumbers.cache.value(for: .init(input: Array("020 7946 0958".utf8), region: "DE")) == nil, "errors are not kept")
    }

    @Test func aFullCacheStartsAgainInsteadOfGrowing() {
        let cache = NormalizedCache(capacity: 8)
        let number = NormalizedPhoneNumber(e164: "+491701234567", regionCode: "DE")
        func key(_ input: String, _ region: String = "DE") -> NormalizedCache.Key {
            .init(input: Array(input.utf8), region: region)
        }
        for i in 0..<8 { cache.store(number, for: key("\(i)")) }
        #expect(cache.count == 8)
        #expect(cache.value(for: key("0")) == number)
        cache.store(number, for: key("8"))
        #expect(cache.count == 1)
        #expect(cache.value(for: key("0")) == nil)
        #expect(cache.value(for: key("8")) == number)
        #expect(cache.value(for: key("8", "GB")) == nil)
    }
}
