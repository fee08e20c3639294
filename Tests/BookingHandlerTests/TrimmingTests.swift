@testable import BookingHandler
import Foundation
import TestSupport
import Testing

/// The rules trim with `trimmingWhitespace()`; it must cut exactly what
/// Foundation's `trimmingCharacters(in: .whitespacesAndNewlines)` cuts, or
/// a title or name would be stored differently than before.
@Suite("Trimming white space")
struct TrimmingTests {
    /// Every scalar Foundation treats as white space or newline, and a few
    /// it does not (zero-width space, BOM, NUL, combining mark, letters).
    static let edgeScalars: [Unicode.Scalar] = {
        var set = (0...0x3000).compactMap(Unicode.Scalar.init).filter { CharacterSet.whitespacesAndNewlines.contains($0) }
        set += ["\u{200B}", "\u{FEFF}", "\u{0}", "\u{301}", "a", "Z", "ü", "🎉", "\u{1F}", "\u{7F}"]
        return set
    }()

    @Test func theTrimmedScalarsAreFoundationsOnEveryScalar() {
        var differing: [String] = []
        for value in 0...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            if String.isTrimmed(scalar) != CharacterSet.whitespacesAndNewlines.contains(scalar) {
                differing.append("U+" + String(value, radix: 16))
            }
        }
        #expect(differing.isEmpty)
    }

    @Test func everyWhiteSpaceScalarIsTrimmedAsFoundationDoes() {
        for scalar in Self.edgeScalars {
            for text in [String(scalar), "\(scalar)x\(scalar)", "x\(scalar)", "\(scalar)\(scalar)", "a\(scalar)b"] {
                #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespacesAndNewlines),
                        "U+\(String(scalar.value, radix: 16))")
                #expect(Array(text.trimmingWhitespace().unicodeScalars)
                        == Array(text.trimmingCharacters(in: .whitespacesAndNewlines).unicodeScalars))
            }
        }
    }

    @Test func randomTextIsTrimmedAsFoundationDoes() {
        var g = SplitMix(seed: 7)
        let pieces = Self.edgeScalars.map { String($0) } + ["Ada", " ", "e\u{301}", "\r\n", ""]
        for _ in 0..<3000 {
            let text = (0..<Int.random(in: 0...6, using: &g)).map { _ in pieces.randomElement(using: &g)! }.joined()
            #expect(Array(text.trimmingWhitespace().unicodeScalars)
                    == Array(text.trimmingCharacters(in: .whitespacesAndNewlines).unicodeScalars), "\(text.debugDescription)")
        }
        let untouched = "Sprint review"
        #expect(untouched.trimmingWhitespace() == untouched)
        #expect("  Ada\n".trimmingWhitespace() == "Ada")
    }
}
