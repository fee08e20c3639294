import AMQPClient
import Testing

/// The one-shot value the I/O thread answers batches with: waiters before
/// and after it is set get the same value, and only the first value counts.
@Suite("OneShot")
struct OneShotTests {
    @Test func waitersBeforeAndAfterGetTheFirstValue() async {
        let shot = OneShot<Int>()
        #expect(!shot.isSettled)
        let early = (0..<3).map { _ in Task { await shot.value() } }
        // Whether these tasks wait before or after `fulfil`, they get its
        // first value.
        shot.fulfil(7)
        shot.fulfil(8)  // ignored
        #expect(shot.isSettled)
        for task in early { #expect(await task.value == 7) }
        #expect(await shot.value() == 7)
    }
}
