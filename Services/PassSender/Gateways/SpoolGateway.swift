import BookingContracts
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The default gateway when `PASS_GATEWAY_URL` is unset: each pass becomes
/// `$DATA_DIR/outbox/<bookingId>-v<version>-<index>.eml` (an RFC 5322
/// e-mail) and `….sms`, written to a temporary name, fsynced and renamed,
/// so a reader never sees half a file.
///
/// It follows the sendpass contract: the passes are checked first (E.164
/// phone → else code 3000, e-mail → else 1111, with the index; nothing is
/// written), then written in order; a write failure at pass i answers code
/// 4500 with index i (passes before it were written). File names depend
/// only on the pass, so writing a pass again replaces the file with the
/// same content instead of adding a second pass. Passes count as written
/// only once the directory is fsynced after their renames; when that
/// fails the answer is transient (all of the call's passes again).
public final class SpoolPassGateway: PassGateway {
    public let channel = PassChannel.outbox
    /// The outbox directory.
    public let directory: URL
    /// `directory.path`, once.
    private let directoryPath: String
    private let sender: String
    private let now: @Sendable () -> Date
    /// The occurrences of a series (the ledger's); nil = every occurrence
    /// of a series is written like a single booking.
    private let series: (@Sendable (String) async throws -> [SeriesOccurrence])?
    /// Makes the renames of a call durable: ``syncDirectory(_:)``; tests
    /// put a failing one here (a failing disk cannot be made on demand).
    private let sync: @Sendable (String) -> String?

    /// Creates the gateway, making `directory` if needed.
    /// - Parameter series: where the occurrences of a series are known
    ///   (``PassLedger/seriesOccurrences(seriesId:)``): with it, a series
    ///   gets one e-mail per attendee (see ``send(_:batch:)``).
    public convenience init(directory: URL, sender: String = "Room Booking <passes@room-booking.invalid>",
                            now: @escaping @Sendable () -> Date = { Date() },
                            series: (@Sendable (String) async throws -> [SeriesOccurrence])? = nil) throws {
        try self.init(directory: directory, sender: sender, now: now, series: series, sync: Self.syncDirectory)
    }

    /// A gateway syncing its directory with `sync` (tests).
    init(directory: URL, sender: String = "Room Booking <passes@room-booking.invalid>",
         now: @escaping @Sendable () -> Date = { Date() },
         series: (@Sendable (String) async throws -> [SeriesOccurrence])? = nil,
         sync: @escaping @Sendable (String) -> String?) throws {
        self.directory = directory
        self.directoryPath = directory.path
        self.sender = sender
        self.now = now
        self.series = series
        self.sync = sync
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// The file name stem of one pass: `<bookingId>-v<version>-<index>`
    /// (characters outside `[A-Za-z0-9._-]` in the id become `_`).
    /// Notices add their kind: `<bookingId>-v<version>-<kind>-<index>`
    /// (the index into that notice's recipients).
    public static func stem(bookingId: String, version: Int, attendeeIndex: Int, kind: NoticeKind = .pass) -> String {
        let safe = String(bookingId.unicodeScalars.map { c -> Character in
            (c.isASCII && (CharacterSet.alphanumerics.contains(c) || c == "." || c == "_" || c == "-")) ? Character(c) : "_"
        })
        return kind == .pass ? "\(safe)-v\(version)-\(attendeeIndex)" : "\(safe)-v\(version)-\(kind.rawValue)-\(attendeeIndex)"
    }

    /// The series e-mail of one attendee: `<seriesId>-series-<hash of the
    /// normalised e-mail>` (one file per person, whatever their position).
    public static func seriesStem(seriesId: String, email: String) -> String {
        let hash = FNV1a64.hash(PassLedger.normalised(email).utf8)
        return String(stem(bookingId: seriesId, version: 0, attendeeIndex: 0).dropLast("-v0-0".count)) + "-series-"
            + String(hash, radix: 16)
    }

    /// Writes each pass as an e-mail and an SMS. An occurrence of a series
    /// (with the ledger's occurrences at hand) is different: its SMS as
    /// always (door systems work per booking), but its e-mail is the whole
    /// series' — one per attendee, `UID` = series id with `RRULE` — written
    /// once every occurrence the series announced (`series.count`) is
    /// known, and an occurrence changed since (moved, or a pass for someone
    /// added) gets an e-mail for that instance (`RECURRENCE-ID`).
    public func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        var occurrences: [SeriesOccurrence] = []
        if let full = batch.booking, let ref = full.series, let series {
            do {
                occurrences = try await series(ref.id)
            } catch {
                return .transient(code: nil, text: "could not read the series from the ledger: \(error)")
            }
        }
        let full = batch.booking
        let mine = occurrences.first { $0.original.id == full?.id }
        return await spool(request.passes, batch: batch) { pass, stem, date in
            let sms = (stem + ".sms", PassMail.sms(pass: pass, booking: request.booking, full: full))
            let messageID = "\(stem)@pass-sender.room-booking.invalid"
            guard let full, let ref = full.series, let mine, let masterStart = occurrences.first?.original.start else {
                return [(stem + ".eml", PassMail.email(pass: pass, booking: request.booking, from: sender, messageID: messageID,
                                                       date: date, full: full)), sms]
            }
            let current = SeriesOccurrence(original: mine.original, latest: full)
            if current.unmoved && full.version == mine.original.version {
                guard occurrences.count >= ref.count else { return [sms] }
                let all = occurrences.map { $0.original.id == full.id ? current : $0 }
                let seriesStem = Self.seriesStem(seriesId: ref.id, email: pass.email)
                return [(seriesStem + ".eml", PassMail.seriesEmail(to: pass, from: sender,
                                                                   messageID: "\(seriesStem)@pass-sender.room-booking.invalid",
                                                                   date: date, seriesId: ref.id, occurrences: all)), sms]
            }
            return [(stem + ".eml", PassMail.email(pass: pass, booking: request.booking, from: sender, messageID: messageID,
                                                   date: date, full: full,
                                                   occurrence: (ref.id, current, masterStart))), sms]
        }
    }

    /// Writes a notice per recipient (`<stem>-<kind>-<index>.eml`/`.sms`,
    /// see ``stem(bookingId:version:attendeeIndex:kind:)``) with the same
    /// checks and answers as ``send(_:batch:)``.
    public func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome {
        // An occurrence of a series: the notice names that instance of the
        // series entry (UID = series id, RECURRENCE-ID).
        var occurrence: (String, SeriesOccurrence, String)?
        if let full = batch.booking, let ref = full.series, let series {
            do {
                let all = try await series(ref.id)
                if let mine = all.first(where: { $0.original.id == full.id }), let masterStart = all.first?.original.start {
                    occurrence = (ref.id, SeriesOccurrence(original: mine.original, latest: full), masterStart)
                }
            } catch {
                return .transient(code: nil, text: "could not read the series from the ledger: \(error)")
            }
        }
        return await spool(request.recipients, batch: batch) { person, stem, date in
            [(stem + ".eml", PassMail.notice(request, to: person, from: sender, messageID: "\(stem)@pass-sender.room-booking.invalid",
                                             date: date, full: batch.booking, previous: batch.previous, occurrence: occurrence)),
             (stem + ".sms", PassMail.noticeSMS(request, to: person, full: batch.booking, previous: batch.previous))]
        }
    }

    /// Checks every recipient, then writes each one's e-mail and SMS.
    private func spool(_ people: [SendPassRequest.Pass], batch: PassBatch,
                       compose: (SendPassRequest.Pass, String, Date) -> [(name: String, text: String)]) async -> GatewayOutcome {
        for (i, pass) in people.enumerated() {
            if !Self.isE164(pass.number) {
                return .rejected(code: .attendeePhoneInvalid, text: "phone number \(pass.number) is not E.164", index: i)
            }
            let parts = pass.email.split(separator: "@", omittingEmptySubsequences: false)
            if parts.count != 2 || parts[0].isEmpty || parts[1].isEmpty
                || pass.email.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F
                    || $0 == "<" || $0 == ">" }) {
                return .rejected(code: .attendeeEmailInvalid, text: "e-mail address \(pass.email) is invalid", index: i)
            }
        }
        let date = now()
        for (i, pass) in people.enumerated() {
            let index = batch.attendeeIndexes[i]
            let stem = Self.stem(bookingId: batch.bookingId, version: batch.version, attendeeIndex: index, kind: batch.kind)
            do {
                for file in compose(pass, stem, date) {
                    try Self.writeAtomically(Array(file.text.utf8), directory: directoryPath, name: file.name)
                }
            } catch {
                // The passes before i count as delivered only once durable.
                if i > 0, let failure = sync(directoryPath) {
                    return .transient(code: nil, text: "could not write pass \(i) to the outbox (\(error)), nor make the ones"
                                      + " before it durable: \(failure)")
                }
                return .passFailed(index: i, code: ErrorCode(4500), text: "could not write the pass to the outbox: \(error)")
            }
        }
        // Until the directory is synced the renames may not survive a
        // crash, and the ledger would call these passes delivered. Every
        // pass of the call is retried instead: writing one again replaces
        // its files under the same names, so the outbox never holds two
        // copies of a pass (docs/pass-sender.md: what a reader sees).
        if let failure = sync(directoryPath) {
            return .transient(code: nil, text: "could not make the outbox's new files durable: \(failure)")
        }
        return .success
    }

    /// `+` and 2 to 15 digits, the first not 0 (what the contract calls
    /// E.164). By hand: an `NSRegularExpression` per pass was a tenth of
    /// the spool's CPU.
    static func isE164(_ number: String) -> Bool {
        let bytes = Array(number.utf8)
        guard bytes.count >= 3, bytes.count <= 16, bytes[0] == UInt8(ascii: "+"), bytes[1] != UInt8(ascii: "0") else { return false }
        return bytes.dropFirst().allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    struct WriteError: Error, CustomStringConvertible {
        let description: String
    }

    /// Writes to `<directory>/.<name>.tmp`, fsyncs, renames over
    /// `<directory>/<name>` (paths as strings: `URL`'s path arithmetic cost
    /// as much CPU as the writes).
    static func writeAtomically(_ bytes: [UInt8], directory: String, name: String) throws {
        let temp = directory + "/." + name + ".tmp", path = directory + "/" + name
        let fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw WriteError(description: "open \(temp): errno \(errno)") }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                close(fd)
                unlink(temp)
                throw WriteError(description: "write \(temp): errno \(e)")
            }
            written += n
        }
        if fsync(fd) != 0 {
            let e = errno
            close(fd)
            unlink(temp)
            throw WriteError(description: "fsync \(temp): errno \(e)")
        }
        close(fd)
        guard rename(temp, path) == 0 else {
            let e = errno
            unlink(temp)
            throw WriteError(description: "rename to \(path): errno \(e)")
        }
    }

    /// fsync of the directory makes the renames durable. Returns what
    /// failed, or nil.
    @Sendable static func syncDirectory(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            return "open \(path): errno \(e)"
        }
        defer { close(fd) }
        while fsync(fd) != 0 {
            let e = errno
            if e == EINTR { continue }
            return "fsync \(path): errno \(e)"
        }
        return nil
    }
}

