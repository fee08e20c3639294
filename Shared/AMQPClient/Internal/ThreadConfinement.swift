import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Checks that state confined to one thread is touched only on that thread,
/// like GRDB's `SchedulingWatchdog` does for database access.
///
/// The I/O loop claims it first thing on its thread and checks it on every
/// access to its loop-owned state. The check is an `assert`: debug builds
/// (and so `swift test`) trap on the first access from another thread, and
/// release builds pay nothing, since the loop touches its state many times
/// per message.
final class ThreadConfinement: Sendable {
    /// The owning thread's id; 0 until claimed.
    private let owner = Atomic<UInt>(0)
    /// What is confined, for the failure message.
    let name: String

    init(_ name: String) {
        self.name = name
    }

    static var currentThreadID: UInt {
        #if canImport(Glibc)
        UInt(pthread_self())
        #else
        UInt(bitPattern: pthread_self())
        #endif
    }

    /// Makes the calling thread the owner.
    func claim() {
        owner.store(Self.currentThreadID, ordering: .sequentiallyConsistent)
    }

    /// Whether the calling thread is the owner (false before any claim).
    var isOwnerThread: Bool {
        owner.load(ordering: .sequentiallyConsistent) == Self.currentThreadID
    }

    /// Traps in debug builds unless called on the owning thread.
    @inline(__always)
    func assertOwnerThread(file: StaticString = #fileID, line: UInt = #line) {
        assert(isOwnerThread, "\(name) touched off its thread", file: file, line: line)
    }
}
