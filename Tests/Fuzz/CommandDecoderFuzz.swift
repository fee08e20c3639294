// libFuzzer target: the command and query decoders of BookingContracts
// (availability queries, booking.get, booking.list), exactly as the
// booking handler and the projector call them on a body from the broker. Built by scripts/fuzz.sh together with
// the BookingContracts sources (one module, no SwiftPM); never by SwiftPM.
//
// Every input is decoded as each command type and as an availability
// query; decode errors are mapped to replies as the services do. A crash,
// a trap (e.g. an arithmetic overflow on a hostile number) or a hang is a
// finding; a thrown error is the expected answer to bad input.

/// Decodes `data` with every decoder a body from outside reaches.
@_cdecl("LLVMFuzzerTestOneInput")
public func commandDecoderFuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let body: [UInt8] = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    for type in CommandType.allCases {
        do {
            let command = try Command.decode(type: type, body: body)
            // What a decoded command is used for next: encoding it again
            // (inbox, events, replies).
            _ = try? command.encodedBody()
        } catch {
            let reply = ContractJSON.replyError(for: error)
            _ = try? ContractJSON.encode(CommandReply.error(reply))
        }
    }
    do {
        let query = try AvailabilityQuery.decode(body: body)
        _ = try? ContractJSON.encode(query)
    } catch {
        _ = ContractJSON.replyError(for: error)
    }
    // The booking queries, with the size check the query loop makes first.
    do {
        try ContractLimits.checkBody(body)
        let get = try ContractJSON.decode(GetBooking.self, from: body)
        _ = try? ContractJSON.encode(get)
    } catch {
        _ = ContractJSON.replyError(for: error)
    }
    do {
        try ContractLimits.checkBody(body)
        let list = try ContractJSON.decode(ListBookings.self, from: body)
        _ = try? ContractJSON.encode(list)
        _ = list.cursor.map { ForeignRouting.isEvent(typeProperty: $0, routingKey: "") }
    } catch {
        _ = ContractJSON.replyError(for: error)
    }
    return 0
}
