/// The life of one logical connection across reconnects, as a value type
/// whose transitions return the action the I/O loop must take.
///
/// States: `connecting` (attempt n) → `connected` → (loss) →
/// `waitingToReconnect` → `connecting` … and `closing` → `closed` from
/// anywhere. Time is passed in (monotonic nanoseconds) so tests need no clock.
///
/// With several endpoints (the nodes of a cluster) each failed attempt moves
/// to the next one at once; the back-off delay applies only after a whole
/// round has failed, and start-up gives up only at the end of a round. At
/// start-up a refusal (bad credentials, no such vhost) fails at once with
/// one endpoint; with several it does only when every node of a round
/// refused — one node may be refusing while it boots or leaves the cluster,
/// and the next may let us in. A lost
/// connection moves to the next endpoint too: the node it was on is the one
/// most likely to be down.
struct ConnectionStateMachine {
    enum State: Equatable {
        case connecting(attempt: Int)
        case connected
        case waitingToReconnect(attempt: Int, until: UInt64)
        case closing
        case closed
    }

    enum ConnectFailureAction: Equatable {
        /// The first connection cannot be made: report to the caller of `connect`.
        case failStartup
        /// Try again at the given monotonic time.
        case retry(at: UInt64)
    }

    private(set) var state: State = .connecting(attempt: 0)
    /// Whether a connection was ever established (start-up is over).
    private(set) var hasConnected = false
    private let backoff: Backoff
    private let startedAt: UInt64
    private let initialConnectTimeoutNanos: UInt64
    /// How many endpoints there are to try (at least 1).
    let endpointCount: Int
    /// Index of the endpoint the next (or current) connection uses.
    private(set) var endpoint = 0
    /// Failed attempts since the last success or the end of the last round.
    private var failedThisRound = 0
    /// Of those, refusals (errors waiting will not fix on that node).
    private var refusedThisRound = 0

    init(backoff: Backoff, now: UInt64, initialConnectTimeoutSeconds: Double, endpointCount: Int = 1) {
        self.backoff = backoff
        self.endpointCount = max(1, endpointCount)
        self.startedAt = now
        // Clamped: infinity (wait forever) or huge values must not trap.
        let nanos = max(0, initialConnectTimeoutSeconds) * 1e9
        self.initialConnectTimeoutNanos = nanos >= Double(UInt64.max / 2) ? UInt64.max / 2 : UInt64(nanos)
    }

    mutating func connectSucceeded() {
        state = .connected
        hasConnected = true
        failedThisRound = 0
        refusedThisRound = 0
    }

    /// A connect attempt failed with `error`.
    mutating func connectFailed(_ error: AMQPError, now: UInt64, random: Double = .random(in: 0..<1)) -> ConnectFailureAction {
        guard case .connecting(let attempt) = state else { return .failStartup }
        // At start-up only broker unavailability is worth waiting for;
        // wrong credentials or URL will not fix themselves.
        let waitable = error.code == .connectionFailed || error.code == .connectionLost
        failedThisRound += 1
        if !waitable { refusedThisRound += 1 }
        let roundOver = failedThisRound >= endpointCount
        let everyNodeRefused = roundOver && refusedThisRound >= endpointCount
        if roundOver {
            failedThisRound = 0
            refusedThisRound = 0
        }
        endpoint = (endpoint + 1) % endpointCount
        if !hasConnected && (everyNodeRefused || (roundOver && now &- startedAt >= initialConnectTimeoutNanos)) {
            state = .closed
            return .failStartup
        }
        guard roundOver else {
            // Another node may be up: try it now.
            state = .waitingToReconnect(attempt: attempt + 1, until: now)
            return .retry(at: now)
        }
        let until = now + UInt64(backoff.delay(attempt: attempt / endpointCount, random: random) * 1e9)
        state = .waitingToReconnect(attempt: attempt + 1, until: until)
        return .retry(at: until)
    }

    /// An established connection dropped; returns when to reconnect.
    mutating func connectionLost(now: UInt64, random: Double = .random(in: 0..<1)) -> UInt64? {
        guard state == .connected else { return nil }
        endpoint = (endpoint + 1) % endpointCount
        failedThisRound = 0
        refusedThisRound = 0
        let until = now + UInt64(backoff.delay(attempt: 0, random: random) * 1e9)
        state = .waitingToReconnect(attempt: 1, until: until)
        return until
    }

    /// Called while waiting: time to try again?
    mutating func reconnectDue(now: UInt64) -> Bool {
        guard case .waitingToReconnect(let attempt, let until) = state, now >= until else { return false }
        state = .connecting(attempt: attempt)
        return true
    }

    mutating func closeRequested() {
        if state != .closed { state = .closing }
    }

    mutating func closed() {
        state = .closed
    }
}
