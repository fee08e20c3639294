import Foundation
import Synchronization
import Testing
@testable import AMQPClient

@Suite("ThreadConfinement")
struct ThreadConfinementTests {
    /// Runs `body` on a new thread and waits for it.
    private func onNewThread(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                body()
                done.resume()
            }
            thread.start()
        }
    }

    @Test func nobodyOwnsItBeforeAClaim() {
        let c = ThreadConfinement("test state")
        #expect(!c.isOwnerThread)
    }

    @Test func onlyTheClaimingThreadOwnsIt() async {
        let c = ThreadConfinement("test state")
        let seen = Flag()
        let claimed = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        // The owner stays alive while the others look: a finished thread's
        // id may be given to the next thread.
        Thread {
            c.claim()
            seen.set(c.isOwnerThread)
            claimed.signal()
            release.wait()
        }.start()
        claimed.wait()
        #expect(seen.get() == true)
        #expect(!c.isOwnerThread)
        await onNewThread { seen.set(c.isOwnerThread) }
        #expect(seen.get() == false)
        release.signal()
    }

    /// What the I/O loop relies on: in a debug build (as tests are) touching
    /// confined state from another thread traps instead of racing.
    @Test(.enabled(if: _isDebugAssertConfiguration()))
    func assertingOffTheOwnerThreadTraps() async {
        await #expect(processExitsWith: .failure) {
            let c = ThreadConfinement("test state")
            let claimed = DispatchSemaphore(value: 0)
            Thread {
                c.claim()
                claimed.signal()
            }.start()
            claimed.wait()
            c.assertOwnerThread()
        }
    }

    @Test func assertingOnTheOwnerThreadPasses() async {
        let c = ThreadConfinement("test state")
        await onNewThread {
            c.claim()
            c.assertOwnerThread()
        }
    }
}

/// A Bool set on one thread and read on another.
private final class Flag: Sendable {
    private let value = Mutex<Bool?>(nil)
    func set(_ v: Bool) { value.withLock { $0 = v } }
    func get() -> Bool? { value.withLock { $0 } }
}
