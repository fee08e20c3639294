import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Tracing

/// Where a pass stands in the ledger.
public enum PassStatus: String, Sendable, Codable, CaseIterable {
    /// Handed to the gateway (or about to be); if the process dies now the
    /// pass is sent again on recovery (see docs/pass-sender.md, "crash window").
    case attempting
    /// The gateway took it. Never sent again for this booking version.
    case delivered
    /// Failed; a retry message for it is on its way through a delay queue.
    case scheduled
    /// Given up; it is in `passes.failed` (an operator may retry it).
    case failed
    /// The booking was cancelled or a newer version superseded it.
    case dropped
}

/// One row of the ledger: a pass or notice for one person, booking version
/// and kind.
public struct PassRecord: Sendable, Equatable {
    public var bookingId: String
    public var version: Int
    /// What the row is for (``NoticeKind/pass`` for passes).
    public var kind: NoticeKind
    /// The recipient's normalised e-mail (``PassLedger/normalised(_:)``):
    /// with booking id, version and kind, the row's key.
    public var email: String
    /// The recipient's position in that version's list (attendees, or for
    /// `rescheduled`/`removed` the attendees before the change): what retry
    /// messages and `passes.failed` carry.
    public var attendeeIndex: Int
    public var status: PassStatus
    public var attempts: Int
    public var firstFailureAt: String?
    public var lastFailureAt: String?
    public var lastErrorCode: Int?
    public var lastErrorText: String?
    /// The instance (``PassLedger/owner``) that claimed the row last.
    public var claimedBy: String?
    /// Until when that claim holds (seconds since 1970), unless renewed.
    public var leaseUntil: Double?
}

/// A pass claimed for a gateway call, with its history so far: the same
/// facts a retry message carries for each of its passes.
public typealias PassWork = PassRetryMessage.Pass

/// Why a message sends nothing.
public enum DropReason: String, Sendable {
    /// The booking was cancelled.
    case cancelled
    /// A newer version of the booking is known.
    case stale
    /// The booking is not confirmed (a reschedule in an approval room made
    /// it pending again): no pass until it is confirmed (contract v1.1).
    case notConfirmed
}

/// One kind of notice for some recipients of one booking version: what a
/// gateway call (or several, after failures) sends.
public struct NoticeJob: Sendable, Equatable {
    public var kind: NoticeKind
    /// The booking at this version.
    public var booking: Booking
    /// The booking before this version's change (the event's `previous`).
    public var previous: BookingSnapshot?
    /// The claimed recipients, by index into ``recipients``.
    public var work: [PassWork]

    public init(kind: NoticeKind, booking: Booking, previous: BookingSnapshot?, work: [PassWork]) {
        self.kind = kind
        self.booking = booking
        self.previous = previous
        self.work = work
    }

    /// The list ``PassWork/attendeeIndex`` points into: the attendees before
    /// the change for `rescheduled` and `removed` (a removed attendee is
    /// only there), the current attendees otherwise.
    public var recipients: [Attendee] { Self.recipients(kind, booking, previous) }

    static func recipients(_ kind: NoticeKind, _ booking: Booking, _ previous: BookingSnapshot?) -> [Attendee] {
        switch kind {
        case .pass, .cancelled: booking.attendees
        case .rescheduled, .removed: previous?.attendees ?? []
        }
    }
}

/// The result of admitting a message to the ledger.
public enum Admission: Sendable, Equatable {
    /// Nothing to send: the whole message is moot.
    case dropped(DropReason)
    /// Send these jobs in order (notices about the change before the new
    /// passes); a job's work may be empty when everything was sent already
    /// or is owned by another message.
    case proceed([NoticeJob])
}

/// A message to publish once the ledger transaction that decided it has
/// committed (the ledger's outbox).
public struct OutboxMessage: Sendable, Equatable {
    public enum HeaderValue: Codable, Sendable, Equatable {
        case string(String)
        case int(Int64)
    }
    public var exchange: String
    public var routingKey: String
    public var messageID: String
    public var type: String
    public var body: [UInt8]
    public var headers: [String: HeaderValue]

    public init(exchange: String, routingKey: String, messageID: String, type: String, body: [UInt8],
                headers: AMQPTable = [:]) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.messageID = messageID
        self.type = type
        self.body = body
        // The trace it is made in (handling a delivery): kept in the row,
        // so a publish from the table later continues that trace too.
        var headers = headers
        if let context = ServiceContext.current { MessageTracing.inject(context, into: &headers) }
        var h: [String: HeaderValue] = [:]
        for (k, v) in headers {
            if let s = v.stringValue { h[k] = .string(s) } else if let i = v.intValue { h[k] = .int(i) }
        }
        self.headers = h
    }

    /// The AMQP properties: persistent JSON with type, message id, headers.
    public var properties: AMQPProperties {
        var table: AMQPTable = [:]
        for (k, v) in headers {
            switch v {
            case .string(let s): table[k] = .string(s)
            case .int(let i): table[k] = .int64(i)
            }
        }
        var p = AMQPProperties.persistentJSON(type: type, messageID: messageID, headers: table)
        p.appID = "pass-sender"
        return p
    }
}

extension OutboxMessage {
    /// `headers` as the ledger's `outbox.headers` column keeps them: the
    /// JSON of `[String: HeaderValue]` in its synthesised `Codable` form
    /// (`{"traceparent":{"string":{"_0":"00-…"}}}`), which the outbox's
    /// readers decode with `JSONDecoder`. Written directly, keys sorted:
    /// through `JSONEncoder` it was 2.6 % of the pass sender's samples in a
    /// profile (docs/performance.md, "Message bodies are written by hand").
    var headersJSON: [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        // In the order of their UTF-8 bytes, as `JSONEncoder`'s sorted keys.
        let sorted = headers.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        for (index, (key, value)) in sorted.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            ContractJSON.appendString(key, to: &out)
            switch value {
            case .string(let value):
                out.append(contentsOf: #":{"string":{"_0":"#.utf8)
                ContractJSON.appendString(value, to: &out)
            case .int(let value):
                out.append(contentsOf: #":{"int":{"_0":"#.utf8)
                out.append(contentsOf: String(value).utf8)
            }
            out.append(contentsOf: "}}".utf8)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// A row of the outbox.
public struct OutboxRow: Sendable, Equatable {
    public var id: Int64
    public var message: OutboxMessage
}

/// How one pass ends a gateway call that did not deliver it.
public struct FailureUpdate: Sendable, Equatable {
    /// Normalised e-mail of the recipient (the ledger key).
    public var email: String
    public var attendeeIndex: Int
    /// ``PassStatus/scheduled`` or ``PassStatus/failed``.
    public var status: PassStatus
    public var attempts: Int
    public var firstFailureAt: String
    public var lastFailureAt: String
    public var lastErrorCode: Int?
    public var lastErrorText: String
}

/// A statement answered in a way the ledger's SQL rules out (a database
/// that is not what the migrations made).
struct LedgerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
