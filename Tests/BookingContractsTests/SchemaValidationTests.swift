import BookingContracts
import Foundation
import Testing

/// The Swift types against the JSON Schemas, through scripts/validate_contract.py
/// (python3 with `jsonschema` and `pyyaml`: `pip install jsonschema pyyaml`).
@Suite("JSON Schemas")
struct SchemaValidationTests {
    private static func writeSamples(_ samples: [(name: String, body: Data)], to dir: URL) throws {
        for sample in samples {
            try sample.body.write(to: dir.appendingPathComponent(sample.name + ".json"))
        }
    }

    private static func explain(_ status: Int32, _ output: String) -> Comment {
        status == 2
            ? "validate_contract.py could not run (missing python3 packages? pip install jsonschema pyyaml):\n\(output)"
            : "validate_contract.py exit \(status):\n\(output)"
    }

    @Test func everyMessageTypeMatchesItsSchema() async throws {
        let dir = try makeTemporaryDirectory("samples")
        defer { try? FileManager.default.removeItem(at: dir) }
        try Self.writeSamples(try Fixtures.samples(), to: dir)

        let (status, output) = try await runValidator(["--samples", dir.path, "--require-all-samples"])
        #expect(status == 0, Self.explain(status, output))
        #expect(output.contains("validate_contract: OK"))
    }

    @Test func brokenSamplesMakeTheValidatorFail() async throws {
        let dir = try makeTemporaryDirectory("broken")
        defer { try? FileManager.default.removeItem(at: dir) }

        // A booking event whose booking has no id.
        var event = try JSONSerialization.jsonObject(
            with: ContractJSON.encode(Fixtures.bookingEvent(Fixtures.booking))) as! [String: Any]
        var booking = event["booking"] as! [String: Any]
        booking.removeValue(forKey: "id")
        event["booking"] = booking
        try JSONSerialization.data(withJSONObject: event).write(to: dir.appendingPathComponent("booking.confirmed.json"))
        // An error code that is not 4 digits, and a fractional-second timestamp.
        try ContractJSON.encode(CommandReply.failure(ErrorCode(42), "x"))
            .write(to: dir.appendingPathComponent("reply--bad-code.json"))
        var delivered = Fixtures.passDelivered
        delivered.occurredAt = "2026-11-22T10:00:03.250Z"
        try ContractJSON.encode(delivered).write(to: dir.appendingPathComponent("pass.delivered.json"))

        let (status, output) = try await runValidator(["--samples", dir.path])
        #expect(status == 1, Self.explain(status, output))
        #expect(output.contains("booking.confirmed.json"))
        #expect(output.contains("'id' is a required property"))
        #expect(output.contains("reply--bad-code.json"))
        #expect(output.contains("pass.delivered.json"))
    }

    @Test func missingSamplesFailWhenAllAreRequired() async throws {
        let dir = try makeTemporaryDirectory("partial")
        defer { try? FileManager.default.removeItem(at: dir) }
        try Self.writeSamples(try Fixtures.samples().filter { !$0.name.hasPrefix("passes.failed") }, to: dir)
        let (status, output) = try await runValidator(["--samples", dir.path, "--require-all-samples"])
        #expect(status == 1, Self.explain(status, output))
        #expect(output.contains("no file for schema 'passes.failed'"))
    }

    @Test func samplesCoverEveryCommandAndEventType() throws {
        let names = Set(try Fixtures.samples().map { $0.name.components(separatedBy: "--")[0] })
        for type in CommandType.allCases { #expect(names.contains(type.rawValue)) }
        for type in EventType.allCases { #expect(names.contains(type.rawValue)) }
        for name in ["reply", "availability.query", "availability.reply", "sendpass.request", "sendpass.response",
                     "passes.failed", "notify.request", "notify.response"] {
            #expect(names.contains(name))
        }
    }
}
