import AsyncHTTPClient
import Foundation
import KQuery
import NIOCore
import NIOHTTP1

/// Why a Web Services call failed: the server's `serverErrorCode` (or `HTTP n`) and `reason`, an
/// answer that could not be read, or no answer at all.
public struct WebServicesClientError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// The server answered with an error: `serverErrorCode` says which.
        case server
        /// The answer was not what the API promises.
        case invalidAnswer
        /// No answer (connection refused, timed out).
        case transport
    }

    public var kind: Kind
    /// CloudKit's `serverErrorCode`, or `HTTP <status>` when the body had none.
    public var serverErrorCode: String?
    public var message: String

    public init(_ kind: Kind, _ message: String, serverErrorCode: String? = nil) {
        self.kind = kind
        self.message = message
        self.serverErrorCode = serverErrorCode
    }

    public var description: String { message }
}

/// The client half of CloudKit Web Services that the client libraries (key-value store,
/// documents) share: URLs with `ckAPIToken`/`ckWebAuthToken` (adopting a rotated web auth token),
/// JSON calls on the private database, the three asset steps of SPEC §12, asset downloads, and
/// each device's web courier WebSocket stream for pushes.
public struct WebServicesClient: Sendable {
    public let server: URL
    public let containerIdentifier: String
    public let environment: String
    public let apiToken: String
    /// The current web auth token: the server may hand out the next one with each answer.
    private let webAuthToken: Locked<String>
    /// This device's web courier token (`tokens/create`'s `apnsToken`): its push stream, and the
    /// device its modifies name so the server does not push a device its own changes.
    private let courierToken = Locked<String?>(nil)
    private let listener = CourierListener()
    /// How long one request may take.
    public var requestTimeout: TimeAmount = .seconds(60)
    /// How long `waitForPush` waits for a push before it returns anyway (the caller then syncs,
    /// which catches a push another server node handed out).
    public var listenInterval: Duration = .seconds(30)

    public init(server: URL, containerIdentifier: String, environment: String = "development", apiToken: String, webAuthToken: String) {
        self.server = server
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.apiToken = apiToken
        self.webAuthToken = Locked(webAuthToken)
    }

    // MARK: Requests

    /// `path` on the server with the credentials as query parameters.
    public func url(_ path: String) -> String {
        var base = server.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let token = webAuthToken.withLock { $0 }
        let query = "ckAPIToken=\(Self.escape(apiToken))&ckWebAuthToken=\(Self.escape(token))"
        return base + path + (path.contains("?") ? "&" : "?") + query
    }

    /// The HTTP client every request goes through: the shared one's, but a server that does not
    /// answer a connection attempt (gone, restarting) fails the request within seconds, not at its
    /// deadline (a sync then stops, and tries again later, instead of waiting a minute a request).
    private static let http: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = HTTPClient.Configuration.Timeout(connect: .seconds(5))
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    public static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? text
    }

    private func databasePath(_ operation: String) -> String {
        "/database/1/\(Self.escape(containerIdentifier))/\(environment)/private/\(operation)"
    }

    /// Sends a request, adopts a rotated web auth token, and gives the status and body.
    public func send(_ method: HTTPMethod, _ target: String, body: [UInt8]? = nil, contentType: String = "application/json",
                     timeout: TimeAmount? = nil) async throws(WebServicesClientError) -> (status: Int, body: [UInt8]) {
        var request = HTTPClientRequest(url: target)
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        do {
            let response = try await Self.http.execute(request, timeout: timeout ?? requestTimeout)
            if let next = response.headers.first(name: "X-Apple-CloudKit-Web-Auth-Token"), !next.isEmpty {
                webAuthToken.withLock { $0 = next }
            }
            let buffer = try await response.body.collect(upTo: 64 << 20)
            return (Int(response.status.code), Array(buffer.readableBytesView))
        } catch {
            throw WebServicesClientError(.transport, "\(method.rawValue) \(server.absoluteString): \(error)")
        }
    }

    /// A JSON request to the private database (GET without a body); a whole-request error becomes
    /// a thrown error.
    public func call(_ operation: String, _ body: JSON?) async throws(WebServicesClientError) -> JSON {
        let answer = try await send(body == nil ? .GET : .POST, url(databasePath(operation)), body: body?.serializedBytes)
        return try Self.json(answer, operation)
    }

    /// An answer's JSON object, or the error its status and body say.
    public static func json(_ answer: (status: Int, body: [UInt8]), _ operation: String) throws(WebServicesClientError) -> JSON {
        let json = try? answer.body.withUnsafeBufferPointer { buffer in try JSON.parse(bytes: buffer) }
        guard (200..<300).contains(answer.status) else {
            let code = json?["serverErrorCode"]?.stringValue ?? "HTTP \(answer.status)"
            let reason = json?["reason"]?.stringValue ?? String(decoding: answer.body.prefix(200), as: UTF8.self)
            throw WebServicesClientError(.server, "\(operation): \(code): \(reason)", serverErrorCode: code)
        }
        guard let json, case .object = json else {
            throw WebServicesClientError(.invalidAnswer, "\(operation): the answer is not a JSON object")
        }
        return json
    }

    // MARK: Zones

    /// Creates a zone of the private database (`zones/modify`); one that exists already is kept.
    public func createZone(_ zoneName: String) async throws(WebServicesClientError) {
        let zoneID = JSON.object([("zoneName", .string(zoneName))])
        let body = JSON.object([("operations", .array([.object([("operationType", .string("create")), ("zone", .object([("zoneID", zoneID)]))])]))])
        let zones = try await call("zones/modify", body)
        if let code = zones["zones"]?[0]?["serverErrorCode"]?.stringValue {
            throw WebServicesClientError(.server, "zones/modify: \(code): \(zones["zones"]?[0]?["reason"]?.stringValue ?? "")", serverErrorCode: code)
        }
    }

    /// One page of `changes/zone`: the records (changed ones whole, deleted ones as
    /// `{"recordName", "recordType"?, "deleted": true}`), the token after them, and whether more
    /// are waiting.
    public struct ZoneChangesPage: Sendable {
        public var records: [JSON]
        public var syncToken: String
        public var moreComing: Bool
    }

    /// The changes to a zone of the private database after `token` (nil: everything).
    public func zoneChanges(_ zoneName: String, since token: String?) async throws(WebServicesClientError) -> ZoneChangesPage {
        var zone: [(String, JSON)] = [("zoneID", .object([("zoneName", .string(zoneName))]))]
        if let token { zone.append(("syncToken", .string(token))) }
        let json = try await call("changes/zone", .object([("zones", .array([.object(zone)]))]))
        guard let answer = json["zones"]?[0], case .object = answer else { throw WebServicesClientError(.invalidAnswer, "changes/zone: no zone in the answer") }
        if let code = answer["serverErrorCode"]?.stringValue {
            throw WebServicesClientError(.server, "changes/zone: \(code): \(answer["reason"]?.stringValue ?? "")", serverErrorCode: code)
        }
        guard let next = answer["syncToken"]?.stringValue else { throw WebServicesClientError(.invalidAnswer, "changes/zone: no syncToken") }
        let records = answer["records"]?.arrayElements ?? []
        for record in records where record["recordName"]?.stringValue == nil {
            throw WebServicesClientError(.invalidAnswer, "changes/zone: a record without a recordName")
        }
        let more: Bool
        switch answer["moreComing"] {
        case .bool(let flag)?: more = flag
        case nil, .null?: more = false
        default: throw WebServicesClientError(.invalidAnswer, "changes/zone: moreComing is not a boolean")
        }
        return ZoneChangesPage(records: records, syncToken: next, moreComing: more)
    }

    // MARK: Assets

    /// The three steps of SPEC §12 for one field: a ticket, the bytes to its URL, and the
    /// `singleFile` dictionary a modify saves as the field's value.
    public func uploadAsset(_ bytes: [UInt8], zoneName: String, recordName: String, recordType: String, fieldName: String)
        async throws(WebServicesClientError) -> JSON
    {
        let files = try await uploadAssets([(recordName, bytes)], zoneName: zoneName, recordType: recordType, fieldName: fieldName)
        guard let file = files.first else { throw WebServicesClientError(.invalidAnswer, "asset upload: no singleFile") }
        return file
    }

    /// The same for many records' field: tickets 200 a request, then the bytes, `concurrency` at
    /// a time. The `singleFile` dictionaries, in order.
    public func uploadAssets(_ items: [(recordName: String, bytes: [UInt8])], zoneName: String, recordType: String, fieldName: String,
                             concurrency: Int = 8) async throws(WebServicesClientError) -> [JSON] {
        var targets: [String] = []
        for start in stride(from: 0, to: items.count, by: 200) {
            let tokens = items[start..<min(start + 200, items.count)].map { item in
                JSON.object([("recordName", .string(item.recordName)), ("recordType", .string(recordType)), ("fieldName", .string(fieldName))])
            }
            let tickets = try await call("assets/upload", .object([("zoneID", .object([("zoneName", .string(zoneName))])), ("tokens", .array(tokens))]))
            let urls = (tickets["tokens"]?.arrayElements ?? []).compactMap { $0["url"]?.stringValue }
            guard urls.count == tokens.count else { throw WebServicesClientError(.invalidAnswer, "assets/upload: \(urls.count) upload URLs for \(tokens.count) tokens") }
            targets += urls
        }
        let client = self
        return try await Self.concurrently(Array(zip(targets, items.map(\.bytes))), limit: concurrency) { (target, bytes) throws(WebServicesClientError) -> JSON in
            let json = try Self.json(try await client.send(.POST, target, body: bytes, contentType: "application/octet-stream"), "asset upload")
            guard let file = json["singleFile"], case .object = file else { throw WebServicesClientError(.invalidAnswer, "asset upload: no singleFile") }
            return file
        }
    }

    /// Runs `body` over `inputs`, at most `limit` at a time; the results in input order, or the
    /// first error.
    public static func concurrently<Input: Sendable, Output: Sendable>(
        _ inputs: [Input], limit: Int, _ body: @escaping @Sendable (Input) async throws(WebServicesClientError) -> Output
    ) async throws(WebServicesClientError) -> [Output] {
        let results = await withTaskGroup(of: (Int, Result<Output, WebServicesClientError>).self) { group in
            var results: [Result<Output, WebServicesClientError>?] = Array(repeating: nil, count: inputs.count)
            var next = 0
            func add() {
                let index = next
                let input = inputs[index]
                group.addTask {
                    do throws(WebServicesClientError) { return (index, .success(try await body(input))) } catch { return (index, .failure(error)) }
                }
                next += 1
            }
            while next < min(limit, inputs.count) { add() }
            var failed = false
            for await (index, result) in group {
                results[index] = result
                if case .failure = result { failed = true }
                // After a failure nothing more is sent: the answer is that error.
                if !failed && next < inputs.count { add() }
            }
            return results
        }
        var outputs: [Output] = []
        outputs.reserveCapacity(results.count)
        for result in results {
            switch result {
            case .success(let output)?: outputs.append(output)
            case .failure(let error)?: throw error
            case nil: throw WebServicesClientError(.transport, "a request did not finish")
            }
        }
        return outputs
    }

    /// The bytes behind an asset's `downloadURL` (its `${f}` placeholder filled with `fileName`).
    public func downloadAsset(_ downloadURL: String, fileName: String) async throws(WebServicesClientError) -> [UInt8] {
        let answer = try await send(.GET, downloadURL.replacingOccurrences(of: "${f}", with: fileName))
        guard answer.status == 200 else {
            throw WebServicesClientError(.server, "asset download answered HTTP \(answer.status)", serverErrorCode: "HTTP \(answer.status)")
        }
        return answer.body
    }

    // MARK: Pushes

    /// This device's web courier token, made by `tokens/create` (with the device as `clientId`)
    /// the first time.
    public func courierToken(device: String) async throws(WebServicesClientError) -> String {
        if let token = courierToken.withLock({ $0 }) { return token }
        let target = url("/device/1/\(Self.escape(containerIdentifier))/\(environment)/tokens/create")
        let body = JSON.object([("apnsEnvironment", .string(environment)), ("clientId", .string(device))])
        let json = try Self.json(try await send(.POST, target, body: body.serializedBytes), "tokens/create")
        guard let token = json["apnsToken"]?.stringValue, !token.isEmpty else { throw WebServicesClientError(.invalidAnswer, "tokens/create: no apnsToken") }
        courierToken.withLock { $0 = token }
        return token
    }

    /// The courier token, if `courierToken(device:)` made it already: what a modify names as its
    /// device (`apnsToken`).
    public var knownCourierToken: String? { courierToken.withLock { $0 } }

    /// Waits for a push to `device` on its own web courier WebSocket stream (opened the first
    /// time and kept open; every device of a user hears every push but its own changes), or
    /// `listenInterval`, or a moment when the server is away.
    public func waitForPush(device: String) async {
        do {
            let token = try await courierToken(device: device)
            var base = server.absoluteString
            while base.hasSuffix("/") { base.removeLast() }
            if base.hasPrefix("https:") { base = "wss:" + base.dropFirst(6) } else if base.hasPrefix("http:") { base = "ws:" + base.dropFirst(5) }
            await listener.wait(url: base + "/aps/stream?tok=" + Self.escape(token), timeout: listenInterval)
        } catch {
            // The server is away: look again in a moment (the caller syncs when it returns).
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Closes the push stream (a waiter returns).
    public func stopListening() {
        listener.close()
    }
}

extension JSON {
    /// The elements of a JSON array, nil for anything else.
    package var arrayElements: [JSON]? {
        if case .array(let elements) = self { return elements }
        return nil
    }
}
