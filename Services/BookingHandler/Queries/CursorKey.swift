import Crypto
import Foundation
import ServiceSupport

/// The key that signs `booking.list` cursors (HMAC-SHA256), so a client
/// cannot forge one: not its snapshot, not where it continues, not the
/// `issuedAt` that bounds its life.
///
/// `LIST_CURSOR_KEY` when set (any text of at least 32 characters; every
/// handler instance that answers the same queue needs the same one), else a
/// random key kept in `DATA_DIR/list-cursor.key`, made on first start with
/// mode 0600. A new key invalidates the cursors in flight: their next page
/// answers 1100 `cursor`, and the client lists again from the first page.
public struct CursorKey: Sendable {
    let key: SymmetricKey

    /// The shortest `LIST_CURSOR_KEY` taken.
    public static let minimumLength = 32

    /// A key derived from `text` (SHA-256 of its UTF-8).
    public init(text: String) {
        key = SymmetricKey(data: SHA256.hash(data: Data(text.utf8)))
    }

    /// A random key (tests, and a process that needs no cursor to outlive it).
    public static func random() -> CursorKey {
        CursorKey(key: SymmetricKey(size: .bits256))
    }

    private init(key: SymmetricKey) {
        self.key = key
    }

    /// `LIST_CURSOR_KEY` if given, else the key file in `dataDirectory`
    /// (made when missing). Throws ``SettingsError`` naming the variable or
    /// the file.
    public static func resolve(setting: String?, dataDirectory: String) throws -> CursorKey {
        if let setting {
            guard setting.count >= minimumLength else {
                throw SettingsError("LIST_CURSOR_KEY: at least \(minimumLength) characters (e.g. openssl rand -hex 32)")
            }
            return CursorKey(text: setting)
        }
        let path = dataDirectory + "/list-cursor.key"
        if let existing = FileManager.default.contents(atPath: path) {
            guard existing.count >= minimumLength, let text = String(data: existing, encoding: .utf8) else {
                throw SettingsError("\(path): not a cursor key (delete it to make a new one)")
            }
            return CursorKey(text: text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let text = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }.map { String(format: "%02x", $0) }.joined()
        guard FileManager.default.createFile(atPath: path, contents: Data((text + "\n").utf8),
                                             attributes: [.posixPermissions: 0o600]) else {
            throw SettingsError("\(path): cannot write the cursor key (DATA_DIR writable?)")
        }
        return CursorKey(text: text)
    }

    /// The tag of `payload`: HMAC-SHA256, the first 16 bytes.
    func tag(_ payload: Data) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: payload, using: key)).prefix(16)
    }

    /// Whether `tag` is `payload`'s (compared in constant time).
    func verify(_ tag: Data, for payload: Data) -> Bool {
        let expected = self.tag(payload)
        guard tag.count == expected.count else { return false }
        var difference: UInt8 = 0
        for (a, b) in zip(tag, expected) { difference |= a ^ b }
        return difference == 0
    }
}
