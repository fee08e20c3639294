import ServiceSupport
import Tracing

/// Every ledger transaction in a span of its own, `store <operation>`
/// (``StoreSpans``): from the moment it is queued for the group commit to
/// its commit, so a slow pass shows whether it waited for the database.
/// The parent is the current span — the consume span of the message being
/// handled — or none for work of no message (the outbox sweep's look-up,
/// the start-up flush, pruning): each of those is a trace of its own.
extension PassLedger {
    /// `database.write` in a span `store <operation>`; `bookingId` (the
    /// lock key) becomes `booking.id` when there is one.
    func storeWrite<T: Sendable>(_ operation: String, lockKey: String?,
                            _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await withSpan("store \(operation)", ofKind: .internal) { span in
            if span.isRecording { span.attributes = attributes(operation: "transaction", bookingId: lockKey) }
            return try await database.write(lockKey: lockKey, body)
        }
    }

    /// `database.read` in a span `store <operation>`.
    func storeRead<T: Sendable>(_ operation: String, bookingId: String? = nil,
                           _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await withSpan("store \(operation)", ofKind: .internal) { span in
            if span.isRecording { span.attributes = attributes(operation: "read", bookingId: bookingId) }
            return try await database.read(body)
        }
    }

    /// `database.submit` in a span `store <operation>` that ends when the
    /// write settles (its caller has gone on by then: the span is a child
    /// that outlives its parent, as the producer spans of batches do).
    func storeSubmit(_ operation: String, lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> Void,
                settle: @escaping @Sendable ((any Error)?) -> Void) {
        let span = startSpan("store \(operation)", ofKind: .internal)
        if span.isRecording { span.attributes = attributes(operation: "transaction", bookingId: lockKey) }
        database.submit(lockKey: lockKey, body) { error in
            if let error { span.recordError(error) }
            span.end()
            settle(error)
        }
    }

    private func attributes(operation: String, bookingId: String?) -> SpanAttributes {
        var attributes = StoreSpans.attributes(system: database.systemName, operation: operation)
        if let bookingId { attributes["booking.id"] = bookingId }
        return attributes
    }
}
