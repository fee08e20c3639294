import BookingContracts
import Foundation
import Testing

@Suite("Topology, types, codes, formats")
struct ContractBasicsTests {
    /// The services reserve these as metric labels: a contract name missing
    /// here could be counted as `other` after a stranger's flood of keys.
    @Test func theContractsRoutingKeysAreKnown() {
        let known = Set(Topology.knownRoutingKeys)
        #expect(known.isSuperset(of: ["booking.create", "booking.get", "booking.created", "availability.changed",
                                      "availability.query", "availability.suggest", "availability.queries",
                                      "room.closed", "passes.failed", "availability-projector.control"]))
    }

    @Test func topologyNames() {
        #expect(Topology.commandsExchange == "booking.commands")
        #expect(Topology.handlerCommandsQueue == "booking-handler.commands")
        #expect(Topology.eventsExchange == "booking.events")
        #expect(Topology.passSenderEventsQueue == "pass-sender.events")
        #expect(Topology.projectorEventsQueue == "availability-projector.events")
        #expect(Topology.availabilityQueriesQueue == "availability.queries")
        #expect(Topology.passesFailedQueue == "passes.failed")
        #expect(Topology.deadLetterExchange == "booking.dead-letter")
        #expect(Topology.deadLetterQueue(for: "pass-sender.events") == "pass-sender.events.dead")
        #expect(Topology.passSenderPrefix == "pass-sender.")
        #expect(Topology.passSenderEventsQueue.hasPrefix(Topology.passSenderPrefix))
    }

    @Test func topologyBindings() {
        #expect(Topology.handlerCommandsBindingKeys
                    == ["room.register", "booking.create", "booking.confirm", "booking.cancel", "booking.reject",
                        "booking.reschedule", "booking.update", "booking.checkin", "booking.replay", "room.close", "room.reopen"])
        #expect(Set(Topology.passSenderEventsBindingKeys)
                    == ["booking.confirmed", "booking.rescheduled", "booking.cancelled", "booking.rejected", "booking.updated",
                        "booking.submitted"])
        #expect(Topology.projectorEventsBindingKeys == ["room.#", "booking.#"])
        #expect(Topology.exchanges.map(\.kind) == [.fanout, .direct, .topic, .topic, .direct, .topic])
        #expect(Topology.exchanges.last?.name == "booking.public")
        // v1.1: queries through the booking.queries exchange, routing key = query type.
        #expect(Topology.queue(named: Topology.bookingQueriesQueue)?.bindings
                    == [Topology.Binding(exchange: "booking.queries", key: "booking.get"),
                        Topology.Binding(exchange: "booking.queries", key: "booking.list"),
                        Topology.Binding(exchange: "booking.queries", key: "room.closures")])
        // v1.1: booking.commands has an internal alternate exchange.
        let commands = Topology.exchanges.first { $0.name == Topology.commandsExchange }
        #expect(commands?.alternateExchange == Topology.commandsUnroutedExchange)
        #expect(Topology.exchanges.first { $0.name == Topology.commandsUnroutedExchange }?.isInternal == true)

        // Every service queue dead-letters under its own name into a bound <queue>.dead.
        for queue in Topology.serviceQueues {
            #expect(queue.quorum)
            #expect(queue.deadLetterExchange == Topology.deadLetterExchange)
            #expect(queue.deadLetterRoutingKey == queue.name)
            let dead = Topology.queue(named: queue.name + ".dead")
            #expect(dead?.bindings == [Topology.Binding(exchange: Topology.deadLetterExchange, key: queue.name)])
            #expect(dead?.deadLetterExchange == nil)
        }
        #expect(Topology.queue(named: "passes.failed")?.deadLetterExchange == nil)
        #expect(Topology.queue(named: Topology.handlerCommandsQueue)?.bindings
                    == CommandType.allCases.map { Topology.Binding(exchange: Topology.commandsExchange, key: $0.rawValue) }
                    + [Topology.Binding(exchange: Topology.commandsUnroutedExchange, key: "")])
        #expect(Topology.queue(named: Topology.availabilityQueriesQueue)?.bindings
                    == [Topology.Binding(exchange: Topology.bookingQueriesExchange, key: "availability.query"),
                        Topology.Binding(exchange: Topology.bookingQueriesExchange, key: "availability.suggest")])
        #expect(Set(Topology.queues.map(\.name)).count == Topology.queues.count)
    }

    @Test func topologyMatchesAsyncAPIDocument() throws {
        let text = try String(contentsOf: Repo.contractDir.appendingPathComponent("asyncapi.yaml"), encoding: .utf8)
        for exchange in Topology.exchanges { #expect(text.contains("address: \(exchange.name)\n")) }
        for queue in Topology.serviceQueues + [Topology.queue(named: Topology.passesFailedQueue)!] {
            #expect(text.contains("address: \(queue.name)\n"), "asyncapi.yaml has no channel for \(queue.name)")
            #expect(text.contains("x-dead-letter-routing-key: \(queue.name)\n") == (queue.deadLetterExchange != nil))
        }
        #expect(text.contains("x-delivery-limit: \(Topology.serviceQueueDeliveryLimit)\n"))
        for type in CommandType.allCases { #expect(text.contains("messageType: \(type.rawValue),")) }
        for type in EventType.allCases { #expect(text.contains("messageType: \(type.rawValue),")) }
    }

    /// An event's name: the `type` property, else (absent or empty) the
    /// routing key — as for commands.
    @Test func eventNames() {
        #expect(EventType.name(typeProperty: "booking.created", routingKey: "booking.confirmed") == "booking.created")
        #expect(EventType.name(typeProperty: "", routingKey: "booking.confirmed") == "booking.confirmed")
        #expect(EventType.name(typeProperty: nil, routingKey: "x.y") == "x.y")
        #expect(CommandType.resolve(typeProperty: "", routingKey: "booking.create") == .createBooking)
    }

    @Test func messageTypes() {
        #expect(CommandType.allCases.map(\.rawValue)
                    == ["room.register", "booking.create", "booking.confirm", "booking.cancel", "booking.reject",
                        "booking.reschedule", "booking.update", "booking.checkin", "booking.replay", "room.close", "room.reopen"])
        #expect(EventType.allCases.map(\.rawValue)
                    == ["room.registered", "room.closed", "room.reopened", "booking.created", "booking.confirmed", "booking.cancelled",
                        "booking.rescheduled", "booking.rejected", "booking.updated", "booking.started", "booking.completed",
                        "booking.submitted", "pass.delivered", "pass.failed", "availability.changed"])
        #expect(EventType.allCases.filter(\.isBookingEvent).count == 9)
        #expect(CommandType.resolve(typeProperty: nil, routingKey: "booking.create") == .createBooking)
        #expect(CommandType.resolve(typeProperty: "", routingKey: "booking.cancel") == .cancelBooking)
        #expect(CommandType.resolve(typeProperty: "booking.confirm", routingKey: "booking.create") == .confirmBooking)
        #expect(CommandType.resolve(typeProperty: "booking.delete", routingKey: "booking.create") == nil)
        #expect(CommandType.resolve(typeProperty: nil, routingKey: "") == nil)
    }

    @Test func messageProperties() {
        #expect(MessageProperties.idempotencyKey(messageID: "m", idempotencyKeyHeader: "h") == "m")
        #expect(MessageProperties.idempotencyKey(messageID: nil, idempotencyKeyHeader: "h") == "h")
        #expect(MessageProperties.idempotencyKey(messageID: "", idempotencyKeyHeader: nil) == nil)
        #expect(MessageProperties.replyCorrelationID(correlationID: "c", messageID: "m") == "c")
        #expect(MessageProperties.replyCorrelationID(correlationID: nil, messageID: "m") == "m")
        #expect(MessageProperties.replyCorrelationID(correlationID: nil, messageID: nil) == nil)
        #expect(MessageProperties.idempotencyKeyHeader == "idempotency-key")
        #expect(MessageProperties.directReplyTo == "amq.rabbitmq.reply-to")
    }

    /// Replay covers every status (v1.1), each under its own booking event.
    @Test func replayTypeByStatus() {
        let types = BookingStatus.allCases.map(ReplayStream.eventType(for:))
        // v1.2: held and waitlisted replay as created (the projector reads the status).
        #expect(types == [.bookingCreated, .bookingConfirmed, .bookingStarted, .bookingCompleted, .bookingCancelled,
                          .bookingRejected, .bookingCreated, .bookingCreated])
        #expect(types.allSatisfy { $0.isBookingEvent })
        #expect(Topology.projectorEventsBindingKeys.contains("booking.#"), "the projector receives all of them")
    }

    /// v1.2: what booking.public carries is the busy view: no title,
    /// description, attendee (not even a name) or requester.
    @Test func publicEventsCarryTheBusyViewOnly() throws {
        let event = BookingEvent(eventId: "e", occurredAt: Fixtures.occurredAt, booking: Fixtures.rescheduledBooking,
                                 previous: BookingSnapshot(Fixtures.pendingBooking), released: true)
        let text = String(decoding: try ContractJSON.encode(PublicBookingEvent(event)), as: UTF8.self)
        for attendee in Fixtures.rescheduledBooking.attendees + Fixtures.pendingBooking.attendees {
            #expect(!text.contains(attendee.name) && !text.contains(attendee.email) && !text.contains(attendee.phone), "\(text)")
        }
        for secret in [Fixtures.rescheduledBooking.title, "\"title\"", "\"description\"", "\"requestedBy\""] {
            #expect(!text.contains(secret), "\(text)")
        }
        let decoded = try ContractJSON.decode(PublicBookingEvent.self, from: Array(text.utf8))
        #expect(decoded.booking.version == event.booking.version && decoded.eventId == "e" && decoded.released == true)
        #expect(decoded.previous?.start == Fixtures.pendingBooking.start && decoded.previous?.status == Fixtures.pendingBooking.status)
    }

    @Test func errorCodes() throws {
        let table: [(ErrorCode, Int)] = [
            (.invalidJSON, 1000), (.unknownCommand, 1001), (.idempotencyKeyReused, 1009), (.invalidField, 1100),
            (.unknownRoom, 1101),
            (.outsideOpeningHours, 1102), (.offGrid, 1103), (.endNotAfterStart, 1104), (.startInPast, 1105),
            (.overCapacity, 1106), (.attendeeNameInvalid, 1110), (.attendeeEmailInvalid, 1111),
            (.attendeePhoneInvalid, 3000), (.overlap, 2000), (.bookingNotFound, 2001),
            (.statusChangeNotAllowed, 2002), (.notPermitted, 2003), (.beyondHorizon, 1107), (.durationOutOfRange, 1108),
            (.tooLateToChange, 2004),
            (.checkinNotPossible, 2005), (.rateLimited, 1010), (.roomClosed, 1112), (.quotaExceeded, 1113),
        ]
        for (code, value) in table {
            #expect(code.rawValue == value)
            #expect((1000...9999).contains(code.rawValue))
            #expect(!code.isPassDeliveryFailure)
            #expect(code.meaning != nil)
        }
        #expect(Set(ErrorCode.allKnown) == Set(table.map(\.0)))
        #expect(ErrorCode(4001).isPassDeliveryFailure)
        #expect(!ErrorCode(4000).isPassDeliveryFailure)
        #expect(String(decoding: try ContractJSON.encode([ErrorCode.overlap]), as: UTF8.self) == "[2000]")
        #expect(try ContractJSON.decode([ErrorCode].self, from: Data("[4711]".utf8)) == [ErrorCode(4711)])
    }

    @Test func timeFormats() {
        #expect(ContractFormat.minutes(ofTime: "00:00") == 0)
        #expect(ContractFormat.minutes(ofTime: "23:59") == 1439)
        #expect(ContractFormat.minutes(ofTime: "24:00") == nil)
        #expect(ContractFormat.minutes(ofTime: "9:00") == nil)
        #expect(ContractFormat.minutes(ofTime: "09:60") == nil)
        #expect(ContractFormat.time(fromMinutes: 630) == "10:30")
        #expect(ContractFormat.isOnGrid("10:45"))
        #expect(!ContractFormat.isOnGrid("10:50"))
        #expect(ContractFormat.range("07:00", "09:00") == "07:00 - 09:00")
        #expect(ContractFormat.calendarDate("2026-11-23")! == (2026, 11, 23))
        #expect(ContractFormat.calendarDate("2026-13-01") == nil)
        #expect(ContractFormat.calendarDate("2100-02-29") == nil)
    }

    @Test func instantsAcrossDaylightSaving() {
        // Winter: UTC+1, summer: UTC+2; both change days are ordinary days.
        #expect(Fixtures.instant("2026-11-23", "09:00") == "2026-11-23T08:00:00Z")
        #expect(Fixtures.instant("2026-07-01", "09:00") == "2026-07-01T07:00:00Z")
        #expect(Fixtures.instant("2026-03-29", "07:00") == "2026-03-29T05:00:00Z")
        #expect(Fixtures.instant("2026-10-25", "07:00") == "2026-10-25T06:00:00Z")
        #expect(Fixtures.instant("2026-10-25", "19:00") == "2026-10-25T18:00:00Z")
        #expect(ContractFormat.instant(date: "2026-11-23", time: "09:00", timeZone: "Nowhere/City") == nil)
    }

    @Test func timestamps() {
        let date = Date(timeIntervalSince1970: 1_795_420_800.75)
        #expect(ContractFormat.timestamp(date) == "2026-11-23T08:00:00Z")
        #expect(ContractFormat.parseTimestamp("2026-11-23T08:00:00Z") == Date(timeIntervalSince1970: 1_795_420_800))
        #expect(ContractFormat.parseTimestamp("2026-11-23T08:00:00.000Z") == nil)
        #expect(ContractFormat.parseTimestamp("2026-11-23T09:00:00+01:00") == nil)
        #expect(ContractFormat.timestamp(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
        #expect(ContractFormat.localDate(of: date, timeZone: "Pacific/Kiritimati") == "2026-11-23")
        #expect(ContractFormat.timestamp(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59Z")
        #expect(ContractFormat.parseTimestamp("2028-02-29T23:59:59Z") == Date(timeIntervalSince1970: 1_835_481_599))
        #expect(ContractFormat.parseTimestamp("2027-02-29T00:00:00Z") == nil)
    }

    /// The day arithmetic agrees with Foundation's Gregorian calendar in UTC
    /// on instants spread over four centuries (leap days, century years,
    /// before 1970), both ways.
    @Test func timestampsAgreeWithCalendar() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var seconds: Int64 = -2_208_988_800  // 1900-01-01
        while seconds < 10_413_792_000 {  // 2300-01-01
            let date = Date(timeIntervalSince1970: Double(seconds))
            let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            let expected = String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
            #expect(ContractFormat.timestamp(date) == expected)
            #expect(ContractFormat.parseTimestamp(expected) == date)
            seconds += 86_400 * 37 + 3_661  // walks through every month, day and time of day
        }
    }
}
