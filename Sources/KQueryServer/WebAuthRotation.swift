import Hummingbird
import KQueryWebServices

/// A header name (Hummingbird re-exports `HTTPFields` but not its element type's name).
typealias HeaderName = HTTPFields.Element.Name

/// CloudKit's web auth token rotation: the successful answer to a request a web auth token signed
/// in carries the client's next token in `X-Apple-CloudKit-Web-Auth-Token` (CloudKit JS and other
/// clients adopt it). Whether the old one still works is `Authentication`'s call (single-use or not).
///
/// An answer that is not a success (any non-2xx) hands out no token and, when tokens are
/// single-use, gives the spent one back: CloudKit JS never reads an error answer's header, so a
/// token spent there would leave the client with none and every later request refused.
struct WebAuthRotation: RouterMiddleware {
    static let header = HeaderName("X-Apple-CloudKit-Web-Auth-Token")!
    let secret: ServerSecret
    let spentTokens: (any WebAuthTokenLedger)?
    let blockingWork: BlockingWork

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            await giveBackSpentToken(context)
            throw error
        }
        let facts = context.entry.facts.withLock { $0 }
        guard (200..<300).contains(response.status.code) else {
            await giveBackSpentToken(context)
            return response
        }
        if facts.bySignIn, let user = facts.user {
            response.headers[Self.header] = secret.webAuthToken(user: user)
        }
        return response
    }

    private func giveBackSpentToken(_ context: ServerContext) async {
        guard let spentTokens, let token = context.entry.facts.withLock({ $0.spentToken }) else { return }
        if spentTokens.isShared {
            _ = try? await blockingWork.run { () throws(ServerError) in spentTokens.giveBack(token) }
        } else {
            spentTokens.giveBack(token)
        }
    }
}

/// Lets CloudKit JS in a web page of another origin (a dev server on another port) call the
/// server: CORS preflights are answered, and answers name the origin and expose the rotated web
/// auth token. The server listens on loopback by default, so this opens nothing to the network.
struct BrowserAccess: RouterMiddleware {
    let cors = CORSMiddleware<ServerContext>(
        allowOrigin: .originBased,
        allowHeaders: [
            .accept, .contentType, .origin, HeaderName("X-Apple-CloudKit-Request-KeyID")!,
            HeaderName("X-Apple-CloudKit-Request-ISO8601Date")!, HeaderName("X-Apple-CloudKit-Request-SignatureV1")!,
        ],
        allowMethods: [.get, .post, .options],
        exposedHeaders: [WebAuthRotation.header.canonicalName])

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        var response = try await cors.handle(request, context: context, next: next)
        // Hummingbird names exposed headers on preflights only; browsers read them off the answer.
        if request.headers.contains(.origin), request.method != .options {
            response.headers[.accessControlExposeHeaders] = WebAuthRotation.header.canonicalName
        }
        return response
    }
}
