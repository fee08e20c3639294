import BookingContracts
import Foundation
import ServiceSettings
import Synchronization
import Testing
@testable import ServiceSupport

/// A clock the tests move by hand.
private final class ManualClock: Sendable {
    private let seconds = Mutex<Double>(0)
    var now: Double { seconds.withLock { $0 } }
    func advance(_ s: Double) { seconds.withLock { $0 += s } }
}

/// `CALLER_RATE` (contract v1.2): a token bucket per caller and instance.
@Suite("Caller rate limits")
struct CallerRateTests {
    @Test func aBurstIsAdmittedThenRefusedWithTheWaitUntilTheNextToken() {
        let clock = ManualClock()
        let limiter = CallerRateLimiter(rate: CallerRate(perSecond: 10, burst: 3), exempt: [], now: { clock.now })
        let alice = Caller.user("alice")
        for _ in 0..<3 { #expect(limiter.take(alice) == nil) }
        // Empty: the next token comes in 1/10 s.
        #expect(limiter.take(alice) == 100)
        clock.advance(0.05)
        #expect(limiter.take(alice) == 50)
        clock.advance(0.05)
        #expect(limiter.take(alice) == nil)
        #expect(limiter.take(alice) == 100)
    }

    @Test func aBucketRefillsOnlyUpToItsBurst() {
        let clock = ManualClock()
        let limiter = CallerRateLimiter(rate: CallerRate(perSecond: 100, burst: 2), exempt: [], now: { clock.now })
        let bob = Caller.user("bob")
        #expect(limiter.take(bob) == nil)
        clock.advance(3600)
        #expect(limiter.take(bob) == nil)
        #expect(limiter.take(bob) == nil)
        #expect(limiter.take(bob) != nil)
    }

    @Test func callersHaveBucketsOfTheirOwnAndAnonymousCallersShareOne() {
        let clock = ManualClock()
        let limiter = CallerRateLimiter(rate: CallerRate(perSecond: 1, burst: 1), exempt: [], now: { clock.now })
        #expect(limiter.take(.user("a")) == nil)
        #expect(limiter.take(.user("a")) != nil)
        #expect(limiter.take(.user("b")) == nil)
        #expect(limiter.take(.anonymous) == nil)
        // Another anonymous sender is the same caller.
        #expect(limiter.take(Caller(userID: "")) != nil)
        #expect(limiter.take(Caller(userID: nil)) != nil)
    }

    @Test func exemptCallersAndNoRateAreNeverLimited() {
        let clock = ManualClock()
        let limiter = CallerRateLimiter(rate: CallerRate(perSecond: 1, burst: 1), exempt: ["ops"], now: { clock.now })
        for _ in 0..<1000 { #expect(limiter.take(.user("ops")) == nil) }
        let off = CallerRateLimiter(rate: nil, exempt: [], now: { clock.now })
        for _ in 0..<1000 { #expect(off.take(.user("x")) == nil) }
    }

    @Test func manyCallersDoNotGrowTheTableWithoutBound() {
        let clock = ManualClock()
        // Buckets that never refill in the test's time: nothing is dropped as full.
        let limiter = CallerRateLimiter(rate: CallerRate(perSecond: 0.01, burst: 1), exempt: [], now: { clock.now })
        for i in 0..<(CallerRateLimiter.maxBuckets + 500) {
            _ = limiter.take(.user("u\(i)"))
            clock.advance(0.01)
        }
        #expect(limiter.bucketCount <= CallerRateLimiter.maxBuckets)
    }

    @Test func theSettingIsParsed() throws {
        #expect(try CallerRate.parse(nil) == .standard)
        #expect(CallerRate.standard == CallerRate(perSecond: 100, burst: 500))
        #expect(try CallerRate.parse("20,40") == CallerRate(perSecond: 20, burst: 40))
        #expect(try CallerRate.parse("20") == CallerRate(perSecond: 20, burst: 100))
        #expect(try CallerRate.parse("0.5, 3") == CallerRate(perSecond: 0.5, burst: 3))
        #expect(try CallerRate.parse("off") == nil)
        for bad in ["fast", "10,", "10,0", "-1", "10,5,2", "0"] {
            let error = #expect(throws: SettingsError.self) { try CallerRate.parse(bad) }
            #expect(error?.description.hasPrefix("CALLER_RATE") == true)
        }
    }
}

/// Events routed into a command or query queue (contract v1.2).
@Suite("Foreign routing")
struct ForeignRoutingTests {
    @Test func everyEventOfTheContractIsRecognisedByTypeOrElseRoutingKey() {
        for event in EventType.allCases {
            #expect(ForeignRouting.isEvent(typeProperty: event.rawValue, routingKey: "x"))
            #expect(ForeignRouting.isEvent(typeProperty: nil, routingKey: event.rawValue))
            #expect(ForeignRouting.isEvent(typeProperty: "", routingKey: event.rawValue))
        }
        for name in ["booking.replay.done", "availability.changed", "room.closed", "room.reopened", "booking.submitted"] {
            #expect(ForeignRouting.isEvent(typeProperty: name, routingKey: "booking.create"))
        }
    }

    /// The set's own replies, sent back into a command or query queue
    /// through an outside user's dead-letter exchange, are foreign by
    /// their `type`, whatever the routing key the bounce gave them.
    @Test func theSetsRepliesAreForeignByTheirType() {
        for type in ["reply", "booking.reply", "availability.reply", "projector.reply"] {
            #expect(ForeignRouting.isForeign(typeProperty: type, routingKey: "booking.create"))
            #expect(!ForeignRouting.isForeign(typeProperty: nil, routingKey: type) || ForeignRouting.isEvent(typeProperty: nil, routingKey: type))
        }
        #expect(ForeignRouting.isForeign(typeProperty: "booking.created", routingKey: "booking.create"), "events too")
        for command in CommandType.allCases {
            #expect(!ForeignRouting.isForeign(typeProperty: command.rawValue, routingKey: command.rawValue))
        }
        for query in ["booking.get", "booking.list", "availability.query", "availability.suggest", "room.closures"] {
            #expect(!ForeignRouting.isForeign(typeProperty: query, routingKey: query))
        }
    }

    @Test func commandsAndQueriesAreNot() {
        for command in CommandType.allCases {
            #expect(!ForeignRouting.isEvent(typeProperty: nil, routingKey: command.rawValue))
            #expect(!ForeignRouting.isEvent(typeProperty: command.rawValue, routingKey: "booking.created"))
        }
        for query in ["booking.get", "booking.list", "availability.query", "availability.suggest", "room.closures"] {
            #expect(!ForeignRouting.isEvent(typeProperty: nil, routingKey: query))
        }
    }
}

@Suite("Secrets kept out of logs")
struct RedactionTests {
    @Test func credentialsAndQueryValuesAreHidden() {
        #expect(Redaction.url("https://user:s3cret@gw.example:8443/api?key=abc&x=1") == "https://***@gw.example:8443/api?key=***&x=***")
        #expect(Redaction.url("http://gw:8080/base") == "http://gw:8080/base")
        #expect(!Redaction.url("https://tok@gw/p").contains("tok"))
        #expect(Redaction.url("s3cret-not-a-url") == "<not a URL>")
    }
}

@Suite("HTTP_BIND")
struct BindAddressTests {
    @Test func loopbackUnlessToldOtherwise() throws {
        #expect(try CommonSettings(environment: [:], defaultHTTPPort: 8080).httpBind == "127.0.0.1")
        #expect(try CommonSettings(environment: ["HTTP_BIND": "0.0.0.0"], defaultHTTPPort: 8080).httpBind == "0.0.0.0")
        #expect(try CommonSettings(environment: ["HTTP_BIND": "::1"], defaultHTTPPort: 8080).httpBind == "::1")
        let error = #expect(throws: SettingsError.self) {
            _ = try CommonSettings(environment: ["HTTP_BIND": "everywhere"], defaultHTTPPort: 8080)
        }
        #expect(error?.description.hasPrefix("HTTP_BIND") == true)
    }
}
