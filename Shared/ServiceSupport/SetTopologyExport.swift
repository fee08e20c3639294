// The set's topology moved out of this module (into `SetTopology`, so that
// `bookingctl` can use it without the server libraries this module links);
// every service still gets it with `import ServiceSupport`.
@_exported import SetTopology
