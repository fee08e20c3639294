import Logging
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
}
