import BookingContracts
import BrokerObjects
import Foundation
@testable import PassSender
import TestSupport
import Testing
import Logging

@Suite("Settings")
struct SettingsTests {
    @Test func defaultsAndParsing() throws {
        let d = try PassSenderSettings(environment: [:])
        #expect(d.gatewayURL == nil && d.maxAttempts == 5 && d.gatewayTimeout == .seconds(10))
        #expect(d.retryDelays.map(\.label) == ["1s", "5s", "30s", "2m", "10m"])
        let s = try PassSenderSettings(environment: ["PASS_RETRY_DELAYS": "100ms, 200ms,1500ms", "PASS_MAX_ATTEMPTS": "3",
                                                     "PASS_GATEWAY_URL": "http://127.0.0.1:9/x", "PASS_GATEWAY_TIMEOUT": "750ms"])
        #expect(s.retryDelays.map(\.milliseconds) == [100, 200, 1500])
        #expect(s.delay(afterAttempt: 1).milliseconds == 100 && s.delay(afterAttempt: 9).milliseconds == 1500)
        #expect(s.gatewayTimeout == .milliseconds(750) && s.maxAttempts == 3)
        #expect(PassQueues.delay(RetryDelay(milliseconds: 120_000)) == "pass-sender.retry.delay.2m")
    }

    /// Messages in progress and gateway calls in flight are bounded apart:
    /// 64 and 8 unless set, each 1...256.
    @Test func concurrencies() throws {
        let defaults = try PassSenderSettings(environment: [:])
        #expect(defaults.concurrency == 64 && defaults.gatewayConcurrency == 8)
        #expect(PassSenderSettings().concurrency == 64 && PassSenderSettings().gatewayConcurrency == 8)
        let set = try PassSenderSettings(environment: ["PASS_CONCURRENCY": "100", "PASS_GATEWAY_CONCURRENCY": "3"])
        #expect(set.concurrency == 100 && set.gatewayConcurrency == 3)
        for bad in ["0", "257", "eight", "-1"] {
            #expect(throws: (any Error).self) { try PassSenderSettings(environment: ["PASS_GATEWAY_CONCURRENCY": bad]) }
            do {
                _ = try PassSenderSettings(environment: ["PASS_GATEWAY_CONCURRENCY": bad])
            } catch {
                #expect("\(error)".hasPrefix("PASS_GATEWAY_CONCURRENCY"), "\(error)")
            }
        }
    }

    /// The claim lease: twice the gateway timeout plus 30 s unless
    /// `PASS_CLAIM_LEASE` says otherwise, and never shorter than two calls
    /// plus 5 s, whatever the timeout.
    @Test func claimLease() throws {
        #expect(try PassSenderSettings(environment: [:]).claimLease == 50)
        #expect(try PassSenderSettings(environment: ["PASS_GATEWAY_TIMEOUT": "2s"]).claimLease == 34)
        #expect(try PassSenderSettings(environment: ["PASS_CLAIM_LEASE": "25s"]).claimLease == 25)
        #expect(try PassSenderSettings(environment: ["PASS_CLAIM_LEASE": "2m"]).claimLease == 120)
        #expect(try PassSenderSettings(environment: ["PASS_GATEWAY_TIMEOUT": "2s", "PASS_CLAIM_LEASE": "9s"]).claimLease == 9)
        for (timeout, lease) in [("2s", "8999ms"), ("10s", "24s"), (nil, "0")] {
            var environment = ["PASS_CLAIM_LEASE": lease]
            environment["PASS_GATEWAY_TIMEOUT"] = timeout
            do {
                _ = try PassSenderSettings(environment: environment)
                Issue.record("lease \(lease) with timeout \(timeout ?? "default") was accepted")
            } catch {
                #expect("\(error)".hasPrefix("PASS_CLAIM_LEASE"), "\(error)")
                #expect("\(error)".contains("shorter than twice PASS_GATEWAY_TIMEOUT"), "\(error)")
            }
        }
    }

    @Test(arguments: [["PASS_RETRY_DELAYS": "1s,,x"], ["PASS_MAX_ATTEMPTS": "0"], ["PASS_GATEWAY_URL": "ftp://x"],
                      ["PASS_GATEWAY_TIMEOUT": "5x"], ["PASS_RETRY_DELAYS": "-1s"],
                      ["PASS_RETRY_DELAYS": "99999999999999999"], ["PASS_GATEWAY_TIMEOUT": "99999999999999999"],
                      ["PASS_CLAIM_LEASE": "soon"], ["PASS_CLAIM_LEASE": "2h"], ["DATABASE_KEEPALIVE": "0"],
                      ["DATABASE_STATEMENT_TIMEOUT": "forever"], ["DATABASE_CONNECT_TIMEOUT": "301"]])
    func badValuesNameTheVariable(_ env: [String: String]) {
        #expect(throws: (any Error).self) { try PassSenderSettings(environment: env) }
        do {
            _ = try PassSenderSettings(environment: env)
        } catch {
            #expect("\(error)".hasPrefix(env.keys.first!))
        }
    }
}

@Suite("Gateway answers")
struct ClassificationTests {
    func classify(_ status: Int, _ body: String, passes: Int = 3) -> GatewayOutcome {
        GatewayOutcome.classify(status: status, body: Array(body.utf8), passCount: passes)
    }

    @Test func contractCases() {
        #expect(classify(200, #"{"success":true}"#) == .success)
        #expect(classify(200, #"{"error":{"text":"x","code":4001,"index":1}}"#) == .passFailed(index: 1, code: 4001, text: "x"))
        #expect(classify(200, #"{"success":true,"error":{"text":"x","code":4002,"index":0}}"#)
            == .passFailed(index: 0, code: 4002, text: "x"), "error wins over success")
        #expect(classify(200, #"{"error":{"text":"bad phone","code":3000}}"#) == .rejected(code: 3000, text: "bad phone", index: nil))
        #expect(classify(400, #"{"error":{"text":"bad","code":3000,"index":2}}"#) == .rejected(code: 3000, text: "bad", index: 2))
        if case .transient(let code, _) = classify(200, #"{"error":{"text":"x","code":4001,"index":7}}"#) {
            #expect(code == 4001, "an index outside the request is unusable")
        } else { Issue.record("expected transient") }
        // A server error that says which pass failed: the ones before it were
        // sent (contract v1), so they must not be retried.
        #expect(classify(500, #"{"error":{"text":"x","code":4001,"index":2}}"#) == .passFailed(index: 2, code: 4001, text: "x"))
        #expect(classify(429, #"{"error":{"text":"x","code":4003,"index":0}}"#) == .passFailed(index: 0, code: 4003, text: "x"))
        for (status, body) in [(200, "garbage"), (200, #"{"success":false}"#), (200, ""), (503, #"{"error":{"text":"x","code":3000}}"#),
                               (503, #"{"error":{"text":"x","code":4001,"index":3}}"#), (503, #"{"error":{"text":"x","code":4001}}"#),
                               (429, ""), (500, #"{"success":true}"#), (404, "not found"), (302, #"{"success":true}"#)] {
            if case .transient = classify(status, body) {} else { Issue.record("\(status) \(body) should be transient") }
        }
    }

    /// The plain success is recognised without a decoder; every other
    /// spelling still goes through it.
    @Test func plainSuccessAndItsNearMisses() {
        for body in [#"{"success":true}"#, " {\"success\":true}\r\n", #"{ "success" : true }"#, #"{"success":true,"x":1}"#] {
            #expect(classify(200, body) == .success, "\(body)")
        }
        #expect(GatewayOutcome.isPlainSuccess(Array(" {\"success\":true}\n".utf8)))
        #expect(!GatewayOutcome.isPlainSuccess(Array(#"{ "success" : true }"#.utf8)), "inner spaces: the decoder's")
        for body in [#"{"suc cess":true}"#, #"{"success":true"#, #"{"success":true}}"#, #"{"success":truex}"#, "\n", ""] {
            #expect(!GatewayOutcome.isPlainSuccess(Array(body.utf8)), "\(body)")
            if case .transient = classify(200, body) {} else { Issue.record("\(body) should be transient") }
        }
    }
}

@Suite("Spool gateway and mail format")
struct SpoolTests {
    let booking = SendPassRequest.BookingInfo(date: 1_795_388_400, timeStart: 1_795_420_800, timeEnd: 1_795_426_200,
                                              title: "Prüfung der Zahlen", description: "", room: "München")

    @Test func rfc2047AndHeaders() {
        let pass = SendPassRequest.Pass(name: "Zoë Ünal", email: "zoe@example.com", number: "+491701234567")
        let mail = PassMail.email(pass: pass, booking: booking, from: "Room Booking <p@x.invalid>", messageID: "a@b",
                                  date: Date(timeIntervalSince1970: 0))
        let head = mail.components(separatedBy: "\r\n\r\n")[0]
        #expect(head.contains("To: =?utf-8?B?Wm/DqyDDnG5hbA==?= <zoe@example.com>"))
        #expect(head.contains("Subject: =?utf-8?B?"))
        #expect(head.contains("Date: Thu, 01 Jan 1970 00:00:00 +0000"))
        #expect(head.contains("Message-ID: <a@b>") && head.contains("MIME-Version: 1.0"))
        #expect(head.contains("Content-Type: text/plain; charset=utf-8"))
        #expect(head.allSatisfy { $0.isASCII }, "headers are 7-bit")
        for line in head.components(separatedBy: "\r\n") { #expect(line.utf8.count <= 78, "line too long: \(line)") }
        #expect(PassMail.address(name: "Lovelace, Ada", email: "a@x") == #""Lovelace, Ada" <a@x>"#)
        // Long non-ASCII text: several encoded words, each ≤ 75 characters.
        let words = PassMail.encodedWords(String(repeating: "ä", count: 100)).components(separatedBy: "\r\n ")
        #expect(words.count > 1 && words.allSatisfy { $0.count <= 75 })
        let decoded = words.map { w -> String in
            let b64 = w.dropFirst("=?utf-8?B?".count).dropLast(2)
            return String(decoding: Data(base64Encoded: String(b64))!, as: UTF8.self)
        }.joined()
        #expect(decoded == String(repeating: "ä", count: 100))
    }

    @Test func writesFilesAtomicallyAndValidatesFirst() async throws {
        let dir = try TemporaryDirectory("spool")
        defer { dir.remove() }
        let gateway = try SpoolPassGateway(directory: dir.url)
        let good = SendPassRequest.Pass(name: "Ada", email: "ada@example.com", number: "+491701234567")
        let bad = SendPassRequest.Pass(name: "Bob", email: "bob@example.com", number: "0170 123")
        let rejected = await gateway.send(SendPassRequest(booking: booking, passes: [good, bad]),
                                          batch: PassBatch(bookingId: "b/1", version: 2, attendeeIndexes: [0, 1]))
        #expect(rejected == .rejected(code: 3000, text: "phone number 0170 123 is not E.164", index: 1))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty, "nothing written on a 3000")
        let ok = await gateway.send(SendPassRequest(booking: booking, passes: [good]),
                                    batch: PassBatch(bookingId: "b/1", version: 2, attendeeIndexes: [3]))
        #expect(ok == .success)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["b_1-v2-3.eml", "b_1-v2-3.sms"])
        // Sending the same pass again replaces the file: still one pass.
        _ = await gateway.send(SendPassRequest(booking: booking, passes: [good]),
                               batch: PassBatch(bookingId: "b/1", version: 2, attendeeIndexes: [3]))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).count == 2)
    }
}

/// A gateway answering from a script, for the dispatcher without a broker.
final class ScriptedGateway: PassGateway, @unchecked Sendable {  // state behind `lock`
    let channel = PassChannel.gateway
    private let lock = NSLock()
    private var answers: [GatewayOutcome]
    private(set) var requests: [[Int]] = []
    /// Notice calls: kind and recipient e-mails, in order.
    private(set) var notices: [(kind: NoticeKind, emails: [String])] = []
    /// Each notice call's `previous.timeStart` (the times the change is from).
    private(set) var noticeFromStarts: [Int64?] = []
    init(_ answers: [GatewayOutcome]) { self.answers = answers }
    func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        lock.withLock {
            requests.append(batch.attendeeIndexes)
            return answers.isEmpty ? .success : answers.removeFirst()
        }
    }
    func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome {
        lock.withLock {
            notices.append((request.kind, request.recipients.map(\.email)))
            noticeFromStarts.append(request.previous?.timeStart)
            return answers.isEmpty ? .success : answers.removeFirst()
        }
    }
}

@Suite("Dispatcher and ledger")
struct DispatcherTests {
    static func booking(version: Int = 1, attendees: Int = 3) -> Booking {
        Booking(id: "bk-\(UUID().uuidString.prefix(8))", room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:30",
                timeZone: "Europe/Berlin", startsAt: "2026-11-23T08:00:00Z", endsAt: "2026-11-23T09:30:00Z", title: "Review",
                status: .confirmed,
                attendees: (0..<attendees).map { Attendee(name: "P\($0)", email: "p\($0)@example.com", phone: "+4917012345\($0)") },
                version: version)
    }

    func make(on kind: LedgerKind, _ answers: [GatewayOutcome], maxAttempts: Int = 3) async throws
        -> (PassDispatcher, ScriptedGateway, PassLedger, URL) {
        let dir = try TemporaryDirectory("ledger")
        let ledger = try await kind.open(directory: dir.url)
        let gateway = ScriptedGateway(answers)
        let settings = PassSenderSettings(maxAttempts: maxAttempts, retryDelays: try RetryDelay.parseList("1s,5s"))
        return (PassDispatcher(ledger: ledger, gateway: gateway, settings: settings, logger: Logger(label: "t")), gateway, ledger, dir.url)
    }

    @Test(arguments: LedgerKind.allCases) func failureIndexSplitsTheBatch(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await make(on: kind, [.passFailed(index: 1, code: 4001, text: "x")])
        defer { try? FileManager.default.removeItem(at: dir) }
        let b = Self.booking(attendees: 4)
        let s = try await d.handle(event: b)
        #expect(g.requests == [[0, 1, 2, 3], [2, 3]])
        #expect(s.delivered == [0, 2, 3] && s.scheduled == [1])
        let out = try await ledger.unpublished()
        let retry = try #require(out.first { $0.message.type == PassQueues.retryMessageType })
        #expect(retry.message.routingKey == "pass-sender.retry.delay.1s")
        let message = try ContractJSON.decode(PassRetryMessage.self, from: retry.message.body)
        #expect(message.passes == [.init(attendeeIndex: 1, attempts: 1, firstFailureAt: message.passes[0].firstFailureAt,
                                         lastFailureAt: message.passes[0].lastFailureAt, lastErrorCode: 4001, lastErrorText: "x")])
        // The same event again sends nothing; the retry message twice sends once.
        #expect(try await d.handle(event: b).gatewayCalls == 0)
        #expect(try await d.handle(retry: message).delivered == [1])
        #expect(try await d.handle(retry: message).gatewayCalls == 0)
        #expect(g.requests.count == 3)
    }

    @Test(arguments: LedgerKind.allCases) func lastAttemptGoesToPassesFailedAndMatchesTheSchemas(_ kind: LedgerKind) async throws {
        let (d, _, ledger, dir) = try await make(on: kind, [.transient(code: nil, text: "timeout"), .passFailed(index: 0, code: 4100, text: "full")],
                                           maxAttempts: 2)
        defer { try? FileManager.default.removeItem(at: dir) }
        let b = Self.booking(attendees: 1)
        _ = try await d.handle(event: b)
        let retryRow = try #require(try await ledger.unpublished().first { $0.message.type == PassQueues.retryMessageType })
        let s = try await d.handle(retry: try ContractJSON.decode(PassRetryMessage.self, from: retryRow.message.body))
        #expect(s.failed == [0])
        let rows = try await ledger.unpublished()
        let failed = try #require(rows.first { $0.message.routingKey == Topology.passesFailedQueue })
        let body = try ContractJSON.decode(FailedPass.self, from: failed.message.body)
        #expect(body.attempts == 2 && body.lastErrorCode == 4100 && failed.message.messageID == "\(b.id):1:0")
        #expect(failed.message.properties.headers["last-error-code"]?.intValue == 4100)
        // What we encode validates against the contract's JSON Schemas.
        let samples = try TemporaryDirectory("samples")
        defer { samples.remove() }
        try Data(failed.message.body).write(to: samples.appending("passes.failed.json"))
        let event = try #require(rows.first { $0.message.routingKey == EventType.passFailed.rawValue })
        try Data(event.message.body).write(to: samples.appending("pass.failed.json"))
        let (d2, _, ledger2, dir2) = try await make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir2) }
        _ = try await d2.handle(event: Self.booking(attendees: 1))
        let delivered = try #require(try await ledger2.unpublished().first { $0.message.routingKey == EventType.passDelivered.rawValue })
        try Data(delivered.message.body).write(to: samples.appending("pass.delivered.json"))
        let request = SendPassRequestBuilder.request(for: b, attendeeIndexes: [0])
        try ContractJSON.encode(request).write(to: samples.appending("sendpass.request.json"))
        #expect(request.booking.date == 1_795_388_400, "local midnight in Berlin")
        let (status, output) = try runValidator(["--samples", samples.path])
        #expect(status == 0, "\(output)")
    }

    @Test(arguments: LedgerKind.allCases) func cancelAndStaleVersionsDrop(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await make(on: kind, [.transient(code: nil, text: "down")])
        defer { try? FileManager.default.removeItem(at: dir) }
        var b = Self.booking(version: 3, attendees: 2)
        _ = try await d.handle(event: b)
        var older = b
        older.version = 2
        #expect(try await d.handle(event: older).dropped == .stale)
        b.version = 4
        b.status = .cancelled
        let cancel = try await d.handle(event: .bookingCancelled, booking: b, previous: nil)
        #expect(cancel.gatewayCalls == 0, "nobody got a pass, so nobody is told")
        let retry = PassRetryMessage(kind: .backoff, bookingId: b.id, version: 3, booking: nil,
                                     passes: [.init(attendeeIndex: 0, attempts: 1)])
        #expect(try await d.handle(retry: retry).dropped == .cancelled)
        #expect(g.requests.count == 1)
    }

    /// A reschedule in an approval room makes the booking pending again:
    /// its version is recorded (the old pass's retries are void) but no pass
    /// goes out until the approval's booking.confirmed.
    @Test(arguments: LedgerKind.allCases) func aPendingRescheduleSendsNothingUntilConfirmedAgain(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await make(on: kind, [.success, .success])
        defer { try? FileManager.default.removeItem(at: dir) }
        var b = Self.booking(version: 1, attendees: 1)
        #expect(try await d.handle(event: b).delivered == [0])
        b.version = 2
        b.status = .pending
        b.start = "11:00"
        let pending = try await d.handle(event: b)
        #expect(pending.dropped == .notConfirmed)
        #expect(pending.gatewayCalls == 0)
        #expect(g.requests.count == 1, "no pass for the pending version")
        // A retry of the old version is stale now.
        let retry = PassRetryMessage(kind: .backoff, bookingId: b.id, version: 1, booking: nil,
                                     passes: [.init(attendeeIndex: 0, attempts: 1)])
        #expect(try await d.handle(retry: retry).dropped == .stale)
        b.version = 3
        b.status = .confirmed
        #expect(try await d.handle(event: b).delivered == [0])
        #expect(g.requests.count == 2)
    }

    @Test(arguments: LedgerKind.allCases) func aRetryWithImpossibleCountsIsUnusableNotACrash(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let b = Self.booking(attendees: 2)
        for passes: [PassWork] in [[.init(attendeeIndex: 0, attempts: .max)], [.init(attendeeIndex: 0, attempts: -1)],
                                   [.init(attendeeIndex: 1, attempts: 1), .init(attendeeIndex: 1, attempts: 1)]] {
            let retry = PassRetryMessage(kind: .backoff, bookingId: b.id, version: 1, booking: b, passes: passes)
            await #expect(throws: PassLedger.UnusableMessage.self) { try await d.handle(retry: retry) }
        }
        #expect(g.requests.isEmpty)
    }

    @Test(arguments: LedgerKind.allCases) func operatorRetryOfADeliveredPassSendsNothing(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await make(on: kind, [.rejected(code: 3000, text: "bad", index: 1)])
        defer { try? FileManager.default.removeItem(at: dir) }
        let b = Self.booking(attendees: 2)
        let s = try await d.handle(event: b)
        #expect(s.failed == [1] && s.delivered == [0])
        let retry1 = PassRetryMessage(kind: .operator, bookingId: b.id, version: 1, booking: nil,
                                      passes: [.init(attendeeIndex: 1, attempts: 0)], retryToken: "t1")
        #expect(try await d.handle(retry: retry1).delivered == [1], "uses the ledger's snapshot")
        #expect(try await d.handle(retry: retry1).gatewayCalls == 0, "same request twice")
        let retry0 = PassRetryMessage(kind: .operator, bookingId: b.id, version: 1, booking: nil,
                                      passes: [.init(attendeeIndex: 0, attempts: 0)], retryToken: "t2")
        #expect(try await d.handle(retry: retry0).gatewayCalls == 0, "delivered already")
        #expect(g.requests == [[0, 1], [0], [1]])
    }
}

/// Runs `python3 scripts/validate_contract.py <arguments>`.
func runValidator(_ arguments: [String]) throws -> (Int32, String) {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let out = FileManager.default.temporaryDirectory.appendingPathComponent("validator-\(UUID().uuidString).txt")
    FileManager.default.createFile(atPath: out.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: out) }
    let handle = try FileHandle(forWritingTo: out)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", root.appendingPathComponent("scripts/validate_contract.py").path] + arguments
    process.standardOutput = handle
    process.standardError = handle
    try process.run()
    process.waitUntilExit()
    try handle.close()
    return (process.terminationStatus, (try? String(contentsOf: out, encoding: .utf8)) ?? "")
}
