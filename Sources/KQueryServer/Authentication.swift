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

    /// What authenticating a request needs to see of it.
    struct Credentials {
        var apiToken: String?
        var webAuthToken: String?
        var keyID: String?
        var date: String?
        var signature: String?
        var subpath: String
        var body: [UInt8]
    }

    /// The user a request acts as (nil: an anonymous request to the public database). `scope` is
    /// the database the request reaches, nil for the device endpoints (which need a user).
    func user(_ credentials: Credentials, scope: DatabaseScope?, now: Date = Date()) throws(ServerError) -> String? {
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
            return key.userRecordName
        }
        guard let apiToken = credentials.apiToken else {
            throw ServerError.authenticationRequired("a ckAPIToken (or a server-to-server key signature) is required")
        }
        guard apiTokens.isEmpty || apiTokens.contains(apiToken) else { throw ServerError.authenticationFailed("unknown ckAPIToken") }
        guard let webAuthToken = credentials.webAuthToken else {
            if scope == .public { return nil }
            throw ServerError.authenticationRequired(
                scope.map { "the \($0.name) database requires a signed-in user (ckWebAuthToken)" } ?? "this request requires a signed-in user (ckWebAuthToken)")
        }
        guard let user = secret.user(webAuthToken: webAuthToken) else { throw ServerError.authenticationFailed("invalid ckWebAuthToken") }
        return user
    }

    /// An ISO 8601 date with or without fractional seconds.
    static func date(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
