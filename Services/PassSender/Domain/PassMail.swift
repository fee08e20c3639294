import BookingContracts
import Foundation

/// Text of the spool files: RFC 5322 e-mails (UTF-8 body, RFC 2047 for
/// header text that is not plain ASCII) and SMS, for passes and notices.
///
/// Everything a booking's creator or attendees typed (names, title,
/// description, room) is untrusted here: it cannot end a header line, start
/// an encoded-word of its own, or contain the MIME boundary.
public enum PassMail {
    /// The pass e-mail, CRLF line ends. With the booking (`full`) it is
    /// multipart: the text, with times local to the room, and an iCalendar
    /// invitation (``PassCalendar``); without it (a caller that only has
    /// the legacy request) plain text with UTC times.
    /// With `occurrence` (an occurrence of a series changed after the
    /// series e-mail) the calendar part updates that instance of the
    /// series entry (``SeriesCalendar/occurrence(method:seriesId:occurrence:masterStart:attendeeName:attendeeEmail:organizerEmail:organizerName:stamp:)``).
    public static func email(pass: SendPassRequest.Pass, booking: SendPassRequest.BookingInfo, from: String,
                             messageID: String, date: Date, full: Booking? = nil,
                             occurrence: (seriesId: String, occurrence: SeriesOccurrence, masterStart: String)? = nil) -> String {
        let when = full.map(LocalTimeText.when) ?? utcWhen(booking)
        let subject = "Your access pass: \(booking.title) (\(booking.room), \(when))"
        var text = ["Hello \(pass.name),", "", "this is your access pass for \"\(booking.title)\" in room \(booking.room),", "\(when)."]
        if !booking.description.isEmpty {
            text += ["", booking.description]
        }
        text += ["", "Show this e-mail or the SMS sent to \(pass.number) at the door."]
        var calendar: (method: String, text: String)?
        if let full {
            let (organizerName, organizerEmail) = mailbox(from)
            if let occurrence {
                calendar = ("REQUEST", SeriesCalendar.occurrence(
                    method: "REQUEST", seriesId: occurrence.seriesId, occurrence: occurrence.occurrence,
                    masterStart: occurrence.masterStart, attendeeName: pass.name, attendeeEmail: pass.email,
                    organizerEmail: organizerEmail, organizerName: organizerName, stamp: date))
            } else {
                calendar = ("REQUEST", PassCalendar.request(booking: full, attendeeName: pass.name, attendeeEmail: pass.email,
                                                            organizerEmail: organizerEmail, organizerName: organizerName, stamp: date))
            }
        }
        return compose(to: pass, from: from, subject: subject, lines: text, calendar: calendar, messageID: messageID, date: date)
    }

    /// The e-mail for a whole series, to one attendee: every date local to
    /// the room (cancelled ones marked) and one calendar entry with `RRULE`
    /// (``SeriesCalendar``).
    public static func seriesEmail(to pass: SendPassRequest.Pass, from: String, messageID: String, date: Date,
                                   seriesId: String, occurrences: [SeriesOccurrence]) -> String {
        let first = occurrences.first?.latest
        let title = first?.title ?? "", room = first?.room ?? ""
        let live = occurrences.filter { !$0.gone }
        let subject = "Your access passes: \(title) (\(room), \(live.count) dates from \(live.first.map { LocalTimeText.when($0.latest) } ?? "-"))"
        var text = ["Hello \(pass.name),", "", "these are your access passes for \"\(title)\" in room \(room):", ""]
        text += occurrences.map { "- " + LocalTimeText.when($0.latest) + ($0.gone ? " (cancelled)" : "") }
        if let d = first?.description, !d.isEmpty { text += ["", d] }
        text += ["", "Show this e-mail or the SMS sent to \(pass.number) for each date at the door."]
        let (organizerName, organizerEmail) = mailbox(from)
        let calendar = SeriesCalendar.request(seriesId: seriesId, occurrences: occurrences, attendeeName: pass.name,
                                              attendeeEmail: pass.email, organizerEmail: organizerEmail,
                                              organizerName: organizerName, stamp: date)
        return compose(to: pass, from: from, subject: subject, lines: text, calendar: ("REQUEST", calendar), messageID: messageID,
                       date: date)
    }

    /// The SMS: recipient line, blank line, text (one line: a line break in
    /// a name or title cannot fake a header line of the file).
    public static func sms(pass: SendPassRequest.Pass, booking: SendPassRequest.BookingInfo, full: Booking? = nil) -> String {
        let when = full.map(LocalTimeText.when) ?? utcWhen(booking)
        return "To: \(pass.number)\n\n" + oneLine("Access pass for \(pass.name): \(booking.title), room \(booking.room), \(when).") + "\n"
    }

    /// A notice e-mail (`rescheduled`, `cancelled`, `removed`): the text and,
    /// with the booking, a calendar part — `METHOD:REQUEST` with the new
    /// time for a reschedule, `METHOD:CANCEL` for a cancellation or a
    /// removal — with the booking's `UID` and `SEQUENCE` = its version, so
    /// it updates or removes the entry the pass made.
    public static func notice(_ request: NotifyRequest, to person: SendPassRequest.Pass, from: String, messageID: String,
                              date: Date, full: Booking?, previous: BookingSnapshot?,
                              occurrence: (seriesId: String, occurrence: SeriesOccurrence, masterStart: String)? = nil) -> String {
        let (subject, lines) = noticeText(request, to: person, full: full, previous: previous)
        var calendar: (method: String, text: String)?
        if let full {
            let (organizerName, organizerEmail) = mailbox(from)
            let method = request.kind == .rescheduled ? "REQUEST" : "CANCEL"
            calendar = occurrence.map {
                (method, SeriesCalendar.occurrence(method: method, seriesId: $0.seriesId, occurrence: $0.occurrence,
                                                   masterStart: $0.masterStart, attendeeName: person.name,
                                                   attendeeEmail: person.email, organizerEmail: organizerEmail,
                                                   organizerName: organizerName, stamp: date))
            } ?? (request.kind == .rescheduled
                ? ("REQUEST", PassCalendar.request(booking: full, attendeeName: person.name, attendeeEmail: person.email,
                                                   organizerEmail: organizerEmail, organizerName: organizerName, stamp: date))
                : ("CANCEL", PassCalendar.cancel(booking: full, attendeeName: person.name, attendeeEmail: person.email,
                                                 organizerEmail: organizerEmail, organizerName: organizerName, stamp: date)))
        }
        return compose(to: person, from: from, subject: subject, lines: lines, calendar: calendar, messageID: messageID, date: date)
    }

    /// The notice as an SMS.
    public static func noticeSMS(_ request: NotifyRequest, to person: SendPassRequest.Pass, full: Booking?,
                                 previous: BookingSnapshot?) -> String {
        let b = request.booking
        let when = full.map(LocalTimeText.when) ?? utcWhen(b)
        let text: String
        switch request.kind {
        case .rescheduled:
            let before = oldWhen(request, full: full, previous: previous)
            text = "\(b.title), room \(b.room) moved from \(before) to \(when). Your old pass is void; a new one follows."
        case .cancelled:
            text = "\(b.title), room \(b.room), \(when) is cancelled. Your pass is void."
        case .removed:
            text = "You are no longer an attendee of \(b.title), room \(b.room), \(when). Your pass is void."
        case .pass:
            text = "Access pass for \(person.name): \(b.title), room \(b.room), \(when)."
        }
        return "To: \(person.number)\n\n" + oneLine(text) + "\n"
    }

    static func noticeText(_ request: NotifyRequest, to person: SendPassRequest.Pass, full: Booking?,
                           previous: BookingSnapshot?) -> (subject: String, lines: [String]) {
        let b = request.booking
        let when = full.map(LocalTimeText.when) ?? utcWhen(b)
        var lines = ["Hello \(person.name),", ""]
        let subject: String
        switch request.kind {
        case .rescheduled:
            let before = oldWhen(request, full: full, previous: previous)
            subject = "Moved: \(b.title) (\(b.room), now \(when))"
            lines += ["\"\(b.title)\" in room \(b.room) has moved", "from \(before)", "to \(when).", "",
                      "Your pass for the old time is void; your pass for the new time comes separately."]
        case .cancelled:
            subject = "Cancelled: \(b.title) (\(b.room), \(when))"
            lines += ["\"\(b.title)\" in room \(b.room), \(when), is cancelled.", "", "Your pass is void."]
        case .removed:
            subject = "No longer invited: \(b.title) (\(b.room), \(when))"
            lines += ["you are no longer an attendee of \"\(b.title)\" in room \(b.room), \(when).", "", "Your pass is void."]
        case .pass:
            subject = "Your access pass: \(b.title) (\(b.room), \(when))"
            lines += ["this is your access pass for \"\(b.title)\" in room \(b.room),", "\(when)."]
        }
        return (subject, lines)
    }

    /// The time before a reschedule, local to the room.
    static func oldWhen(_ request: NotifyRequest, full: Booking?, previous: BookingSnapshot?) -> String {
        if let full, let previous { return LocalTimeText.when(full.applying(previous)) }
        return request.previous.map(utcWhen) ?? "an earlier time"
    }

    /// Headers, the text part and (optionally) the calendar part.
    static func compose(to person: SendPassRequest.Pass, from: String, subject: String, lines: [String],
                        calendar: (method: String, text: String)?, messageID: String, date: Date) -> String {
        var headers = [
            "From: \(from)",
            "To: \(address(name: person.name, email: person.email))",
            "Subject: \(encodeHeaderText(subject, prefixLength: "Subject: ".count))",
            "Date: \(rfc5322Date(date))",
            "Message-ID: <\(messageID)>",
            "MIME-Version: 1.0",
        ]
        let plain = bodyText(lines.joined(separator: "\n")) + "\r\n"
        guard let calendar else {
            headers += ["Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: 8bit", ""]
            return headers.joined(separator: "\r\n") + "\r\n" + plain
        }
        // The parts hold untrusted text: a boundary that appears in either
        // (a description crafted to end the part) is made longer until not.
        var boundary = "=_pass_" + messageID.filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }
        // Byte-wise, as a mail reader looks for it (String's `contains`
        // compares characters: a combining mark after the boundary would hide it).
        while plain.utf8.firstRange(of: boundary.utf8) != nil || calendar.text.utf8.firstRange(of: boundary.utf8) != nil {
            boundary += "_x"
        }
        headers += ["Content-Type: multipart/mixed; boundary=\"\(boundary)\"", ""]
        return headers.joined(separator: "\r\n") + "\r\n" + [
            "--\(boundary)",
            "Content-Type: text/plain; charset=utf-8",
            "Content-Transfer-Encoding: 8bit",
            "",
            plain,
            "--\(boundary)",
            "Content-Type: text/calendar; charset=utf-8; method=\(calendar.method)",
            "Content-Transfer-Encoding: 8bit",
            "Content-Disposition: attachment; filename=\"\(calendar.method == "CANCEL" ? "cancel" : "pass").ics\"",
            "",
            calendar.text,
            "--\(boundary)--",
            "",
        ].joined(separator: "\r\n")
    }

    /// Body text with CRLF line ends only (a bare CR or LF in a description
    /// becomes a line break) and no other control characters but tab.
    static func bodyText(_ text: String) -> String {
        // One pass over the scalars (Foundation's replacingOccurrences,
        // three times, was a tenth of composing a pass).
        var out = String.UnicodeScalarView()
        var afterCR = false
        for s in text.unicodeScalars {
            defer { afterCR = s == "\r" }
            switch s {
            case "\r": out.append("\r"); out.append("\n")
            case "\n": if !afterCR { out.append("\r"); out.append("\n") }
            case "\t": out.append(s)
            default:
                out.append(s.value < 0x20 || s.value == 0x7F || (0x80...0x9F).contains(s.value)
                           || s.value == 0x2028 || s.value == 0x2029 ? " " : s)
            }
        }
        return String(out)
    }

    /// One line: every control character (line breaks included) becomes a space.
    static func oneLine(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { s -> Unicode.Scalar in
            s.value < 0x20 || s.value == 0x7F || (0x80...0x9F).contains(s.value) || s.value == 0x2028 || s.value == 0x2029 ? " " : s
        }))
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

    /// `Name <email>`: plain ASCII names as they are, or quoted when they
    /// contain specials; anything else — non-ASCII, or text a reader would
    /// decode as an encoded-word of its own (`=?`) — as RFC 2047
    /// encoded-words, which a reader shows as text and never as syntax.
    public static func address(name: String, email: String) -> String {
        let clean = oneLine(name)
        if needsEncoding(clean) { return "\(encodedWords(clean, firstLineUsed: "To: ".count)) <\(email)>" }
        let specials = CharacterSet(charactersIn: "()<>[]:;@\\,.\"")
        if clean.unicodeScalars.contains(where: { specials.contains($0) }) {
            let escaped = clean.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            return "\"\(escaped)\" <\(email)>"
        }
        return "\(clean) <\(email)>"
    }

    /// Header text: as is when plain ASCII, else RFC 2047 `=?utf-8?B?…?=`
    /// words (folded); also encoded when so long that the line would pass
    /// RFC 5322's hard limit of 998 characters.
    public static func encodeHeaderText(_ text: String, prefixLength: Int = 0) -> String {
        let clean = oneLine(text)
        return needsEncoding(clean) || prefixLength + clean.utf8.count > 990
            ? encodedWords(clean, firstLineUsed: prefixLength) : clean
    }

    /// Non-ASCII, or `=?` (the start of an encoded-word: a name like
    /// `=?utf-8?B?QWRtaW4=?=` must not be shown as "Admin").
    static func needsEncoding(_ text: String) -> Bool {
        !text.utf8.allSatisfy { $0 < 0x80 } || text.utf8.firstRange(of: "=?".utf8) != nil
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
