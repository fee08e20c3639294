import Foundation

/// A tiny lock-protected box for test bookkeeping.
public final class LockedBox<Value>: @unchecked Sendable {  // all access goes through `lock`
    private let lock = NSLock()
    private var value: Value
    public init(_ value: Value) { self.value = value }
    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
