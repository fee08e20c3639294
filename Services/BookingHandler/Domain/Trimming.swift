/// Trimming for the validation rules, without Foundation.
///
/// Why: `trimmingCharacters(in: .whitespacesAndNewlines)` bridges through
/// `NSString` and copies, about 2 % of the handler's CPU per booking for a
/// title, a description and each attendee's name and e-mail. The set is
/// the same: Foundation's `whitespacesAndNewlines` is Unicode's
/// `White_Space` property plus U+200B ZERO WIDTH SPACE (CoreFoundation
/// counts it as white space). `TrimmingTests` compares the two on every
/// scalar and on random text.
extension String {
    /// The text without leading and trailing white space and newlines, as
    /// `trimmingCharacters(in: .whitespacesAndNewlines)` gives it.
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !Self.isTrimmed($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !Self.isTrimmed($0) })!
        // Nothing to trim (the usual case): the string itself, no copy.
        if first == scalars.startIndex && scalars.index(after: last) == scalars.endIndex { return self }
        return String(scalars[first...last])
    }

    /// Whether `scalar` is in `CharacterSet.whitespacesAndNewlines`.
    static func isTrimmed(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace || scalar.value == 0x200B
    }
}
