import AMQPClient
import BookingContracts
import Foundation
import Logging

/// What the page's "Book" button sends to `POST /api/book`.
public struct PageBookingRequest: Codable, Sendable, Equatable {
    public var room: String
    public var date: String
    public var start: String
    public var end: String
    public var title: String
    public var name: String
    public var email: String
    public var phone: String
    /// The click's idempotency key (`message_id`): a retry of one click
    /// books once; another click is another request.
    public var key: String?

    public init(room: String, date: String, start: String, end: String, title: String, name: String, email: String,
                phone: String, key: String? = nil) {
        self.room = room
        self.date = date
        self.start = start
        self.end = end
        self.title = title
        self.name = name
        self.email = email
        self.phone = phone
        self.key = key
    }
}

/// The page's answer: whether it booked, and the handler's reply in words.
public struct PageBookingAnswer: Codable, Sendable, Equatable {
    public var ok: Bool
    /// A sentence for people (conflict, closure, quota, rate … in words).
    public var message: String
    /// The contract's code when refused.
    public var code: Int?
    /// The booking's id and status when booked.
    public var bookingId: String?
    public var status: String?
}

/// Books from the page: publishes `booking.create` to `booking.commands`
/// as the broker user `PAGE_USER` (its own connection, so `user_id` is
/// that user's and the broker vouches for it) and waits for the handler's
/// reply. The page is one caller like any other: the handler applies its
/// rules, quotas and rate limit to `PAGE_USER` as to anyone.
public struct PageBooker: Sendable {
    let connection: AMQPConnection
    let timeout: Duration
    let logger: Logger
    /// The names a booking request must be addressed to (``PageHosts``).
    public let hosts: PageHosts

    public init(connection: AMQPConnection, logger: Logger, hosts: PageHosts = PageHosts(bind: "127.0.0.1"),
                timeout: Duration = .seconds(15)) {
        self.connection = connection
        self.logger = logger
        self.hosts = hosts
        self.timeout = timeout
    }

    /// The broker user the page books as.
    public var user: String { connection.user }

    public func book(_ request: PageBookingRequest) async -> PageBookingAnswer {
        guard let date = ContractFormat.calendarDate(request.date).map({ _ in request.date }) else {
            return PageBookingAnswer(ok: false, message: "Not booked: \(request.date.prefix(40)) is not a date.", code: 1100)
        }
        let command = CreateBooking(room: request.room, date: .calendarDate(date), start: request.start, end: request.end,
                                    title: request.title,
                                    attendees: [AttendeeInput(name: request.name, email: request.email, phone: request.phone)])
        let key = request.key.flatMap { $0.isEmpty || $0.utf8.count > 100 ? nil : $0 } ?? UUID().uuidString
        var properties = AMQPProperties.persistentJSON(type: CommandType.createBooking.rawValue, messageID: key,
                                                       userID: connection.user)
        properties.correlationID = UUID().uuidString
        do {
            let reply = try await connection.call([UInt8](try ContractJSON.encode(command)), exchange: Topology.commandsExchange,
                                                  routingKey: CommandType.createBooking.rawValue, properties: properties,
                                                  timeout: timeout)
            return Self.answer(body: reply.body, request: request, logger: logger)
        } catch {
            logger.warning("page booking got no reply", metadata: ["error": "\(error)"])
            return PageBookingAnswer(ok: false, message: "No answer from the booking service yet; the booking may or may not "
                                     + "have been made. Look at the bar in a moment before trying again.")
        }
    }

    /// The reply's body in words. A reply this build cannot read in full
    /// (a newer handler's: a booking status it does not know) is read in
    /// outline, so the person learns whether the booking was made.
    static func answer(body: [UInt8], request: PageBookingRequest, logger: Logger) -> PageBookingAnswer {
        if let reply = try? ContractJSON.decode(CommandReply.self, from: body) { return answer(reply, request: request) }
        let slot = "\(request.room), \(request.date) \(request.start)–\(request.end)"
        guard let outline = ReplyOutline.read(body), let id = outline.bookingId, let status = outline.status else {
            logger.warning("page booking got a reply it cannot read",
                           metadata: ["reply": .string(String(decoding: body.prefix(300), as: UTF8.self))])
            return PageBookingAnswer(ok: false, message: "The booking service answered in a form this page cannot read; the "
                                     + "booking may or may not have been made. Look at the bar in a moment before trying again.")
        }
        logger.notice("page booking answered with a booking status this version does not know (a newer booking handler?)",
                      metadata: ["booking.id": .string(String(id.prefix(100))),
                                 "booking.status": .string(String(status.prefix(64)))])
        return PageBookingAnswer(ok: true, message: "Accepted: \(slot), with a status this page does not know "
                                 + "(\(status.prefix(40))). The bar shows what it means for the room.",
                                 bookingId: id, status: String(status.prefix(64)))
    }

    /// The reply in words.
    static func answer(_ reply: CommandReply, request: PageBookingRequest) -> PageBookingAnswer {
        let slot = "\(request.room), \(request.date) \(request.start)–\(request.end)"
        switch reply {
        case .booking(let booking):
            return PageBookingAnswer(
                ok: true,
                message: booking.status == .pending ? "Requested: \(slot). The room's approvers decide; until then it is pending."
                    : "Booked: \(slot).",
                bookingId: booking.id, status: booking.status.rawValue)
        case .bookingView(let view):
            return PageBookingAnswer(ok: true, message: "Booked: \(slot).", bookingId: view.id, status: view.status.rawValue)
        case .error(let error):
            return PageBookingAnswer(ok: false, message: words(error, slot: slot, room: request.room), code: error.code.rawValue)
        default:
            return PageBookingAnswer(ok: false, message: "Unexpected answer from the booking service.")
        }
    }

    static func words(_ error: ReplyError, slot: String, room: String) -> String {
        switch error.code {
        case .overlap:
            return "Taken: \(room) is booked then (or too close to a booking for its time between bookings). Search again for another time."
        case .roomClosed:
            return "Closed: \(room) is closed then" + (error.closure.map { " (\($0.reason))." } ?? ".")
        case .quotaExceeded:
            return "Quota used: bookings made on this page count as one person's, and that person already holds "
                + "\(error.limit.map(String.init) ?? "the most") active bookings of \(room), the most the room allows. "
                + "Book with your own account, or ask the room's manager."
        case .rateLimited:
            let seconds = max(1, ((error.retryAfterMs ?? 1000) + 999) / 1000)
            return "Busy: this page has made too many bookings just now. Try again in \(seconds) second\(seconds == 1 ? "" : "s")."
        case .startInPast:
            return "Too late: \(slot) has begun or passed."
        case .outsideOpeningHours:
            return "Not open: \(error.text)."
        default:
            return "Not booked: \(error.text)."
        }
    }
}
