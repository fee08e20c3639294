import Logging
import Synchronization
import Testing
@testable import BookingHandler

@Suite("Command log context")
struct LogContextTests {
    @Test func carriesTheCommandsMetadataWhenALineIsWritten() {
        var context = LogContext(base: Logger(label: "test"), messageID: "m-1", correlationID: nil, commandType: "booking.create")
        #expect(context.logger[metadataKey: "amqp.message_id"] == "m-1")
        #expect(context.logger[metadataKey: "amqp.correlation_id"] == nil)
        #expect(context.logger[metadataKey: "command.type"] == "booking.create")
        #expect(context.logger[metadataKey: "booking.id"] == nil)
        context.bookingID = "b-1"
        context.errorCode = 2000
        #expect(context.logger[metadataKey: "booking.id"] == "b-1")
        #expect(context.logger[metadataKey: "error.code"]?.description == "2000")
    }

    /// Lines a ``CaptureInto`` handler wrote.
    final class Lines: Sendable {
        let value = Mutex<[(Logger.Level, String, Logger.Metadata)]>([])
    }

    static func context(level: Logger.Level, lines: Lines) -> LogContext {
        let base = Logger(label: "test") { _ in CaptureInto(lines: lines, logLevel: level) }
        return LogContext(base: base, messageID: "m-1", correlationID: "c-1", commandType: "booking.create",
                          bookingID: "b-1", errorCode: nil)
    }

    /// Keeps what is written in `lines`.
    struct CaptureInto: LogHandler {
        let lines: Lines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
                 file: String, function: String, line: UInt) {
            lines.value.withLock { $0.append((level, message.description, self.metadata.merging(metadata ?? [:]) { $1 })) }
        }
    }

    @Test func aWrittenLineCarriesTheCommandsMetadataAndItsOwn() {
        let lines = Lines()
        Self.context(level: .info, lines: lines).write(.info, "command handled", metadata: ["outcome": "ok"])
        let written = lines.value.withLock { $0 }
        #expect(written.count == 1)
        #expect(written.first?.1 == "command handled")
        let metadata = written.first?.2 ?? [:]
        #expect(metadata["amqp.message_id"] == "m-1" && metadata["amqp.correlation_id"] == "c-1")
        #expect(metadata["command.type"] == "booking.create" && metadata["booking.id"] == "b-1")
        #expect(metadata["outcome"] == "ok")
    }

    @Test func aLineBelowTheLevelBuildsAndWritesNothing() {
        let lines = Lines()
        let built = Mutex(false)
        func message() -> Logger.Message { built.withLock { $0 = true }; return "command handled" }
        Self.context(level: .warning, lines: lines).write(.info, message())
        #expect(lines.value.withLock { $0.isEmpty })
        #expect(!built.withLock { $0 }, "the message is not even built")
    }
}
