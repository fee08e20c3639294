import CRabbitMQ
import Testing
@testable import AMQPClient

@Suite("AMQPError.libraryStatus")
struct LibraryStatusTests {
    @Test func keptOnTheErrorAndPartOfEquality() {
        let status = AMQP_STATUS_SOCKET_ERROR.rawValue
        let e = AMQPError(.connectionLost, "x", libraryStatus: status)
        #expect(e.libraryStatus == status)
        #expect(AMQPError(.connectionLost, "x").libraryStatus == nil)
        #expect(e != AMQPError(.connectionLost, "x"))
        #expect(e == AMQPError(.connectionLost, "x", libraryStatus: status))
    }

    /// No broker needed: nothing listens on port 1 of the loopback, so the
    /// socket open fails inside rabbitmq-c and its status must come along.
    @Test func aRefusedConnectCarriesRabbitMQCsStatus() throws {
        let url = try AMQPURL("amqp://guest:guest@127.0.0.1:1/%2f")
        let configuration = AMQPConfiguration(url: url, connectTimeoutSeconds: 2)
        let error = #expect(throws: AMQPError.self) {
            _ = try CConnection.open(configuration, url: url)
        }
        #expect(error?.code == .connectionFailed)
        let status = try #require(error?.libraryStatus)
        #expect(status < 0)  // amqp_status_enum values are negative
        #expect(error?.message.contains(CConnection.errorString(status)) == true)
    }
}
