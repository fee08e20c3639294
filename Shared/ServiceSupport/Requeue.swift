import AMQPClient

extension AMQPDelivery {
    /// How long a delivery waits before it goes back after a failure of our
    /// own (database, disk).
    public static let requeuePause: Duration = .seconds(1)

    /// Gives the delivery back to its queue after ``requeuePause``, for a
    /// failure of this service rather than of the message: the message is
    /// fine and will work once the database or disk does. The pause keeps
    /// such a failure from becoming a hot redelivery loop that burns CPU and
    /// the queue's delivery limit (which would dead-letter a good message).
    /// A failure to settle is left to the broker: the delivery comes back
    /// when the channel closes.
    public func requeueAfterPause(_ pause: Duration = AMQPDelivery.requeuePause) async {
        try? await Task.sleep(for: pause)
        try? await nack(requeue: true)
    }
}
