/// `POST <gateway>/sendpass` body (legacy; snake_case keys as on the wire).
public struct SendPassRequest: Codable, Sendable, Equatable {
    /// The booking part.
    public struct BookingInfo: Codable, Sendable, Equatable {
        /// UNIX seconds of the booking's local date at 00:00 in the room's zone.
        public var date: Int64
        /// UNIX seconds of the start instant.
        public var timeStart: Int64
        /// UNIX seconds of the end instant.
        public var timeEnd: Int64
        /// Title.
        public var title: String
        /// Description; `""` when the booking has none (the gateway expects the key).
        public var description: String
        /// Room name.
        public var room: String

        enum CodingKeys: String, CodingKey {
            case date
            case timeStart = "time_start"
            case timeEnd = "time_end"
            case title, description, room
        }

        /// Creates the booking part.
        public init(date: Int64, timeStart: Int64, timeEnd: Int64, title: String, description: String,
                    room: String) {
            self.date = date
            self.timeStart = timeStart
            self.timeEnd = timeEnd
            self.title = title
            self.description = description
            self.room = room
        }
    }

    /// One pass.
    public struct Pass: Codable, Sendable, Equatable {
        /// Attendee name.
        public var name: String
        /// Attendee e-mail.
        public var email: String
        /// Attendee phone, E.164.
        public var number: String

        /// Creates a pass.
        public init(name: String, email: String, number: String) {
            self.name = name
            self.email = email
            self.number = number
        }
    }

    /// The booking.
    public var booking: BookingInfo
    /// Passes in order; the gateway halts at the first failure.
    public var passes: [Pass]

    /// Creates the request.
    public init(booking: BookingInfo, passes: [Pass]) {
        self.booking = booking
        self.passes = passes
    }
}

/// The gateway's `error` object.
public struct SendPassError: Codable, Sendable, Equatable, Error {
    /// Human-readable text.
    public var text: String
    /// Code; > 4000 (``ErrorCode/isPassDeliveryFailure``) means passes before
    /// ``index`` were sent and the one at ``index`` failed; other codes mean
    /// nothing was sent.
    public var code: ErrorCode
    /// 0-based index of the failed pass (with codes > 4000).
    public var index: Int?

    /// Creates an error.
    public init(text: String, code: ErrorCode, index: Int? = nil) {
        self.text = text
        self.code = code
        self.index = index
    }
}

/// The gateway's answer: `{"success":true}` or `{"error":{…}}`.
public enum SendPassResponse: Codable, Sendable, Equatable {
    /// Every pass was sent.
    case success
    /// See ``SendPassError``.
    case failure(SendPassError)

    private enum CodingKeys: String, CodingKey {
        case success, error
    }

    /// Decodes `error` when present, else requires `success: true`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if c.contains(.error), try !c.decodeNil(forKey: .error) {
            self = .failure(try c.decode(SendPassError.self, forKey: .error))
        } else if try c.decodeIfPresent(Bool.self, forKey: .success) == true {
            self = .success
        } else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: c.codingPath,
                      debugDescription: "gateway answer has neither \"success\": true nor \"error\""))
        }
    }

    /// Encodes `{"success":true}` or `{"error":{…}}`.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .success: try c.encode(true, forKey: .success)
        case .failure(let error): try c.encode(error, forKey: .error)
        }
    }
}

/// A `passes.failed` message: one pass that could not be delivered after all
/// retries, with what an operator needs to act on it.
public struct FailedPass: Codable, Sendable, Equatable {
    /// ``Booking/id``.
    public var bookingId: String
    /// ``Booking/version`` the pass was made for.
    public var version: Int
    /// 0-based index into ``Booking/attendees``.
    public var attendeeIndex: Int
    /// Attendee name.
    public var name: String
    /// Attendee e-mail.
    public var email: String
    /// Attendee E.164 phone.
    public var phone: String
    /// Attempts made (≥ 1).
    public var attempts: Int
    /// UTC instant of the first failed attempt.
    public var firstFailureAt: String
    /// UTC instant of the last failed attempt.
    public var lastFailureAt: String
    /// The gateway's last code; omitted when the last attempt got none.
    public var lastErrorCode: ErrorCode?
    /// The last error's text.
    public var lastErrorText: String
    /// Room name.
    public var room: String
    /// Local date `YYYY-MM-DD`.
    public var date: String
    /// Local start `HH:mm`.
    public var start: String
    /// Local end `HH:mm`.
    public var end: String
    /// Booking title.
    public var title: String
    /// What was not delivered (v1.1); omitted for a pass, so a v1 reader
    /// sees passes exactly as before. For ``NoticeKind/rescheduled`` and
    /// ``NoticeKind/removed`` ``attendeeIndex`` indexes the attendees as
    /// they were before the change (the event's `previous`).
    public var kind: NoticeKind?

    /// Creates the message.
    public init(bookingId: String, version: Int, attendeeIndex: Int, name: String, email: String,
                phone: String, attempts: Int, firstFailureAt: String, lastFailureAt: String,
                lastErrorCode: ErrorCode?, lastErrorText: String, room: String, date: String,
                start: String, end: String, title: String, kind: NoticeKind? = nil) {
        self.kind = kind == .pass ? nil : kind
        self.bookingId = bookingId
        self.version = version
        self.attendeeIndex = attendeeIndex
        self.name = name
        self.email = email
        self.phone = phone
        self.attempts = attempts
        self.firstFailureAt = firstFailureAt
        self.lastFailureAt = lastFailureAt
        self.lastErrorCode = lastErrorCode
        self.lastErrorText = lastErrorText
        self.room = room
        self.date = date
        self.start = start
        self.end = end
        self.title = title
    }

    /// The kind, ``NoticeKind/pass`` when omitted.
    public var noticeKind: NoticeKind { kind ?? .pass }

    /// Identifies one failed delivery; also the message's `message_id`:
    /// `<bookingId>:<version>:<attendeeIndex>` for a pass (as in contract
    /// v1), `<bookingId>:<version>:<kind>:<attendeeIndex>` for a notice.
    public var passKey: String {
        kind.map { "\(bookingId):\(version):\($0.rawValue):\(attendeeIndex)" } ?? "\(bookingId):\(version):\(attendeeIndex)"
    }
}

/// What an attendee is told (contract v1.1, "Notifications to attendees").
public enum NoticeKind: String, Codable, Sendable, CaseIterable {
    /// An access pass: booking confirmed, rescheduled (the new pass), or
    /// the attendee added by `booking.update`. Sent through `/sendpass`.
    case pass
    /// The booking moved; the pass for the previous time is void.
    case rescheduled
    /// The booking was cancelled, released, rejected or expired after a pass went out.
    case cancelled
    /// The attendee was removed by `booking.update` after a pass went out.
    case removed
}

/// `POST <PASS_NOTIFY_URL>/notify` body (contract v1.1): one notice for
/// several recipients of one booking version. Answered like `sendpass`
/// (``SendPassResponse``; `index` names a recipient).
public struct NotifyRequest: Codable, Sendable, Equatable {
    /// ``NoticeKind/rescheduled``, ``NoticeKind/cancelled`` or ``NoticeKind/removed``
    /// (passes go through `/sendpass`).
    public var kind: NoticeKind
    /// The booking after the change, as in `sendpass`.
    public var booking: SendPassRequest.BookingInfo
    /// The booking before the change, same shape; `null` when the notice
    /// has none (a cancellation).
    public var previous: SendPassRequest.BookingInfo?
    /// Who is told, in order; the gateway halts at the first failure.
    public var recipients: [SendPassRequest.Pass]

    /// Creates the request.
    public init(kind: NoticeKind, booking: SendPassRequest.BookingInfo, previous: SendPassRequest.BookingInfo?,
                recipients: [SendPassRequest.Pass]) {
        self.kind = kind
        self.booking = booking
        self.previous = previous
        self.recipients = recipients
    }

    private enum CodingKeys: String, CodingKey {
        case kind, booking, previous, recipients
    }

    /// Encodes `previous` as `null` when absent (the contract names the key).
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(kind, forKey: .kind)
        try c.encode(booking, forKey: .booking)
        if let previous { try c.encode(previous, forKey: .previous) } else { try c.encodeNil(forKey: .previous) }
        try c.encode(recipients, forKey: .recipients)
    }
}
