import Crypto
import Foundation
import ServiceSettings
import ServiceSupport
#if canImport(Glibc)
import Glibc
#endif

/// The key that seals `booking.list` cursors (ChaCha20-Poly1305): a client
/// can neither read one — where a page stopped may be a booking it is not
/// allowed to match — nor forge or alter one: not its snapshot, not where
/// it continues, not the `issuedAt` that bounds its life.
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
        if FileManager.default.fileExists(atPath: path) { return try stored(at: path) }
        let text = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }.map { String(format: "%02x", $0) }.joined()
        // Written whole to a file of its own, then linked into place: two
        // processes starting on one DATA_DIR both end up with the key of
        // whichever linked first, and neither can read a key half written
        // (created in place with O_EXCL, the other process could open it
        // between the create and the write and find it empty).
        let temporary = path + ".\(getpid()).\(UInt64.random(in: 0 ... .max))"
        let fd = Glibc.open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw SettingsError("\(path): cannot create the cursor key: \(String(cString: strerror(errno)))") }
        defer { unlink(temporary) }
        let bytes = Array((text + "\n").utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        Glibc.close(fd)
        guard written == bytes.count, synced else {
            throw SettingsError("\(path): cannot write the cursor key (DATA_DIR full or not writable?)")
        }
        if link(temporary, path) == 0 { return CursorKey(text: text) }
        guard errno == EEXIST else { throw SettingsError("\(path): cannot create the cursor key: \(String(cString: strerror(errno)))") }
        return try stored(at: path)
    }

    /// The key kept at `path` (always written whole, see ``resolve(setting:dataDirectory:)``).
    private static func stored(at path: String) throws -> CursorKey {
        guard let existing = FileManager.default.contents(atPath: path), existing.count >= minimumLength,
              let stored = String(data: existing, encoding: .utf8) else {
            throw SettingsError("\(path): not a cursor key (delete it to make a new one)")
        }
        return CursorKey(text: stored.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// `payload` sealed: nonce, ciphertext and tag.
    func seal(_ payload: Data) -> Data {
        (try? ChaChaPoly.seal(payload, using: key).combined) ?? Data()
    }

    /// The payload of a box this key sealed; nil for anything else
    /// (altered, made up, or sealed with another key).
    func open(_ box: Data) -> Data? {
        guard let sealed = try? ChaChaPoly.SealedBox(combined: box) else { return nil }
        return try? ChaChaPoly.open(sealed, using: key)
    }
}
