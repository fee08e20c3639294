import CRabbitMQ

#if canImport(Glibc)
import Glibc
#endif

/// An eventfd the I/O thread polls beside the broker socket, so that other
/// threads can wake it when they hand it work.
///
/// Threading: `signal()` may be called from any thread; `drain()` and the
/// descriptor's use in `poll` belong to the I/O thread. Ownership: the fd is
/// closed in `deinit`.
final class Wakeup: @unchecked Sendable {  // only an immutable fd; eventfd ops are thread-safe
    let fd: Int32

    init() {
        fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        precondition(fd >= 0, "eventfd failed: errno \(errno)")
    }

    deinit { close(fd) }

    func signal() {
        var one: UInt64 = 1
        _ = write(fd, &one, 8)
    }

    func drain() {
        var value: UInt64 = 0
        _ = read(fd, &value, 8)
    }
}
