import Crypto
import KQuery
import KQueryWebServices

import Foundation

/// The JWT that authenticates every APNs request (SPEC §10): header `{"alg":"ES256","kid":keyID}`,
/// claims `{"iss":teamID,"iat":seconds}`, signed with the team's .p8 key. One token is reused until
/// it is `refreshInterval` old, as APNs asks (renewed at most every 20 minutes, at least every 60).
final class APNsProviderToken: Sendable {
    let teamID: String
    let keyID: String
    /// The .p8 key's raw scalar.
    let key: Data
    let refreshInterval: Duration
    /// The clock (tests move it).
    let now: @Sendable () -> Date
    private let cached = Locked<(token: String, issued: Date)?>(nil)

    init(teamID: String, keyID: String, key: Data, refreshInterval: Duration, now: @escaping @Sendable () -> Date = { Date() }) {
        self.teamID = teamID
        self.keyID = keyID
        self.key = key
        self.refreshInterval = refreshInterval
        self.now = now
    }

    /// The current token, signed anew when the cached one is too old.
    func current() throws(ServerError) -> String {
        let date = now()
        let refresh = Double(refreshInterval.components.seconds)
        if let cached = cached.withLock({ $0 }), date.timeIntervalSince(cached.issued) < refresh, date >= cached.issued {
            return cached.token
        }
        let token = try Self.sign(teamID: teamID, keyID: keyID, key: key, issuedAt: date)
        cached.withLock { $0 = (token, date) }
        return token
    }

    /// Forgets the cached token (APNs answered `ExpiredProviderToken`).
    func invalidate() {
        cached.withLock { $0 = nil }
    }

    static func sign(teamID: String, keyID: String, key: Data, issuedAt date: Date) throws(ServerError) -> String {
        let header = JSON.object([("alg", .string("ES256")), ("kid", .string(keyID))]).serialized
        let claims = JSON.object([("iss", .string(teamID)), ("iat", .int(Int64(date.timeIntervalSince1970.rounded(.down))))]).serialized
        let input = Data(header.utf8).base64URLEncoded + "." + Data(claims.utf8).base64URLEncoded
        do {
            // JWS wants the raw 64-byte r‖s, not DER.
            let signer = try P256.Signing.PrivateKey(rawRepresentation: key)
            return input + "." + (try signer.signature(for: Data(input.utf8)).rawRepresentation).base64URLEncoded
        } catch {
            throw ServerError("INTERNAL_ERROR", "cannot sign the APNs provider token: \(error)", httpStatus: 500)
        }
    }
}
