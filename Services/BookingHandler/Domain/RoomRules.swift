import BookingContracts
import Foundation

extension BookingRules {
    /// Longest room name, `location`, `size` and `equipment` item, in UTF-8
    /// bytes (the name after trimming; see ``ContractLimits``).
    public static let maxRoomTextBytes = ContractLimits.maxNameBytes
    /// Longest image URL, in UTF-8 bytes.
    public static let maxImageURLBytes = ContractLimits.maxImageURLBytes
    /// Largest room capacity.
    public static let maxCapacity = 10_000

    /// Validates `room.register` (and each element of `ROOMS_FILE`) and
    /// returns the room with the contract's defaults applied
    /// (``RegisterRoom/resolved()``). Checks, first failure wins, all 1100:
    /// - `name` non-empty after trimming, at most ``maxRoomTextBytes``
    ///   UTF-8 bytes (field `name`); the returned room carries the trimmed name;
    /// - `location`, `size` and each `equipment` item at most
    ///   ``maxRoomTextBytes`` bytes (fields `location`, `size`,
    ///   `equipment[i]`); kept as given;
    /// - `capacity` in 1...``maxCapacity`` (field `capacity`);
    /// - at most ``Room/maxImages`` images (field `images`), each an absolute
    ///   `http` or `https` URL with a host, at most ``maxImageURLBytes``
    ///   bytes (field `images[i]`): the page and the passes link to them, so
    ///   `javascript:`, `data:` or `file:` URLs must not get that far;
    /// - `timeZone` a known IANA zone, `TimeZone(identifier:)` non-nil (field
    ///   `timeZone`); kept as given;
    /// - `opens` and `closes` `HH:mm` on the 15-minute grid (fields `opens`,
    ///   `closes`), `opens` before `closes` (field `closes`);
    /// - `hours` (v1.2): keys `mon`…`sun` only, each `null` or two such
    ///   times, opening before closing (field `hours.<day>`);
    ///   `bufferMinutes` 0…240, a multiple of 15 (field `bufferMinutes`);
    ///   `maxActiveBookings` 1…``maxActiveBookingsLimit`` (field `maxActiveBookings`).
    public static func validateRoom(_ command: RegisterRoom) -> Result<Room, ReplyError> {
        var room = command.resolved()
        let name = room.name.trimmingWhitespace()
        if name.isEmpty {
            return .failure(invalid("name", "room name must not be empty"))
        }
        if name.utf8.count > maxRoomTextBytes {
            return .failure(invalid("name", "room name is longer than \(maxRoomTextBytes) bytes (UTF-8)"))
        }
        room.name = name
        if let location = room.location, location.utf8.count > maxRoomTextBytes {
            return .failure(invalid("location", "location is longer than \(maxRoomTextBytes) bytes (UTF-8)"))
        }
        if let size = room.size, size.utf8.count > maxRoomTextBytes {
            return .failure(invalid("size", "size is longer than \(maxRoomTextBytes) bytes (UTF-8)"))
        }
        if let index = room.equipment.firstIndex(where: { $0.utf8.count > maxRoomTextBytes }) {
            return .failure(invalid("equipment[\(index)]",
                                    "equipment \(index) is longer than \(maxRoomTextBytes) bytes (UTF-8)"))
        }
        if !(1...maxCapacity).contains(room.capacity) {
            return .failure(invalid("capacity", "capacity must be between 1 and \(maxCapacity), got \(room.capacity)"))
        }
        if room.images.count > Room.maxImages {
            return .failure(invalid("images", "at most \(Room.maxImages) images, got \(room.images.count)"))
        }
        for (index, url) in room.images.enumerated() {
            if url.utf8.count > maxImageURLBytes {
                return .failure(invalid("images[\(index)]",
                                        "image \(index) is longer than \(maxImageURLBytes) bytes (UTF-8)"))
            }
            if !isWebURL(url) {
                return .failure(invalid("images[\(index)]", "image \(index) is not an http or https URL"))
            }
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
        if let error = validateCalendar(room) { return .failure(error) }
        if let error = validateApprovers(room.approvers ?? []) { return .failure(error) }
        if let error = validatePolicies(room) { return .failure(error) }
        return .success(room)
    }

    /// Longest ``Room/bufferMinutes``.
    public static let maxBufferMinutes = 240

    /// Largest ``Room/maxActiveBookings``: far above any real quota, low
    /// enough that counting a requester's bookings stays a short range.
    public static let maxActiveBookingsLimit = 10_000

    /// `hours`, `bufferMinutes` and `maxActiveBookings` (contract v1.2,
    /// "Availability calendars").
    static func validateCalendar(_ room: Room) -> ReplyError? {
        for (key, value) in (room.hours ?? [:]).sorted(by: { $0.key < $1.key }) {
            let field = "hours.\(key.prefix(20))"
            guard WeeklyHours.keys.contains(key) else {
                return invalid(field, "hours names weekdays as \(WeeklyHours.keys.joined(separator: ", ")), not '\(key.prefix(20))'")
            }
            guard let pair = value else { continue }
            guard pair.count == 2 else {
                return invalid(field, "\(key) is [\"HH:mm\", \"HH:mm\"] (opening, closing) or null (closed)")
            }
            guard let opens = ContractFormat.minutes(ofTime: pair[0]), let closes = ContractFormat.minutes(ofTime: pair[1]) else {
                return invalid(field, "\(key): \"\(pair[0].prefix(20))\" and \"\(pair[1].prefix(20))\" must be times HH:mm")
            }
            if opens % ContractFormat.gridMinutes != 0 || closes % ContractFormat.gridMinutes != 0 {
                return invalid(field, "\(key): \(pair[0])-\(pair[1]) is not on the \(ContractFormat.gridMinutes)-minute grid")
            }
            if closes <= opens {
                return invalid(field, "\(key): closing \(pair[1]) is not after opening \(pair[0])")
            }
        }
        if let buffer = room.bufferMinutes,
           !(0...maxBufferMinutes).contains(buffer) || buffer % ContractFormat.gridMinutes != 0 {
            return invalid("bufferMinutes",
                           "bufferMinutes must be 0 to \(maxBufferMinutes), a multiple of \(ContractFormat.gridMinutes), got \(buffer)")
        }
        // 0 would forbid every booking but an admin's: a closure says that
        // better, so a quota is at least one.
        if let quota = room.maxActiveBookings, !(1...maxActiveBookingsLimit).contains(quota) {
            return invalid("maxActiveBookings", "maxActiveBookings must be 1 to \(maxActiveBookingsLimit), got \(quota)")
        }
        return nil
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

    /// The policy fields of contract v1.1, each optional: `horizonDays`
    /// 0…3650 (0: today only), `minMinutes` and `maxMinutes` 1…1500 (a
    /// 25-hour DST day counts 1500) with min ≤ max, `changeCutoffMinutes`
    /// 0…525600 (a year), `autoReleaseMinutes` 1…1440 (0 would release a
    /// booking at its start, before anyone could check in). 1100 naming
    /// the field otherwise.
    static func validatePolicies(_ room: Room) -> ReplyError? {
        if let days = room.horizonDays, !(0...3650).contains(days) {
            return invalid("horizonDays", "horizonDays must be 0 to 3650, got \(days)")
        }
        for (field, value) in [("minMinutes", room.minMinutes), ("maxMinutes", room.maxMinutes)] {
            if let value, !(1...1500).contains(value) {
                return invalid(field, "\(field) must be 1 to 1500, got \(value)")
            }
        }
        if let least = room.minMinutes, let most = room.maxMinutes, least > most {
            return invalid("maxMinutes", "maxMinutes \(most) is below minMinutes \(least)")
        }
        if let cutoff = room.changeCutoffMinutes, !(0...525_600).contains(cutoff) {
            return invalid("changeCutoffMinutes", "changeCutoffMinutes must be 0 to 525600, got \(cutoff)")
        }
        if let release = room.autoReleaseMinutes, !(1...1440).contains(release) {
            return invalid("autoReleaseMinutes", "autoReleaseMinutes must be 1 to 1440, got \(release)")
        }
        return nil
    }

    /// Whether `text` is an absolute `http`/`https` URL (scheme in any
    /// case) with a non-empty host, as `URLComponents` parses it (which
    /// refuses spaces and control characters).
    static func isWebURL(_ text: String) -> Bool {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty
        else { return false }
        return true
    }

    static func invalid(_ field: String, _ text: String) -> ReplyError {
        ReplyError(code: .invalidField, text: text, field: field)
    }
}
