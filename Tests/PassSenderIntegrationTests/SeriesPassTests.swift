import AMQPClient
import BookingContracts
import Foundation
import PassSender
import Testing
import TestSupport

/// Recurring bookings (contract v1.1) at the pass sender: each occurrence
/// is its own booking, so each gets its own `sendpass` call and its own
/// passes, once — also when its `booking.confirmed` arrives twice.
@Suite("Passes for a series", .serialized)
struct SeriesPassTests {
    @Test func onePassPerAttendeePerOccurrenceThroughSendpass() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "series-pass")
        let seriesID = uniqueName("series")
        let occurrences: [Booking] = (0..<3).map { index in
            var b = makeBooking(id: "\(seriesID)-\(index)", attendees: 2)
            b.series = SeriesRef(id: seriesID, index: index, count: 3, version: 1)
            return b
        }
        for b in occurrences { try await h.publish(.bookingConfirmed, b) }
        try await h.publish(.bookingConfirmed, occurrences[1])  // a redelivered copy
        for b in occurrences { try await h.waitDelivered(b, indexes: [0, 1]) }
        // The copy is settled (acked) without a second pass.
        try await h.settled.wait("both copies of occurrence 1 settled", timeout: 60) { all in
            all.filter { $0.bookingId == occurrences[1].id && $0.outcome == .acked }.count == 2
        }

        let requests = gateway.state.current.requests
        #expect(requests.count == 3, "one sendpass call per occurrence: \(requests)")
        // Occurrences are handled concurrently: each call is one occurrence's, in any order.
        let callBookings: [[String]] = requests.map { call in Array(Set(call.map(\.bookingId))) }
        #expect(callBookings.allSatisfy { $0.count == 1 })
        #expect(callBookings.map { $0[0] }.sorted() == occurrences.map(\.id))
        #expect(gateway.sentCounts.values.allSatisfy { $0 == 1 } && gateway.sentCounts.count == 6)
        #expect(h.events.current.delivered.count == 6)
        await h.stop()
    }
}
