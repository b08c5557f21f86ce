import Foundation
import KQuery
import KQueryContainer
import KQueryWebServicesClient

/// A container synced with `kquery serve` (or any CloudKit Web Services server) through
/// `zones/modify`, `changes/zone`, `records/lookup`, `records/modify`, `assets/upload` and the
/// asset download URLs.
///
/// Other devices' changes arrive as web courier pushes: `prepare` saves a zone subscription and
/// makes the device's courier token, and `waitForChange` listens on its stream.
public struct WebServicesDocumentsTransport: DocumentsTransport {
    public var client: WebServicesClient
    public let zoneID: ZoneID

    /// `listenInterval`: how long `waitForChange` waits for a push before it returns anyway (a
    /// watching container then looks for local changes).
    public init(server: URL, containerIdentifier: String, environment: String = "development", apiToken: String, webAuthToken: String,
                zoneName: String = UbiquityContainer.zoneName, listenInterval: Duration = .seconds(1)) {
        client = WebServicesClient(server: server, containerIdentifier: containerIdentifier, environment: environment, apiToken: apiToken,
                                   webAuthToken: webAuthToken)
        client.listenInterval = listenInterval
        zoneID = ZoneID(zoneName: zoneName)
    }

    private var zoneIDJSON: JSON { .object([("zoneName", .string(zoneID.zoneName))]) }

    private func call(_ operation: String, _ body: JSON) async throws(DocumentsError) -> JSON {
        do { return try await client.call(operation, body) } catch { throw Self.failed(error) }
    }

    static func failed(_ error: WebServicesClientError) -> DocumentsError {
        switch (error.kind, error.serverErrorCode) {
        case (.invalidAnswer, _): DocumentsError(.invalidServerAnswer, error.message)
        case (.server, "CHANGE_TOKEN_EXPIRED"): DocumentsError(.changeTokenExpired, error.message)
        default: DocumentsError(.syncFailed, error.message)
        }
    }

    public func prepare(device: String) async throws(DocumentsError) {
        do { try await client.createZone(zoneID.zoneName) } catch { throw Self.failed(error) }
        let subscription = JSON.object([
            ("subscriptionID", .string("docs-\(zoneID.zoneName)-\(device)")), ("subscriptionType", .string("zone")), ("zoneID", zoneIDJSON),
            ("notificationInfo", .object([("shouldSendContentAvailable", .bool(true))])),
        ])
        // One that exists already answers a per-item error: it is there, which is the point.
        _ = try await call("subscriptions/modify", .object([("operations", .array([.object([("operationType", .string("create")), ("subscription", subscription)])]))]))
    }

    /// The device's pushes: its courier stream, opened the first time.
    public func waitForChange(device: String) async { await client.waitForPush(device: device) }

    public func stopListening() { client.stopListening() }

    public func fetchChanges(since token: String?) async throws(DocumentsError) -> DocumentChanges {
        let page: WebServicesClient.ZoneChangesPage
        do { page = try await client.zoneChanges(zoneID.zoneName, since: token) } catch { throw Self.failed(error) }
        var changes: [RecordZoneChange] = []
        for entry in page.records {
            if entry["deleted"] == .bool(true) {
                let name = entry["recordName"]?.stringValue ?? ""
                changes.append(.deleted(RecordID(recordName: name, zoneID: zoneID), recordType: entry["recordType"]?.stringValue ?? ""))
                continue
            }
            do { changes.append(.changed(try Record(json: entry))) } catch {
                throw DocumentsError(.invalidServerAnswer, "changes/zone: \(error.message)")
            }
        }
        return DocumentChanges(changes: changes, token: page.syncToken, moreComing: page.moreComing)
    }

    public func existing(_ recordNames: [String]) async throws(DocumentsError) -> Set<String> {
        let records = recordNames.map { JSON.object([("recordName", .string($0))]) }
        let json = try await call("records/lookup", .object([("records", .array(records)), ("zoneID", zoneIDJSON)]))
        return Set((json["records"]?.arrayElements ?? []).compactMap { entry in
            entry["serverErrorCode"] == nil && entry["recordType"] != nil ? entry["recordName"]?.stringValue : nil
        })
    }

    public func modify(_ operations: [RecordOperation], device: String) async throws(DocumentsError) -> [RecordResult] {
        let body = JSON.object([
            ("operations", .array(operations.map { .object([("operationType", .string($0.kind.rawValue)), ("record", $0.record.json())]) })),
            // The courier token names this device, so its own changes are not pushed back to it.
            ("zoneID", zoneIDJSON), ("atomic", .bool(false)), ("apnsToken", .string(client.knownCourierToken ?? device)),
        ])
        let json = try await call("records/modify", body)
        let entries = json["records"]?.arrayElements ?? []
        guard entries.count == operations.count else {
            throw DocumentsError(.invalidServerAnswer, "records/modify: \(entries.count) results for \(operations.count) operations")
        }
        var results: [RecordResult] = []
        for (entry, operation) in zip(entries, operations) {
            let id = operation.record.recordID
            if let code = entry["serverErrorCode"]?.stringValue {
                let kind = ContainerError.Code(rawValue: code) ?? .internalError
                results.append(.failed(id, ContainerError(kind, entry["reason"]?.stringValue ?? code)))
            } else if entry["deleted"] == .bool(true) {
                results.append(.deleted(id, recordType: operation.record.recordType))
            } else {
                do { results.append(.saved(try Record(json: entry))) } catch {
                    throw DocumentsError(.invalidServerAnswer, "records/modify: \(error.message)")
                }
            }
        }
        return results
    }

    public func uploadChunks(_ chunks: [(hash: String, bytes: [UInt8])]) async throws(DocumentsError) -> [FieldValue] {
        do {
            let files = try await client.uploadAssets(chunks.map { (ChunkRecord.recordName($0.hash), $0.bytes) }, zoneName: zoneID.zoneName,
                                                      recordType: ChunkRecord.recordType, fieldName: ChunkRecord.field)
            return files.map { .assetID($0.serialized) }
        } catch { throw Self.failed(error) }
    }

    /// Chunk records 200 a lookup: inline chunks arrive with them, the rest from their assets'
    /// download URLs, 8 at a time.
    public func downloadChunks(_ hashes: [String]) async throws(DocumentsError) -> [[UInt8]] {
        var chunks: [[UInt8]?] = []
        var urls: [(index: Int, url: String)] = []
        chunks.reserveCapacity(hashes.count)
        for start in stride(from: 0, to: hashes.count, by: 200) {
            let slice = hashes[start..<min(start + 200, hashes.count)]
            let records = slice.map { JSON.object([("recordName", .string(ChunkRecord.recordName($0)))]) }
            let json = try await call("records/lookup", .object([("records", .array(records)), ("zoneID", zoneIDJSON)]))
            let entries = json["records"]?.arrayElements ?? []
            guard entries.count == slice.count else { throw DocumentsError(.invalidServerAnswer, "records/lookup: \(entries.count) answers for \(slice.count) chunks") }
            for (hash, entry) in zip(slice, entries) {
                let fields = entry["fields"]
                if let url = fields?[ChunkRecord.field]?["value"]?["downloadURL"]?.stringValue {
                    urls.append((chunks.count, url))
                    chunks.append(nil)
                } else if let text = fields?[ChunkRecord.inlineField]?["value"]?.stringValue, let data = Data(base64Encoded: text) {
                    chunks.append([UInt8](data))
                } else {
                    throw DocumentsError(.notFound, "chunk \(hash) is not on the server")
                }
            }
        }
        let client = self.client
        do {
            let downloaded = try await WebServicesClient.concurrently(urls.map(\.url), limit: 8) { url throws(WebServicesClientError) in
                try await client.downloadAsset(url, fileName: "chunk")
            }
            for (target, bytes) in zip(urls, downloaded) { chunks[target.index] = bytes }
        } catch { throw Self.failed(error) }
        return chunks.map { $0 ?? [] }
    }
}
