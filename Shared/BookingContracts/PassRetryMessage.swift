/// A retry message (`pass-sender.retry`, schema version 1): one or more
/// passes of one booking version to try again. See docs/pass-sender.md.
public struct PassRetryMessage: Codable, Sendable, Equatable {
    /// Why the passes are retried.
    public enum Kind: String, Codable, Sendable {
        /// Scheduled by the pass sender after a failed attempt (through a delay queue).
        case backoff
        /// Requested by an operator from `passes.failed`; attempts start again at 0.
        case `operator`
    }

    /// One pass to retry and its history.
    public struct Pass: Codable, Sendable, Equatable {
        /// 0-based index into the booking's attendees.
        public var attendeeIndex: Int
        /// Attempts already made (0 for an operator retry).
        public var attempts: Int
        /// First failed attempt, UTC instant; absent when none yet.
        public var firstFailureAt: String?
        /// Last failed attempt.
        public var lastFailureAt: String?
        /// Last gateway code; absent when the last failure had none.
        public var lastErrorCode: Int?
        /// Last error text.
        public var lastErrorText: String?

        public init(attendeeIndex: Int, attempts: Int, firstFailureAt: String? = nil, lastFailureAt: String? = nil,
                    lastErrorCode: Int? = nil, lastErrorText: String? = nil) {
            self.attendeeIndex = attendeeIndex
            self.attempts = attempts
            self.firstFailureAt = firstFailureAt
            self.lastFailureAt = lastFailureAt
            self.lastErrorCode = lastErrorCode
            self.lastErrorText = lastErrorText
        }
    }

    /// The schema version this code writes and reads.
    public static let currentSchemaVersion = 1

    /// Always ``currentSchemaVersion`` (messages of another version are dead-lettered).
    public var schemaVersion: Int
    /// Why.
    public var kind: Kind
    /// Booking id.
    public var bookingId: String
    /// Booking version the passes are for.
    public var version: Int
    /// The booking snapshot (always on ``Kind/backoff``; an operator retry
    /// omits it and the pass sender uses the snapshot in its ledger).
    public var booking: Booking?
    /// The passes, in attendee order.
    public var passes: [Pass]
    /// Operator retries: a unique token, so a second delivery of the same
    /// request sends nothing.
    public var retryToken: String?
    /// What is retried; absent = a pass (messages written before notices
    /// existed read the same).
    public var notice: NoticeKind?
    /// The booking before the change (`rescheduled`/`removed` index into
    /// its attendees); an operator retry omits it (the ledger has it).
    public var previous: BookingSnapshot?

    /// ``notice``, ``NoticeKind/pass`` when absent.
    public var noticeKind: NoticeKind { notice ?? .pass }

    public init(kind: Kind, bookingId: String, version: Int, booking: Booking?, passes: [Pass],
                retryToken: String? = nil, notice: NoticeKind = .pass, previous: BookingSnapshot? = nil) {
        self.notice = notice == .pass ? nil : notice
        self.previous = previous
        self.schemaVersion = Self.currentSchemaVersion
        self.kind = kind
        self.bookingId = bookingId
        self.version = version
        self.booking = booking
        self.passes = passes
        self.retryToken = retryToken
    }

    /// An operator retry of one `passes.failed` message (attempts reset).
    public static func operatorRetry(of failed: FailedPass, token: String) -> PassRetryMessage {
        PassRetryMessage(kind: .operator, bookingId: failed.bookingId, version: failed.version, booking: nil,
                         passes: [Pass(attendeeIndex: failed.attendeeIndex, attempts: 0)], retryToken: token,
                         notice: failed.noticeKind)
    }
}
