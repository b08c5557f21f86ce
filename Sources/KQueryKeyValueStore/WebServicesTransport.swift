import AsyncHTTPClient
import Foundation
import KQuery
import NIOCore
import NIOHTTP1

/// A store synced with `kquery serve` (or any CloudKit Web Services server) through the calls
/// CloudKit clients already make: `users/current`, `zones/modify`, `subscriptions/modify` (a zone
/// subscription per device), `changes/zone`, `records/modify`, `assets/upload` and the asset
/// download URL, `tokens/create` and the web courier's WebSocket stream for pushes (each device
/// a stream of its own, so every device hears every other device's writes).
public struct WebServicesTransport: KeyValueStoreTransport {
    public let server: URL
    public let containerIdentifier: String
    public let environment: String
    public let storeIdentifier: String
    public let apiToken: String
    /// The current web auth token: the server may hand out the next one with each answer.
    private let webAuthToken: Locked<String>
    /// This device's web courier token (`tokens/create`'s `apnsToken`): its push stream, and the
    /// device its modifies name so the server does not push a device its own changes.
    private let courierToken = Locked<String?>(nil)
    private let listener = CourierListener()
    /// How long one request may take.
    public var requestTimeout: TimeAmount = .seconds(60)
    /// How long `waitForChange` waits for a push before it returns anyway (the store then syncs,
    /// which catches a push another server node took).
    public var listenInterval: Duration = .seconds(30)

    public init(server: URL, containerIdentifier: String, environment: String = "development", storeIdentifier: String, apiToken: String,
                webAuthToken: String) {
        self.server = server
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.storeIdentifier = storeIdentifier
        self.apiToken = apiToken
        self.webAuthToken = Locked(webAuthToken)
    }

    private var zoneIDJSON: JSON { .object([("zoneName", .string(storeIdentifier))]) }

    // MARK: Requests

    private func url(_ path: String) -> String {
        var base = server.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let token = webAuthToken.withLock { $0 }
        let query = "ckAPIToken=\(Self.escape(apiToken))&ckWebAuthToken=\(Self.escape(token))"
        return base + path + (path.contains("?") ? "&" : "?") + query
    }

    private static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? text
    }

    private func databasePath(_ operation: String) -> String {
        "/database/1/\(Self.escape(containerIdentifier))/\(environment)/private/\(operation)"
    }

    /// Sends a request, adopts a rotated web auth token, and gives the status and body.
    private func send(_ method: HTTPMethod, _ target: String, body: [UInt8]? = nil, contentType: String = "application/json",
                      timeout: TimeAmount? = nil) async throws(KeyValueStoreError) -> (status: Int, body: [UInt8]) {
        var request = HTTPClientRequest(url: target)
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        do {
            let response = try await HTTPClient.shared.execute(request, timeout: timeout ?? requestTimeout)
            if let next = response.headers.first(name: "X-Apple-CloudKit-Web-Auth-Token"), !next.isEmpty {
                webAuthToken.withLock { $0 = next }
            }
            let buffer = try await response.body.collect(upTo: 64 << 20)
            return (Int(response.status.code), Array(buffer.readableBytesView))
        } catch let error as KeyValueStoreError {
            throw error
        } catch {
            throw KeyValueStoreError(.syncFailed, "\(method.rawValue) \(server.absoluteString): \(error)")
        }
    }

    /// A JSON request to the private database; a whole-request error becomes a thrown error.
    private func call(_ operation: String, _ body: JSON?) async throws(KeyValueStoreError) -> JSON {
        let answer = try await send(body == nil ? .GET : .POST, url(databasePath(operation)), body: body?.serializedBytes)
        return try Self.json(answer, operation)
    }

    private static func json(_ answer: (status: Int, body: [UInt8]), _ operation: String) throws(KeyValueStoreError) -> JSON {
        let json = try? answer.body.withUnsafeBufferPointer { buffer in try JSON.parse(bytes: buffer) }
        guard (200..<300).contains(answer.status) else {
            let code = json?["serverErrorCode"]?.stringValue ?? "HTTP \(answer.status)"
            let reason = json?["reason"]?.stringValue ?? String(decoding: answer.body.prefix(200), as: UTF8.self)
            let kind: KeyValueStoreError.Code = switch code {
            case "QUOTA_EXCEEDED": .quotaExceeded
            case "CHANGE_TOKEN_EXPIRED": .changeTokenExpired
            default: .syncFailed
            }
            throw KeyValueStoreError(kind, "\(operation): \(code): \(reason)")
        }
        guard let json, case .object = json else {
            throw KeyValueStoreError(.invalidServerAnswer, "\(operation): the answer is not a JSON object")
        }
        return json
    }

    // MARK: KeyValueStoreTransport

    public func currentUser() async throws(KeyValueStoreError) -> String {
        let json = try await call("users/current", nil)
        guard let name = json["userRecordName"]?.stringValue, !name.isEmpty else {
            throw KeyValueStoreError(.invalidServerAnswer, "users/current: no userRecordName")
        }
        return name
    }

    public func prepare(device: String) async throws(KeyValueStoreError) {
        let zone = JSON.object([("operations", .array([.object([("operationType", .string("create")), ("zone", .object([("zoneID", zoneIDJSON)]))])]))])
        let zones = try await call("zones/modify", zone)
        if let error = zones["zones"]?[0]?["serverErrorCode"]?.stringValue {
            throw KeyValueStoreError(.syncFailed, "zones/modify: \(error): \(zones["zones"]?[0]?["reason"]?.stringValue ?? "")")
        }
        let subscription = JSON.object([
            ("subscriptionID", .string("kvs-\(storeIdentifier)-\(device)")), ("subscriptionType", .string("zone")), ("zoneID", zoneIDJSON),
            ("notificationInfo", .object([("shouldSendContentAvailable", .bool(true))])),
        ])
        // A subscription that exists already answers a per-item error: it is there, which is the point.
        _ = try await call("subscriptions/modify", .object([("operations", .array([.object([("operationType", .string("create")), ("subscription", subscription)])]))]))
        _ = try await courier(device: device)
    }

    /// This device's web courier token, made by `tokens/create` the first time.
    private func courier(device: String) async throws(KeyValueStoreError) -> String {
        if let token = courierToken.withLock({ $0 }) { return token }
        let target = url("/device/1/\(Self.escape(containerIdentifier))/\(environment)/tokens/create")
        let body = JSON.object([("apnsEnvironment", .string(environment)), ("clientId", .string(device))])
        let json = try Self.json(try await send(.POST, target, body: body.serializedBytes), "tokens/create")
        guard let token = json["apnsToken"]?.stringValue, !token.isEmpty else { throw KeyValueStoreError(.invalidServerAnswer, "tokens/create: no apnsToken") }
        courierToken.withLock { $0 = token }
        return token
    }

    public func fetchChanges(since token: String?) async throws(KeyValueStoreError) -> RemoteKeyChanges {
        var zone: [(String, JSON)] = [("zoneID", zoneIDJSON)]
        if let token { zone.append(("syncToken", .string(token))) }
        let json = try await call("changes/zone", .object([("zones", .array([.object(zone)]))]))
        guard let answer = json["zones"]?[0], case .object = answer else { throw KeyValueStoreError(.invalidServerAnswer, "changes/zone: no zone in the answer") }
        if let code = answer["serverErrorCode"]?.stringValue {
            throw KeyValueStoreError(code == "CHANGE_TOKEN_EXPIRED" ? .changeTokenExpired : .syncFailed, "changes/zone: \(code): \(answer["reason"]?.stringValue ?? "")")
        }
        guard let next = answer["syncToken"]?.stringValue else { throw KeyValueStoreError(.invalidServerAnswer, "changes/zone: no syncToken") }
        var changes: [RemoteKeyChange] = []
        for record in answer["records"]?.arrayElements ?? [] {
            guard let name = record["recordName"]?.stringValue else { throw KeyValueStoreError(.invalidServerAnswer, "changes/zone: a record without a recordName") }
            if record["deleted"] == .bool(true) {
                if let key = KeyValueRecord.key(forRecordName: name) { changes.append(.deleted(key: key)) }
                continue
            }
            guard record["recordType"]?.stringValue == KeyValueRecord.recordType else { continue }
            changes.append(.saved(try await remoteValue(record, name: name)))
        }
        let more: Bool
        switch answer["moreComing"] {
        case .bool(let flag)?: more = flag
        case nil, .null?: more = false
        default: throw KeyValueStoreError(.invalidServerAnswer, "changes/zone: moreComing is not a boolean")
        }
        return RemoteKeyChanges(changes: changes, token: next, moreComing: more)
    }

    private func remoteValue(_ record: JSON, name: String) async throws(KeyValueStoreError) -> RemoteKeyValue {
        guard let key = KeyValueRecord.key(forRecordName: name) else {
            throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)' is not named base64 of a key")
        }
        let fields = record["fields"]
        guard let date = fields?["localModificationDate"]?["value"]?.int64Value else {
            throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)' has no localModificationDate timestamp")
        }
        let bytes: Data
        if let text = fields?["value"]?["value"]?.stringValue {
            guard let decoded = Data(base64Encoded: text) else { throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)': value is not base64") }
            bytes = decoded
        } else if let download = fields?["assetValue"]?["value"]?["downloadURL"]?.stringValue {
            let target = download.replacingOccurrences(of: "${f}", with: "value.plist")
            let answer = try await send(.GET, target)
            guard answer.status == 200 else { throw KeyValueStoreError(.syncFailed, "record '\(name)': its assetValue download answered HTTP \(answer.status)") }
            bytes = Data(answer.body)
        } else {
            throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)' has neither a value (BYTES) nor an assetValue (ASSET)")
        }
        return RemoteKeyValue(key: key, bytes: bytes, date: date, changeTag: record["recordChangeTag"]?.stringValue)
    }

    public func save(_ writes: [KeyWrite], device: String) async throws(KeyValueStoreError) -> [KeyWriteResult] {
        var operations: [JSON] = []
        for write in writes {
            let name = KeyValueRecord.recordName(forKey: write.key)
            var record: [(String, JSON)] = [("recordName", .string(name)), ("recordType", .string(KeyValueRecord.recordType)), ("zoneID", zoneIDJSON)]
            if let tag = write.baseTag { record.append(("recordChangeTag", .string(tag))) }
            let kind: String
            if let bytes = write.bytes {
                var fields: [(String, JSON)] = [("localModificationDate", .object([("value", .int(write.date)), ("type", .string("TIMESTAMP"))]))]
                if bytes.count > KeyValueRecord.assetThreshold {
                    let asset = try await upload(bytes, recordName: name)
                    fields.append(("assetValue", .object([("value", asset), ("type", .string("ASSETID"))])))
                } else {
                    fields.append(("value", .object([("value", .string(bytes.base64EncodedString())), ("type", .string("BYTES"))])))
                }
                record.append(("fields", .object(fields)))
                kind = write.baseTag == nil ? "create" : "replace"
            } else {
                kind = "delete"
            }
            operations.append(.object([("operationType", .string(kind)), ("record", .object(record))]))
        }
        let body = JSON.object([("operations", .array(operations)), ("zoneID", zoneIDJSON), ("atomic", .bool(false)),
                                ("apnsToken", .string(courierToken.withLock { $0 } ?? device))])
        let json = try await call("records/modify", body)
        let records = json["records"]?.arrayElements ?? []
        guard records.count == writes.count else {
            throw KeyValueStoreError(.invalidServerAnswer, "records/modify: \(records.count) results for \(writes.count) writes")
        }
        return records.map { record in
            if let code = record["serverErrorCode"]?.stringValue {
                switch code {
                case "CONFLICT", "EXISTS", "NOT_FOUND": return .conflict
                default: return .failed("\(code): \(record["reason"]?.stringValue ?? "")", quotaExceeded: code == "QUOTA_EXCEEDED")
                }
            }
            if record["deleted"] == .bool(true) { return .deleted }
            return .saved(tag: record["recordChangeTag"]?.stringValue)
        }
    }

    /// The three steps of SPEC §12: a ticket, the bytes to its URL, the receipt for the field.
    private func upload(_ bytes: Data, recordName: String) async throws(KeyValueStoreError) -> JSON {
        let request = JSON.object([
            ("zoneID", zoneIDJSON),
            ("tokens", .array([.object([("recordName", .string(recordName)), ("recordType", .string(KeyValueRecord.recordType)), ("fieldName", .string("assetValue"))])])),
        ])
        let tickets = try await call("assets/upload", request)
        guard let target = tickets["tokens"]?[0]?["url"]?.stringValue else { throw KeyValueStoreError(.invalidServerAnswer, "assets/upload: no upload URL") }
        let answer = try await send(.POST, target, body: [UInt8](bytes), contentType: "application/octet-stream")
        let json = try Self.json(answer, "asset upload")
        guard let file = json["singleFile"], case .object = file else { throw KeyValueStoreError(.invalidServerAnswer, "asset upload: no singleFile") }
        return file
    }

    public func waitForChange(device: String) async {
        do {
            let token = try await courier(device: device)
            var base = server.absoluteString
            while base.hasSuffix("/") { base.removeLast() }
            if base.hasPrefix("https:") { base = "wss:" + base.dropFirst(6) } else if base.hasPrefix("http:") { base = "ws:" + base.dropFirst(5) }
            await listener.wait(url: base + "/aps/stream?tok=" + Self.escape(token), timeout: listenInterval)
        } catch {
            // The server is away: look again in a moment (the store syncs when it returns).
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Stops listening for pushes (the stream closes).
    public func stopListening() {
        listener.close()
    }
}

extension JSON {
    var arrayElements: [JSON]? {
        if case .array(let elements) = self { return elements }
        return nil
    }
}
