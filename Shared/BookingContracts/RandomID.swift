#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Random (version 4) UUIDs as lowercase strings, the form the contract
/// uses for booking, event and message ids.
///
/// Why not `UUID().uuidString.lowercased()`: on Linux, Foundation's `UUID()`
/// opens, reads and closes `/dev/urandom` for every id — three system calls,
/// and the booking handler makes three ids per booking. This draws 4 KiB
/// from the kernel's generator at a time (`getrandom` through
/// `arc4random_buf`) and hands out 16 bytes per id: the same randomness,
/// one system call per 256 ids. (`arc4random_buf` needs glibc 2.36 or
/// later: Debian bookworm, as in `deploy/Dockerfile`.)
public enum RandomID {
    private static let pool = Mutex(Pool())

    private struct Pool {
        var bytes = [UInt8](repeating: 0, count: 4096)
        var next = 4096
    }

    /// A new random UUID, e.g. `3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b`.
    public static func uuidString() -> String {
        var raw: (UInt64, UInt64) = pool.withLock { pool in
            if pool.next + 16 > pool.bytes.count {
                pool.bytes.withUnsafeMutableBytes { arc4random_buf($0.baseAddress!, $0.count) }
                pool.next = 0
            }
            defer { pool.next += 16 }
            return pool.bytes.withUnsafeBytes { buffer in
                (buffer.loadUnaligned(fromByteOffset: pool.next, as: UInt64.self),
                 buffer.loadUnaligned(fromByteOffset: pool.next + 8, as: UInt64.self))
            }
        }
        return withUnsafeMutableBytes(of: &raw) { bytes in
            bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4
            bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 4122 variant
            let hex = Array("0123456789abcdef".utf8)
            return String(unsafeUninitializedCapacity: 36) { out in
                var o = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[o] = UInt8(ascii: "-")
                        o += 1
                    }
                    out[o] = hex[Int(bytes[i] >> 4)]
                    out[o + 1] = hex[Int(bytes[i] & 0x0F)]
                    o += 2
                }
                return o
            }
        }
    }
}
