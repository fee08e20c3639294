import Testing
@testable import AMQPClient

@Suite("ChannelTable")
struct ChannelTableTests {
    @Test func anUnknownChannelIsClosedAndAcceptsNothing() {
        let t = ChannelTable()
        #expect(!t.isOpen(1))
        #expect(t.generation(of: 1) == nil)
        #expect(!t.isCurrent(channel: 1, generation: 0))
        #expect(!t.isCurrent(channel: 1, generation: 1))
    }

    @Test func everyOpenGetsANewGeneration() {
        var t = ChannelTable()
        t.opened(1)
        t.opened(2)
        let g1 = t.generation(of: 1), g2 = t.generation(of: 2)
        #expect(g1 != nil && g2 != nil && g1 != g2)
        #expect(t.isOpen(1) && t.isOpen(2))
        t.opened(1)  // reopened after a channel error
        #expect(t.generation(of: 1) != g1)
        #expect(t.generation(of: 2) == g2)
    }

    @Test func aStaleGenerationsSettlementIsRefused() {
        var t = ChannelTable()
        t.opened(3)
        let old = t.generation(of: 3)!
        #expect(t.isCurrent(channel: 3, generation: old))
        t.closed(3)
        #expect(!t.isCurrent(channel: 3, generation: old))
        #expect(!t.isOpen(3))
        t.opened(3)  // same number, new incarnation
        let new = t.generation(of: 3)!
        #expect(!t.isCurrent(channel: 3, generation: old))
        #expect(t.isCurrent(channel: 3, generation: new))
        // A generation belongs to its channel number only.
        #expect(!t.isCurrent(channel: 4, generation: new))
    }

    @Test func generationsAreNeverReusedAcrossConnections() {
        var t = ChannelTable()
        t.opened(1)
        let before = t.generation(of: 1)!
        t.removeAll()
        #expect(t.generation(of: 1) == nil)
        #expect(!t.isOpen(1))
        t.opened(1)
        #expect(t.generation(of: 1)! > before)
        #expect(!t.isCurrent(channel: 1, generation: before))
    }

    @Test func needsReopenMarksClosedButKeepsTheGenerationUntilReopened() {
        var t = ChannelTable()
        t.opened(2)
        let g = t.generation(of: 2)!
        t.needsReopen(2)
        #expect(!t.isOpen(2))
        #expect(t.isCurrent(channel: 2, generation: g))
        t.opened(2)
        #expect(t.isOpen(2))
        #expect(!t.isCurrent(channel: 2, generation: g))
        // On an unknown channel it creates nothing.
        t.needsReopen(9)
        #expect(!t.isOpen(9) && t.generation(of: 9) == nil)
    }

    @Test func closingOneChannelLeavesTheOthers() {
        var t = ChannelTable()
        t.opened(1); t.opened(2); t.opened(3)
        let g1 = t.generation(of: 1)!, g3 = t.generation(of: 3)!
        t.closed(2)
        #expect(t.isCurrent(channel: 1, generation: g1) && t.isCurrent(channel: 3, generation: g3))
        #expect(t.isOpen(1) && !t.isOpen(2) && t.isOpen(3))
    }
}
