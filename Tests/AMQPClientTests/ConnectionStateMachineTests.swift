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
        m.connectSucceeded()
        #expect(m.state == .connected)
        #expect(m.hasConnected)
    }

    @Test func startupRetryThenSuccess() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 30)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: second))
        #expect(m.reconnectDue(now: second) == true)
        m.connectSucceeded()
        #expect(m.state == .connected)
        #expect(m.hasConnected)
    }

    @Test func connectionLostWaitsWithBackoff() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        m.connectSucceeded()
        let lostAt: UInt64 = 3_600 * second
        let until: UInt64? = m.connectionLost(now: lostAt, random: 0.9)
        #expect(until == lostAt + 1 * second)
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
        low.connectSucceeded()
        high.connectSucceeded()
        #expect(low.connectionLost(now: 10 * second, random: 0) == 11 * second)
        #expect(high.connectionLost(now: 10 * second, random: 1) == 12 * second)
    }

    @Test(arguments: [AMQPError.Code.connectionFailed, .accessRefused, .vhostNotAllowed, .invalidURL, .protocolError, .channelClosed, .timeout])
    func afterHavingConnectedFailuresAlwaysRetry(_ code: AMQPError.Code) {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        m.connectSucceeded()
        var now: UInt64 = 1_000_000 * second  // far beyond any start-up timeout
        let until: UInt64? = m.connectionLost(now: now, random: 0)
        #expect(until == now + second)
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
        m.connectSucceeded()
        var now: UInt64 = 100 * second
        #expect(m.connectionLost(now: now, random: 0) == now + second)
        #expect(m.reconnectDue(now: now + second) == true)
        now += 2 * second
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now + 2 * second))
        #expect(m.reconnectDue(now: now + 2 * second) == true)
        m.connectSucceeded()
        #expect(m.state == .connected)
        // A later loss starts from the initial delay again.
        now += 60 * second
        #expect(m.connectionLost(now: now, random: 0) == now + second)
        #expect(m.state == .waitingToReconnect(attempt: 1, until: now + second))
    }

    @Test func connectionLostOutsideConnectedIsIgnored() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 30)
        #expect(m.connectionLost(now: 1, random: 0) == nil)
        #expect(m.state == .connecting(attempt: 0))

        #expect(m.connectFailed(failed(.connectionFailed), now: 1, random: 0) == .retry(at: 1 + second))
        #expect(m.connectionLost(now: 2, random: 0) == nil)
        #expect(m.state == .waitingToReconnect(attempt: 1, until: 1 + second))

        m.closeRequested()
        #expect(m.connectionLost(now: 3, random: 0) == nil)
        #expect(m.state == .closing)
    }

    @Test func reconnectDueOnlyWhileWaiting() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .connecting(attempt: 0))
        m.connectSucceeded()
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .connected)
    }

    // MARK: Closing

    @Test func closeFromConnected() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        m.connectSucceeded()
        m.closeRequested()
        #expect(m.state == .closing)
        m.closeRequested()
        #expect(m.state == .closing)
        m.closed()
        #expect(m.state == .closed)
        // closeRequested never reopens a closed machine.
        m.closeRequested()
        #expect(m.state == .closed)
        #expect(m.connectionLost(now: 1, random: 0) == nil)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .closed)
    }

    @Test func closeWhileWaitingToReconnectCancelsTheReconnect() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 0)
        m.connectSucceeded()
        #expect(m.connectionLost(now: 10, random: 0) == 10 + second)
        m.closeRequested()
        #expect(m.state == .closing)
        #expect(m.reconnectDue(now: .max) == false)
        #expect(m.state == .closing)
        m.closed()
        #expect(m.state == .closed)
    }

    @Test func closeWhileConnecting() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 10)
        m.closeRequested()
        #expect(m.state == .closing)
        m.closed()
        #expect(m.state == .closed)
        #expect(!m.hasConnected)
    }

    @Test func closedDirectlyFromAnyState() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 10)
        m.closed()
        #expect(m.state == .closed)

        var n = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 10)
        n.connectSucceeded()
        n.closed()
        #expect(n.state == .closed)
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
        // Round 1: nodes 0 and 1 fail → the next at once; node 2 fails → 1 s.
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now))
        #expect(m.endpoint == 1)
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now))
        #expect(m.endpoint == 2)
        #expect(m.reconnectDue(now: now) == true)
        #expect(m.connectFailed(failed(.connectionFailed), now: now, random: 0) == .retry(at: now + second))
        #expect(m.endpoint == 0)
        // Round 2 ends with 2 s.
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
        m.connectSucceeded()
        #expect(m.endpoint == 0 && m.state == .connected)
    }

    @Test func aSuccessStaysOnItsNodeAndALossMovesOn() {
        var m = ConnectionStateMachine(backoff: exactBackoff, now: 0, initialConnectTimeoutSeconds: 60, endpointCount: 3)
        #expect(m.connectFailed(failed(.connectionFailed), now: 0, random: 0) == .retry(at: 0))
        #expect(m.reconnectDue(now: 0) == true)
        m.connectSucceeded()
        #expect(m.endpoint == 1)
        #expect(m.connectionLost(now: 100, random: 0) == 100 + second)
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
