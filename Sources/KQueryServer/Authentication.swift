import Crypto
import KQuery
import KQueryContainer
import KQueryWebServices

import Foundation

/// Who makes a request (SPEC §11): an API token (`ckAPIToken`) admits the app and a web auth token
/// (`ckWebAuthToken`) names the user; or a server-to-server key signs the request, for the public
/// database only.
struct Authentication: Sendable {
    let apiTokens: Set<String>
    let serverKeys: [String: ServerKey]
    let secret: ServerSecret
    let signatureTolerance: Double
    /// How long a web auth token is accepted after it was issued (seconds).
    var webAuthTokenLifetime: Double = ServerConfiguration.defaultWebAuthTokenLifetime
    /// When set, a web auth token is accepted once (CloudKit's documented rule); each answer hands
    /// the client the next one.
    var spentTokens: (any WebAuthTokenLedger)? = nil

    /// What authenticating a request needs to see of it.
    struct Credentials {
        var apiToken: String?
        var webAuthToken: String?
        var keyID: String?
        var date: String?
        var signature: String?
        var subpath: String
        var body: [UInt8]

        /// What admitted the request, as the console's request log says it (a token shown by its
        /// first characters only).
        func decision(_ requester: Requester) -> String {
            if let keyID { return "server-to-server key \(keyID) as \(requester.user ?? "-")" }
            let app = "API token " + (apiToken.map { $0.count > 12 ? $0.prefix(12) + "…" : $0 } ?? "-")
            guard let user = requester.user else { return app + ", anonymous" }
            return app + ", web auth token of \(user)"
        }
    }

    /// Who a request acts as.
    struct Requester: Equatable {
        /// nil: an anonymous request to the public database.
        var user: String?
        /// Whether a web auth token named the user (its answer then carries the next token).
        var bySignIn = false
        /// The single-use token this request spent: given back if the answer is not a success.
        var spentToken: String? = nil
        /// When that token was issued.
        var issued: Date? = nil
    }

    /// The web auth token a request carries, if any. CloudKit JS sends `null` or `undefined` (the
    /// JavaScript value printed into the URL) or an empty value when nobody is signed in: that is
    /// no token, so a public read stays anonymous and a private one asks for sign-in (421), rather
    /// than failing as a forged token (401).
    static func webAuthToken(_ value: String?) -> String? {
        guard let value, !value.isEmpty, value != "null", value != "undefined" else { return nil }
        return value
    }

    /// Who a request acts as. `scope` is the database the request reaches, nil for the device
    /// endpoints (which need a user).
    func requester(_ credentials: Credentials, scope: DatabaseScope?, now: Date = Date()) throws(ServerError) -> Requester {
        if let keyID = credentials.keyID {
            guard scope == .public else { throw ServerError.authenticationFailed("server-to-server keys sign requests to the public database only") }
            guard let key = serverKeys[keyID] else { throw ServerError.authenticationFailed("unknown server-to-server key '\(keyID)'") }
            guard let dateText = credentials.date, let signature = credentials.signature else {
                throw ServerError.authenticationFailed("a signed request needs the X-Apple-CloudKit-Request-ISO8601Date and -SignatureV1 headers")
            }
            guard let date = Self.date(dateText) else { throw ServerError.authenticationFailed("unreadable request date '\(dateText)'") }
            guard abs(date.timeIntervalSince(now)) <= signatureTolerance else {
                throw ServerError.authenticationFailed("the request date is more than \(Int(signatureTolerance)) seconds from the server's clock")
            }
            let message = ServerKey.message(date: dateText, body: credentials.body, subpath: credentials.subpath)
            guard key.isValidSignature(signature, for: message) else { throw ServerError.authenticationFailed("Authentication failed") }
            return Requester(user: key.userRecordName)
        }
        guard let apiToken = credentials.apiToken else {
            throw ServerError.authenticationRequired("a ckAPIToken (or a server-to-server key signature) is required")
        }
        guard apiTokens.isEmpty || apiTokens.contains(apiToken) else { throw ServerError.authenticationFailed("unknown ckAPIToken") }
        guard let webAuthToken = Self.webAuthToken(credentials.webAuthToken) else {
            if scope == .public { return Requester(user: nil) }
            throw ServerError.authenticationRequired(
                scope.map { "the \($0.name) database requires a signed-in user (ckWebAuthToken)" } ?? "this request requires a signed-in user (ckWebAuthToken)")
        }
        guard let identity = secret.identity(webAuthToken: webAuthToken) else { throw ServerError.authenticationFailed("invalid ckWebAuthToken") }
        if let issued = identity.issued, now.timeIntervalSince(issued) > webAuthTokenLifetime {
            throw ServerError.authenticationFailed(
                "the ckWebAuthToken expired (web auth tokens last \(Int(webAuthTokenLifetime)) seconds; sign in again with a new one)")
        }
        // A shared ledger (PostgreSQL) is a round trip: the caller spends the token on a blocking
        // thread (`spend`), not here on the request's.
        if let spentTokens, !spentTokens.isShared, try !spentTokens.spend(webAuthToken, issued: identity.issued ?? now, now: now, lifetime: webAuthTokenLifetime) {
            throw Self.alreadyUsed
        }
        return Requester(user: identity.user, bySignIn: true, spentToken: spentTokens == nil ? nil : webAuthToken,
                         issued: identity.issued ?? now)
    }

    static let alreadyUsed = ServerError.authenticationFailed(
        "the ckWebAuthToken was already used (tokens are single-use here: use the one the last answer's X-Apple-CloudKit-Web-Auth-Token header carried)")

    /// Spends the requester's single-use token in a shared ledger (which `requester` left to the
    /// caller): refused when any node spent it already.
    func spend(_ requester: Requester, now: Date = Date()) throws(ServerError) {
        guard let spentTokens, spentTokens.isShared, let token = requester.spentToken else { return }
        guard try spentTokens.spend(token, issued: requester.issued ?? now, now: now, lifetime: webAuthTokenLifetime) else { throw Self.alreadyUsed }
    }

    /// An ISO 8601 date with or without fractional seconds.
    static func date(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}

/// Where single-use web auth tokens are spent: in this process's memory, or in the database the
/// nodes of a cluster share (so a token spent on one node is spent on all).
protocol WebAuthTokenLedger: Sendable {
    /// Whether spending is a round trip to a shared database (done on a blocking thread).
    var isShared: Bool { get }
    /// Spends `token` (issued at `issued`): false when it was spent already.
    func spend(_ token: String, issued: Date, now: Date, lifetime: Double) throws(ServerError) -> Bool
    /// Takes back the spending of `token`: the request it signed was not answered with success.
    func giveBack(_ token: String)
}

/// Tokens spent on any node of a cluster, in its shared database: each under the SHA-256 of the
/// token (the database never holds a usable token), until the token would have expired.
struct SharedSpentWebAuthTokens: WebAuthTokenLedger {
    let store: any SharedContainerStore
    var isShared: Bool { true }

    static func key(_ token: String) -> String { ServerSecret.hex(SHA256.hash(data: Array(token.utf8))) }

    func spend(_ token: String, issued: Date, now: Date, lifetime: Double) throws(ServerError) -> Bool {
        let expires = Int64(((issued.timeIntervalSince1970 + lifetime) * 1000).rounded(.up))
        do throws(ContainerError) { return try store.spendWebAuthToken(Self.key(token), expires: expires) } catch { throw ServerError(error) }
    }

    func giveBack(_ token: String) { try? store.giveBackWebAuthToken(Self.key(token)) }
}

/// The web auth tokens already used, when tokens are single-use: each is remembered until it
/// would have expired anyway, so the set stays as small as the traffic of one token lifetime.
/// (Kept in memory: a restart forgets it, and a token spent before it may be used once more.)
final class SpentWebAuthTokens: WebAuthTokenLedger {
    var isShared: Bool { false }

    private struct State {
        var spent: [String: Date] = [:]
        var nextSweep = 1024
    }

    private let state = Locked(State())

    /// Spends `token` (issued at `issued`): false when it was spent already.
    func spend(_ token: String, issued: Date, now: Date, lifetime: Double) throws(ServerError) -> Bool {
        state.withLock { state in
            guard state.spent[token] == nil else { return false }
            state.spent[token] = issued
            if state.spent.count >= state.nextSweep {
                state.spent = state.spent.filter { now.timeIntervalSince($0.value) <= lifetime }
                state.nextSweep = max(1024, state.spent.count * 2)
            }
            return true
        }
    }

    /// Takes back the spending of `token`: the request it signed was not answered with success,
    /// and a client keeps the token it has when an answer fails (CloudKit JS reads the next token
    /// only off successful answers).
    func giveBack(_ token: String) {
        _ = state.withLock { $0.spent.removeValue(forKey: token) }
    }
}
