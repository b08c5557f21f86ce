import Hummingbird
import KQuery
import KQueryWebServices

/// Bounds the requests served at once: past `limit`, a request is answered at once with
/// 503 TRY_AGAIN_LATER, `retryAfter` in its JSON and a `Retry-After` header, before its body is
/// read. A flood of requests then costs a short answer each, not a body in memory and a place in
/// the queue for the container's threads. Web courier polls (paths under `exempting`) wait for
/// pushes rather than work, and are not counted.
struct AdmissionLimit: RouterMiddleware {
    static let retryAfterSeconds = 1
    let limit: Int
    let inFlight: Locked<Int>
    let exempting: String

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        if request.uri.path.hasPrefix(exempting) { return try await next(request, context) }
        let admitted = inFlight.withLock { count -> Bool in
            guard count < limit else { return false }
            count += 1
            return true
        }
        guard admitted else {
            let refusal = ServerError.tryAgainLater(
                "the server is busy (\(limit) requests in flight); retry after \(Self.retryAfterSeconds) s", retryAfter: Self.retryAfterSeconds)
            var response = CloudKitServer.response(ServiceAnswer(json: refusal.webServicesJSON, status: refusal.httpStatus), loggingIn: context.entry)
            response.headers[HeaderName("Retry-After")!] = String(Self.retryAfterSeconds)
            return response
        }
        defer { inFlight.withLock { $0 -= 1 } }
        return try await next(request, context)
    }
}
