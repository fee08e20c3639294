import BookingContracts
import Testing

/// How a replay cuts bookings into pages: by count, and by bytes so that no
/// page the broker would refuse is ever sent.
@Suite("Replay page cuts")
struct ReplayPagesTests {
    @Test func pagesAreCutByCount() {
        #expect(ReplayStream.pages(sizes: Array(repeating: 100, count: 1_200), perPage: 500)
                    == [0..<500, 500..<1_000, 1_000..<1_200])
        #expect(ReplayStream.pages(sizes: [], perPage: 500).isEmpty)
        #expect(ReplayStream.pages(sizes: [10, 10, 10], perPage: 1) == [0..<1, 1..<2, 2..<3])
    }

    @Test func aPageEndsBeforeItsBytesWouldPassTheBound() {
        // 40 bookings of 100 KB: five to a page of 512 KiB (each counts its comma).
        let pages = ReplayStream.pages(sizes: Array(repeating: 100_000, count: 40), perPage: 500)
        #expect(pages.allSatisfy { $0.count == 5 }, "\(pages)")
        #expect(pages.count == 8)
        for page in pages {
            #expect(page.count * 100_001 <= ReplayStream.maxPageBytes)
        }
    }

    @Test func aBookingLargerThanTheBoundIsAPageOfItsOwn() {
        let pages = ReplayStream.pages(sizes: [10, 600_000, 10, 10], perPage: 500)
        #expect(pages == [0..<1, 1..<2, 2..<4])
        // Pages cover every booking once, in order.
        #expect(pages.flatMap { Array($0) } == [0, 1, 2, 3])
    }
}
