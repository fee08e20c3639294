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
    ] + [false, true].flatMap { approval -> [TransitionCase] in
        // v1.1: reject decides a pending booking; rejected is final like cancelled.
        [.init(action: .reject, from: .pending, requiresApproval: approval, to: .rejected),
         .init(action: .reject, from: .confirmed, requiresApproval: approval, to: nil),
         .init(action: .reject, from: .cancelled, requiresApproval: approval, to: nil),
         .init(action: .reject, from: .rejected, requiresApproval: approval, to: nil)]
            + [BookingAction.confirm, .cancel, .reschedule, .update, .checkin].map {
                .init(action: $0, from: .rejected, requiresApproval: approval, to: nil)
            }
            // v1.1: update keeps the status of a live booking.
            + [.init(action: .update, from: .pending, requiresApproval: approval, to: .pending),
               .init(action: .update, from: .confirmed, requiresApproval: approval, to: .confirmed),
               .init(action: .update, from: .cancelled, requiresApproval: approval, to: nil)]
            // v1.1: check-in starts a confirmed booking, nothing else.
            + [.init(action: .checkin, from: .pending, requiresApproval: approval, to: nil),
               .init(action: .checkin, from: .confirmed, requiresApproval: approval, to: .inProgress),
               .init(action: .checkin, from: .inProgress, requiresApproval: approval, to: nil),
               .init(action: .checkin, from: .cancelled, requiresApproval: approval, to: nil)]
            // v1.1: in progress it may be cancelled (ending it early); a
            // reschedule or update passes the table and is refused as too
            // late (2004, tested with the change window); it can be neither
            // confirmed nor rejected.
            + [.init(action: .cancel, from: .inProgress, requiresApproval: approval, to: .cancelled),
               .init(action: .reschedule, from: .inProgress, requiresApproval: approval, to: .inProgress),
               .init(action: .update, from: .inProgress, requiresApproval: approval, to: .inProgress),
               .init(action: .confirm, from: .inProgress, requiresApproval: approval, to: nil),
               .init(action: .reject, from: .inProgress, requiresApproval: approval, to: nil)]
            // v1.1: completed is final.
            + BookingAction.allCases.map { .init(action: $0, from: .completed, requiresApproval: approval, to: nil) }
            // v1.2: a hold is confirmed by its requester (pending again
            // where approval is required), cancelled or updated; a waiter
            // only cancelled or updated; neither rescheduled.
            + [.init(action: .confirm, from: .held, requiresApproval: approval, to: approval ? .pending : .confirmed),
               .init(action: .cancel, from: .held, requiresApproval: approval, to: .cancelled),
               .init(action: .update, from: .held, requiresApproval: approval, to: .held),
               .init(action: .reschedule, from: .held, requiresApproval: approval, to: nil),
               .init(action: .reject, from: .held, requiresApproval: approval, to: nil),
               .init(action: .checkin, from: .held, requiresApproval: approval, to: nil),
               .init(action: .confirm, from: .waitlisted, requiresApproval: approval, to: nil),
               .init(action: .cancel, from: .waitlisted, requiresApproval: approval, to: .cancelled),
               .init(action: .update, from: .waitlisted, requiresApproval: approval, to: .waitlisted),
               .init(action: .reschedule, from: .waitlisted, requiresApproval: approval, to: nil),
               .init(action: .reject, from: .waitlisted, requiresApproval: approval, to: nil),
               .init(action: .checkin, from: .waitlisted, requiresApproval: approval, to: nil)]
    }

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
        #expect(BookingAction.reject.rawValue == "reject")
        #expect(BookingAction.update.rawValue == "update")
        #expect(BookingAction.checkin.rawValue == "checkin")
    }
}

@Suite("Authorisation: changing a booking (cancel, reschedule)")
struct AuthorizationTests {
    static let policy = CallerPolicy(administrators: ["approval-system"])

    @Test func anonymousBookingIsOpenToAnonymousCallersAndAdmins() {
        for requestedBy in [nil, ""] as [String?] {
            let booking = Fixture.booking(requestedBy: requestedBy)
            #expect(Self.policy.mayChange(booking, caller: Caller(userID: nil)) == nil)
            #expect(Self.policy.mayChange(booking, caller: Caller(userID: "")) == nil)
            #expect(Self.policy.mayChange(booking, caller: .user("approval-system")) == nil)
        }
    }

    @Test(arguments: ["calendar-app", "someone-else"])
    func namedOutsiderMayNotChangeAnonymousBooking(_ user: String) throws {
        let booking = Fixture.booking(id: "b-9", requestedBy: nil)
        let error = try #require(Self.policy.mayChange(booking, caller: .user(user)))
        #expect(error.code == .notPermitted)
        #expect(error.text.contains("b-9"))
    }

    @Test func sameRequesterMayChange() {
        #expect(CallerPolicy().mayChange(Fixture.booking(requestedBy: "calendar-app"), caller: .user("calendar-app")) == nil)
    }

    @Test func administratorMayChangeAnyBooking() {
        #expect(Self.policy.mayChange(Fixture.booking(requestedBy: "calendar-app"), caller: .user("approval-system")) == nil)
    }

    @Test func otherRequesterMayNot() throws {
        let booking = Fixture.booking(id: "b-42", requestedBy: "calendar-app")
        let error = try #require(Self.policy.mayChange(booking, caller: .user("mallory")))
        #expect(error.code == .notPermitted)
        #expect(error.field == nil)
        #expect(error.text.contains("b-42"))
        #expect(!error.text.contains("calendar-app"))
    }

    @Test(arguments: [nil, ""] as [String?])
    func anonymousCommandMayNotChangeOwnedBooking(_ requester: String?) throws {
        let booking = Fixture.booking(id: "b-7", requestedBy: "calendar-app")
        let error = try #require(Self.policy.mayChange(booking, caller: Caller(userID: requester)))
        #expect(error.code == .notPermitted)
        #expect(error.field == nil)
        #expect(error.text.contains("b-7"))
        #expect(!error.text.contains("calendar-app"))
    }

    @Test func matchingIsExact() {
        let booking = Fixture.booking(requestedBy: "calendar-app")
        #expect(Self.policy.mayChange(booking, caller: .user("Calendar-App"))?.code == .notPermitted)
        #expect(Self.policy.mayChange(booking, caller: .user("calendar-app "))?.code == .notPermitted)
        #expect(Self.policy.mayChange(booking, caller: .user("APPROVAL-SYSTEM"))?.code == .notPermitted)
    }
}

@Suite("Authorisation: approving a pending booking")
struct ApprovalTests {
    static let policy = CallerPolicy(administrators: ["ops"])
    static var room: Room {
        var room = Fixture.berlin
        room.requiresApproval = true
        room.approvers = ["facility-desk", "calendar-app"]
        return room
    }

    @Test func approverOfTheRoomMayConfirm() {
        let booking = Fixture.booking(status: .pending, requestedBy: "calendar-app")
        #expect(Self.policy.mayApprove(booking, room: Self.room, caller: .user("facility-desk")) == nil)
    }

    @Test func requesterMayNotConfirmOwnBookingEvenAsApprover() throws {
        let booking = Fixture.booking(id: "b-1", status: .pending, requestedBy: "calendar-app")
        let error = try #require(Self.policy.mayApprove(booking, room: Self.room, caller: .user("calendar-app")))
        #expect(error.code == .notPermitted)
        #expect(error.text.contains("own requester"))
    }

    @Test func adminMayConfirmEvenOwnBooking() {
        let booking = Fixture.booking(status: .pending, requestedBy: "ops")
        #expect(Self.policy.mayApprove(booking, room: Self.room, caller: .user("ops")) == nil)
    }

    @Test(arguments: [nil, "", "someone-else"] as [String?])
    func othersMayNotConfirm(_ user: String?) throws {
        let booking = Fixture.booking(status: .pending, requestedBy: nil)
        let error = try #require(Self.policy.mayApprove(booking, room: Self.room, caller: Caller(userID: user)))
        #expect(error.code == .notPermitted)
    }

    @Test func roomWithoutApproversNeedsAnAdmin() throws {
        var room = Self.room
        room.approvers = nil
        let booking = Fixture.booking(status: .pending, requestedBy: "calendar-app")
        #expect(Self.policy.mayApprove(booking, room: room, caller: .user("facility-desk"))?.code == .notPermitted)
        #expect(Self.policy.mayApprove(booking, room: room, caller: .user("ops")) == nil)
    }
}

@Suite("Caller model: admission")
struct AdmissionTests {
    @Test func requireUserIDRefusesAnonymousCommandsOfEveryType() {
        let policy = CallerPolicy(requireUserID: true)
        for type in CommandType.allCases {
            #expect(policy.admit(type, caller: .anonymous)?.code == .notPermitted, "\(type)")
        }
        #expect(policy.admit(.createBooking, caller: .user("calendar-app")) == nil)
    }

    @Test func roomsAreOpenUntilManagersOrAdminsAreNamed() {
        let open = CallerPolicy()
        #expect(open.admit(.registerRoom, caller: .anonymous) == nil)
        #expect(open.admit(.registerRoom, caller: .user("calendar-app")) == nil)
        for policy in [CallerPolicy(administrators: ["ops"]), CallerPolicy(roomManagers: ["facilities"])] {
            #expect(policy.admit(.registerRoom, caller: .anonymous)?.code == .notPermitted)
            #expect(policy.admit(.registerRoom, caller: .user("calendar-app"))?.code == .notPermitted)
        }
        let both = CallerPolicy(administrators: ["ops"], roomManagers: ["facilities"])
        #expect(both.admit(.registerRoom, caller: .user("ops")) == nil)
        #expect(both.admit(.registerRoom, caller: .user("facilities")) == nil)
    }

    @Test func replayOnlyForReplayersAndAdmins() {
        let policy = CallerPolicy(administrators: ["ops"], replayUsers: ["availability-projector"])
        #expect(policy.admit(.replayBookings, caller: .user("availability-projector")) == nil)
        #expect(policy.admit(.replayBookings, caller: .user("ops")) == nil)
        #expect(policy.admit(.replayBookings, caller: .anonymous)?.code == .notPermitted)
        #expect(policy.admit(.replayBookings, caller: .user("calendar-app"))?.code == .notPermitted)
    }
}

@Suite("Caller model: reply_to")
struct ReplyAddressTests {
    @Test(arguments: [nil, "", "amq.rabbitmq.reply-to", "amq.rabbitmq.reply-to.g1h2AA==", "amq.gen-abc",
                      "calendar-app.replies", "calendar-app.x.y"] as [String?])
    func allowedForTheSender(_ replyTo: String?) {
        #expect(ReplyAddress.refusal(replyTo, caller: .user("calendar-app")) == nil)
    }

    @Test(arguments: ["passes.failed", "booking-handler.commands", "other-app.replies", "calendar-app", "calendar-app.",
                      "calendar-apps.replies", "Calendar-App.replies"])
    func refusedForTheSender(_ replyTo: String) {
        #expect(ReplyAddress.refusal(replyTo, caller: .user("calendar-app")) != nil)
    }

    @Test func anonymousCallersGetOnlyServerNamedOrDirectReplies() {
        #expect(ReplyAddress.refusal("amq.gen-abc", caller: .anonymous) == nil)
        #expect(ReplyAddress.refusal("amq.rabbitmq.reply-to", caller: .anonymous) == nil)
        #expect(ReplyAddress.refusal("external-publisher.replies", caller: .anonymous) != nil)
    }
}

@Suite("Replay pacing")
struct ReplayPacerTests {
    @Test func waitsOnlyWhenAheadOfTheRate() {
        let start = ContinuousClock.now
        var pacer = ReplayPacer(rate: 1_000, start: start)
        // 500 messages sent instantly: due at 0.5 s, so wait 0.5 s.
        #expect(pacer.sent(500, now: start) == .milliseconds(500))
        // The next 500 by 2 s: already behind the pace, no wait.
        #expect(pacer.sent(500, now: start + .seconds(2)) == nil)
        // 1,500 in total by 1.2 s: due at 1.5 s.
        #expect(pacer.sent(500, now: start + .milliseconds(1_200)) == .milliseconds(300))
    }

    /// The backlog bound is in replayed items: pages of 500 bookings stop
    /// the replay at 20 waiting messages, as 10,000 single events would.
    @Test func theBacklogBoundCountsBookingsNotMessages() {
        let start = ContinuousClock.now
        #expect(ReplayPacer(rate: 0, start: start).backlogMessages == ReplayPacer.maxBacklog)
        #expect(ReplayPacer(rate: 0, start: start, itemsPerMessage: 500).backlogMessages == ReplayPacer.maxBacklog / 500)
        #expect(ReplayPacer(rate: 0, start: start, itemsPerMessage: 1_000).backlogMessages == 10)
        // Never fewer than two pages waiting: one to take while the next is published.
        #expect(ReplayPacer(rate: 0, start: start, itemsPerMessage: 1_000_000).backlogMessages == 2)
        // The fixed rate counts items whatever the message size.
        var pacer = ReplayPacer(rate: 1_000, start: start, itemsPerMessage: 500)
        #expect(pacer.sent(500, now: start) == .milliseconds(500))
    }

    @Test func rateZeroNeverWaits() {
        let start = ContinuousClock.now
        var pacer = ReplayPacer(rate: 0, start: start)
        #expect(pacer.sent(1_000_000, now: start) == nil)
        #expect(ReplayPacer.defaultRate == 0, "the projector's replay is paced by its backlog, not a fixed rate")
    }
}

@Suite("Authorisation: confirming a booking that is not pending")
struct ConfirmNonPendingTests {
    @Test func whoMaySeeTheBookingLearnsItsStatusOthersDoNot() throws {
        var room = Fixture.berlin
        room.approvers = ["facility-desk"]
        let policy = CallerPolicy(administrators: ["ops"])
        let confirmed = Fixture.booking(status: .confirmed, requestedBy: "calendar-app")
        // Requester, approver and admin pass on to the status machine (2002).
        for user in ["calendar-app", "facility-desk", "ops"] {
            #expect(policy.refusal(.confirm, of: confirmed, in: room, caller: .user(user)) == nil, "\(user)")
        }
        // Anyone else: 2003.
        #expect(policy.refusal(.confirm, of: confirmed, in: room, caller: .user("mallory"))?.code == .notPermitted)
        #expect(policy.refusal(.confirm, of: confirmed, in: room, caller: .anonymous)?.code == .notPermitted)
        // A pending one is an approval: the requester is refused.
        let pending = Fixture.booking(status: .pending, requestedBy: "calendar-app")
        #expect(policy.refusal(.confirm, of: pending, in: room, caller: .user("calendar-app"))?.code == .notPermitted)
        #expect(policy.refusal(.confirm, of: pending, in: room, caller: .user("facility-desk")) == nil)
    }
}
