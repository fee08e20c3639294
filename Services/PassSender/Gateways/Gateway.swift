import BookingContracts
import Foundation

/// Which booking version, kind and recipients a gateway request is for (the
/// spool gateway names its files after it; the HTTP gateway does not send it).
public struct PassBatch: Sendable, Equatable {
    public var bookingId: String
    public var version: Int
    /// Indexes of the recipients (``NoticeJob/recipients``), one per pass or
    /// recipient of the request, in the same order.
    public var attendeeIndexes: [Int]
    /// The booking itself: the legacy request carries only UNIX times, and
    /// what a person reads needs the room's zone (the spool gateway).
    public var booking: Booking?
    /// What is sent.
    public var kind: NoticeKind
    /// The booking before the change (a reschedule's old time).
    public var previous: BookingSnapshot?

    public init(bookingId: String, version: Int, attendeeIndexes: [Int], booking: Booking? = nil,
                kind: NoticeKind = .pass, previous: BookingSnapshot? = nil) {
        self.bookingId = bookingId
        self.version = version
        self.attendeeIndexes = attendeeIndexes
        self.booking = booking
        self.kind = kind
        self.previous = previous
    }
}

/// What a gateway call came to, classified per the contract
/// (docs/contract/README.md, "Pass gateway").
public enum GatewayOutcome: Sendable, Equatable {
    /// Every pass of the request was sent.
    case success
    /// Code > 4000 with a valid `index`: passes before it were sent, the
    /// one at it failed, the ones after it were not tried.
    case passFailed(index: Int, code: ErrorCode, text: String)
    /// Any other gateway error code: nothing was sent and the input is
    /// wrong; not retried. `index` names the offending pass when the
    /// gateway said so.
    case rejected(code: ErrorCode, text: String, index: Int?)
    /// Timeout, connection error, 5xx, 429, garbage: nothing known to be
    /// sent; everything is retried with back-off. `code` is the gateway's
    /// code when its answer carried one.
    case transient(code: ErrorCode?, text: String)

    /// A bounded label for metrics.
    public var label: String {
        switch self {
        case .success: "success"
        case .passFailed: "pass_failed"
        case .rejected: "rejected"
        case .transient: "transient"
        }
    }

    /// Classifies an HTTP answer: status and body.
    ///
    /// - 429 and 5xx are transient, unless the body reports a pass failure
    ///   (code > 4000) at an index inside the request: the contract says
    ///   every pass before it was sent, so retrying them would send them
    ///   twice.
    /// - Otherwise a body `{"error":{…}}` wins (the contract: `error` wins over
    ///   `success`): code > 4000 with an index inside the request → ``passFailed``;
    ///   code > 4000 without a usable index → transient (nobody can tell which
    ///   passes went out); any other code → ``rejected``.
    /// - `{"success":true}` with a 2xx status → ``success``.
    /// - Anything else (other non-2xx, malformed JSON, neither form) → transient.
    public static func classify(status: Int, body: [UInt8], passCount: Int) -> GatewayOutcome {
        if status == 429 || (500...599).contains(status) {
            let error = (try? ContractJSON.decode(SendPassResponse.self, from: body)).flatMap { r -> SendPassError? in
                if case .failure(let e) = r { return e }
                return nil
            }
            if let outcome = error.map({ classify(error: $0, passCount: passCount) }), case .passFailed = outcome { return outcome }
            return .transient(code: error?.code, text: "gateway answered HTTP \(status)")
        }
        // The usual answer, recognised without a decoder (a JSONDecoder per
        // call was 1 % of the pass sender's CPU per booking).
        if (200...299).contains(status), isPlainSuccess(body) { return .success }
        let decoded: SendPassResponse
        do {
            decoded = try ContractJSON.decode(SendPassResponse.self, from: body)
        } catch {
            let snippet = String(decoding: body.prefix(80), as: UTF8.self)
            return .transient(code: nil, text: "gateway answered HTTP \(status) with an unusable body: \(snippet.isEmpty ? "(empty)" : snippet)")
        }
        switch decoded {
        case .success:
            guard (200...299).contains(status) else {
                return .transient(code: nil, text: "gateway answered HTTP \(status)")
            }
            return .success
        case .failure(let error):
            return classify(error: error, passCount: passCount)
        }
    }

    /// Whether `body` is exactly `{"success":true}`, with JSON whitespace
    /// at most around it (any other spelling goes through the decoder).
    static func isPlainSuccess(_ body: [UInt8]) -> Bool {
        let isSpace = { (b: UInt8) in b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
        guard let first = body.firstIndex(where: { !isSpace($0) }),
              let last = body.lastIndex(where: { !isSpace($0) }) else { return false }
        return body[first...last].elementsEqual(#"{"success":true}"#.utf8)
    }

    /// Classifies a gateway `error` object.
    public static func classify(error: SendPassError, passCount: Int) -> GatewayOutcome {
        let text = error.text.isEmpty ? "gateway error \(error.code)" : error.text
        if error.code.isPassDeliveryFailure {
            if let index = error.index, index >= 0, index < passCount {
                return .passFailed(index: index, code: error.code, text: text)
            }
            return .transient(code: error.code, text: text + " (no usable index in the answer)")
        }
        let index = error.index.flatMap { $0 >= 0 && $0 < passCount ? $0 : nil }
        return .rejected(code: error.code, text: text, index: index)
    }
}

/// A way to deliver passes, following the sendpass contract: passes in
/// order, halting at the first failure. Implementations never throw; every
/// failure is an outcome.
public protocol PassGateway: Sendable {
    /// Recorded on `pass.delivered` / `pass.failed`.
    var channel: PassChannel { get }
    /// Sends the passes of `request` (their identities are in `batch`).
    func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome
    /// Sends a notice (`rescheduled`, `cancelled`, `removed`) to the
    /// recipients of `request`, with the same answers as ``send(_:batch:)``.
    func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome
    /// Releases resources (the HTTP client); called once at shutdown.
    func shutdown() async
}

extension PassGateway {
    public func shutdown() async {}
}

/// Builds the legacy sendpass request for some attendees of a booking.
public enum SendPassRequestBuilder {
    /// `date` = UNIX seconds of local midnight of the booking date in the
    /// room's zone; start/end from the booking's instants; `description`
    /// `""` when none; passes in the given attendee order.
    public static func request(for booking: Booking, attendeeIndexes: [Int]) -> SendPassRequest {
        let midnight = ContractFormat.instant(date: booking.date, time: "00:00", timeZone: booking.timeZone)
        let start = ContractFormat.parseTimestamp(booking.startsAt)
            ?? ContractFormat.instant(date: booking.date, time: booking.start, timeZone: booking.timeZone)
        let end = ContractFormat.parseTimestamp(booking.endsAt)
            ?? ContractFormat.instant(date: booking.date, time: booking.end, timeZone: booking.timeZone)
        let info = SendPassRequest.BookingInfo(
            date: Int64(midnight?.timeIntervalSince1970 ?? 0), timeStart: Int64(start?.timeIntervalSince1970 ?? 0),
            timeEnd: Int64(end?.timeIntervalSince1970 ?? 0), title: booking.title,
            description: booking.description ?? "", room: booking.room)
        let passes = attendeeIndexes.map { i in
            let a = booking.attendees[i]
            return SendPassRequest.Pass(name: a.name, email: a.email, number: a.phone)
        }
        return SendPassRequest(booking: info, passes: passes)
    }
}

/// Builds the `/notify` request (contract v1.1) for some recipients.
public enum NotifyRequestBuilder {
    /// `booking` as in sendpass; `previous` the booking before the change
    /// in the same shape (null for a cancellation, where nothing moved);
    /// recipients in the given order from ``NoticeJob/recipients``.
    public static func request(for job: NoticeJob, indexes: [Int]) -> NotifyRequest {
        let info = SendPassRequestBuilder.request(for: job.booking, attendeeIndexes: []).booking
        var before: SendPassRequest.BookingInfo?
        if job.kind != .cancelled, let previous = job.previous {
            before = SendPassRequestBuilder.request(for: job.booking.applying(previous), attendeeIndexes: []).booking
        }
        let list = job.recipients
        return NotifyRequest(kind: job.kind, booking: info, previous: before, recipients: indexes.map {
            SendPassRequest.Pass(name: list[$0].name, email: list[$0].email, number: list[$0].phone)
        })
    }
}

extension Booking {
    /// This booking with the fields of `snapshot` (its state before a change).
    public func applying(_ snapshot: BookingSnapshot) -> Booking {
        var b = self
        b.date = snapshot.date
        b.start = snapshot.start
        b.end = snapshot.end
        b.startsAt = snapshot.startsAt
        b.endsAt = snapshot.endsAt
        b.title = snapshot.title
        b.description = snapshot.description
        b.attendees = snapshot.attendees
        b.status = snapshot.status
        return b
    }
}
