import Foundation
import Logging
import ServiceLifecycle

/// Publishes outbox rows that nobody published: a row is normally
/// published right after its commit, or with its booking's next message,
/// or at start-up; one whose publish failed, whose mark was lost, or whose
/// commit reached PostgreSQL only after its caller had given up (a
/// partition: the COMMIT sat in the TCP buffer and arrived when the link
/// came back) would otherwise wait for a booking message that may never
/// come — a retry message stuck there is a pass never retried.
///
/// Every `interval` it looks for bookings with rows unpublished for longer
/// than `interval` and flushes each under the booking's lock
/// (``PassConsumer/sweep(olderThan:)``). Several instances may publish the
/// same row once more; every consumer of these messages is idempotent by
/// message id. Stops at the graceful shutdown.
struct OutboxSweep: Service {
    let consumer: PassConsumer
    let interval: Duration
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown { [consumer, interval, logger] in
            while !Task.isCancelled {
                do {
                    try await Task.sleep(for: interval)
                } catch {
                    return
                }
                let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
                await consumer.sweep(olderThan: seconds, logger: logger)
            }
        }
    }
}
