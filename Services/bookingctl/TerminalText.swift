import Foundation

/// What bookingctl writes to a terminal, made inert.
///
/// Why: titles, attendee names, gateway error texts and the bodies and
/// headers of dead-lettered messages come from outside systems, and a
/// terminal obeys the control characters in them — `ESC [2K` and `CR`
/// rewrite the line that shows a message id, OSC 52 writes the operator's
/// clipboard, bidirectional overrides make text read other than it is.
/// Every control character but newline and tab (C0, DEL, C1) and the
/// bidirectional formatting characters are written as `\uXXXX`: readable,
/// and a valid escape inside a JSON string, so `--json` output stays JSON.
enum TerminalText {
    static func safe(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if needsEscape(scalar) {
                out.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: false
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x061C: true  // bidirectional marks and overrides
        default: false
        }
    }

    /// A message body for the terminal: at most `limit` bytes, then how many were left out.
    static func body(_ bytes: [UInt8], limit: Int = 65_536) -> String {
        guard bytes.count > limit else { return String(decoding: bytes, as: UTF8.self) }
        return String(decoding: bytes.prefix(limit), as: UTF8.self) + "\n… \(bytes.count - limit) bytes more (--json has them all)"
    }
}

/// Every `print` of bookingctl goes through ``TerminalText/safe(_:)``
/// (this shadows the standard library's within the module).
func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Swift.print(TerminalText.safe(items.map { "\($0)" }.joined(separator: separator)), terminator: terminator)
}
