import AvailabilityProjector
import BookingContracts
import Foundation
import Testing

@Suite("Queries")
struct QueryTests {
    /// 2026-11-23 10:07 in Berlin (09:07Z).
    static let monday1007 = Date(timeIntervalSince1970: 1_795_424_820)

    static func model(now: Date = monday1007) async throws -> (QueryEngine, ProjectorStore, URL) {
        let (store, dir) = try makeStore()
        let rooms = [
            berlinRoom,
            Room(name: "Hamburg", equipment: ["TV", "whiteboard"], capacity: 4),
            Room(name: "Boardroom", equipment: ["beamer", "catering"], capacity: 24, opens: "08:00", closes: "18:00",
                 requiresApproval: true),
            Room(name: "New York", capacity: 6, timeZone: "America/New_York"),
        ]
        try await store.applyBulk(rooms.map { .room($0, occurredAt: "2026-11-01T10:00:00Z") } + [
            state("b1", "09:00", "10:30"),
            state("b2", room: "Hamburg", "10:00", "12:00", .pending),
            state("b3", room: "Boardroom", "08:00", "18:00"),
            state("b4", room: "New York", "07:00", "08:00"),
        ])
        return (QueryEngine(index: store.index, now: { now }), store, dir)
    }

    func names(_ reply: AvailabilityReply) -> [String] { reply.map(\.name) }

    @Test func orderedByNameWithLegacyShape() async throws {
        let (engine, _, dir) = try await Self.model()
        defer { try? FileManager.default.removeItem(at: dir) }
        let reply = try query(engine, AvailabilityQuery(date: .date(.calendarDate("2026-11-23"))))
        #expect(names(reply) == ["Berlin", "Boardroom", "Hamburg", "New York"])
        #expect(reply[0] == RoomAvailability(name: "Berlin", location: "2nd floor", equipment: ["beamer", "tv"], size: "22m2",
                                             capacity: 8, images: [], avail: ["07:00 - 09:00", "10:30 - 19:00"]))
        #expect(reply[1].avail == [])
        #expect(reply[2].location == "" && reply[2].size == "")
        // The hand-written JSON is what ContractJSON would write.
        let checked = try QueryEngine.check(AvailabilityQuery(date: .date(.calendarDate("2026-11-23")))).get()
        #expect(engine.replyJSON(checked) == [UInt8](try ContractJSON.encode(engine.reply(checked))))
    }

    @Test func filters() async throws {
        let (engine, _, dir) = try await Self.model()
        defer { try? FileManager.default.removeItem(at: dir) }
        let day = AvailabilityDate.date(.calendarDate("2026-11-23"))
        #expect(names(try query(engine, AvailabilityQuery(date: day, name: "OR"))) == ["New York"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, name: "bOaRd"))) == ["Boardroom"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, name: "r"))).count == 4)
        #expect(names(try query(engine, AvailabilityQuery(date: day, equipment: ["beamer"]))) == ["Berlin", "Boardroom"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, equipment: ["tv", "Whiteboard"]))) == ["Hamburg"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, minCapacity: 8))) == ["Berlin", "Boardroom"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, freeFrom: "10:30", freeTo: "12:00")))
                    == ["Berlin", "New York"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, freeFrom: "09:45")))
                    == ["Hamburg", "New York"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, freeTo: "09:00"))) == ["Berlin", "Hamburg"])
        #expect(names(try query(engine, AvailabilityQuery(date: day, freeFrom: "06:00", freeTo: "08:00"))) == [])
    }

    @Test func nowAndAvailableNextHour() async throws {
        let (engine, _, dir) = try await Self.model()
        defer { try? FileManager.default.removeItem(at: dir) }
        // 10:07 in Berlin: from the 10:00 quarter on.
        let now = try query(engine, AvailabilityQuery(date: .now))
        #expect(now.first { $0.name == "Berlin" }?.avail == ["10:30 - 19:00"])
        #expect(now.first { $0.name == "Hamburg" }?.avail == ["12:00 - 19:00"])
        // 04:07 in New York: the whole day is still ahead.
        #expect(now.first { $0.name == "New York" }?.avail == ["08:00 - 19:00"])
        // Free 10:07–11:07: Berlin is busy until 10:30, Hamburg until 12:00, New York is closed at 04:07.
        #expect(names(try query(engine, AvailabilityQuery(availableNextHour: true))) == [])
        let later = QueryEngine(index: engine.index, now: { Self.monday1007.addingTimeInterval(3600) })  // 11:07
        #expect(names(try query(later, AvailabilityQuery(availableNextHour: true))) == ["Berlin"])
        #expect(names(try query(later, AvailabilityQuery(date: .date(.calendarDate("2030-01-01")), availableNextHour: true)))
                    == ["Berlin"])  // availableNextHour implies today
    }

    @Test func unixAndTodayDatesResolvePerRoomZone() async throws {
        let (engine, _, dir) = try await Self.model()
        defer { try? FileManager.default.removeItem(at: dir) }
        let today = try query(engine, AvailabilityQuery())
        #expect(today.first { $0.name == "Berlin" }?.avail == ["07:00 - 09:00", "10:30 - 19:00"])
        // 2026-11-23T03:00:00Z: Monday in Berlin, still Sunday in New York.
        let unix = try query(engine, AvailabilityQuery(date: .date(.unixSeconds(1_795_402_800))))
        #expect(unix.first { $0.name == "Berlin" }?.avail == ["07:00 - 09:00", "10:30 - 19:00"])
        #expect(unix.first { $0.name == "New York" }?.avail == ["07:00 - 19:00"])
    }

    @Test func badQueriesAreErrorsWithTheContractsCodes() {
        func error(_ params: [(String, String)]) -> ReplyError? {
            if case .failure(let e) = QueryEngine.parse(parameters: params) { return e }
            return nil
        }
        #expect(error([("date", "2026-02-30")])?.code == .invalidField)
        #expect(error([("date", "2026-02-30")])?.field == "date")
        #expect(error([("date", "tomorrow")])?.field == "date")
        // Timestamps whose date arithmetic would overflow are refused, not a crash.
        #expect(error([("date", "9223372036854775807")])?.field == "date")
        #expect(error([("date", "253402300800")])?.field == "date")
        #expect(error([("date", "253402300799")]) == nil)
        #expect(error([("minCapacity", "many")])?.field == "minCapacity")
        #expect(error([("freeFrom", "9:00")])?.field == "freeFrom")
        #expect(error([("freeFrom", "11:00"), ("freeTo", "10:00")])?.code == .endNotAfterStart)
        #expect(error([("availableNextHour", "perhaps")])?.field == "availableNextHour")
        #expect(error([("date", "2026-11-23"), ("equipment", "beamer,tv"), ("equipment", "catering"), ("x", "y")]) == nil)
        if case .success(let q) = QueryEngine.parse(parameters: [("equipment", "beamer, tv"), ("equipment", "catering")]) {
            #expect(q.equipment == ["beamer", "tv", "catering"])
        } else {
            Issue.record("equipment list rejected")
        }
        // Repeats cost a look-up each per room and change nothing: matched once.
        let repeated = Array(repeating: "Beamer", count: 10_000).joined(separator: ",") + ",tv, BEAMER "
        if case .success(let q) = QueryEngine.parse(parameters: [("equipment", repeated)]) {
            #expect(q.equipment.count == 2, "\(q.equipment.count) items")
            #expect(q.equipment.prefix(3) == ["beamer", "tv"])
        } else {
            Issue.record("equipment list rejected")
        }
        func bodyError(_ text: String) -> ReplyError? {
            if case .failure(let e) = QueryEngine.parse(body: Array(text.utf8)) { return e }
            return nil
        }
        #expect(bodyError(#"{"date": -9223372036854775808}"#)?.field == "date")
        #expect(bodyError(#"{"date": 9223372036854775807}"#)?.field == "date")
        #expect(bodyError("not json")?.code == .invalidJSON)
        #expect(bodyError("[1]")?.code == .invalidJSON)
        #expect(bodyError(#"{"minCapacity":"four"}"#)?.field == "minCapacity")
        #expect(bodyError(#"{"date":true}"#)?.field == "date")
        #expect(bodyError(#"{"date":"2026-13-01"}"#)?.field == "date")
        #expect(bodyError("{}") == nil)
        #expect(bodyError(#"{"date":"now","future":1}"#) == nil)
    }

    /// The RPC body limit: 256 KiB, checked before decoding; over it the
    /// reply is the error form with 1000.
    @Test func queryBodySizeLimit() {
        func padded(_ count: Int) -> [UInt8] {
            let json = Array(#"{"name":"ber"}"#.utf8)
            return json + [UInt8](repeating: UInt8(ascii: " "), count: count - json.count)
        }
        if case .failure(let error) = QueryEngine.parse(body: padded(262_144)) {
            Issue.record("a body of exactly 256 KiB was refused: \(error.text)")
        }
        guard case .failure(let error) = QueryEngine.parse(body: padded(262_145)) else {
            Issue.record("a body over 256 KiB was accepted")
            return
        }
        #expect(error.code == .invalidJSON)
        #expect(error.text.hasPrefix("body is larger than 256 KiB"))
    }
}
