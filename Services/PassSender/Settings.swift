import BrokerObjects
import Foundation
import PostgresSupport
import ServiceSettings
import ServiceSupport

/// The pass sender's own settings (docs/pass-sender.md), read from the
/// environment next to the common ones (``CommonSettings``).
public struct PassSenderSettings: Sendable, Equatable {
    /// `PASS_GATEWAY_URL`: base URL of the sendpass gateway; nil = spool to `$DATA_DIR/outbox/`.
    public var gatewayURL: String?
    /// `PASS_NOTIFY_URL`: base URL of the notice gateway (`POST <url>/notify`,
    /// contract v1.1); nil = notices are written by the spool gateway.
    public var notifyURL: String?
    /// `PASS_MAX_ATTEMPTS`: attempts per pass before it goes to `passes.failed` (default 5).
    public var maxAttempts: Int
    /// `PASS_RETRY_DELAYS`: back-off before attempt 2, 3, …; the last one repeats (default `1s,5s,30s,2m,10m`).
    public var retryDelays: [RetryDelay]
    /// `PASS_GATEWAY_TIMEOUT`: whole-request timeout of the HTTP gateway (default 10 s).
    public var gatewayTimeout: Duration
    /// `PASS_CONCURRENCY`: messages handled at once per consumer (default
    /// ``defaultConcurrency``; passes of one booking are always handled one
    /// batch at a time). Of these, at most ``gatewayConcurrency`` are in a
    /// gateway call at once.
    public var concurrency: Int
    /// `PASS_GATEWAY_CONCURRENCY`: gateway calls in flight at once, both
    /// consumers together (default ``defaultGatewayConcurrency``): what the
    /// gateway sees at once, and how many calls' passes can go out twice
    /// after a crash (``GatewaySlots``).
    public var gatewayConcurrency: Int
    /// `BOOKING_HANDLER_USER`: the broker user whose booking events are
    /// trusted; nil = the pass sender's own user (``SenderCheck``).
    public var bookingHandlerUser: String?
    /// `ADMIN_USERS`: operators whose retry messages (`bookingctl passes
    /// failed retry`) are accepted besides the pass sender's own.
    public var administrators: Set<String> = []
    /// `DATABASE_URL`: the ledger in PostgreSQL, shared by several pass
    /// sender instances (schema `pass_sender` unless the URL names one);
    /// unset = SQLite in `DATA_DIR`.
    public var database: PostgresSettings?

    /// `PASS_CLAIM_LEASE`: how long a claimed pass stays its instance's
    /// without a recorded gateway answer; nil = the default,
    /// ``claimLease``.
    public var claimLeaseSetting: Duration?

    /// `PASS_OUTBOX_SWEEP`: how often outbox rows nobody published are
    /// looked for, and how old they must be (default 30 s). Such rows are
    /// otherwise published only with their booking's next message or at the
    /// next start (``OutboxSweep``).
    public var outboxSweep: Duration = .seconds(30)

    /// How long a claimed pass stays another instance's without a recorded
    /// gateway answer: `PASS_CLAIM_LEASE`, else twice the gateway timeout
    /// plus 30 s (a call and its ledger commit fit many times over). A dead
    /// claimer's passes are taken over after it, so it is also how long a
    /// restart after a crash waits before sending again what was in flight.
    public var claimLease: TimeInterval {
        if let claimLeaseSetting { return Self.seconds(claimLeaseSetting) }
        return 2 * Self.seconds(gatewayTimeout) + 30
    }

    /// The shortest `PASS_CLAIM_LEASE` accepted for a gateway timeout: two
    /// calls and 5 s for the ledger commit between them (the lease is
    /// renewed with every answer recorded, so a live instance must get from
    /// one renewal to the next within it, or another takes over rows it is
    /// still sending: a second send).
    public static func minimumClaimLease(gatewayTimeout: Duration) -> TimeInterval {
        2 * seconds(gatewayTimeout) + answerCommitMargin
    }

    /// Seconds a lease must leave, after a gateway call, for committing its
    /// answer (``minimumClaimLease(gatewayTimeout:)``, and the renewal
    /// before a call in ``PassDispatcher``).
    public static let answerCommitMargin: TimeInterval = 5

    static func seconds(_ duration: Duration) -> TimeInterval {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// The defaults of the operations contract.
    public static let defaultRetryDelays = "1s,5s,30s,2m,10m"
    /// `PASS_CONCURRENCY` unset. Was 8 until the gateway calls got a bound
    /// of their own: 8 messages in progress left the pass sender waiting on
    /// its own confirms and commits (docs/performance.md, "Gateway calls get a
    /// bound of their own; 64 messages in progress").
    public static let defaultConcurrency = 64
    /// `PASS_GATEWAY_CONCURRENCY` unset: the 8 calls at once the gateway
    /// saw before (AsyncHTTPClient's connections per host).
    public static let defaultGatewayConcurrency = 8

    /// Settings with explicit values (tests, benchmarks).
    public init(gatewayURL: String? = nil, maxAttempts: Int = 5,
                retryDelays: [RetryDelay] = try! RetryDelay.parseList(PassSenderSettings.defaultRetryDelays),
                gatewayTimeout: Duration = .seconds(10), concurrency: Int = PassSenderSettings.defaultConcurrency,
                gatewayConcurrency: Int = PassSenderSettings.defaultGatewayConcurrency, notifyURL: String? = nil) {
        self.gatewayURL = gatewayURL
        self.notifyURL = notifyURL
        self.maxAttempts = maxAttempts
        self.retryDelays = retryDelays
        self.gatewayTimeout = gatewayTimeout
        self.concurrency = concurrency
        self.gatewayConcurrency = gatewayConcurrency
    }

    /// Reads the settings from `environment`; a bad value throws a
    /// ``SettingsError`` naming the variable.
    public init(environment: [String: String]) throws {
        func value(_ name: String) -> String? {
            guard let v = environment[name]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        self.init()
        bookingHandlerUser = value("BOOKING_HANDLER_USER")
        // Checked with or without DATABASE_URL: a typo must not wait for the
        // day the database is switched on.
        let timeouts = try PostgresTimeouts(environment: environment)
        database = try value("DATABASE_URL").map { url in
            var settings = try PostgresSettings(url: url)
            settings.timeouts = timeouts
            return settings
        }
        administrators = CommonSettings.userList(value("ADMIN_USERS"))
        func httpURL(_ name: String) throws -> String? {
            guard let url = value(name) else { return nil }
            guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
                  scheme == "http" || scheme == "https", parsed.host != nil else {
                throw SettingsError("\(name): '\(Redaction.url(url))' is not an http:// or https:// URL")
            }
            return url
        }
        gatewayURL = try httpURL("PASS_GATEWAY_URL")
        notifyURL = try httpURL("PASS_NOTIFY_URL")
        if let text = value("PASS_MAX_ATTEMPTS") {
            guard let n = Int(text), (1...100).contains(n) else {
                throw SettingsError("PASS_MAX_ATTEMPTS: '\(text)' is not a whole number in 1...100")
            }
            maxAttempts = n
        }
        if let text = value("PASS_RETRY_DELAYS") {
            do {
                retryDelays = try RetryDelay.parseList(text)
            } catch {
                throw SettingsError("PASS_RETRY_DELAYS: \(error)")
            }
        }
        if let text = value("PASS_GATEWAY_TIMEOUT") {
            guard let delay = RetryDelay(text), delay.milliseconds >= 100, delay.milliseconds <= 600_000 else {
                throw SettingsError("PASS_GATEWAY_TIMEOUT: '\(text)' is not a duration between 100ms and 10m (e.g. 10s)")
            }
            gatewayTimeout = .milliseconds(delay.milliseconds)
        }
        if let text = value("PASS_CONCURRENCY") {
            guard let n = Int(text), (1...256).contains(n) else {
                throw SettingsError("PASS_CONCURRENCY: '\(text)' is not a whole number in 1...256")
            }
            concurrency = n
        }
        if let text = value("PASS_GATEWAY_CONCURRENCY") {
            guard let n = Int(text), (1...256).contains(n) else {
                throw SettingsError("PASS_GATEWAY_CONCURRENCY: '\(text)' is not a whole number in 1...256")
            }
            gatewayConcurrency = n
        }
        if let text = value("PASS_CLAIM_LEASE") {
            let minimum = Self.minimumClaimLease(gatewayTimeout: gatewayTimeout)
            guard let lease = RetryDelay(text), lease.milliseconds <= 3_600_000 else {
                throw SettingsError("PASS_CLAIM_LEASE: '\(text)' is not a duration of at most 1h (e.g. 50s)")
            }
            guard Double(lease.milliseconds) / 1000 >= minimum else {
                throw SettingsError("PASS_CLAIM_LEASE: '\(text)' is shorter than twice PASS_GATEWAY_TIMEOUT plus 5 s "
                                    + "(\(Int(minimum.rounded(.up)))s): a live instance's claim could run out during its own call")
            }
            claimLeaseSetting = .milliseconds(lease.milliseconds)
        }
        if let text = value("PASS_OUTBOX_SWEEP") {
            guard let sweep = RetryDelay(text), (100...3_600_000).contains(sweep.milliseconds) else {
                throw SettingsError("PASS_OUTBOX_SWEEP: '\(text)' is not a duration from 100ms to 1h (e.g. 30s)")
            }
            outboxSweep = .milliseconds(sweep.milliseconds)
        }
    }

    /// The delay to wait after the `attempts`-th failed attempt (1-based):
    /// the `attempts`-th configured delay, the last one repeating.
    public func delay(afterAttempt attempts: Int) -> RetryDelay {
        retryDelays[min(max(attempts, 1), retryDelays.count) - 1]
    }
}
