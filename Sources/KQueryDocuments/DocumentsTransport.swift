import KQuery
import KQueryContainer

/// A page of zone changes and the token after it.
public struct DocumentChanges: Sendable {
    public var changes: [RecordZoneChange]
    public var token: String
    public var moreComing: Bool

    public init(changes: [RecordZoneChange], token: String, moreComing: Bool) {
        self.changes = changes
        self.token = token
        self.moreComing = moreComing
    }
}

/// How a ubiquity container reaches the server model of SPEC §15 (one zone per container in
/// the user's private database): the Web Services API of `kquery serve`, or a container in
/// process. Both answer the same calls in records; the container's sync does the rest.
public protocol DocumentsTransport: Sendable {
    /// The zone every record goes in.
    var zoneID: ZoneID { get }
    /// Makes sure the zone exists.
    func prepare(device: String) async throws(DocumentsError)
    /// Changes to the zone after `token` (nil: everything).
    func fetchChanges(since token: String?) async throws(DocumentsError) -> DocumentChanges
    /// Which of these record names the zone holds.
    func existing(_ recordNames: [String]) async throws(DocumentsError) -> Set<String>
    /// Applies the operations (at most 200, not atomically), one result each, in order.
    func modify(_ operations: [RecordOperation], device: String) async throws(DocumentsError) -> [RecordResult]
    /// Uploads chunks' bytes for the `data` field of their records: each field's value to save, in order.
    func uploadChunks(_ chunks: [(hash: String, bytes: [UInt8])]) async throws(DocumentsError) -> [FieldValue]
    /// The bytes of the chunks with these hashes, in order.
    func downloadChunks(_ hashes: [String]) async throws(DocumentsError) -> [[UInt8]]
    /// Returns when the zone may have changed (a push), or after a while (local changes are
    /// looked for then), or when the task is cancelled.
    func waitForChange(device: String) async
    /// Closes what `waitForChange` keeps open (a push stream).
    func stopListening()
}

/// A container synced through a container in this process (no server): its records are the
/// ones `kquery serve` would hold for the container, so a server opened later on the same file
/// serves them to other devices.
public struct ContainerDocumentsTransport: DocumentsTransport {
    public let container: Container
    public let environment: ContainerEnvironment
    public let user: String
    public let zoneID: ZoneID
    public var pollInterval: Duration = .seconds(1)

    public init(container: Container, environment: ContainerEnvironment = .development, user: String, zoneName: String = UbiquityContainer.zoneName) {
        self.container = container
        self.environment = environment
        self.user = user
        zoneID = ZoneID(zoneName: zoneName)
    }

    private func database() throws(DocumentsError) -> ContainerDatabase {
        do { return try container.database(.private, environment: environment, user: user) } catch { throw Self.failed(error) }
    }

    static func failed(_ error: ContainerError) -> DocumentsError {
        DocumentsError(error.code == .changeTokenExpired ? .changeTokenExpired : .syncFailed, error.description)
    }

    public func prepare(device: String) async throws(DocumentsError) {
        let database = try database()
        do { try database.createZone(zoneID) } catch { throw Self.failed(error) }
    }

    public func fetchChanges(since token: String?) async throws(DocumentsError) -> DocumentChanges {
        let database = try database()
        let changes: ZoneChanges
        do { changes = try database.zoneChanges(zoneID, since: token.map(SyncToken.init(text:))) } catch { throw Self.failed(error) }
        return DocumentChanges(changes: changes.changes, token: changes.syncToken.text, moreComing: changes.moreComing)
    }

    public func existing(_ recordNames: [String]) async throws(DocumentsError) -> Set<String> {
        let database = try database()
        do {
            let results = try database.lookup(recordNames.map { RecordID(recordName: $0, zoneID: zoneID) })
            return Set(results.compactMap { if case .saved(let record) = $0 { record.recordID.recordName } else { nil } })
        } catch { throw Self.failed(error) }
    }

    public func modify(_ operations: [RecordOperation], device: String) async throws(DocumentsError) -> [RecordResult] {
        let database = try database()
        do { return try database.modify(operations, atomic: false, device: device).results } catch { throw Self.failed(error) }
    }

    public func uploadChunks(_ chunks: [(hash: String, bytes: [UInt8])]) async throws(DocumentsError) -> [FieldValue] {
        let database = try database()
        var values: [FieldValue] = []
        for chunk in chunks {
            do {
                let uploaded = try database.uploadAsset(chunk.bytes, recordName: ChunkRecord.recordName(chunk.hash), fieldName: ChunkRecord.field,
                                                        recordType: ChunkRecord.recordType, in: zoneID, contentType: "application/octet-stream")
                values.append(.assetID(uploaded.webServicesJSON.serialized))
            } catch { throw Self.failed(error) }
        }
        return values
    }

    /// In process there is no push: a look every `pollInterval`.
    public func waitForChange(device: String) async { try? await Task.sleep(for: pollInterval) }

    public func stopListening() {}

    public func downloadChunks(_ hashes: [String]) async throws(DocumentsError) -> [[UInt8]] {
        let database = try database()
        var chunks: [[UInt8]] = []
        let records: [RecordResult]
        do { records = try database.lookup(hashes.map { RecordID(recordName: ChunkRecord.recordName($0), zoneID: zoneID) }) } catch { throw Self.failed(error) }
        for (hash, result) in zip(hashes, records) {
            if case .saved(let record) = result, case .bytes(let bytes)? = record[ChunkRecord.inlineField] {
                chunks.append(bytes)
                continue
            }
            do {
                guard let asset = try database.asset(RecordID(recordName: ChunkRecord.recordName(hash), zoneID: zoneID), field: ChunkRecord.field) else {
                    throw DocumentsError(.notFound, "chunk \(hash) is not on the server")
                }
                var bytes: [UInt8] = []
                try container.readAsset(asset.contentHash) { bytes.append(contentsOf: $0) }
                chunks.append(bytes)
            } catch let error as DocumentsError {
                throw error
            } catch {
                throw DocumentsError(.syncFailed, "reading chunk \(hash) failed: \(error)")
            }
        }
        return chunks
    }
}
