/// The pass sender: sends an access pass to every attendee of a confirmed or
/// rescheduled booking through a gateway, retrying per attendee.
public enum PassSender {}
