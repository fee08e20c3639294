// `PassQueues`, `PassRetryMessage` and `RetryDelay` live in `SetTopology`
// (bookingctl uses them without linking the pass sender); users of the
// pass sender keep getting them with `import PassSender`.
@_exported import SetTopology
