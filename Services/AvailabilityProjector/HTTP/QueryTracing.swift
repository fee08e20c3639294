import Hummingbird

/// A server span per query the projector answers over HTTP — `/rooms`,
/// `/rooms/{name}`, `/suggest`, `/api/day`, `/api/week`, `/api/book` —
/// named by its route (Hummingbird's ``TracingMiddleware``: method, path,
/// query, status). A caller's `traceparent` (and `tracestate`) header is
/// read with the process's propagator, so its trace continues here; the
/// command `/api/book` sends is a child of this span.
///
/// The page's own requests that are not queries (`/`, `/api/page`, and
/// `/api/revision`, which every open page polls) and the operations
/// routes are not traced: a span per poll would drown the queries.
struct QueryTracingMiddleware<Context: RequestContext>: RouterMiddleware {
    // Query strings are recorded as they are: they hold dates, room names
    // and equipment, nobody's personal data (the page's booking is a POST
    // body, which is not recorded).
    private let tracing = TracingMiddleware<Context>(redactingQueryParameters: [])

    /// Whether a request to `path` gets a span.
    static func traces(_ path: String) -> Bool {
        switch path {
        case "/rooms", "/suggest", "/api/day", "/api/week", "/api/book": true
        default: path.hasPrefix("/rooms/")
        }
    }

    func handle(_ request: Request, context: Context,
                next: (Request, Context) async throws -> Response) async throws -> Response {
        guard Self.traces(request.uri.path) else { return try await next(request, context) }
        return try await tracing.handle(request, context: context, next: next)
    }
}
