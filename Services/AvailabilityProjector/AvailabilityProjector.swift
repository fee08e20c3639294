/// The availability projector: a rebuildable read model of free slots per
/// room and day, queried over AMQP and HTTP, shown as time bars.
public enum AvailabilityProjector {}
