import Testing
@testable import AMQPClient

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

private let second: UInt64 = 1_000_000_000

/// No jitter: delays are exactly 1 s, 2 s, 4 s, 8 s, 8 s, ...
private let exactBackoff = Backoff(initial: 1, maximum: 8, multiplier: 2, jitter: 0)

private func failed(_ code: AMQPError.Code) -> AMQPError {
    AMQPError(code, "test failure")
}

@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    typealias State = ConnectionStateMachine.State

    @Test func startsConnectingAttemptZero() {
        let m = ConnectionStateMachine(backoff: exactBackoff, now: 5 * second, initialConnectTimeoutSeconds: 30)
        #expect(m.state == .connecting(attempt: 0))
        #expect(!m.hasConnected)
    }

    // MARK: Start-up

    @Test(arguments: [AMQPError.Code.accessRefused, .vhostNotAllowed, .invalidURL, .protocolError, .channelClosed, .timeout, .closed])
    func startupFailsAtOnceOnNonWaitableErrors(_ code: AMQPError.Code) {
        let start: UInt64 = 100 * second
        var m = ConnectionStateMachine(backoff: exactBackoff, now: start, initialConnectTimeoutSeconds: 60)
        let action: ConnectionStateMachine.ConnectFailureAction = m.connectFailed(failed(code), now: start + 1, random: 0.5)
        #expect(action == .failStartup)
        #expect(m.state == .closed)
        #expect(!m.hasConnected)
    }

    @Test(arguments: [AMQPError.Code.connectionFailed, .connectionLost])
    func startupRetriesWithIncreasingDelaysUntilTheTimeout(_ code: AMQPError.Code) {
        let start: UInt64 = 1_000 * second
        var m = ConnectionStateMachine(backoff: exactBackoff, now: start, initialConnectTimeoutSeconds: 10)

        // Attempt 0 fails at t+0: retry after 1 s.
        var now: UInt64 = start
        #expect(m.connectFailed(failed(code), now: now, random: 0.3) == .retry(at: now + 1 * second))
        #expect(m.state == .waitingToReconnect(attempt: 1, until: now + 1 * second))
        #expect(m.reconnectDue(now: now + 1 * second - 1) == false)
        #expect(m.state == .waitingToReconnect(attempt: 1, until: now + 1 * second))
        #expect(m.reconnectDue(now: now + 1 * second) == true)
        #expect(m.state == .connecting(attempt: 1))

        // Attempt 1 fails at t+1.5 s: retry after 2 s.
        now = start + 1_500_000_000
        #expect(m.connectFailed(failed(code), now: now, random: 0.3) == .retry(at: now + 2 * second))
        #expect(m.state == .waitingToReconnect(attempt: 2, until: now + 2 * second))
        #expect(m.reconnectDue(now: now + 5 * second) == true)  // late is fine
        #expect(m.state == .connecting(attempt: 2))

        // Attempt 2 fails at t+6 s: retry after 4 s.
        now = start + 6 * second
        #expect(m.connectFailed(failed(code), now: now, random: 0.3) == .retry(at: now + 4 * second))
        #expect(m.reconnectDue(now: now + 4 * second) == true)
        #expect(m.state == .connecting(attempt: 3))

        // Just before the deadline: still retrying (8 s).
        now = start + 10 * second - 1
        #expect(m.connectFailed(failed(code), now: now, random: 0.3) == .retry(at: now + 8 * second))
        #expect(m.reconnectDue(now: now + 8 * second) == true)
        #expect(m.state == .connecting(attempt: 4))

        // At the deadline: give up.
        now = start + 10 * second
        #expect(m.connectFailed(failed(code), now: now, random: 0.3) == .failStartup)
        #expect(m.state == .closed)
        #expect(!m.hasConnected)
    }

    @Test func startupBeyondTheTimeoutFailsEvenOnTheFirstAttempt() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 2)
        #expect(m.connectFailed(failed(.connectionFailed), now: 3 * second, random: 0) == .failStartup)
        #expect(m.state == .closed)
    }

    @Test(arguments: [0.0, -5.0])
    func zeroOrNegativeInitialTimeoutFailsOnFirstRefusal(_ timeout: Double) {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 7 * second, initialConnectTimeoutSeconds: timeout)
        #expect(m.connectFailed(failed(.connectionFailed), now: 7 * second, random: 0) == .failStartup)
        #expect(m.state == .closed)
    }

    @Test func fractionalInitialTimeout() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0.25)
        #expect(m.connectFailed(failed(.connectionFailed), now: 249_999_999, random: 0) == .retry(at: 249_999_999 + second))
        #expect(m.reconnectDue(now: 249_999_999 + second) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: 250_000_000, random: 0) == .failStartup)
    }

    @Test func startupRetryUsesJitter() {
        let jittery = Backoff(initial: 1, maximum: 8, multiplier: 2, jitter: 0.5)
        var low = ConnectionStateMachine(backoff: jittery, now: 0, initialConnectTimeoutSeconds: 60)
        var high = ConnectionStateMachine(backoff: jittery, now: 0, initialConnectTimeoutSeconds: 60)
        #expect(low.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 500_000_000))
        #expect(high.connectFailed(failed(.connectionFailed), now: 0, random: 1) == .retry(at: 1 * second))
    }

    // MARK: After a successful connect

    @Test func connectSucceededMarksStartupOver() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.state == .connected)
        #expect(m.hasConnected)
    }

    @Test func startupRetryThenSuccess() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 30)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: second))
        #expect(m.reconnectDue(now: second) == true)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.state == .connected)
        #expect(m.hasConnected)
    }

    @Test func connectionLostWaitsWithBackoff() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        let lostAt: UInt64 = 3_600 * second
        let action: ConnectionStateMachine.ConnectionLostAction = m.connectionLost(now: lostAt, random: 0.9)
        #expect(action == .reconnect(at: lostAt + 1 * second))
        #expect(m.state == .waitingToReconnect(attempt: 1, until: lostAt + 1 * second))
        #expect(m.hasConnected)

        #expect(m.reconnectDue(now: lostAt) == false)
        #expect(m.reconnectDue(now: lostAt + second - 1) == false)
        #expect(m.state == .waitingToReconnect(attempt: 1, until: lostAt + 1 * second))
        #expect(m.reconnectDue(now: lostAt + second) == true)
        #expect(m.state == .connecting(attempt: 1))
        // Only once.
        #expect(m.reconnectDue(now: lostAt + 2 * second) == false)
        #expect(m.state == .connecting(attempt: 1))
    }

    @Test func connectionLostUsesJitter() {
        let jittery = Backoff(initial: 2, maximum: 8, multiplier: 2, jitter: 0.5)
        var low = ConnectionStateMachine(backoff: jittery, now: 0, initialConnectTimeoutSeconds: 0)
        var high = ConnectionStateMachine(backoff: jittery, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(low.connectSucceeded() == .completeStartup)
        #expect(high.connectSucceeded() == .completeStartup)
        #expect(low.connectionLost(now: 10 * second, random: 0) == .reconnect(at: 11 * second))
        #expect(high.connectionLost(now: 10 * second, random: 1) == .reconnect(at: 12 * second))
    }

    @Test(arguments: [AMQPError.Code.connectionFailed, .accessRefused, .vhostNotAllowed, .invalidURL, .protocolError, .channelClosed, .timeout])
    func afterHavingConnectedFailuresAlwaysRetry(_ code: AMQPError.Code) {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        var now: UInt64 = 1_000_000 * second  // far beyond any start-up timeout
        let action: ConnectionStateMachine.ConnectionLostAction = m.connectionLost(now: now, random: 0)
        #expect(action == .reconnect(at: now + second))
        #expect(m.reconnectDue(now: now + second) == true)

        // Attempts 1, 2, 3, 4, 5 fail: 2 s, 4 s, 8 s, then capped at 8 s.
        let expectedDelays: [UInt64] = [2, 4, 8, 8, 8]
        for (i, delay) in expectedDelays.enumerated() {
            now += 10 * second
            #expect(m.state == .connecting(attempt: i + 1))
            let action: ConnectionStateMachine.ConnectFailureAction = m.connectFailed(failed(code), now: now, random: 0)
            #expect(action == .retry(at: now + delay * second))
            #expect(m.state == .waitingToReconnect(attempt: i + 2, until: now + delay * second))
            #expect(m.reconnectDue(now: now + delay * second) == true)
        }
        #expect(m.hasConnected)
    }

    @Test func reconnectResetsTheBackoff() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        var now: UInt64 = 100 * second
        #expect(m.connectionLost(now: now, random: 0) == .reconnect(at: now + second))
        #expect(m.reconnectDue(now: now + second) == true)
        now += 2 * second
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now + 2 * second))
        #expect(m.reconnectDue(now: now + 2 * second) == true)
        #expect(m.connectSucceeded() == .announceReconnect)
        #expect(m.state == .connected)
        // A later loss starts from the initial delay again.
        now += 60 * second
        #expect(m.connectionLost(now: now, random: 0) == .reconnect(at: now + second))
        #expect(m.state == .waitingToReconnect(attempt: 1, until: now + second))
    }

    @Test func connectionLostOutsideConnectedIsIgnored() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 30)
        #expect(m.connectionLost(now: 1, random: 0) == .ignore)
        #expect(m.state == .connecting(attempt: 0))

        #expect(m.connectFailed(failed(.connectionFailed), now: 1, random: 0) == .retry(at: 1 + second))
        #expect(m.connectionLost(now: 2, random: 0) == .ignore)
        #expect(m.state == .waitingToReconnect(attempt: 1, until: 1 + second))

        #expect(m.closeRequested(now: 3) == .closeNow)
        #expect(m.connectionLost(now: 3, random: 0) == .ignore)
        #expect(m.state == .closing)
    }

    @Test func reconnectDueOnlyWhileWaiting() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .connecting(attempt: 0))
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .connected)
    }

    // MARK: Closing

    @Test func closeFromConnectedDrainsFirst() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        let deadline = 10 + ConnectionStateMachine.drainNanos
        #expect(m.closeRequested(now: 10) == .drain(deadline: deadline))
        #expect(m.state == .draining(deadline: deadline))
        #expect(m.isServicing && m.isDraining)
        // A second request keeps the first deadline.
        #expect(m.closeRequested(now: 20) == .alreadyClosing)
        #expect(m.state == .draining(deadline: deadline))
        #expect(m.drainCheck(now: 30, confirmsOutstanding: false) == .closeNow)
        #expect(m.state == .closing)
        #expect(!m.isServicing && !m.isDraining)
        #expect(m.closeRequested(now: 40) == .alreadyClosing)
        #expect(m.state == .closing)
        #expect(m.closed() == .init(failStartup: false, announceClosed: true))
        #expect(m.state == .closed)
        // closeRequested never reopens a closed machine.
        #expect(m.closeRequested(now: 50) == .alreadyClosing)
        #expect(m.state == .closed)
        #expect(m.connectionLost(now: 1, random: 0) == .ignore)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .closed)
        // Closed twice (the loop finishes a close from .closing and .closed): said once.
        #expect(m.closed() == .init(failStartup: false, announceClosed: false))
    }

    @Test func closeWhileWaitingToReconnectCancelsTheReconnect() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.connectionLost(now: 10, random: 0) == .reconnect(at: 10 + second))
        #expect(m.closeRequested(now: 11) == .closeNow)
        #expect(m.state == .closing)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .closing)
        #expect(m.closed() == .init(failStartup: false, announceClosed: true))
        #expect(m.state == .closed)
    }

    @Test func closeWhileConnectingFailsStartup() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 10)
        #expect(m.closeRequested(now: 1) == .closeNow)
        #expect(m.state == .closing)
        #expect(m.closed() == .init(failStartup: true, announceClosed: true))
        #expect(m.state == .closed)
        #expect(!m.hasConnected)
        // Start-up is answered once.
        #expect(m.closed() == .init(failStartup: false, announceClosed: false))
    }

    @Test func closedDirectlyFromAnyState() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 10)
        #expect(m.closed() == .init(failStartup: true, announceClosed: true))
        #expect(m.state == .closed)

        var n = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 10)
        #expect(n.connectSucceeded() == .completeStartup)
        #expect(n.closed() == .init(failStartup: false, announceClosed: true))
        #expect(n.state == .closed)
    }
}

/// The actions that used to be flags beside the machine in the I/O loop
/// (`closeRequested`, `closeDeadline`, whether `connect` was answered).
@Suite("ConnectionStateMachine drain and start-up actions")
struct ConnectionStateMachineActionTests {
    @Test func drainWaitsForConfirmsUntilTheDeadline() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        let deadline = 100 + ConnectionStateMachine.drainNanos
        #expect(m.closeRequested(now: 100) == .drain(deadline: deadline))
        #expect(m.drainCheck(now: 101, confirmsOutstanding: true) == .keepServicing)
        #expect(m.drainCheck(now: deadline - 1, confirmsOutstanding: true) == .keepServicing)
        #expect(m.state == .draining(deadline: deadline))
        #expect(m.drainCheck(now: deadline, confirmsOutstanding: true) == .closeNow)
        #expect(m.state == .closing)
        // Once closing, nothing more to drain.
        #expect(m.drainCheck(now: deadline, confirmsOutstanding: false) == .keepServicing)
        #expect(m.state == .closing)
    }

    @Test func drainCheckOutsideDrainingChangesNothing() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.drainCheck(now: .max, confirmsOutstanding: false) == .keepServicing)
        #expect(m.state == .connecting(attempt: 0))
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.drainCheck(now: .max, confirmsOutstanding: false) == .keepServicing)
        #expect(m.state == .connected)
    }

    @Test func connectionLostWhileDrainingFinishesTheCloseInsteadOfReconnecting() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.closeRequested(now: 5) == .drain(deadline: 5 + ConnectionStateMachine.drainNanos))
        #expect(m.connectionLost(now: 6, random: 0) == .finishClosing)
        #expect(m.state == .closing)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.closed() == .init(failStartup: false, announceClosed: true))
    }

    @Test func aConnectionThatDoesNotReconnectClosesAtTheLoss() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 30, endpointCount: 2,
                                       reconnectsAfterLoss: false)
        // The first connect still waits and moves between nodes as usual.
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.connectionLost(now: 10, random: 0) == .closeForGood)
        #expect(m.state == .closing)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.closed() == .init(failStartup: false, announceClosed: true))
    }

    @Test func startupFailureIsAnsweredOnce() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectFailed(failed(.accessRefused), now: 0, random: 0) == .failStartup)
        #expect(m.state == .closed)
        // The loop then finishes the close: start-up was already failed, and
        // there was never a connection to announce closing.
        #expect(m.closed() == .init(failStartup: false, announceClosed: false))
    }

    @Test func closeDuringStartupRetriesFailsStartup() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 60)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: second))
        #expect(m.closeRequested(now: 1) == .closeNow)
        #expect(m.closed() == .init(failStartup: true, announceClosed: true))
    }

    @Test func onlyTheFirstSuccessCompletesStartup() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.connectSucceeded() == .completeStartup)
        for round in 1...3 {
            let now = UInt64(round) * 100 * second
            #expect(m.connectionLost(now: now, random: 0) == .reconnect(at: now + second))
            #expect(m.reconnectDue(now: now + second) == true)
            #expect(m.connectSucceeded() == .announceReconnect)
        }
        #expect(m.closed() == .init(failStartup: false, announceClosed: true))
    }

    @Test func servicingStates() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(!m.isServicing)  // connecting
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.isServicing && !m.isDraining)  // connected
        #expect(m.connectionLost(now: 0, random: 0) == .reconnect(at: second))
        #expect(!m.isServicing)  // waiting to reconnect
    }
}

/// `initialConnectTimeoutSeconds` is a `Double` of seconds; `.infinity` is the
/// natural way to say "wait for the broker forever" at start-up. The state
/// machine once converted it with a plain `UInt64(max(0, seconds) * 1e9)`,
/// which traps for infinity (and anything above ~1.8e10 s), crashing the
/// process inside `AMQPConnection.connect`. Regression test; runs in a child
/// process (exit test) so a trap cannot take the test runner down.
@Suite("ConnectionStateMachine limits")
struct ConnectionStateMachineLimitTests {
    @Test func infiniteInitialConnectTimeoutDoesNotCrash() async {
        await #expect(processExitsWith: .success) {
            var m = ConnectionStateMachine(
                backoff: Backoff(initial: 1, maximum: 8, multiplier: 2, jitter: 0), now: 0,
                initialConnectTimeoutSeconds: Double.infinity)
            let action: ConnectionStateMachine.ConnectFailureAction = m.connectFailed(
                AMQPError(.connectionFailed, "refused"), now: 3_600_000_000_000, random: 0)
            // Waiting forever: a refusal an hour in is still retried.
            if action != .retry(at: 3_601_000_000_000) { exit(1) }
        }
    }
}

/// Several endpoints (the nodes of a cluster): the next one is tried at once,
/// back-off only after a whole round failed, start-up gives up only at the end
/// of a round, a dropped connection moves on.
@Suite("ConnectionStateMachine with several endpoints")
struct ConnectionStateMachineEndpointTests {
    @Test func failuresWalkTheEndpointsAndBackOffPerRound() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 60, endpointCount: 3)
        #expect(m.endpoint == 0)
        var now: UInt64 = 10
        // First pass over the nodes: 0 and 1 fail → the next at once; node 2 fails → 1 s.
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now))
        #expect(m.endpoint == 1)
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now))
        #expect(m.endpoint == 2)
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now + second))
        #expect(m.endpoint == 0)
        // The second pass ends with 2 s.
        now += second
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now))
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now))
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now + 2 * second))
    }

    @Test func startupWithoutPatienceTriesEveryNodeOnce() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0, endpointCount: 3)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .failStartup)
        #expect(m.state == .closed)
    }

    /// Bad credentials fail start-up once every node refused them, without
    /// waiting out the timeout; one node refusing (booting, leaving the
    /// cluster) only moves on to the next.
    @Test func aRefusalMovesOnAndStartUpFailsWhenEveryNodeRefused() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 60, endpointCount: 3)
        #expect(m.connectFailed(failed(.accessRefused), now: 0, random: 0) == .retry(at: 0))
        #expect(m.endpoint == 1)
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectFailed(failed(.accessRefused), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectFailed(failed(.vhostNotAllowed), now: 0, random: 0) == .failStartup)
        #expect(m.state == .closed)
    }

    @Test func oneNodeRefusingWhileAnotherIsDownKeepsTrying() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 60, endpointCount: 3)
        #expect(m.connectFailed(failed(.accessRefused), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectFailed(failed(.accessRefused), now: 0, random: 0) == .retry(at: second))
        #expect(m.reconnectDue(now: second) == true)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.endpoint == 0 && m.state == .connected)
    }

    @Test func aSuccessStaysOnItsNodeAndALossMovesOn() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 60, endpointCount: 3)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        #expect(m.connectSucceeded() == .completeStartup)
        #expect(m.endpoint == 1)
        #expect(m.connectionLost(now: 100, random: 0) == .reconnect(at: 100 + second))
        #expect(m.endpoint == 2)
        #expect(m.reconnectDue(now: 100 + second) == true)
        // A fresh round after the loss: two immediate moves, then back-off.
        #expect(m.connectFailed(failed(.connectionFailed), now: 200, random: 0) == .retry(at: 200))
        #expect(m.endpoint == 0)
        #expect(m.reconnectDue(now: 200) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: 200, random: 0) == .retry(at: 200))
        #expect(m.reconnectDue(now: 200) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: 200, random: 0) != .retry(at: 200))
        #expect(m.endpoint == 2)
    }
}
