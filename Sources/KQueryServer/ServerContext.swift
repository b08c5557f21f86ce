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
        /// The single-use web auth token the request spent, if it did.
        var spentToken: String?
        var pushes = 0
        /// Which credential admitted the request, or why it was refused (the console shows it).
        var authentication: String?
        /// Whether the console's request log keeps the bodies (the request log sets it).
        var capturesBodies = false
        /// The request's and answer's bodies, as the console shows them.
        var requestBody = ""
        var responseBody = ""
        /// The numbers of the record changes the request committed, in the console's change journal.
        var changes: [Int] = []
    }

    let facts = Locked(Facts())

    func record(user: String?, bySignIn: Bool = false, spentToken: String? = nil) {
        facts.withLock {
            $0.user = user
            $0.bySignIn = bySignIn
            $0.spentToken = spentToken
        }
    }
    func record(pushes: Int) { facts.withLock { $0.pushes = pushes } }
    func record(authentication: String) { facts.withLock { $0.authentication = authentication } }
    func record(changes: [Int]) { facts.withLock { $0.changes += changes } }

    /// Keeps a body as the console shows it (`ConsoleRequest.text`), when the console logs requests.
    func record(requestBody: [UInt8]) {
        facts.withLock { if $0.capturesBodies { $0.requestBody = ConsoleRequest.text(requestBody) } }
    }
    func record(responseBody: [UInt8]) {
        facts.withLock { if $0.capturesBodies { $0.responseBody = ConsoleRequest.text(responseBody) } }
    }
}
