import KQuery
import KQueryContainer
import KQueryStore
import KQueryWebServices

import Foundation

/// What `kquery serve` is told: where the data lives, where to listen, whom to let in.
public struct ServerConfiguration: Sendable {
    /// The directory holding one container file per container identifier, and the web auth secret.
    public var dataDirectory: String
    public var host: String = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var port: Int = 8080
    /// API tokens (`ckAPIToken`) accepted; empty accepts any.
    public var apiTokens: Set<String> = []
    /// Server-to-server keys by key ID, for the public database.
    public var serverKeys: [String: ServerKey] = [:]
    /// The largest request body accepted; a larger one is answered 413.
    public var maximumBodySize: Int = 2 * 1024 * 1024
    /// The most requests served at once (web courier polls aside): past it a request is answered
    /// 503 TRY_AGAIN_LATER with `retryAfter` before its body is read, so the bodies held in memory
    /// stay under this times `maximumBodySize`.
    public var maximumRequestsInFlight: Int = 512
    /// How long a web courier GET waits for a notification before answering 204.
    public var courierTimeout: Duration = .seconds(30)
    /// How far a signed request's date may be from the server's clock.
    public var signatureTolerance: Double = 300
    /// How long a web auth token is accepted after it was issued, in seconds (CloudKit's two weeks
    /// with "Keep me signed in"; 1,800 is its default session).
    public var webAuthTokenLifetime: Double = Self.defaultWebAuthTokenLifetime
    public static let defaultWebAuthTokenLifetime: Double = 14 * 24 * 3600
    /// Whether a web auth token is accepted once only, as CloudKit documents (its live service
    /// rotates tokens but takes old ones too, which is the default here): for testing that a
    /// client adopts the token each answer hands back.
    public var singleUseWebAuthTokens = false
    /// The `.ckdb` schema records and queries must fit (nil: any record type and field, any query).
    public var schema: Schema?
    /// Threads for the container's blocking work (a modify waits for the disk): as many modifies
    /// can be in flight at once, and share group commits.
    public var blockingThreads: Int = 64
    /// Threads for queries that run as SQL (a node on PostgreSQL; nil: the blocking threads).
    /// Each holds a connection while its statement runs: 64 threads queued on a pool of 8 made
    /// the queries' p99 107-117 ms where 16 threads gave 61-67 ms (and 2-18% more queries).
    public var queryThreads: Int?
    /// Whether each request is logged to standard error.
    public var logsRequests = true
    /// APNs delivery; nil turns it off (the web courier alone then delivers, and decides when a
    /// push leaves the outbox).
    public var apns: APNsConfiguration?
    /// Asset limits and lifetimes (SPEC §12): 50 MB an asset, upload URLs for 15 minutes, receipts
    /// for an hour, unreferenced bytes kept a day.
    public var assetPolicy = AssetPolicy()
    /// How long a record's asset `downloadURL` works, in seconds (SPEC §12's Decision: an hour).
    public var assetDownloadLifetime: Double = 3600
    /// How often expired uploads and unreferenced assets are collected.
    public var assetCollectionInterval: Duration = .seconds(600)
    /// Users set up with the server (the configuration file's `users`); `DIR/users.json`, which
    /// `kquery users` writes, adds to them and wins for a name in both.
    public var users = UserDirectory()
    /// The shared database the containers and the token secret live in, when this server is one
    /// node of many (nil: container files and the secret in `dataDirectory`, SPEC §16).
    public var sharedStore: (any SharedContainerStore)?

    /// The user directory requests see: the shared database's (`kquery users --postgres`, every
    /// node's) when the containers live there, over `DIR/users.json` (a node's own), over the
    /// configuration file's users; a name in several takes the first's entry.
    public func userDirectory() throws(ServerError) -> UserDirectory {
        let file = try UserDirectory.load(directory: dataDirectory)
        let kept = if let sharedStore { try sharedStore.userDirectory().overlaying(file) } else { file }
        return kept.overlaying(users)
    }

    /// The console's credential (`--console-token`): with one, `/console` asks for it; without,
    /// the console is served on a loopback address only.
    public var consoleToken: String?

    /// Whether `/console` is served: on loopback always, elsewhere only behind a console token.
    public var servesConsole: Bool { consoleToken != nil || Self.isLoopback(host) }

    /// Whether `host` is reachable from this machine only.
    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    public init(dataDirectory: String) {
        self.dataDirectory = dataDirectory
    }

    /// Reads a configuration file: `{"apiTokens": ["..."], "serverToServerKeys": [{"keyID": "...",
    /// "publicKey": "-----BEGIN PUBLIC KEY-----...", "userRecordName": "_server"}],
    /// "webAuthTokenLifetime": 1800, "singleUseWebAuthTokens": true, "apns": {...}, "users": [{"name": "_alice",
    /// "emailAddress": "alice@example.com", "discoverable": true}], "assets": {"maximumSize": 50000000,
    /// "uploadLifetime": 900, ...}}` (every member optional; `"apns"` as
    /// `APNsConfiguration(json:directory:)` reads it, relative paths from `directory`, the configuration
    /// file's; each of `"users"` as `DirectoryUser(json:)` reads it; `"assets"` as `loadAssets` does).
    public mutating func load(configurationText text: String, directory: String? = nil) throws(ServerError) {
        let json: JSON
        do { json = try JSON.parse(text) } catch { throw ServerError.badRequest("configuration: \(error)") }
        guard case .object = json else { throw ServerError.badRequest("configuration: expected a JSON object") }
        if let tokens = json["apiTokens"] {
            guard case .array(let elements) = tokens else { throw ServerError.badRequest("configuration: \"apiTokens\" must be an array of strings") }
            for element in elements {
                guard let token = element.stringValue else { throw ServerError.badRequest("configuration: \"apiTokens\" must be an array of strings") }
                apiTokens.insert(token)
            }
        }
        if let keys = json["serverToServerKeys"] {
            guard case .array(let elements) = keys else { throw ServerError.badRequest("configuration: \"serverToServerKeys\" must be an array") }
            for element in elements {
                guard let keyID = element["keyID"]?.stringValue, let pem = element["publicKey"]?.stringValue else {
                    throw ServerError.badRequest("configuration: each server-to-server key needs \"keyID\" and \"publicKey\" (PEM)")
                }
                serverKeys[keyID] = try ServerKey(keyID: keyID, pem: pem, userRecordName: element["userRecordName"]?.stringValue ?? "_server")
            }
        }
        if let lifetime = json["webAuthTokenLifetime"] {
            guard let seconds = lifetime.doubleValue, seconds > 0 else {
                throw ServerError.badRequest("configuration: \"webAuthTokenLifetime\" must be a positive number of seconds")
            }
            webAuthTokenLifetime = seconds
        }
        if let singleUse = json["singleUseWebAuthTokens"] {
            guard case .bool(let value) = singleUse else { throw ServerError.badRequest("configuration: \"singleUseWebAuthTokens\" must be true or false") }
            singleUseWebAuthTokens = value
        }
        if let apns = json["apns"] { self.apns = try APNsConfiguration(json: apns, directory: directory) }
        if let users = json["users"] {
            do throws(ServerError) { self.users = try UserDirectory(json: users) } catch {
                throw ServerError.badRequest("configuration: \(error.reason)")
            }
        }
        if let assets = json["assets"] { try loadAssets(assets) }
    }

    /// The members of the configuration's `"assets"` object, each optional: `"maximumSize"` in
    /// bytes, and in seconds `"uploadLifetime"`, `"receiptLifetime"`, `"gracePeriod"`,
    /// `"downloadLifetime"` and `"collectionInterval"`. Every one must be positive; an unknown
    /// member is refused, since a misspelt limit would otherwise be silently the default.
    mutating func loadAssets(_ json: JSON) throws(ServerError) {
        guard case .object(let members) = json else { throw ServerError.badRequest("configuration: \"assets\" must be an object") }
        let known = ["maximumSize", "uploadLifetime", "receiptLifetime", "gracePeriod", "downloadLifetime", "collectionInterval"]
        for (name, _) in members where !known.contains(name) {
            throw ServerError.badRequest("configuration: \"assets\" has no member \"\(name)\" (it takes \(known.map { "\"\($0)\"" }.joined(separator: ", ")))")
        }
        /// A positive number of seconds, nil when the member is absent.
        func seconds(_ name: String) throws(ServerError) -> Double? {
            guard let value = json[name] else { return nil }
            // Milliseconds are what the policy keeps: a lifetime must be at least one.
            guard let seconds = value.doubleValue, seconds.isFinite, seconds >= 0.001, seconds <= 10 * 365 * 24 * 3600 else {
                throw ServerError.badRequest("configuration: \"assets\".\"\(name)\" must be a positive number of seconds (at most ten years)")
            }
            return seconds
        }
        if let size = json["maximumSize"] {
            guard let bytes = size.int64Value, bytes > 0 else {
                throw ServerError.badRequest("configuration: \"assets\".\"maximumSize\" must be a positive whole number of bytes")
            }
            assetPolicy.maximumSize = bytes
        }
        if let value = try seconds("uploadLifetime") { assetPolicy.uploadLifetime = Int64((value * 1000).rounded()) }
        if let value = try seconds("receiptLifetime") { assetPolicy.receiptLifetime = Int64((value * 1000).rounded()) }
        if let value = try seconds("gracePeriod") { assetPolicy.gracePeriod = Int64((value * 1000).rounded()) }
        if let value = try seconds("downloadLifetime") { assetDownloadLifetime = value }
        if let value = try seconds("collectionInterval") { assetCollectionInterval = .milliseconds(Int64((value * 1000).rounded())) }
    }
}
