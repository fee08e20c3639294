/// The life of one logical connection across reconnects, as a value type
/// whose transitions return the action the I/O loop must take.
///
/// States: `connecting` (attempt n) → `connected` → (loss) →
/// `waitingToReconnect` → `connecting` … and, once the application asks to
/// close, `draining` (only from `connected`: outstanding publisher confirms
/// get a few seconds to arrive) → `closing` → `closed`, or straight to
/// `closing` from anywhere else. Time is passed in (monotonic nanoseconds)
/// so tests need no clock.
///
/// Every transition returns what the loop must do about it, and none is
/// `@discardableResult`: a loop that ignores one gets a compiler warning.
/// The machine also decides the fate of `connect`'s caller (start-up):
/// answered exactly once, by the first success, by a failure that ends
/// start-up, or by a close before either.
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
        /// Close was requested while connected: the connection is still
        /// serviced (confirms may arrive) until none is outstanding or
        /// `deadline` passes.
        case draining(deadline: UInt64)
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

    /// What to do once a connection is established.
    enum ConnectSuccessAction: Equatable {
        /// The first connection: answer the caller of `connect`.
        case completeStartup
        /// A reconnect: count and log it (topology and consumers were restored).
        case announceReconnect
    }

    /// What to do when an established connection drops.
    enum ConnectionLostAction: Equatable {
        /// Fail what depended on it and reconnect at the given monotonic time.
        case reconnect(at: UInt64)
        /// It dropped while draining for a close: fail what depended on it
        /// and finish closing; there is nothing to reconnect for.
        case finishClosing
        /// It dropped and this connection does not reconnect
        /// (`reconnectsAfterLoss` false): fail what depended on it and close.
        case closeForGood
        /// Not connected (already handled): nothing to do.
        case ignore
    }

    /// What to do when the application asks to close.
    enum CloseAction: Equatable {
        /// Keep servicing the connection, so outstanding confirms can still
        /// arrive, until none is outstanding or the deadline passes.
        case drain(deadline: UInt64)
        /// Nothing to wait for: close now.
        case closeNow
        /// A close is already under way (or done): nothing new to do.
        case alreadyClosing
    }

    /// What to do, while draining, after servicing the connection once.
    enum DrainAction: Equatable {
        /// Keep servicing (not draining, or confirms still outstanding).
        case keepServicing
        /// Draining is over: close now.
        case closeNow
    }

    /// What to do once the connection is closed for good.
    struct ClosedAction: Equatable {
        /// The caller of `connect` was never answered: fail it.
        var failStartup: Bool
        /// First time closed: log it once.
        var announceClosed: Bool
    }

    /// How long a close waits at most for outstanding confirms.
    static let drainNanos: UInt64 = 5_000_000_000

    private(set) var state: State = .connecting(attempt: 0)
    /// Whether a connection was ever established (start-up is over).
    private(set) var hasConnected = false
    /// Whether the caller of `connect` has been (or is being) answered.
    private(set) var startupAnswered = false
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

    /// Whether a lost connection is made again (``AMQPConfiguration/reconnectsAfterLoss``).
    let reconnectsAfterLoss: Bool

    init(backoff: Backoff, now: UInt64, initialConnectTimeoutSeconds: Double, endpointCount: Int = 1,
         reconnectsAfterLoss: Bool = true) {
        self.backoff = backoff
        self.reconnectsAfterLoss = reconnectsAfterLoss
        self.endpointCount = max(1, endpointCount)
        self.startedAt = now
        // Clamped: infinity (wait forever) or huge values must not trap.
        let nanos = max(0, initialConnectTimeoutSeconds) * 1e9
        self.initialConnectTimeoutNanos = nanos >= Double(UInt64.max / 2) ? UInt64.max / 2 : UInt64(nanos)
    }

    /// Whether the connection is up and serviced (connected or draining):
    /// commands run and frames are read.
    var isServicing: Bool {
        switch state {
        case .connected, .draining: true
        default: false
        }
    }

    /// Whether a close is waiting for outstanding confirms.
    var isDraining: Bool {
        if case .draining = state { return true }
        return false
    }

    /// A connect attempt succeeded (channels set up, topology restored).
    mutating func connectSucceeded() -> ConnectSuccessAction {
        let first = !hasConnected
        state = .connected
        hasConnected = true
        failedThisRound = 0
        refusedThisRound = 0
        if first && !startupAnswered {
            startupAnswered = true
            return .completeStartup
        }
        return .announceReconnect
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
            startupAnswered = true
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

    /// An established connection dropped.
    mutating func connectionLost(now: UInt64, random: Double = .random(in: 0..<1)) -> ConnectionLostAction {
        if case .draining = state {
            state = .closing
            return .finishClosing
        }
        guard state == .connected else { return .ignore }
        guard reconnectsAfterLoss else {
            state = .closing
            return .closeForGood
        }
        endpoint = (endpoint + 1) % endpointCount
        failedThisRound = 0
        refusedThisRound = 0
        let until = now + UInt64(backoff.delay(attempt: 0, random: random) * 1e9)
        state = .waitingToReconnect(attempt: 1, until: until)
        return .reconnect(at: until)
    }

    /// Called while waiting: time to try again?
    mutating func reconnectDue(now: UInt64) -> Bool {
        guard case .waitingToReconnect(let attempt, let until) = state, now >= until else { return false }
        state = .connecting(attempt: attempt)
        return true
    }

    /// The application asked to close (at monotonic time `now`).
    mutating func closeRequested(now: UInt64) -> CloseAction {
        switch state {
        case .connected:
            let deadline = now &+ Self.drainNanos
            state = .draining(deadline: deadline)
            return .drain(deadline: deadline)
        case .connecting, .waitingToReconnect:
            state = .closing
            return .closeNow
        case .draining, .closing, .closed:
            return .alreadyClosing
        }
    }

    /// Called after each round of servicing the connection: while draining,
    /// is it time to close?
    mutating func drainCheck(now: UInt64, confirmsOutstanding: Bool) -> DrainAction {
        guard case .draining(let deadline) = state else { return .keepServicing }
        guard !confirmsOutstanding || now >= deadline else { return .keepServicing }
        state = .closing
        return .closeNow
    }

    /// The connection is closed for good (from any state).
    mutating func closed() -> ClosedAction {
        let action = ClosedAction(failStartup: !startupAnswered, announceClosed: state != .closed)
        startupAnswered = true
        state = .closed
        return action
    }
}
