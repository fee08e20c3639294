import BookingContracts
import Testing

@testable import BookingHandler

/// One cell of the action × status table.
struct TransitionCase: CustomTestStringConvertible, Sendable {
    var action: BookingAction
    var from: BookingStatus
    var requiresApproval: Bool
    /// nil: 2002.
    var to: BookingStatus?

    var testDescription: String {
        "\(action.rawValue) \(from.rawValue)\(requiresApproval ? " (approval)" : "") → \(to?.rawValue ?? "2002")"
    }
}

@Suite("Status machine")
struct TransitionTests {
    static let table: [TransitionCase] = [
        // Without approval.
        .init(action: .confirm, from: .pending, requiresApproval: false, to: .confirmed),
        .init(action: .confirm, from: .confirmed, requiresApproval: false, to: nil),
        .init(action: .confirm, from: .cancelled, requiresApproval: false, to: nil),
        .init(action: .cancel, from: .pending, requiresApproval: false, to: .cancelled),
        .init(action: .cancel, from: .confirmed, requiresApproval: false, to: .cancelled),
        .init(action: .cancel, from: .cancelled, requiresApproval: false, to: nil),
        .init(action: .reschedule, from: .pending, requiresApproval: false, to: .pending),
        .init(action: .reschedule, from: .confirmed, requiresApproval: false, to: .confirmed),
        .init(action: .reschedule, from: .cancelled, requiresApproval: false, to: nil),
        // With approval: only reschedule differs (back to pending).
        .init(action: .confirm, from: .pending, requiresApproval: true, to: .confirmed),
        .init(action: .confirm, from: .confirmed, requiresApproval: true, to: nil),
        .init(action: .confirm, from: .cancelled, requiresApproval: true, to: nil),
        .init(action: .cancel, from: .pending, requiresApproval: true, to: .cancelled),
        .init(action: .cancel, from: .confirmed, requiresApproval: true, to: .cancelled),
        .init(action: .cancel, from: .cancelled, requiresApproval: true, to: nil),
        .init(action: .reschedule, from: .pending, requiresApproval: true, to: .pending),
        .init(action: .reschedule, from: .confirmed, requiresApproval: true, to: .pending),
        .init(action: .reschedule, from: .cancelled, requiresApproval: true, to: nil),
    ]

    @Test func tableCoversEveryCombination() {
        for action in BookingAction.allCases {
            for status in BookingStatus.allCases {
                for approval in [false, true] {
                    #expect(Self.table.filter {
                        $0.action == action && $0.from == status && $0.requiresApproval == approval
                    }.count == 1)
                }
            }
        }
    }

    @Test(arguments: table)
    func transition(_ c: TransitionCase) throws {
        let result = BookingRules.transition(c.action, from: c.from, requiresApproval: c.requiresApproval)
        if let to = c.to {
            #expect(try result.get() == to)
        } else {
            let error = try #require(expectFailure(result, .statusChangeNotAllowed, field: nil))
            #expect(error.text == "booking is \(c.from.rawValue); cannot \(c.action.rawValue)")
        }
    }

    @Test func exampleText() throws {
        let error = try #require(expectFailure(BookingRules.transition(.confirm, from: .cancelled,
                                                                       requiresApproval: false),
                                               .statusChangeNotAllowed, field: nil))
        #expect(error.text == "booking is cancelled; cannot confirm")
    }

    @Test func actionNamesMatchTheCommands() {
        #expect(BookingAction.confirm.rawValue == "confirm")
        #expect(BookingAction.cancel.rawValue == "cancel")
        #expect(BookingAction.reschedule.rawValue == "reschedule")
    }
}

@Suite("Authorisation")
struct AuthorizationTests {
    static let admins: Set<String> = ["approval-system"]

    @Test(arguments: [nil, "", "calendar-app", "someone-else", "approval-system"] as [String?])
    func bookingWithoutRequesterIsOpenToAnyone(_ requester: String?) {
        #expect(BookingRules.authorize(requester: requester, booking: Fixture.booking(requestedBy: nil),
                                       administrators: Self.admins) == nil)
        #expect(BookingRules.authorize(requester: requester, booking: Fixture.booking(requestedBy: ""),
                                       administrators: []) == nil)
    }

    @Test func sameRequesterMayChange() {
        #expect(BookingRules.authorize(requester: "calendar-app", booking: Fixture.booking(requestedBy: "calendar-app"),
                                       administrators: []) == nil)
    }

    @Test func administratorMayChangeAnyBooking() {
        #expect(BookingRules.authorize(requester: "approval-system",
                                       booking: Fixture.booking(requestedBy: "calendar-app"),
                                       administrators: Self.admins) == nil)
    }

    @Test func otherRequesterMayNot() throws {
        let booking = Fixture.booking(id: "b-42", requestedBy: "calendar-app")
        let error = try #require(BookingRules.authorize(requester: "mallory", booking: booking,
                                                        administrators: Self.admins))
        #expect(error.code == .notPermitted)
        #expect(error.field == nil)
        #expect(error.text.contains("b-42"))
        #expect(!error.text.contains("calendar-app"))
    }

    @Test(arguments: [nil, ""] as [String?])
    func anonymousCommandMayNotChangeOwnedBooking(_ requester: String?) throws {
        let booking = Fixture.booking(id: "b-7", requestedBy: "calendar-app")
        let error = try #require(BookingRules.authorize(requester: requester, booking: booking,
                                                        administrators: Self.admins))
        #expect(error.code == .notPermitted)
        #expect(error.field == nil)
        #expect(error.text.contains("b-7"))
        #expect(!error.text.contains("calendar-app"))
    }

    @Test func matchingIsExact() {
        let booking = Fixture.booking(requestedBy: "calendar-app")
        #expect(BookingRules.authorize(requester: "Calendar-App", booking: booking, administrators: [])?.code
            == .notPermitted)
        #expect(BookingRules.authorize(requester: "calendar-app ", booking: booking, administrators: [])?.code
            == .notPermitted)
        #expect(BookingRules.authorize(requester: "APPROVAL-SYSTEM", booking: booking, administrators: Self.admins)?
            .code == .notPermitted)
    }

    @Test func ownerNeedsNoAdministrators() {
        #expect(BookingRules.authorize(requester: "calendar-app", booking: Fixture.booking(requestedBy: "calendar-app"),
                                       administrators: Self.admins) == nil)
    }
}

@Suite("Overlap")
struct OverlapTests {
    private static func slot(_ start: String, _ end: String) -> BookingSlot {
        BookingSlot(date: "2026-11-23", start: start, end: end, timeZone: "UTC",
                    startsAt: utc("2026-11-23T\(start):00Z"), endsAt: utc("2026-11-23T\(end):00Z"))
    }

    private static func overlaps(_ a: (String, String), _ b: (String, String)) -> Bool {
        BookingRules.overlaps(slot(a.0, a.1), slot(b.0, b.1).interval)
    }

    @Test func backToBackDoesNotOverlap() {
        #expect(!Self.overlaps(("09:00", "10:00"), ("10:00", "11:00")))
        #expect(!Self.overlaps(("10:00", "11:00"), ("09:00", "10:00")))
    }

    @Test func disjointDoesNotOverlap() {
        #expect(!Self.overlaps(("09:00", "10:00"), ("10:15", "11:00")))
        #expect(!Self.overlaps(("12:00", "13:00"), ("07:00", "08:00")))
    }

    @Test func identicalOverlaps() {
        #expect(Self.overlaps(("09:00", "10:00"), ("09:00", "10:00")))
    }

    @Test func containmentOverlapsBothWays() {
        #expect(Self.overlaps(("09:00", "12:00"), ("10:00", "11:00")))
        #expect(Self.overlaps(("10:00", "11:00"), ("09:00", "12:00")))
        // Sharing a boundary on one side.
        #expect(Self.overlaps(("09:00", "12:00"), ("09:00", "10:00")))
        #expect(Self.overlaps(("09:00", "12:00"), ("11:00", "12:00")))
    }

    @Test func partialOverlapBothWays() {
        #expect(Self.overlaps(("09:00", "10:30"), ("10:15", "11:00")))
        #expect(Self.overlaps(("10:15", "11:00"), ("09:00", "10:30")))
    }

    @Test func oneSecondIsEnough() {
        let a = Self.slot("09:00", "10:00")
        #expect(BookingRules.overlaps(a, (startsAt: utc("2026-11-23T09:59:59Z"), endsAt: utc("2026-11-23T11:00:00Z"))))
        #expect(!BookingRules.overlaps(a, (startsAt: utc("2026-11-23T10:00:00Z"), endsAt: utc("2026-11-23T11:00:00Z"))))
        #expect(BookingRules.overlaps(a, (startsAt: utc("2026-11-23T08:00:00Z"), endsAt: utc("2026-11-23T09:00:01Z"))))
        #expect(!BookingRules.overlaps(a, (startsAt: utc("2026-11-23T08:00:00Z"), endsAt: utc("2026-11-23T09:00:00Z"))))
    }

    @Test func comparesInstantsNotLocalTimes() throws {
        // 09:00-10:00 in Berlin (08:00Z-09:00Z) against 08:30Z-09:30Z given as instants.
        let berlin = try #require(expectSuccess(BookingRules.slot(room: Fixture.berlin,
                                                                  date: .calendarDate("2026-11-23"),
                                                                  start: "09:00", end: "10:00", now: Fixture.now)))
        #expect(BookingRules.overlaps(berlin, (startsAt: utc("2026-11-23T08:30:00Z"),
                                               endsAt: utc("2026-11-23T09:30:00Z"))))
        #expect(!BookingRules.overlaps(berlin, (startsAt: utc("2026-11-23T09:00:00Z"),
                                                endsAt: utc("2026-11-23T10:00:00Z"))))
    }
}
