/// The consumers of one logical connection: what each asked for, its
/// handler, the channel it owns, and the consumer tag the broker gave it on
/// the current connection.
///
/// Consumers outlive connections (they are restarted after a reconnect),
/// consumer tags do not: ``connectionLost()`` forgets every tag. Each
/// consumer gets a channel of its own, numbered from `firstChannel` up, so
/// its prefetch and errors stay its own. Channels of stopped consumers
/// linger until the connection ends so deliveries already handed out can
/// still be settled on them; their numbers are not reused on that
/// connection. A pure value type, generic over the handler, unit-tested on
/// its own; the I/O loop owns one.
struct ConsumerRegistry<Handler> {
    /// One registered consumer.
    struct Consumer {
        var spec: ConsumerSpec
        var handler: Handler
        var channel: UInt16
        /// Set while `basic.consume` is in effect on the current connection.
        var tag: String?
    }

    /// The lowest channel number a consumer may get.
    let firstChannel: UInt16
    private var consumers: [Int: Consumer] = [:]
    private var idByTag: [String: Int] = [:]
    private var lingeringChannels: Set<UInt16> = []

    init(firstChannel: UInt16) {
        self.firstChannel = firstChannel
    }

    var count: Int { consumers.count }
    var isEmpty: Bool { consumers.isEmpty }
    /// Ids in registration order (ids are handed out increasingly), the
    /// order consumers are restarted in after a reconnect.
    var ids: [Int] { consumers.keys.sorted() }

    subscript(id: Int) -> Consumer? { consumers[id] }

    /// Registers a consumer (not yet started) on the lowest free channel.
    mutating func add(id: Int, spec: ConsumerSpec, handler: Handler) {
        let used = Set(consumers.values.map(\.channel)).union(lingeringChannels)
        var channel = firstChannel
        while used.contains(channel) { channel += 1 }
        consumers[id] = Consumer(spec: spec, handler: handler, channel: channel, tag: nil)
    }

    /// `basic.consume` for `id` succeeded with `tag`.
    mutating func started(id: Int, tag: String) {
        guard consumers[id] != nil else { return }
        consumers[id]?.tag = tag
        idByTag[tag] = id
    }

    /// Removes a consumer whose channel need not linger: it never started,
    /// or the connection is down (so its channel is gone anyway).
    mutating func remove(id: Int) -> Consumer? {
        guard let consumer = consumers.removeValue(forKey: id) else { return nil }
        if let tag = consumer.tag { idByTag[tag] = nil }
        return consumer
    }

    /// Removes a consumer the application stopped while connected. Its
    /// channel lingers (deliveries already handed out can still be settled)
    /// and its tag is forgotten, so a delivery that overtook the cancel is
    /// recognised as unclaimed.
    mutating func stop(id: Int) -> Consumer? {
        guard let consumer = consumers.removeValue(forKey: id) else { return nil }
        lingeringChannels.insert(consumer.channel)
        if let tag = consumer.tag { idByTag[tag] = nil }
        return consumer
    }

    /// The consumer a delivery with this tag is for, if it is still registered.
    func consumer(forTag tag: String) -> Consumer? {
        guard let id = idByTag[tag] else { return nil }
        return consumers[id]
    }

    /// The broker cancelled the consumer with `tag` (its queue was deleted):
    /// removes and returns it.
    mutating func brokerCancelled(tag: String) -> Consumer? {
        guard let id = idByTag.removeValue(forKey: tag) else { return nil }
        return consumers.removeValue(forKey: id)
    }

    /// The broker closed `channel`: returns the consumer that owned it (now
    /// without a tag, to be restarted), or `nil` if none did.
    mutating func channelClosed(_ channel: UInt16) -> Int? {
        guard let id = consumers.first(where: { $0.value.channel == channel })?.key else { return nil }
        if let tag = consumers[id]?.tag { idByTag[tag] = nil }
        consumers[id]?.tag = nil
        return id
    }

    /// The connection is gone: tags and lingering channels with it; the
    /// consumers stay, to be restarted on the next connection.
    mutating func connectionLost() {
        idByTag.removeAll()
        lingeringChannels.removeAll()
        for id in consumers.keys { consumers[id]?.tag = nil }
    }

    /// Removes and returns every consumer (the connection is closing for good).
    mutating func removeAll() -> [Consumer] {
        let all = ids.map { consumers[$0]! }
        consumers.removeAll()
        idByTag.removeAll()
        lingeringChannels.removeAll()
        return all
    }
}
