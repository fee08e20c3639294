import BookingContracts
import Foundation
import TestSupport
import Testing

/// The hand-written message writers (MessageJSON.swift) must write what
/// `ContractJSON` writes for the same value, byte for byte: the gateway,
/// the schema tests and other systems know only the contract. A field added
/// to one of these types but not to its writer fails here.
@Suite("Hand-written message JSON")
struct MessageJSONTests {
    typealias Values = BookingJSONTests

    @Test func availabilityChangedIsWhatTheEncoderWrites() throws {
        var g = SplitMix(seed: 7)
        for _ in 0..<400 {
            let event = AvailabilityChanged(eventId: Values.text(&g), occurredAt: Values.text(&g), room: Values.text(&g),
                                            date: Values.text(&g), timeZone: Values.text(&g),
                                            avail: (0..<Int.random(in: 0...3, using: &g)).map { _ in Values.text(&g) })
            Values.same(event.jsonBytes, try ContractJSON.encode(event), "availability.changed")
        }
    }

    @Test func passDeliveredIsWhatTheEncoderWrites() throws {
        var g = SplitMix(seed: 8)
        for _ in 0..<400 {
            let event = PassDelivered(eventId: Values.text(&g), occurredAt: Values.text(&g), bookingId: Values.text(&g),
                                      version: Int.random(in: Int.min...Int.max, using: &g),
                                      attendeeIndex: Int.random(in: -2...1000, using: &g), name: Values.text(&g),
                                      email: Values.text(&g), phone: Values.text(&g),
                                      channel: [nil, .gateway, .outbox].randomElement(using: &g)!)
            Values.same(event.jsonBytes, try ContractJSON.encode(event), "pass.delivered")
        }
    }

    @Test func aGatewayRequestIsWhatTheEncoderWrites() throws {
        var g = SplitMix(seed: 9)
        for _ in 0..<400 {
            let info = SendPassRequest.BookingInfo(date: Int64.random(in: Int64.min...Int64.max, using: &g),
                                                   timeStart: Int64.random(in: -10...Int64.max, using: &g),
                                                   timeEnd: Int64.random(in: Int64.min...10, using: &g),
                                                   title: Values.text(&g), description: Values.text(&g), room: Values.text(&g))
            let request = SendPassRequest(booking: info, passes: (0..<Int.random(in: 0...3, using: &g)).map { _ in
                SendPassRequest.Pass(name: Values.text(&g), email: Values.text(&g), number: Values.text(&g))
            })
            Values.same(request.jsonBytes, try ContractJSON.encode(request), "send pass request")
        }
    }
}
