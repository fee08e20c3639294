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
    /// Error code of a rebuild that failed (replay incomplete, timed out, …);
    /// the projector's control protocol only, not a contract reply code.
    /// A rebuild while another runs is 2002; an error the booking handler
    /// gave to `booking.replay` (e.g. 2003) is passed on.
    public static let rebuildFailed = ErrorCode(9001)

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

        public init(replayId: String, rooms: Int, bookings: Int, liveEvents: Int, changedDays: Int, seconds: Double) {
            self.replayId = replayId
            self.rooms = rooms
            self.bookings = bookings
            self.liveEvents = liveEvents
            self.changedDays = changedDays
            self.seconds = seconds
        }
    }

    /// `{"ok":true,"rebuild":{…}}` or `{"ok":false,"error":{…}}`.
    public struct Reply: Codable, Sendable, Equatable {
        public var ok: Bool
        public var rebuild: RebuildResult?
        public var error: ReplyError?

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
