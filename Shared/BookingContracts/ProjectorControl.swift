import Foundation

/// The projector's control protocol (`bookingctl projector rebuild`).
public enum ProjectorControl {
    /// RPC queue of the projector's control commands (classic, durable).
    public static let queue = "availability-projector.control"
    /// Where the projector asks the booking handler to replay to.
    public static let replayQueue = "availability-projector.replay"
    /// `type` of the rebuild command; body `{}`.
    public static let rebuildType = "projector.rebuild"
    /// `type` of its reply.
    public static let replyType = "projector.reply"
    /// `type` of a question for the running rebuild's progress; body `{}`,
    /// answered with `{"ok":true,"status":{…}}` (``RebuildStatus``).
    public static let statusType = "projector.status"
    /// `type` of a request to cancel the running rebuild; body `{}`,
    /// answered with the status it had. The rebuild itself then answers its
    /// requester with ``rebuildCancelled``; the live model stays as it was.
    public static let cancelType = "projector.cancel"
    /// Error code of a rebuild that failed (replay incomplete, timed out, …);
    /// the projector's control protocol only, not a contract reply code.
    /// A rebuild while another runs is 2002; an error the booking handler
    /// gave to `booking.replay` (e.g. 2003) is passed on.
    public static let rebuildFailed = ErrorCode(9001)
    /// Error code of a rebuild an operator cancelled (``cancelType``).
    public static let rebuildCancelled = ErrorCode(9002)

    /// A rebuild's progress: what the replay delivered so far against what
    /// the live model holds. The handler announces its totals only in the
    /// end marker, so the live model's counts stand in as the expected ones
    /// (they differ only by what changed since, or by drift).
    public struct RebuildStatus: Codable, Sendable, Equatable {
        /// Whether a rebuild runs; the other fields describe it only then.
        public var running: Bool
        public var replayId: String?
        /// Distinct rooms and bookings replayed so far.
        public var rooms: Int
        public var bookings: Int
        /// Live events applied to both models meanwhile.
        public var liveEvents: Int
        /// Rooms and bookings of the live model when the rebuild started.
        public var expectedRooms: Int?
        public var expectedBookings: Int?
        /// Since the rebuild started, and since the replay last delivered.
        public var seconds: Double
        public var secondsSinceProgress: Double
        /// The projector gives up when the replay delivers nothing for this long.
        public var stallTimeoutSeconds: Double

        public init(running: Bool, replayId: String?, rooms: Int, bookings: Int, liveEvents: Int, expectedRooms: Int?,
                    expectedBookings: Int?, seconds: Double, secondsSinceProgress: Double, stallTimeoutSeconds: Double) {
            self.running = running
            self.replayId = replayId
            self.rooms = rooms
            self.bookings = bookings
            self.liveEvents = liveEvents
            self.expectedRooms = expectedRooms
            self.expectedBookings = expectedBookings
            self.seconds = seconds
            self.secondsSinceProgress = secondsSinceProgress
            self.stallTimeoutSeconds = stallTimeoutSeconds
        }

        /// No rebuild runs.
        public static func idle(stallTimeoutSeconds: Double) -> RebuildStatus {
            RebuildStatus(running: false, replayId: nil, rooms: 0, bookings: 0, liveEvents: 0, expectedRooms: nil,
                          expectedBookings: nil, seconds: 0, secondsSinceProgress: 0, stallTimeoutSeconds: stallTimeoutSeconds)
        }
    }

    /// The result of a rebuild.
    public struct RebuildResult: Codable, Sendable, Equatable {
        public var replayId: String
        public var rooms: Int
        public var bookings: Int
        /// Live events applied to both models while the replay ran.
        public var liveEvents: Int
        /// Room-days whose `avail` differed after the swap (normally 0).
        public var changedDays: Int
        public var seconds: Double
        /// Of ``seconds``, the last step: computing every room-day of the
        /// rebuilt bookings and swapping the tables (nil from a projector
        /// that does not say).
        public var finishSeconds: Double?

        public init(replayId: String, rooms: Int, bookings: Int, liveEvents: Int, changedDays: Int, seconds: Double,
                    finishSeconds: Double? = nil) {
            self.replayId = replayId
            self.rooms = rooms
            self.bookings = bookings
            self.liveEvents = liveEvents
            self.changedDays = changedDays
            self.seconds = seconds
            self.finishSeconds = finishSeconds
        }
    }

    /// `{"ok":true,"rebuild":{…}}`, `{"ok":true,"status":{…}}` or
    /// `{"ok":false,"error":{…}}`.
    public struct Reply: Codable, Sendable, Equatable {
        public var ok: Bool
        public var rebuild: RebuildResult?
        public var status: RebuildStatus?
        public var error: ReplyError?

        public init(status: RebuildStatus) {
            ok = true
            self.status = status
        }

        public init(rebuild: RebuildResult) {
            ok = true
            self.rebuild = rebuild
        }

        public init(error: ReplyError) {
            ok = false
            self.error = error
        }
    }
}
