import BookingContracts
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The default gateway when `PASS_GATEWAY_URL` is unset: each pass becomes
/// `$DATA_DIR/outbox/<bookingId>-v<version>-<index>.eml` (an RFC 5322
/// e-mail) and `….sms`, written to a temporary name, fsynced and renamed,
/// so a reader never sees half a file.
///
/// It follows the sendpass contract: the passes are checked first (E.164
/// phone → else code 3000, e-mail → else 1111, with the index; nothing is
/// written), then written in order; a write failure at pass i answers code
/// 4500 with index i (passes before it were written). File names depend
/// only on the pass, so writing a pass again replaces the file with the
/// same content instead of adding a second pass.
public final class SpoolPassGateway: PassGateway {
    public let channel = PassChannel.outbox
    /// The outbox directory.
    public let directory: URL
    private let sender: String
    private let now: @Sendable () -> Date

    /// Creates the gateway, making `directory` if needed.
    public init(directory: URL, sender: String = "Room Booking <passes@room-booking.invalid>",
                now: @escaping @Sendable () -> Date = { Date() }) throws {
        self.directory = directory
        self.sender = sender
        self.now = now
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// The file name stem of one pass: `<bookingId>-v<version>-<index>`
    /// (characters outside `[A-Za-z0-9._-]` in the id become `_`).
    public static func stem(bookingId: String, version: Int, attendeeIndex: Int) -> String {
        let safe = String(bookingId.unicodeScalars.map { c -> Character in
            (c.isASCII && (CharacterSet.alphanumerics.contains(c) || c == "." || c == "_" || c == "-")) ? Character(c) : "_"
        })
        return "\(safe)-v\(version)-\(attendeeIndex)"
    }

    public func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        for (i, pass) in request.passes.enumerated() {
            if pass.number.range(of: #"^\+[1-9][0-9]{1,14}$"#, options: .regularExpression) == nil {
                return .rejected(code: .attendeePhoneInvalid, text: "phone number \(pass.number) is not E.164", index: i)
            }
            let parts = pass.email.split(separator: "@", omittingEmptySubsequences: false)
            if parts.count != 2 || parts[0].isEmpty || parts[1].isEmpty || pass.email.contains(where: \.isWhitespace) {
                return .rejected(code: .attendeeEmailInvalid, text: "e-mail address \(pass.email) is invalid", index: i)
            }
        }
        let date = now()
        for (i, pass) in request.passes.enumerated() {
            let index = batch.attendeeIndexes[i]
            let stem = Self.stem(bookingId: batch.bookingId, version: batch.version, attendeeIndex: index)
            let mail = PassMail.email(pass: pass, booking: request.booking, from: sender,
                                      messageID: "\(stem)@pass-sender.room-booking.invalid", date: date, full: batch.booking)
            let sms = PassMail.sms(pass: pass, booking: request.booking, full: batch.booking)
            do {
                try Self.writeAtomically(Array(mail.utf8), to: directory.appendingPathComponent(stem + ".eml"))
                try Self.writeAtomically(Array(sms.utf8), to: directory.appendingPathComponent(stem + ".sms"))
            } catch {
                return .passFailed(index: i, code: ErrorCode(4500), text: "could not write the pass to the outbox: \(error)")
            }
        }
        Self.syncDirectory(directory)
        return .success
    }

    struct WriteError: Error, CustomStringConvertible {
        let description: String
    }

    /// Writes to `.<name>.tmp`, fsyncs, renames over `url`.
    static func writeAtomically(_ bytes: [UInt8], to url: URL) throws {
        let temp = url.deletingLastPathComponent().appendingPathComponent("." + url.lastPathComponent + ".tmp")
        let fd = open(temp.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw WriteError(description: "open \(temp.path): errno \(errno)") }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                close(fd)
                unlink(temp.path)
                throw WriteError(description: "write \(temp.path): errno \(e)")
            }
            written += n
        }
        if fsync(fd) != 0 {
            let e = errno
            close(fd)
            unlink(temp.path)
            throw WriteError(description: "fsync \(temp.path): errno \(e)")
        }
        close(fd)
        guard rename(temp.path, url.path) == 0 else {
            let e = errno
            unlink(temp.path)
            throw WriteError(description: "rename to \(url.path): errno \(e)")
        }
    }

    /// fsync of the directory makes the renames durable.
    static func syncDirectory(_ url: URL) {
        let fd = open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}

/// Text of the pass files: an RFC 5322 e-mail (UTF-8 body, RFC 2047 for
/// non-ASCII header text) and an SMS.
public enum PassMail {
    /// The e-mail, CRLF line ends. With the booking (`full`) it is
    /// multipart: the text, with times local to the room, and an iCalendar
    /// invitation (``PassCalendar``); without it (a caller that only has
    /// the legacy request) plain text with UTC times.
    public static func email(pass: SendPassRequest.Pass, booking: SendPassRequest.BookingInfo, from: String,
                             messageID: String, date: Date, full: Booking? = nil) -> String {
        let when = full.map(LocalTimeText.when) ?? utcWhen(booking)
        let subject = "Your access pass: \(booking.title) (\(booking.room), \(when))"
        var headers = [
            "From: \(from)",
            "To: \(address(name: pass.name, email: pass.email))",
            "Subject: \(encodeHeaderText(subject, prefixLength: "Subject: ".count))",
            "Date: \(rfc5322Date(date))",
            "Message-ID: <\(messageID)>",
            "MIME-Version: 1.0",
        ]
        var text = ["Hello \(pass.name),", "", "this is your access pass for \"\(booking.title)\" in room \(booking.room),", "\(when)."]
        if !booking.description.isEmpty {
            text += ["", booking.description]
        }
        text += ["", "Show this e-mail or the SMS sent to \(pass.number) at the door."]
        let plain = text.joined(separator: "\r\n") + "\r\n"
        guard let full else {
            headers += ["Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: 8bit", ""]
            return headers.joined(separator: "\r\n") + "\r\n" + plain
        }
        let (organizerName, organizerEmail) = mailbox(from)
        let calendar = PassCalendar.request(booking: full, attendeeName: pass.name, attendeeEmail: pass.email,
                                            organizerEmail: organizerEmail, organizerName: organizerName, stamp: date)
        // The boundary cannot occur in either part: both are text we wrote,
        // and neither contains "=_" followed by the message id.
        let boundary = "=_pass_" + messageID.filter { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }
        headers += ["Content-Type: multipart/mixed; boundary=\"\(boundary)\"", ""]
        return headers.joined(separator: "\r\n") + "\r\n" + [
            "--\(boundary)",
            "Content-Type: text/plain; charset=utf-8",
            "Content-Transfer-Encoding: 8bit",
            "",
            plain,
            "--\(boundary)",
            "Content-Type: text/calendar; charset=utf-8; method=REQUEST",
            "Content-Transfer-Encoding: 8bit",
            "Content-Disposition: attachment; filename=\"pass.ics\"",
            "",
            calendar,
            "--\(boundary)--",
            "",
        ].joined(separator: "\r\n")
    }

    /// The SMS: recipient line, blank line, text.
    public static func sms(pass: SendPassRequest.Pass, booking: SendPassRequest.BookingInfo, full: Booking? = nil) -> String {
        let when = full.map(LocalTimeText.when) ?? utcWhen(booking)
        return "To: \(pass.number)\n\nAccess pass for \(pass.name): \(booking.title), room \(booking.room), \(when).\n"
    }

    /// `2026-11-23 08:00-09:30 UTC` from the request's instants: only for
    /// callers without the booking (and so without its zone).
    static func utcWhen(_ booking: SendPassRequest.BookingInfo) -> String {
        let start = Int64(booking.timeStart), end = Int64(booking.timeEnd)
        let day = CivilDays.civil(days: CivilDays.day(ofSeconds: start))
        func hm(_ t: Int64) -> String {
            let s = Int(t - CivilDays.day(ofSeconds: t) * 86_400)
            return String(format: "%02d:%02d", s / 3600, s / 60 % 60)
        }
        return String(format: "%04d-%02d-%02d ", day.year, day.month, day.day) + hm(start) + "-" + hm(end) + " UTC"
    }

    /// Name and address of `Name <address>` (the sender setting).
    static func mailbox(_ text: String) -> (name: String, email: String) {
        guard let open = text.lastIndex(of: "<"), let close = text.lastIndex(of: ">"), open < close else {
            return (text, text)
        }
        let name = text[..<open].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        return (name.isEmpty ? String(text[text.index(after: open)..<close]) : name, String(text[text.index(after: open)..<close]))
    }

    /// `Name <email>`: ASCII names quoted when they contain specials,
    /// others as RFC 2047 encoded-words.
    public static func address(name: String, email: String) -> String {
        let clean = name.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
        if clean.allSatisfy({ $0.isASCII }) {
            let specials = CharacterSet(charactersIn: "()<>[]:;@\\,.\"")
            if clean.unicodeScalars.contains(where: { specials.contains($0) }) {
                let escaped = clean.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                return "\"\(escaped)\" <\(email)>"
            }
            return "\(clean) <\(email)>"
        }
        return "\(encodedWords(clean)) <\(email)>"
    }

    /// Header text: as is when ASCII, else RFC 2047 `=?utf-8?B?…?=` words.
    public static func encodeHeaderText(_ text: String, prefixLength: Int = 0) -> String {
        let clean = text.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
        return clean.allSatisfy({ $0.isASCII }) ? clean : encodedWords(clean, firstLineUsed: prefixLength)
    }

    /// RFC 2047 B-encoded words of at most 75 characters each, split on
    /// character boundaries, folded with CRLF + space.
    /// `firstLineUsed`: characters already on the first line (`Subject: `),
    /// so that line stays within 78 characters too.
    public static func encodedWords(_ text: String, firstLineUsed: Int = 0) -> String {
        var words: [String] = []
        var chunk: [UInt8] = []
        for character in text {
            let bytes = Array(String(character).utf8)
            // 45 bytes → 60 base64 characters + 12 for "=?utf-8?B?" "?=" = 72 ≤ 75
            let limit = words.isEmpty ? max(3, min(45, (78 - firstLineUsed - 12) / 4 * 3)) : 45
            if !chunk.isEmpty && chunk.count + bytes.count > limit {
                words.append("=?utf-8?B?" + Data(chunk).base64EncodedString() + "?=")
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty { words.append("=?utf-8?B?" + Data(chunk).base64EncodedString() + "?=") }
        return words.joined(separator: "\r\n ")
    }

    /// `Mon, 23 Nov 2026 08:00:00 +0000`.
    public static func rfc5322Date(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second, .weekday], from: date)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        return days[c.weekday! - 1] + ", " + String(format: "%02d", c.day!) + " " + months[c.month! - 1] + " "
            + String(format: "%04d %02d:%02d:%02d +0000", c.year!, c.hour!, c.minute!, c.second!)
    }
}
