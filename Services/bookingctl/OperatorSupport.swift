import AMQPClient
import ArgumentParser
import FailedMessages
import Foundation

/// What `bookingctl passes failed` and `bookingctl failed` share: one
/// connection per run holding the operators' lock, JSON printing.
enum OperatorRun {
    /// Connects, takes the operators' lock ``FailedQueues/lock`` (waiting up
    /// to --timeout for another operator's run), runs `body`, closes.
    ///
    /// The lock is why two operators' listings of one queue never interleave
    /// their returned messages (which would reorder the queue); it goes
    /// away with the connection, also when bookingctl is killed.
    static func run<T: Sendable>(_ global: GlobalOptions, _ body: (AMQPConnection) async throws -> T) async throws -> T {
        let connection: AMQPConnection
        do {
            connection = try await CommandClient(global: global).connect()
        } catch let error as CLIError {
            fail(error.description, error.exit)
        }
        do {
            try await QueueLock.acquire(FailedQueues.lock, on: connection, waitingUpTo: global.timeout)
        } catch let error as AMQPError where error.code == .timeout {
            await connection.close()
            fail(error.message, ExitStatus.unavailable)
        } catch {
            await connection.close()
            fail("cannot take the operators' lock \(FailedQueues.lock): \(error)", OperatorRunError.isLoss(error) ? ExitStatus.unavailable : ExitCode(1))
        }
        do {
            let result = try await body(connection)
            await connection.close()
            return result
        } catch {
            await connection.close()
            // The connection does not reconnect (the lock went with it):
            // the run ends as when the broker cannot be reached.
            if OperatorRunError.isLoss(error) { fail("lost the connection to the broker during the run; nothing more was done: \(error)", ExitStatus.unavailable) }
            throw error
        }
    }

    /// Prints `bookingctl: text` on stderr and exits with `status`.
    static func fail(_ text: String, _ status: ExitCode) -> Never {
        FileHandle.standardError.write(Data("bookingctl: \(TerminalText.safe(text))\n".utf8))
        BookingCtl.exit(withError: status)
    }

    /// Pretty, sorted JSON on stdout; a value JSON cannot hold fails the
    /// run (status 1) rather than leaving a script an empty output and 0.
    static func printJSON(_ object: Any) {
        do {
            let data = try JSONSerialization.data(withJSONObject: object,
                                                  options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
            print(String(decoding: data, as: UTF8.self))
        } catch {
            fail("cannot write the output as JSON: \(error)", ExitCode(1))
        }
    }

    /// An AMQP field value as a JSON value (timestamps as seconds, bytes as
    /// their count — nothing the set sends uses them).
    static func jsonValue(_ value: AMQPFieldValue) -> Any {
        switch value {
        case .bool(let v): return v
        case .int8, .uint8, .int16, .uint16, .int32, .uint32, .int64, .uint64, .timestamp:
            return value.intValue.map { $0 as Any } ?? "\(value)"
        // NaN and the infinities have no JSON number: written as text. (RabbitMQ
        // closes a connection that sends one, so none should reach a queue.)
        case .float(let v): return v.isFinite ? Double(v) : "\(v)"
        case .double(let v): return v.isFinite ? v : "\(v)"
        case .decimal(let scale, let v): return Double(v) / pow(10, Double(scale))
        case .string(let s): return s
        case .bytes(let b): return "(\(b.count) bytes)"
        case .array(let items): return items.map(jsonValue)
        case .table(let table): return table.mapValues(jsonValue)
        case .void: return NSNull()
        }
    }

    /// Counts per key, largest first (ties by key): `key=count key=count`.
    static func counts<T>(_ items: [T], by key: (T) -> String) -> [(key: String, count: Int)] {
        var counts: [String: Int] = [:]
        for item in items { counts[key(item), default: 0] += 1 }
        return counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { ($0.key, $0.value) }
    }
}
