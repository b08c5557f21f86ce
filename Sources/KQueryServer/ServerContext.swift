import Hummingbird
import KQuery

/// The request context: Hummingbird's core storage and the request's log entry, which the routes
/// fill in (the user, the pushes queued) and the request log prints.
public struct ServerContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    let entry = RequestLogEntry()

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }
}

/// What the request log says of a request beyond method, path, status and time.
final class RequestLogEntry: Sendable {
    struct Facts {
        var user: String?
        /// Whether a web auth token named the user (the answer then hands back the next one).
        var bySignIn = false
        var pushes = 0
    }

    let facts = Locked(Facts())

    func record(user: String?, bySignIn: Bool = false) {
        facts.withLock {
            $0.user = user
            $0.bySignIn = bySignIn
        }
    }
    func record(pushes: Int) { facts.withLock { $0.pushes = pushes } }
}
