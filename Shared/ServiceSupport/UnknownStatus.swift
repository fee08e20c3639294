import BookingContracts
import Foundation
import Logging
import Synchronization

/// Booking events whose booking has a status this build does not know:
/// a newer booking handler's. Contract v1.1 has consumers ignore unknown
/// status values, so the services ack such an event and keep what they
/// knew of the booking instead of dead-lettering it — an upgrade done
/// handler first would otherwise fill the dead letters with every event
/// it publishes.
public enum UnknownStatus {
    /// The booking id and status text of a booking event body whose status
    /// is not a ``BookingStatus``; nil for any other body (readable, or
    /// unreadable for another reason).
    public static func probe(_ body: [UInt8]) -> (bookingId: String, status: String)? {
        guard let event = try? ContractJSON.decode(Probe.self, from: body),
              BookingStatus(rawValue: event.booking.status) == nil else { return nil }
        return (event.booking.id, event.booking.status)
    }

    /// `body` without its `previous` when that snapshot's `status` is one
    /// this build does not know (the booking itself has a known one):
    /// after a newer handler's status, the booking's next event carries
    /// it as the state before. The rest of the event is still good; the
    /// snapshot is left out as for an event before v1.1. Nil when that is
    /// not the case.
    public static func withoutUnknownPrevious(_ body: [UInt8]) -> [UInt8]? {
        guard var event = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
              let previous = event["previous"] as? [String: Any], let status = previous["status"] as? String,
              BookingStatus(rawValue: status) == nil else { return nil }
        event["previous"] = nil
        return (try? JSONSerialization.data(withJSONObject: event)).map { [UInt8]($0) }
    }

    private struct Probe: Decodable {
        struct Slot: Decodable {
            let id: String
            let status: String
        }
        let booking: Slot
    }

    /// Logs each unknown status once per process, at warning: the first
    /// event that carries it says the handler is newer than this service;
    /// later ones are only counted by the caller, so the log is not
    /// flooded. At most 32 distinct values are logged.
    public static func note(_ status: String, bookingId: String, logger: Logger) {
        let first = seen.withLock { seen -> Bool in
            guard seen.count < 32, !seen.contains(status) else { return false }
            seen.insert(status)
            return true
        }
        guard first else { return }
        logger.warning("booking event with a status this version does not know; ignored, the booking's last known state is kept",
                       metadata: ["booking.status": .string(String(status.prefix(64))),
                                  "booking.id": .string(String(bookingId.prefix(100)))])
    }

    private static let seen = Mutex<Set<String>>([])
}
