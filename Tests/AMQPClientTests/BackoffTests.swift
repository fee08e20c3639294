import Testing
@testable import AMQPClient

private func approx(_ a: Double, _ b: Double, tolerance: Double = 1e-9) -> Bool {
    abs(a - b) <= tolerance * max(1, abs(b))
}

@Suite("Backoff")
struct BackoffTests {
    @Test func defaults() {
        let b = Backoff()
        #expect(b.initial == 0.1)
        #expect(b.maximum == 10)
        #expect(b.multiplier == 2)
        #expect(b.jitter == 0.2)
        #expect(b == Backoff(initial: 0.1, maximum: 10, multiplier: 2, jitter: 0.2))
        #expect(b != Backoff(initial: 0.1, maximum: 10, multiplier: 2, jitter: 0))
    }

    @Test func growsByMultiplierAndIsCapped() {
        let b = Backoff(initial: 0.5, maximum: 10, multiplier: 2, jitter: 0)
        let delays: [Double] = (0..<8).map { b.delay(attempt: $0, random: 0.7) }
        #expect(delays == [0.5, 1, 2, 4, 8, 10, 10, 10])
    }

    @Test func otherMultiplier() {
        let b = Backoff(initial: 1, maximum: 1000, multiplier: 3, jitter: 0)
        let delays: [Double] = (0..<8).map { b.delay(attempt: $0, random: 0) }
        #expect(delays == [1, 3, 9, 27, 81, 243, 729, 1000])
    }

    @Test func multiplierOneIsConstant() {
        let b = Backoff(initial: 2.5, maximum: 10, multiplier: 1, jitter: 0)
        for attempt in [0, 1, 5, 100] {
            #expect(b.delay(attempt: attempt, random: 0.5) == 2.5)
        }
    }

    @Test func defaultSchedule() {
        // 100 ms doubling to 10 s; random 1 gives the undiminished delay.
        let b = Backoff()
        let delays: [Double] = (0..<9).map { b.delay(attempt: $0, random: 1) }
        let expected: [Double] = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10, 10]
        for (d, e) in zip(delays, expected) {
            #expect(approx(d, e), "\(d) != \(e)")
        }
    }

    @Test func jitterBounds() {
        let b = Backoff(initial: 1, maximum: 100, multiplier: 2, jitter: 0.2)
        // attempt 3: 8 s before jitter.
        #expect(approx(b.delay(attempt: 3, random: 0), 6.4))
        #expect(approx(b.delay(attempt: 3, random: 0.5), 7.2))
        #expect(approx(b.delay(attempt: 3, random: 1), 8))
        // Every random in [0, 1) stays within [80 %, 100 %) of the capped delay.
        for i in 0..<100 {
            let r: Double = Double(i) / 100
            let d: Double = b.delay(attempt: 3, random: r)
            #expect(d >= 6.4 - 1e-9 && d < 8)
        }
    }

    @Test func jitterAppliesToTheCappedDelay() {
        let b = Backoff(initial: 1, maximum: 10, multiplier: 2, jitter: 0.5)
        #expect(approx(b.delay(attempt: 20, random: 0), 5))
        #expect(approx(b.delay(attempt: 20, random: 1), 10))
    }

    @Test func fullJitterAndNoJitter() {
        let full = Backoff(initial: 4, maximum: 100, multiplier: 2, jitter: 1)
        #expect(full.delay(attempt: 0, random: 0) == 0)
        #expect(full.delay(attempt: 0, random: 0.25) == 1)
        #expect(full.delay(attempt: 0, random: 1) == 4)
        let none = Backoff(initial: 4, maximum: 100, multiplier: 2, jitter: 0)
        #expect(none.delay(attempt: 1, random: 0) == 8)
        #expect(none.delay(attempt: 1, random: 0.999) == 8)
    }

    @Test(arguments: [61, 64, 1_000, 1 << 40, Int.max])
    func veryLargeAttemptsDoNotOverflow(_ attempt: Int) {
        let b = Backoff(initial: 0.1, maximum: 30, multiplier: 2, jitter: 0.2)
        let low: Double = b.delay(attempt: attempt, random: 0)
        let high: Double = b.delay(attempt: attempt, random: 1)
        #expect(low.isFinite && high.isFinite)
        #expect(approx(low, 24))
        #expect(approx(high, 30))
    }

    @Test func hugeMultiplierStillCapped() {
        let b = Backoff(initial: 1, maximum: 7, multiplier: 1e300, jitter: 0)
        #expect(b.delay(attempt: 0, random: 0) == 1)
        #expect(b.delay(attempt: 1, random: 0) == 7)
        #expect(b.delay(attempt: Int.max, random: 0) == 7)
    }

    @Test func nonDecreasingForFixedRandom() {
        let b = Backoff()
        var previous: Double = 0
        for attempt in 0..<200 {
            let d: Double = b.delay(attempt: attempt, random: 0.37)
            #expect(d >= previous)
            #expect(d <= b.maximum)
            previous = d
        }
    }

    @Test func randomDefaultStaysInBounds() {
        let b = Backoff(initial: 1, maximum: 10, multiplier: 2, jitter: 0.2)
        for _ in 0..<1_000 {
            let d: Double = b.delay(attempt: 2)
            #expect(d >= 3.2 - 1e-9 && d <= 4)
        }
    }

    @Test func configurationDefaults() {
        let c = AMQPConfiguration()
        #expect(c.url == AMQPURL.default)
        #expect(c.connectionName == "room-booking")
        #expect(c.heartbeatSeconds == 10)
        #expect(c.connectTimeoutSeconds == 10)
        #expect(c.rpcTimeoutSeconds == 30)
        #expect(c.reconnect == Backoff())
        #expect(c.initialConnectTimeoutSeconds == 0)
        #expect(c.tlsCACertificatePath == nil)
        #expect(c.tlsVerifyPeer)
    }
}
