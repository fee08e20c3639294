import ArgumentParser
import BookingContracts
import Foundation

/// Options shared by the commands that send a booking command.
struct SendOptions: ParsableArguments {
    @Option(name: .customLong("message-id"),
            help: "Idempotency key: repeating the command with the same id returns the stored reply and changes nothing twice (default: a fresh id).")
    var messageID: String?
}

/// Sends `body` as `type`, prints the reply and fails with ``ExitStatus/errorReply``
/// on an error reply.
func sendAndPrint<Body: Encodable>(_ type: CommandType, _ body: Body, global: GlobalOptions,
                                           send: SendOptions) async throws {
    let sent = try await CommandClient(global: global).send(type, body, messageID: send.messageID)
    guard case .full(let reply) = sent else {
        if case .outline(let outline, let raw) = sent { try printOutline(outline, raw: raw, json: global.json) }
        return
    }
    if global.json {
        print(try Output.json(reply))
    } else {
        switch reply {
        case .booking(let booking): print(Output.describe(booking))
        case .bookingView(let view): print(Output.describe(view))
        case .room(let room): print(Output.describe(room))
        case .replay(let summary):
            print("replayed \(summary.rooms) rooms and \(summary.bookings) bookings to \(summary.queue) (replay \(summary.replayId))")
        case .series(let series): print(Output.describe(series))
        case .seriesCancelled(let series): print(Output.describe(series))
        case .closure(let reply): print(Output.describe(reply))
        case .error(let error): FileHandle.standardError.write(Data((TerminalText.safe(Output.describe(error)) + "\n").utf8))
        }
    }
    if case .error = reply { throw ExitStatus.errorReply }
}

/// A newer handler's successful reply, read in outline: with `--json` the
/// reply as received (it is JSON), else what it is about and each booking
/// whose status this build does not know.
private func printOutline(_ outline: ReplyOutline, raw: [UInt8], json: Bool) throws {
    if json {
        print(try Output.json(raw: raw))
        return
    }
    var lines: [String] = []
    if let id = outline.bookingId { lines.append("booking \(id)  \(outline.status ?? "?")") }
    if let id = outline.seriesId { lines.append("series \(id)") }
    if let id = outline.closureId { lines.append("closure \(id)") }
    for booking in outline.unknown where booking.id != outline.bookingId {
        lines.append("  booking \(booking.id)  \(booking.status)")
    }
    print(lines.joined(separator: "\n"))
    FileHandle.standardError.write(Data(("bookingctl: the reply has a booking status this bookingctl does not know (a newer "
                                         + "booking handler); --json prints all of it\n").utf8))
}

/// Reads a JSON body from a file or `-` (stdin).
private func readBody<T: Decodable>(_ type: T.Type, from path: String) throws -> T {
    let data: Data
    if path == "-" {
        data = FileHandle.standardInput.readDataToEndOfFile()
    } else {
        guard let contents = FileManager.default.contents(atPath: path) else {
            throw ValidationError("cannot read \(path)")
        }
        data = contents
    }
    do {
        return try ContractJSON.decode(T.self, from: data)
    } catch {
        throw ValidationError("\(path) is not a valid \(T.self) body: \(error)")
    }
}

/// Parses a `--date` value: `YYYY-MM-DD`, `today` or UNIX seconds.
private func parseDate(_ text: String) throws -> DateSpec {
    guard let spec = DateSpec(queryValue: text), spec.isValid else {
        throw ValidationError("--date must be a real YYYY-MM-DD, 'today' or UNIX seconds (1970 to 9999), not '\(text)'")
    }
    return spec
}

// MARK: room

extension RoomCommand.Register {
    /// `--hours mon-thu=07:00-19:00,fri=07:00-15:00,sat=closed`: the
    /// `hours` object of `room.register`; the handler checks the times.
    static func parseHours(_ text: String) throws -> [String: [String]?] {
        var result: [String: [String]?] = [:]
        for item in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw ValidationError("--hours: '\(item)' is not DAY=HH:mm-HH:mm or DAY=closed") }
            let days = parts[0].lowercased().split(separator: "-").map(String.init)
            guard (1...2).contains(days.count), let first = WeeklyHours.keys.firstIndex(of: days[0]),
                  let last = WeeklyHours.keys.firstIndex(of: days.last!), first <= last else {
                throw ValidationError("--hours: '\(parts[0])' is not a weekday (mon…sun) or a range such as mon-fri")
            }
            let value: [String]?
            if parts[1].lowercased() == "closed" {
                value = nil
            } else {
                let times = parts[1].split(separator: "-").map(String.init)
                guard times.count == 2 else { throw ValidationError("--hours: '\(parts[1])' is not HH:mm-HH:mm or closed") }
                value = times
            }
            for day in WeeklyHours.keys[first...last] { result[day] = .some(value) }
        }
        return result
    }
}

/// `bookingctl room register`.
struct RoomCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "room", abstract: "Manage the room catalog and its closures.",
        subcommands: [Register.self, Close.self, Reopen.self, Closures.self])

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "register",
            abstract: "Create or replace a room (room.register; upsert by name).",
            discussion: """
                Examples:
                  bookingctl room register --name Berlin --capacity 8 --equipment beamer,tv --location "2nd floor"
                  bookingctl room register --name Atrium --capacity 12 --hours mon-thu=07:00-19:00,fri=07:00-15:00,sat=closed,sun=closed --buffer 15
                  bookingctl room register --name Loft --capacity 6 --max-active 3
                  bookingctl room register --body room.json
                """)

        @OptionGroup var global: GlobalOptions
        @OptionGroup var send: SendOptions
        @Option(help: "Room name (the key).") var name: String?
        @Option(help: "How many people fit.") var capacity: Int?
        @Option(help: "Where it is.") var location: String?
        @Option(help: "Comma-separated equipment, e.g. beamer,tv.") var equipment: String?
        @Option(help: "Size, e.g. 22m2.") var size: String?
        @Option(name: .customLong("image"), help: "Image URL (up to 3; repeat the option).") var images: [String] = []
        @Option(name: .customLong("time-zone"), help: "IANA zone (default Europe/Berlin).") var timeZone: String?
        @Option(help: "Opening time HH:mm (default 07:00).") var opens: String?
        @Option(help: "Closing time HH:mm (default 19:00).") var closes: String?
        @Flag(name: .customLong("requires-approval"), help: "New bookings start pending until confirmed.")
        var requiresApproval = false
        @Option(help: "Broker users who may confirm pending bookings, comma-separated (v1.1).")
        var approvers: String?
        @Option(name: .customLong("horizon-days"), help: "Bookings start at most this many days ahead (v1.1, 1107).")
        var horizonDays: Int?
        @Option(name: .customLong("min-minutes"), help: "Shortest booking in minutes (v1.1, 1108).")
        var minMinutes: Int?
        @Option(name: .customLong("max-minutes"), help: "Longest booking in minutes (v1.1, 1108).")
        var maxMinutes: Int?
        @Option(name: .customLong("change-cutoff-minutes"),
                help: "No reschedule or cancel later than this before the start, admins excepted (v1.1, 2004).")
        var changeCutoffMinutes: Int?
        @Option(name: .customLong("auto-release-minutes"),
                help: "Check-in required; a booking nobody checked in is released this many minutes after its start (v1.1).")
        var autoReleaseMinutes: Int?
        @Option(help: ArgumentHelp(
            "Opening hours per weekday (v1.2): DAY=HH:mm-HH:mm or DAY=closed, comma-separated; DAY is mon…sun or a range mon-fri. Days not named use --opens/--closes.",
            valueName: "hours"))
        var hours: String?
        @Option(name: .customLong("buffer"), help: "Minutes between two bookings of the room (v1.2; 0-240, a multiple of 15).")
        var bufferMinutes: Int?
        @Option(name: .customLong("max-active"),
                help: "Most bookings of the room one requester may hold that have not ended (v1.2, 1113; admins excepted).")
        var maxActiveBookings: Int?
        @Option(help: "Read the whole room.register body from a JSON file ('-' for stdin) instead of the options.")
        var body: String?

        func validate() throws {
            if body == nil && (name == nil || capacity == nil) {
                throw ValidationError("--name and --capacity are required (or give --body FILE)")
            }
        }

        func run() async throws {
            try await reportingErrors {
                let room: RegisterRoom
                if let body {
                    room = try readBody(RegisterRoom.self, from: body)
                } else {
                    room = RegisterRoom(
                        name: name!, location: location,
                        equipment: equipment.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } },
                        size: size, capacity: capacity!, images: images.isEmpty ? nil : images,
                        timeZone: timeZone, opens: opens, closes: closes,
                        requiresApproval: requiresApproval ? true : nil,
                        approvers: approvers.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } },
                        horizonDays: horizonDays, minMinutes: minMinutes, maxMinutes: maxMinutes,
                        changeCutoffMinutes: changeCutoffMinutes, autoReleaseMinutes: autoReleaseMinutes,
                        hours: try hours.map(Self.parseHours), bufferMinutes: bufferMinutes,
                        maxActiveBookings: maxActiveBookings)
                }
                try await sendAndPrint(.registerRoom, room, global: global, send: send)
            }
        }
    }
}

// MARK: booking commands

/// `bookingctl book`.
struct BookCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "book",
        abstract: "Book a room (booking.create).",
        discussion: """
            Each --attendee is NAME,EMAIL,PHONE; a phone without country code is German.

            A series (v1.1): --repeat daily|weekdays|weekly|biweekly|monthly with
            --until YYYY-MM-DD or --count N; --date is the first occurrence.
            With --skip-conflicts, occurrences that conflict or break a room rule
            are skipped and listed; without it, one such occurrence refuses the
            whole series and nothing is booked.

            Examples:
              bookingctl book --room Berlin --date 2026-11-23 --start 09:00 --end 10:30 \\
                --title "Sprint review" --attendee "Ada Lovelace,ada@example.com,0170 1234567"
              bookingctl book --room Berlin --date 2026-11-23 --start 09:00 --end 09:30 \\
                --title "Stand-up" --attendee "Ada Lovelace,ada@example.com,0170 1234567" \\
                --repeat weekly --until 2027-06-30 --skip-conflicts
              bookingctl book --room Berlin --date 2026-11-23 --start 09:00 --end 10:00 \\
                --title "Interview" --attendee "Ada Lovelace,ada@example.com,0170 1234567" --hold 15
              bookingctl book --room Berlin --date 2026-11-23 --start 09:00 --end 10:00 \\
                --title "Retro" --attendee "Ada Lovelace,ada@example.com,0170 1234567" --waitlist
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Option(help: "Room name.") var room: String?
    @Option(help: "Local date: YYYY-MM-DD, 'today' or UNIX seconds.") var date: String?
    @Option(help: "Local start HH:mm (15-minute grid).") var start: String?
    @Option(help: "Local end HH:mm (15-minute grid).") var end: String?
    @Option(help: "Title.") var title: String?
    @Option(help: "Description.") var description: String?
    @Option(name: .customLong("attendee"), help: "NAME,EMAIL,PHONE (repeat for each attendee).")
    var attendees: [String] = []
    @Option(name: .customLong("repeat"), help: "Book a series: daily, weekdays, weekly, biweekly or monthly (v1.1).")
    var frequency: String?
    @Option(help: "Last date of the series, YYYY-MM-DD (with --repeat).") var until: String?
    @Option(help: "Number of occurrences, 1–366 (with --repeat, instead of --until).") var count: Int?
    @Flag(name: .customLong("skip-conflicts"),
          help: "Book the occurrences that fit and list the others (onConflict skip); default: all or nothing.")
    var skipConflicts = false
    @Option(name: .customLong("hold"),
            help: "Hold the slot for this many minutes (1–60) as 'held'; confirm it with 'bookingctl confirm' before it lapses (v1.2).")
    var holdMinutes: Int?
    @Flag(name: .customLong("waitlist"),
          help: "When the slot is taken, wait for it (ifTaken waitlist): promoted when it comes free (v1.2).")
    var waitlist = false
    @Option(help: "Read the whole booking.create body from a JSON file ('-' for stdin) instead of the options.")
    var body: String?

    func validate() throws {
        if holdMinutes != nil && (waitlist || frequency != nil) {
            throw ValidationError("--hold goes neither with --waitlist nor with --repeat")
        }
        if let frequency {
            guard Recurrence.Frequency(rawValue: frequency) != nil else {
                throw ValidationError("--repeat must be one of \(Recurrence.Frequency.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard (until == nil) != (count == nil) else { throw ValidationError("--repeat needs --until DATE or --count N (one of them)") }
        } else if until != nil || count != nil || skipConflicts {
            throw ValidationError("--until, --count and --skip-conflicts go with --repeat")
        }
        guard body == nil else { return }
        for (flag, value) in [("--room", room), ("--date", date), ("--start", start), ("--end", end), ("--title", title)]
        where value == nil {
            throw ValidationError("\(flag) is required (or give --body FILE)")
        }
        if attendees.isEmpty { throw ValidationError("at least one --attendee NAME,EMAIL,PHONE is required") }
        _ = try parsedAttendees()
    }

    func parsedAttendees() throws -> [AttendeeInput] {
        try attendees.map(parseAttendee)
    }

    func run() async throws {
        try await reportingErrors {
            let create: CreateBooking
            if let body {
                create = try readBody(CreateBooking.self, from: body)
            } else {
                create = CreateBooking(room: room!, date: try parseDate(date!), start: start!, end: end!,
                                       title: title!, description: description, attendees: try parsedAttendees(),
                                       recurrence: frequency.map { Recurrence(frequency: $0, until: until, count: count) },
                                       onConflict: skipConflicts ? ConflictPolicy.skip.rawValue : nil,
                                       hold: holdMinutes.map { HoldRequest(minutes: $0) },
                                       ifTaken: waitlist ? IfTaken.waitlist.rawValue : nil)
            }
            try await sendAndPrint(.createBooking, create, global: global, send: send)
        }
    }
}

/// `bookingctl confirm`.
struct ConfirmCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "confirm", abstract: "Confirm a pending booking, or your own held one (booking.confirm).",
        discussion: "Example:\n  bookingctl confirm 6f1c2a9e-…")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Argument(help: "The booking id.") var bookingId: String

    func run() async throws {
        try await reportingErrors {
            try await sendAndPrint(.confirmBooking, ConfirmBooking(bookingId: bookingId), global: global, send: send)
        }
    }
}

/// `bookingctl cancel`.
struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel", abstract: "Cancel a booking or a series (booking.cancel); pending passes are dropped.",
        discussion: """
            Examples:
              bookingctl cancel 6f1c2a9e-… --reason "moved online"
              bookingctl cancel --series 0b7d… --from 2027-03-01     # every occurrence on or after that date
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Argument(help: "The booking id (one booking; one occurrence of a series alone).") var bookingId: String?
    @Option(name: .customLong("series"), help: "Cancel the occurrences of this series instead (v1.1).") var seriesId: String?
    @Option(help: "With --series: the first local date to cancel, YYYY-MM-DD (default: all).") var from: String?
    @Option(help: "Why; kept with the booking.") var reason: String?

    func validate() throws {
        guard (bookingId == nil) != (seriesId == nil) else { throw ValidationError("give a booking id or --series ID (one of them)") }
        if from != nil, seriesId == nil { throw ValidationError("--from goes with --series") }
    }

    func run() async throws {
        try await reportingErrors {
            if let seriesId {
                try await sendAndPrint(.cancelBooking, CancelSeries(seriesId: seriesId, from: from, reason: reason),
                                       global: global, send: send)
            } else {
                try await sendAndPrint(.cancelBooking, CancelBooking(bookingId: bookingId!, reason: reason),
                                       global: global, send: send)
            }
        }
    }
}

/// One `--attendee NAME,EMAIL,PHONE` option of `book` and `update`.
private func parseAttendee(_ text: String) throws -> AttendeeInput {
    let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
    guard parts.count == 3 else { throw ValidationError("--attendee '\(text)': expected NAME,EMAIL,PHONE") }
    return AttendeeInput(name: parts[0], email: parts[1], phone: parts[2])
}

/// `bookingctl update` (v1.1).
struct UpdateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Change a booking's title, description or attendees (booking.update); status and time stay.",
        discussion: """
            Given options replace the old values with the create rules; --attendee (repeatable,
            NAME,EMAIL,PHONE) replaces the whole list. --description "" removes the description.

            Example:
              bookingctl update 6f1c2a9e-… --title "Sprint review (moved online)" \\
                  --attendee "Ada Lovelace,ada@example.com,0170 1234567" --json
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Argument(help: "The booking id.") var bookingId: String
    @Option(help: "New title.") var title: String?
    @Option(help: "New description (\"\" removes it).") var description: String?
    @Option(name: .customLong("attendee"), help: "NAME,EMAIL,PHONE (repeat; replaces the whole list).")
    var attendees: [String] = []

    func validate() throws {
        if title == nil && description == nil && attendees.isEmpty {
            throw ValidationError("give at least one of --title, --description, --attendee")
        }
        _ = try parsedAttendees()
    }

    func parsedAttendees() throws -> [AttendeeInput]? {
        attendees.isEmpty ? nil : try attendees.map(parseAttendee)
    }

    func run() async throws {
        try await reportingErrors {
            try await sendAndPrint(.updateBooking, UpdateBooking(bookingId: bookingId, title: title, description: description,
                                                                 attendees: try parsedAttendees()),
                                   global: global, send: send)
        }
    }
}

/// `bookingctl reject` (v1.1).
struct RejectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reject",
        abstract: "Reject a pending booking (booking.reject); for the room's approvers and ADMIN_USERS.",
        discussion: "Example:\n  bookingctl reject 6f1c2a9e-… --reason \"room closed for works\" --json")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Argument(help: "The booking id.") var bookingId: String
    @Option(help: "Why; kept with the booking (as cancelReason).") var reason: String?

    func run() async throws {
        try await reportingErrors {
            try await sendAndPrint(.rejectBooking, RejectBooking(bookingId: bookingId, reason: reason),
                                   global: global, send: send)
        }
    }
}

/// `bookingctl checkin` (v1.1).
struct CheckinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkin",
        abstract: "Check a confirmed booking in (booking.checkin): from 15 minutes before its start until its end or release.",
        discussion: """
            For the booking's requester, the room's approvers and ADMIN_USERS. In a room with
            autoReleaseMinutes a booking nobody checked in is released; elsewhere bookings start
            by themselves. 2005 outside the window.
            Example:
              bookingctl checkin 6f1c2a9e-… --json
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Argument(help: "The booking id.") var bookingId: String

    func run() async throws {
        try await reportingErrors {
            try await sendAndPrint(.checkinBooking, CheckinBooking(bookingId: bookingId), global: global, send: send)
        }
    }
}

/// `bookingctl reschedule`.
struct RescheduleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reschedule",
        abstract: "Move a booking (booking.reschedule); passes are sent again.",
        discussion: "Example:\n  bookingctl reschedule 6f1c2a9e-… --date 2026-11-24 --start 14:00 --end 15:00")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var send: SendOptions
    @Argument(help: "The booking id.") var bookingId: String
    @Option(help: "New local date: YYYY-MM-DD, 'today' or UNIX seconds.") var date: String
    @Option(help: "New local start HH:mm.") var start: String
    @Option(help: "New local end HH:mm.") var end: String

    func run() async throws {
        try await reportingErrors {
            let command = RescheduleBooking(bookingId: bookingId, date: try parseDate(date), start: start, end: end)
            try await sendAndPrint(.rescheduleBooking, command, global: global, send: send)
        }
    }
}
