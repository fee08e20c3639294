import BookingContracts
import Foundation

extension BookingRules {
    /// Longest room name, in characters, after trimming.
    public static let maxRoomNameLength = 100
    /// Largest room capacity.
    public static let maxCapacity = 10_000

    /// Validates `room.register` (and each element of `ROOMS_FILE`) and
    /// returns the room with the contract's defaults applied
    /// (``RegisterRoom/resolved()``). Checks, first failure wins, all 1100:
    /// - `name` non-empty after trimming, at most ``maxRoomNameLength``
    ///   characters (field `name`); the returned room carries the trimmed name;
    /// - `capacity` in 1...``maxCapacity`` (field `capacity`);
    /// - at most ``Room/maxImages`` images (field `images`);
    /// - `timeZone` a known IANA zone, `TimeZone(identifier:)` non-nil (field
    ///   `timeZone`); kept as given;
    /// - `opens` and `closes` `HH:mm` on the 15-minute grid (fields `opens`,
    ///   `closes`), `opens` before `closes` (field `closes`).
    public static func validateRoom(_ command: RegisterRoom) -> Result<Room, ReplyError> {
        var room = command.resolved()
        let name = room.name.trimmingCharacters(in: .whitespacesAndNewlines)
        if name.isEmpty {
            return .failure(invalid("name", "room name must not be empty"))
        }
        if name.count > maxRoomNameLength {
            return .failure(invalid("name", "room name is longer than \(maxRoomNameLength) characters"))
        }
        room.name = name
        if !(1...maxCapacity).contains(room.capacity) {
            return .failure(invalid("capacity", "capacity must be between 1 and \(maxCapacity), got \(room.capacity)"))
        }
        if room.images.count > Room.maxImages {
            return .failure(invalid("images", "at most \(Room.maxImages) images, got \(room.images.count)"))
        }
        if room.timeZone.isEmpty || TimeZone(identifier: room.timeZone) == nil {
            return .failure(invalid("timeZone", "unknown time zone \"\(room.timeZone)\""))
        }
        guard let opens = ContractFormat.minutes(ofTime: room.opens) else {
            return .failure(invalid("opens", "opens \"\(room.opens)\" is not a time HH:mm"))
        }
        if opens % ContractFormat.gridMinutes != 0 {
            return .failure(invalid("opens",
                                    "opens \(room.opens) is not on the \(ContractFormat.gridMinutes)-minute grid"))
        }
        guard let closes = ContractFormat.minutes(ofTime: room.closes) else {
            return .failure(invalid("closes", "closes \"\(room.closes)\" is not a time HH:mm"))
        }
        if closes % ContractFormat.gridMinutes != 0 {
            return .failure(invalid("closes",
                                    "closes \(room.closes) is not on the \(ContractFormat.gridMinutes)-minute grid"))
        }
        if closes <= opens {
            return .failure(invalid("closes", "closes \(room.closes) is not after opens \(room.opens)"))
        }
        if let error = validateApprovers(room.approvers ?? []) { return .failure(error) }
        return .success(room)
    }

    /// Most ``Room/approvers`` a room may name.
    public static let maxApprovers = 50

    /// Approvers are broker user names: 1 to 200 bytes (RabbitMQ's own
    /// limit is 255), no duplicates, at most ``maxApprovers``.
    static func validateApprovers(_ approvers: [String]) -> ReplyError? {
        if approvers.count > maxApprovers {
            return invalid("approvers", "at most \(maxApprovers) approvers, got \(approvers.count)")
        }
        for (index, user) in approvers.enumerated() {
            if user.isEmpty || user.utf8.count > 200 {
                return invalid("approvers[\(index)]", "an approver is a broker user name of 1 to 200 bytes")
            }
        }
        if Set(approvers).count != approvers.count {
            return invalid("approvers", "approvers must not repeat a user")
        }
        return nil
    }

    private static func invalid(_ field: String, _ text: String) -> ReplyError {
        ReplyError(code: .invalidField, text: text, field: field)
    }
}
