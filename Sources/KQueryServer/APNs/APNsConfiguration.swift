import Crypto
import KQuery
import NIOSSL
import KQueryWebServices

import Foundation

/// How `kquery serve` reaches Apple Push Notification service (SPEC §10): the provider key that
/// signs its JWTs, the app's topic, and the two hosts. Read from the configuration file's `"apns"`
/// object; without one, APNs delivery is off.
public struct APNsConfiguration: Sendable {
    /// The 10-character Team ID: the JWT's `iss`.
    public var teamID: String
    /// The 10-character ID of the .p8 key: the JWT's `kid`.
    public var keyID: String
    /// The .p8 key (P-256) that signs the provider tokens, as its raw scalar (swift-crypto's key
    /// type is not `Sendable`).
    public private(set) var privateKeyRepresentation: Data
    /// The app's bundle ID: `apns-topic`.
    public var topic: String
    /// Where devices registered with apnsEnvironment "production" are reached.
    public var productionURL = "https://api.push.apple.com"
    /// Where devices registered with apnsEnvironment "development" are reached.
    public var sandboxURL = "https://api.sandbox.push.apple.com"
    /// Certificates trusted besides the system's (a test's own APNs, a proxy).
    public var trustRoots: [NIOSSLCertificate] = []
    /// How long APNs keeps trying an offline device: `apns-expiration` is the queue time plus this.
    public var expiration: Duration = .seconds(86_400)
    /// Sends of one push to one device before it is left pending (to be tried again later).
    public var maximumAttempts = 5
    /// The wait after the first failed send; it doubles after each further failure.
    public var initialBackoff: Duration = .milliseconds(500)
    /// The longest wait between two sends of one push.
    public var maximumBackoff: Duration = .seconds(30)
    /// How often the outbox is looked at when no modify wakes the delivery.
    public var pollInterval: Duration = .seconds(30)
    /// How long one request may take.
    public var requestTimeout: Duration = .seconds(20)
    /// The age at which the provider token is signed anew: APNs refuses one older than an hour and
    /// one renewed within 20 minutes.
    public var tokenRefreshInterval: Duration = .seconds(40 * 60)
    /// Where delivery reports refusals and failures (nil: standard error, unless requests are not logged).
    public var log: (@Sendable (String) -> Void)?

    /// A configuration for the key `privateKeyPEM` (a .p8 file's text: "-----BEGIN PRIVATE KEY-----").
    public init(teamID: String, keyID: String, privateKeyPEM: String, topic: String) throws(ServerError) {
        self.teamID = teamID
        self.keyID = keyID
        self.topic = topic
        do { privateKeyRepresentation = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM).rawRepresentation } catch {
            throw ServerError.badRequest("configuration: \"apns.privateKey\" is not a P-256 private key in PEM (a .p8 file): \(error)")
        }
    }

    /// Reads the `"apns"` object: `{"teamID", "keyID", "privateKey": PEM | "privateKeyPath": FILE,
    /// "topic", "productionURL"?, "sandboxURL"?, "trustRootsPEM"?, "expirationSeconds"?}`. A relative
    /// `privateKeyPath` is read from `directory`.
    public init(json: JSON, directory: String?) throws(ServerError) {
        guard case .object = json else { throw ServerError.badRequest("configuration: \"apns\" must be an object") }
        func string(_ key: String) throws(ServerError) -> String? {
            guard let value = json[key] else { return nil }
            guard let text = value.stringValue, !text.isEmpty else {
                throw ServerError.badRequest("configuration: \"apns.\(key)\" must be a non-empty string")
            }
            return text
        }
        func required(_ key: String) throws(ServerError) -> String {
            guard let text = try string(key) else { throw ServerError.badRequest("configuration: \"apns.\(key)\" is missing") }
            return text
        }
        let pem: String
        if let inline = try string("privateKey") {
            pem = inline
        } else if let path = try string("privateKeyPath") {
            let file = path.hasPrefix("/") || directory == nil ? path : ((directory ?? "") as NSString).appendingPathComponent(path)
            guard let data = FileManager.default.contents(atPath: file), let text = String(data: data, encoding: .utf8) else {
                throw ServerError.badRequest("configuration: \"apns.privateKeyPath\": cannot read \(file)")
            }
            pem = text
        } else {
            throw ServerError.badRequest("configuration: \"apns\" needs \"privateKey\" (PEM) or \"privateKeyPath\" (a .p8 file)")
        }
        try self.init(teamID: try required("teamID"), keyID: try required("keyID"), privateKeyPEM: pem, topic: try required("topic"))
        for key in ["productionURL", "sandboxURL"] {
            guard let url = try string(key) else { continue }
            guard let parsed = URL(string: url), parsed.scheme == "https" || parsed.scheme == "http", parsed.host != nil, parsed.path.isEmpty || parsed.path == "/" else {
                throw ServerError.badRequest("configuration: \"apns.\(key)\" must be an http(s) URL without a path, such as https://api.push.apple.com")
            }
            let base = url.hasSuffix("/") ? String(url.dropLast()) : url
            if key == "productionURL" { productionURL = base } else { sandboxURL = base }
        }
        if let roots = try string("trustRootsPEM") {
            do { trustRoots = try NIOSSLCertificate.fromPEMBytes(Array(roots.utf8)) } catch {
                throw ServerError.badRequest("configuration: \"apns.trustRootsPEM\" is not PEM certificates: \(error)")
            }
            if trustRoots.isEmpty { throw ServerError.badRequest("configuration: \"apns.trustRootsPEM\" holds no certificate") }
        }
        if let seconds = json["expirationSeconds"] {
            guard case .int(let value) = seconds, value >= 0 else {
                throw ServerError.badRequest("configuration: \"apns.expirationSeconds\" must be a whole number of seconds, 0 or more")
            }
            expiration = .seconds(value)
        }
    }
}
