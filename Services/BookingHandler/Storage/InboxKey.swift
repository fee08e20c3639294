import BookingContracts
import Foundation

/// A command's idempotency key as the inbox stores it: scoped by the
/// sender, with a fingerprint of what was sent (contract v1.1).
///
/// - The scope is the broker-verified `user_id` (`u:<user>`), or `""` for
///   anonymous commands: the same key from another user is another command,
///   and a stored reply only ever goes back to the user who caused it.
/// - The fingerprint tells the same command from a different one under the
///   same key (1009). It is 64-bit FNV-1a over the command type and the body
///   bytes: only one sender's own keys are ever compared, so a collision
///   (about 2⁻⁶⁴ per pair) could only hurt that sender, and no one else
///   can aim for one. A body re-serialised with other whitespace or key
///   order is a different body: retries must resend the same bytes.
/// - Rows stored before scopes existed get a scope when the database is
///   migrated (``migratedScope(ofReply:)``): a reply that shows a booking
///   belongs to that booking's requester (or to the anonymous scope), so
///   nobody else can read its attendees; other replies (errors, rooms,
///   replays: no personal data) keep ``legacyScope`` and answer any sender.
///   Migrated rows have no fingerprint and answer with their stored reply,
///   so a command redelivered across the upgrade is not executed twice.
///   They age out with `INBOX_RETENTION_DAYS`.
public struct InboxKey: Sendable, Hashable {
    /// `u:<user>` or `""` (anonymous).
    public var scope: String
    /// `message_id`, else the `idempotency-key` header.
    public var key: String
    /// FNV-1a 64 of the command type, a NUL and the body.
    public var fingerprint: Int64

    /// The scope of rows migrated from the unscoped inbox.
    public static let legacyScope = "legacy"

    public init(scope: String, key: String, fingerprint: Int64) {
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
    }

    /// The key of a command from `caller`.
    public init(caller: Caller, key: String, commandType: String, body: [UInt8]) {
        self.init(scope: Self.scope(of: caller), key: key,
                  fingerprint: Self.fingerprint(commandType: commandType, body: body))
    }

    /// The inbox scope of `caller`.
    public static func scope(of caller: Caller) -> String {
        caller.name.map { "u:" + $0 } ?? ""
    }

    /// The scope a row stored before scopes existed gets: its booking's
    /// requester's (anonymous when none) when the reply shows a booking,
    /// else ``legacyScope``. An admin's redelivered cancel of someone
    /// else's booking therefore runs again after the upgrade — and finds
    /// the booking already cancelled (2002), a second effect of nothing.
    public static func migratedScope(ofReply reply: Data) -> String {
        guard case .booking(let booking)? = try? ContractJSON.decode(CommandReply.self, from: reply) else {
            return legacyScope
        }
        return scope(of: Caller(userID: booking.requestedBy))
    }

    /// FNV-1a 64 of `commandType`, a NUL byte and `body`.
    public static func fingerprint(commandType: String, body: [UInt8]) -> Int64 {
        var hash = FNV1a64()
        hash.add(field: commandType.utf8)
        hash.combine(body)
        return Int64(bitPattern: hash.value)
    }
}
