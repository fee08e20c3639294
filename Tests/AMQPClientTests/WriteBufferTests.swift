import CAMQPWriteBuffer
import CRabbitMQ
import Foundation
import Synchronization
import Testing

/// The write buffer under rabbitmq-c's socket (Shared/CAMQPWriteBuffer):
/// real rabbitmq-c connections writing real frames to a TCP peer on
/// loopback (no broker: the peer only reads bytes).
@Suite("Write buffer under rabbitmq-c's socket", .timeLimit(.minutes(1)))
struct WriteBufferTests {
    /// A rabbitmq-c connection state whose TCP socket is connected to a peer
    /// this test reads from.
    final class Pair {
        let state: amqp_connection_state_t
        let peer: Int32
        let buffer: OpaquePointer?

        /// - Parameter smallBuffers: socket buffers of 64 KiB each way, so
        ///   that a few MB cannot fit whatever the host's TCP settings.
        init(buffered: Bool, smallBuffers: Bool = false) throws {
            let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(listener) }
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            if smallBuffers {
                var size: Int32 = 65536
                for (fd, option) in [(listener, SO_RCVBUF), (client, SO_SNDBUF)] {
                    _ = setsockopt(fd, SOL_SOCKET, option, &size, socklen_t(MemoryLayout<Int32>.size))
                }
            }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            try withUnsafeMutablePointer(to: &address) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    guard bind(listener, $0, length) == 0, listen(listener, 1) == 0,
                          getsockname(listener, $0, &length) == 0 else { throw POSIXError(.EADDRINUSE) }
                }
            }
            try withUnsafePointer(to: &address) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    guard connect(client, $0, length) == 0 else { throw POSIXError(.ECONNREFUSED) }
                }
            }
            peer = accept(listener, nil, nil)
            // rabbitmq-c's sockets are non-blocking; so is this one, so that
            // a full socket shows as it would against a slow broker.
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
            state = amqp_new_connection()
            let socket = amqp_tcp_socket_new(state)!
            amqp_tcp_socket_set_sockfd(socket, client)
            buffer = buffered ? crabbitmq_write_buffer_install(socket) : nil
        }

        deinit {
            amqp_destroy_connection(state)  // frees the buffer with the socket
            close(peer)
        }

        /// One publish: a method, a header and a body frame.
        func publish(_ body: [UInt8], routingKey: String = "k") -> Int32 {
            var properties = amqp_basic_properties_t()
            properties._flags = 0
            return body.withUnsafeBytes { raw in
                "x".withCString { exchange in
                    routingKey.withCString { key in
                        amqp_basic_publish(state, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes(key), 0, 0, &properties,
                                           crabbitmq_bytes(raw.baseAddress, raw.count))
                    }
                }
            }
        }

        /// Whether the peer has bytes to read right now.
        var peerHasData: Bool {
            var fd = pollfd(fd: peer, events: Int16(POLLIN), revents: 0)
            return poll(&fd, 1, 0) == 1
        }

        /// Reads exactly `count` bytes at the peer.
        func read(_ count: Int) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: count)
            var got = 0
            while got < count {
                let n = out.withUnsafeMutableBytes { recv(peer, $0.baseAddress! + got, count - got, 0) }
                if n <= 0 { break }
                got += n
            }
            return Array(out[0..<got])
        }
    }

    @Test func heldFramesLeaveAtTheFlushInOneWriteAndByteForByteAsUnbuffered() throws {
        let buffered = try Pair(buffered: true), plain = try Pair(buffered: false)
        let buffer = try #require(buffered.buffer)
        let bodies: [[UInt8]] = [Array("one".utf8), Array(repeating: 7, count: 5000), Array("three".utf8)]

        crabbitmq_write_buffer_hold(buffer)
        for body in bodies { #expect(buffered.publish(body) == AMQP_STATUS_OK.rawValue) }
        let held = crabbitmq_write_buffer_pending(buffer)
        #expect(held > 5000)
        #expect(!buffered.peerHasData, "nothing is written while the buffer holds")
        #expect(crabbitmq_write_buffer_held_sends(buffer) == 9, "three frames per publish, each a send of rabbitmq-c's")

        #expect(crabbitmq_write_buffer_flush(buffer, 1000) == AMQP_STATUS_OK.rawValue)
        #expect(crabbitmq_write_buffer_pending(buffer) == 0)
        #expect(crabbitmq_write_buffer_flushes(buffer) == 1)
        #expect(crabbitmq_write_buffer_writes(buffer) == 1, "nine frames, one write")
        let written = buffered.read(held)

        for body in bodies { #expect(plain.publish(body) == AMQP_STATUS_OK.rawValue) }
        let expected = plain.read(held)
        #expect(written.count == held)
        #expect(written == expected, "the same frames, in the same order")

        // Not holding: a frame goes out at once.
        #expect(buffered.publish(Array("four".utf8)) == AMQP_STATUS_OK.rawValue)
        #expect(crabbitmq_write_buffer_pending(buffer) == 0)
        #expect(crabbitmq_write_buffer_held_sends(buffer) == 9)
        var fd = pollfd(fd: buffered.peer, events: Int16(POLLIN), revents: 0)
        #expect(poll(&fd, 1, 1000) == 1)
    }

    @Test func aFlushWaitsForAFullSocketAndReportsATimeoutWhenThePeerNeverReads() throws {
        let pair = try Pair(buffered: true, smallBuffers: true)
        let buffer = try #require(pair.buffer)
        // More than the socket buffers take while the peer reads nothing:
        // the flush must wait, then give up.
        crabbitmq_write_buffer_hold(buffer)
        let body = [UInt8](repeating: 1, count: 1 << 20)
        for _ in 0..<4 { #expect(pair.publish(body) == AMQP_STATUS_OK.rawValue) }
        #expect(crabbitmq_write_buffer_flush(buffer, 300) == AMQP_STATUS_TIMEOUT.rawValue)
        #expect(crabbitmq_write_buffer_pending(buffer) == 0, "emptied either way")
    }

    /// The timeout counts from the last sign of life, not from the start:
    /// a peer that reads slowly, or reads nothing but sends (a broker that
    /// blocked the connection still sends heartbeats), is waited for.
    @Test(arguments: [SignOfLife.reads, .writes])
    func aFlushWaitsAsLongAsThePeerShowsSignsOfLife(_ sign: SignOfLife) throws {
        let pair = try Pair(buffered: true, smallBuffers: true)
        let buffer = try #require(pair.buffer)
        crabbitmq_write_buffer_hold(buffer)
        let body = [UInt8](repeating: 3, count: 1 << 20)
        #expect(pair.publish(body) == AMQP_STATUS_OK.rawValue)
        let peer = pair.peer
        let peerDone = Mutex(false)
        let done = DispatchSemaphore(value: 0)
        // Every 40 ms, 30 times: a read of 64 KiB (1 MiB takes 16 of them),
        // or a byte written back. Far longer in all than the 200 ms timeout.
        let trickle = Thread {
            var chunk = [UInt8](repeating: 0, count: 65536)
            for _ in 0..<30 {
                switch sign {
                case .reads: _ = chunk.withUnsafeMutableBytes { recv(peer, $0.baseAddress!, 65536, Int32(MSG_DONTWAIT)) }
                case .writes: _ = chunk.withUnsafeBytes { send(peer, $0.baseAddress!, 1, Int32(MSG_NOSIGNAL)) }
                }
                usleep(40_000)
            }
            peerDone.withLock { $0 = true }
            done.signal()
        }
        trickle.start()
        let status = crabbitmq_write_buffer_flush(buffer, 200)
        let peerDoneAtReturn = peerDone.withLock { $0 }
        _ = done.wait(timeout: .now() + 5)
        switch sign {
        case .reads:
            // It got through, at the peer's pace.
            #expect(status == AMQP_STATUS_OK.rawValue)
        case .writes:
            // It gave up only after the peer had gone quiet.
            #expect(status == AMQP_STATUS_TIMEOUT.rawValue)
            #expect(peerDoneAtReturn, "the flush gave up while the peer was still writing")
        }
    }

    enum SignOfLife: Sendable, CustomStringConvertible {
        case reads, writes
        var description: String { self == .reads ? "the peer reads slowly" : "the peer sends bytes" }
    }

    @Test func aFlushThatMustWaitFinishesWhenThePeerReads() throws {
        let pair = try Pair(buffered: true)
        let buffer = try #require(pair.buffer)
        crabbitmq_write_buffer_hold(buffer)
        let body = [UInt8](repeating: 2, count: 1 << 20)
        for _ in 0..<16 { #expect(pair.publish(body) == AMQP_STATUS_OK.rawValue) }
        let held = crabbitmq_write_buffer_pending(buffer)
        let peer = pair.peer
        let total = Mutex(0)
        let done = DispatchSemaphore(value: 0)
        let reader = Thread {
            var chunk = [UInt8](repeating: 0, count: 65536)
            while total.withLock({ $0 }) < held {
                let n = chunk.withUnsafeMutableBytes { recv(peer, $0.baseAddress!, 65536, 0) }
                if n <= 0 { break }
                total.withLock { $0 += n }
            }
            done.signal()
        }
        reader.start()
        #expect(crabbitmq_write_buffer_flush(buffer, 10_000) == AMQP_STATUS_OK.rawValue)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(total.withLock { $0 } == held)
    }
}
