import Foundation
import KQuery
import KQueryWebServicesClient
import NIOCore

/// A store synced with `kquery serve` (or any CloudKit Web Services server) through the calls
/// CloudKit clients already make: `users/current`, `zones/modify`, `subscriptions/modify` (a zone
/// subscription per device), `changes/zone`, `records/modify`, `assets/upload` and the asset
/// download URL, `tokens/create` and the web courier's WebSocket stream for pushes (each device
/// a stream of its own, so every device hears every other device's writes).
public struct WebServicesTransport: KeyValueStoreTransport {
    public let storeIdentifier: String
    /// The HTTP side, shared with the other client libraries.
    public var client: WebServicesClient
    public var server: URL { client.server }
    public var containerIdentifier: String { client.containerIdentifier }
    public var environment: String { client.environment }
    public var apiToken: String { client.apiToken }
    /// How long one request may take.
    public var requestTimeout: TimeAmount {
        get { client.requestTimeout }
        set { client.requestTimeout = newValue }
    }
    /// How long `waitForChange` waits for a push before it returns anyway (the store then syncs).
    public var listenInterval: Duration {
        get { client.listenInterval }
        set { client.listenInterval = newValue }
    }

    public init(server: URL, containerIdentifier: String, environment: String = "development", storeIdentifier: String, apiToken: String,
                webAuthToken: String) {
        self.storeIdentifier = storeIdentifier
        client = WebServicesClient(server: server, containerIdentifier: containerIdentifier, environment: environment, apiToken: apiToken,
                                   webAuthToken: webAuthToken)
    }

    private var zoneIDJSON: JSON { .object([("zoneName", .string(storeIdentifier))]) }

    /// A Web Services call whose failure is a store error.
    private func call(_ operation: String, _ body: JSON?) async throws(KeyValueStoreError) -> JSON {
        do { return try await client.call(operation, body) } catch { throw Self.storeError(error) }
    }

    static func storeError(_ error: WebServicesClientError) -> KeyValueStoreError {
        let code: KeyValueStoreError.Code = switch (error.kind, error.serverErrorCode) {
        case (.invalidAnswer, _): .invalidServerAnswer
        case (.server, "QUOTA_EXCEEDED"): .quotaExceeded
        case (.server, "CHANGE_TOKEN_EXPIRED"): .changeTokenExpired
        default: .syncFailed
        }
        return KeyValueStoreError(code, error.message)
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
        do { try await client.createZone(storeIdentifier) } catch { throw Self.storeError(error) }
        let subscription = JSON.object([
            ("subscriptionID", .string("kvs-\(storeIdentifier)-\(device)")), ("subscriptionType", .string("zone")), ("zoneID", zoneIDJSON),
            ("notificationInfo", .object([("shouldSendContentAvailable", .bool(true))])),
        ])
        // A subscription that exists already answers a per-item error: it is there, which is the point.
        _ = try await call("subscriptions/modify", .object([("operations", .array([.object([("operationType", .string("create")), ("subscription", subscription)])]))]))
        do { _ = try await client.courierToken(device: device) } catch { throw Self.storeError(error) }
    }

    public func fetchChanges(since token: String?) async throws(KeyValueStoreError) -> RemoteKeyChanges {
        let page: WebServicesClient.ZoneChangesPage
        do { page = try await client.zoneChanges(storeIdentifier, since: token) } catch { throw Self.storeError(error) }
        var changes: [RemoteKeyChange] = []
        for record in page.records {
            let name = record["recordName"]?.stringValue ?? ""
            if record["deleted"] == .bool(true) {
                if let key = KeyValueRecord.key(forRecordName: name) { changes.append(.deleted(key: key)) }
                continue
            }
            guard record["recordType"]?.stringValue == KeyValueRecord.recordType else { continue }
            changes.append(.saved(try await remoteValue(record, name: name)))
        }
        return RemoteKeyChanges(changes: changes, token: page.syncToken, moreComing: page.moreComing)
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
            do { bytes = Data(try await client.downloadAsset(download, fileName: "value.plist")) } catch {
                throw KeyValueStoreError(.syncFailed, "record '\(name)': its assetValue download failed: \(error.message)")
            }
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
                                ("apnsToken", .string(client.knownCourierToken ?? device))])
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

    private func upload(_ bytes: Data, recordName: String) async throws(KeyValueStoreError) -> JSON {
        do {
            return try await client.uploadAsset([UInt8](bytes), zoneName: storeIdentifier, recordName: recordName, recordType: KeyValueRecord.recordType,
                                                fieldName: "assetValue")
        } catch { throw Self.storeError(error) }
    }

    public func waitForChange(device: String) async { await client.waitForPush(device: device) }

    public func stopListening() { client.stopListening() }
}
