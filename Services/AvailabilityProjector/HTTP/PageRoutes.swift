import BookingContracts
import Foundation
import Hummingbird

extension ProjectorRoutes {
    /// The page's own routes beside `/api/day`: the week view, whether it
    /// books, and the booking endpoint.
    static func addPage(to router: Router<BasicRequestContext>, engine: QueryEngine, booker: PageBooker?) {
        router.get("api/week") { request, _ -> Response in
            let params = parameters(request)
            guard let room = params.first(where: { $0.0 == "room" })?.1, !room.isEmpty else {
                return failure(.badRequest, ReplyError(code: .invalidField, text: "room is required", field: "room"))
            }
            let date = params.first { $0.0 == "date" }?.1 ?? "today"
            switch QueryEngine.parse(parameters: [("date", date), ("name", room)]) {
            case .success(let query):
                let state = engine.index.snapshot
                let days = (0..<7).compactMap { offset in
                    engine.answers(query, state: state, dayOffset: offset).first { $0.info.room.name == room }
                }
                guard !days.isEmpty else {
                    return failure(.notFound, ReplyError(code: .unknownRoom, text: "unknown room '\(room.prefix(100))'", field: "room"))
                }
                let week = DayView(answers: days, revision: state.revision, date: days[0].date)
                return respond(.ok, [UInt8]((try? ContractJSON.encode(week)) ?? Data()))
            case .failure(let error):
                return failure(.badRequest, error)
            }
        }
        router.get("api/page") { _, _ -> Response in
            respond(.ok, Array(#"{"booking":\#(booker != nil)}"#.utf8))
        }
        guard let booker else { return }
        router.post("api/book") { request, _ -> Response in
            if let refusal = booker.hosts.refusal(host: request.head.authority,
                                                  origin: request.headers[.origin]) {
                booker.logger.warning("page booking refused", metadata: ["reason": .string(refusal)])
                return failure(.forbidden, ReplyError(code: .notPermitted, text: refusal))
            }
            // JSON only: a cross-site form cannot send it without the
            // browser's preflight, which this server does not answer.
            guard request.headers[.contentType]?.lowercased().hasPrefix("application/json") == true else {
                return failure(.unsupportedMediaType,
                               ReplyError(code: .invalidJSON, text: "POST /api/book takes application/json"))
            }
            let body = try await request.body.collect(upTo: 16_384)
            guard let booking = try? ContractJSON.decode(PageBookingRequest.self, from: Data(body.readableBytesView)) else {
                return failure(.badRequest, ReplyError(code: .invalidJSON, text: "not a booking request"))
            }
            let answer = await booker.book(booking)
            return respond(.ok, [UInt8]((try? ContractJSON.encode(answer)) ?? Data()))
        }
    }
}
