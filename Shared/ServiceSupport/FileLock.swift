import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An exclusive advisory lock (`flock`) on a file beside a database, held
/// while a process creates or migrates it.
///
/// Why: several processes may open one SQLite database at the same time
/// (two booking handlers started together on a fresh data directory). Each
/// runs GRDB's migrator, which reads the applied migrations and then runs
/// the missing ones, each in its own transaction — so both can find the
/// database empty and the second fails with "table already exists". The
/// lock makes the check-and-migrate of one process complete before the
/// next one looks. `flock` locks belong to the open file description, so
/// two opens in one process exclude each other too, and the kernel drops
/// the lock when a process dies.
public enum FileLock {
    /// Runs `body` while holding the lock on `path` (created if missing).
    public static func withExclusive<T>(path: String, _ body: () throws -> T) throws -> T {
        let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw LockError(description: "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else { throw LockError(description: "cannot lock \(path): \(String(cString: strerror(errno)))") }
        }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }

    /// The lock file could not be opened or locked.
    public struct LockError: Error, CustomStringConvertible {
        public let description: String
    }
}
