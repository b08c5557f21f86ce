import Foundation
import KQuery
import KQueryContainer

/// A store synced through a container in this process (no server): its records are the same
/// `KVSRecord`s `kquery serve` would hold for the container, so a server opened later on the same
/// file serves them to other devices. Stores on one `Container` object learn of each other's
/// writes at once; a store on the same file in another process finds them by polling.
public struct ContainerTransport: KeyValueStoreTransport {
    public let container: Container
    public let environment: ContainerEnvironment
    public let user: String
    public let zoneID: ZoneID
    /// How often `waitForChange` looks again when no write in this process woke it.
    public var pollInterval: Duration

    public init(container: Container, environment: ContainerEnvironment = .development, user: String, storeIdentifier: String,
                pollInterval: Duration = .seconds(1)) {
        self.container = container
        self.environment = environment
        self.user = user
        self.zoneID = ZoneID(zoneName: storeIdentifier)
        self.pollInterval = pollInterval
    }

    private func database() throws(KeyValueStoreError) -> ContainerDatabase {
        do { return try container.database(.private, environment: environment, user: user) } catch {
            throw KeyValueStoreError(.syncFailed, error.description)
        }
    }

    public func currentUser() async throws(KeyValueStoreError) -> String { user }

    public func prepare(device: String) async throws(KeyValueStoreError) {
        let database = try database()
        do { try database.createZone(zoneID) } catch {
            throw KeyValueStoreError(.syncFailed, error.description)
        }
    }

    public func fetchChanges(since token: String?) async throws(KeyValueStoreError) -> RemoteKeyChanges {
        let database = try database()
        let changes: ZoneChanges
        do { changes = try database.zoneChanges(zoneID, since: token.map(SyncToken.init(text:))) } catch {
            throw KeyValueStoreError(error.code == .changeTokenExpired ? .changeTokenExpired : .syncFailed, error.description)
        }
        var result: [RemoteKeyChange] = []
        for change in changes.changes {
            switch change {
            case .changed(let record):
                guard record.recordType == KeyValueRecord.recordType else { continue }
                result.append(.saved(try remoteValue(record, database: database)))
            case .deleted(let id, _):
                guard let key = KeyValueRecord.key(forRecordName: id.recordName) else { continue }
                result.append(.deleted(key: key))
            }
        }
        return RemoteKeyChanges(changes: result, token: changes.syncToken.text, moreComing: changes.moreComing)
    }

    /// A `KVSRecord` read back; one that is not well formed is an error, never trusted.
    private func remoteValue(_ record: Record, database: ContainerDatabase) throws(KeyValueStoreError) -> RemoteKeyValue {
        let name = record.recordID.recordName
        guard let key = KeyValueRecord.key(forRecordName: name) else {
            throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)' is not named base64 of a key")
        }
        guard case .timestamp(let date)? = record["localModificationDate"] else {
            throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)' has no localModificationDate timestamp")
        }
        let bytes: Data
        switch (record["value"], record["assetValue"]) {
        case (.bytes(let value)?, _): bytes = Data(value)
        case (_, .assetID?):
            do {
                guard let asset = try database.asset(record.recordID, field: "assetValue") else {
                    throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)': its assetValue is not a stored asset")
                }
                var collected = Data()
                try container.readAsset(asset.contentHash) { collected.append(contentsOf: $0) }
                bytes = collected
            } catch let error as KeyValueStoreError {
                throw error
            } catch {
                throw KeyValueStoreError(.syncFailed, "record '\(name)': reading its assetValue failed: \(error)")
            }
        default: throw KeyValueStoreError(.invalidServerAnswer, "record '\(name)' has neither a value (BYTES) nor an assetValue (ASSET)")
        }
        return RemoteKeyValue(key: key, bytes: bytes, date: date, changeTag: record.recordChangeTag)
    }

    public func save(_ writes: [KeyWrite], device: String) async throws(KeyValueStoreError) -> [KeyWriteResult] {
        let database = try database()
        var operations: [RecordOperation] = []
        for write in writes {
            var record = Record(recordType: KeyValueRecord.recordType, recordName: KeyValueRecord.recordName(forKey: write.key))
            record.recordID.zoneID = zoneID
            record.recordChangeTag = write.baseTag
            if let bytes = write.bytes {
                record.fields["localModificationDate"] = .timestamp(write.date)
                if bytes.count > KeyValueRecord.assetThreshold {
                    let uploaded: UploadedAsset
                    do { uploaded = try upload(bytes, recordName: record.recordID.recordName, database: database) } catch {
                        throw KeyValueStoreError(.syncFailed, "uploading the value of '\(write.key)' failed: \(error.description)")
                    }
                    record.fields["assetValue"] = .assetID(uploaded.webServicesJSON.serialized)
                } else {
                    record.fields["value"] = .bytes([UInt8](bytes))
                }
                operations.append(RecordOperation(kind: write.baseTag == nil ? .create : .replace, record: record))
            } else {
                operations.append(RecordOperation(kind: .delete, record: record))
            }
        }
        let result: ModifyResult
        do { result = try database.modify(operations, atomic: false, device: device) } catch {
            throw KeyValueStoreError(.syncFailed, error.description)
        }
        let results = result.results.map(Self.writeResult)
        ContainerTransportSignals.shared.changed(container: container, zone: zoneID, user: user, except: device)
        return results
    }

    private func upload(_ bytes: Data, recordName: String, database: ContainerDatabase) throws(ContainerError) -> UploadedAsset {
        let request = AssetFieldRequest(recordName: recordName, recordType: KeyValueRecord.recordType, fieldName: "assetValue")
        guard let ticket = try database.requestAssetUploads([request], in: zoneID).first else {
            throw ContainerError(.internalError, "no upload ticket was made")
        }
        let writer = try container.beginAssetUpload(token: ticket.token, contentType: "application/x-plist")
        do throws(ContainerError) {
            try writer.append(bytes)
            return try writer.finish()
        } catch {
            writer.abandon()
            throw error
        }
    }

    static func writeResult(_ result: RecordResult) -> KeyWriteResult {
        switch result {
        case .saved(let record): return .saved(tag: record.recordChangeTag)
        case .deleted: return .deleted
        case .failed(_, let error):
            switch error.code {
            case .conflict, .exists, .notFound: return .conflict
            default: return .failed(error.description, quotaExceeded: error.code == .quotaExceeded)
            }
        }
    }

    public func waitForChange(device: String) async {
        await ContainerTransportSignals.shared.wait(container: container, zone: zoneID, user: user, device: device, timeout: pollInterval)
    }
}

/// Wakes the stores of this process that share a container, zone and user when one of them saves.
final class ContainerTransportSignals: Sendable {
    static let shared = ContainerTransportSignals()

    private struct Waiter {
        var key: Key
        var device: String
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct Key: Hashable {
        var container: ObjectIdentifier
        var zone: ZoneID
        var user: String
    }

    private struct State {
        var waiters: [UUID: Waiter] = [:]
        /// Waits whose timer or cancellation came before they were registered.
        var ended: Set<UUID> = []
    }

    private let state = Locked(State())

    func changed(container: Container, zone: ZoneID, user: String, except device: String) {
        let key = Key(container: ObjectIdentifier(container), zone: zone, user: user)
        let woken = state.withLock { state -> [Waiter] in
            let woken = state.waiters.filter { $0.value.key == key && $0.value.device != device }
            for id in woken.keys { state.waiters[id] = nil }
            return Array(woken.values)
        }
        for waiter in woken { waiter.continuation.resume() }
    }

    func wait(container: Container, zone: ZoneID, user: String, device: String, timeout: Duration) async {
        let key = Key(container: ObjectIdentifier(container), zone: zone, user: user)
        let id = UUID()
        let timer = Task {
            try? await Task.sleep(for: timeout)
            self.end(id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = state.withLock { state -> Bool in
                    if state.ended.remove(id) != nil { return true }
                    state.waiters[id] = Waiter(key: key, device: device, continuation: continuation)
                    return false
                }
                if ended { continuation.resume() }
            }
        } onCancel: {
            self.end(id)
        }
        timer.cancel()
        state.withLock { _ = $0.ended.remove(id) }
    }

    private func end(_ id: UUID) {
        let waiter = state.withLock { state -> Waiter? in
            guard let waiter = state.waiters.removeValue(forKey: id) else {
                state.ended.insert(id)
                return nil
            }
            return waiter
        }
        waiter?.continuation.resume()
    }
}

/// A store synced through a container file that other processes write too (each `kquery kvs`
/// process is a device): a `Container` reads a mirror of its file loaded when it opens, so this
/// opens the file again for each call and so sees what other processes committed. It looks for
/// changes every `pollInterval`. Two processes writing one file at the same moment are not
/// supported: live devices belong on `kquery serve`.
public struct ContainerFileTransport: KeyValueStoreTransport {
    public let path: String
    public let containerIdentifier: String
    public let environment: ContainerEnvironment
    public let user: String
    public let storeIdentifier: String
    public var pollInterval: Duration

    public init(path: String, containerIdentifier: String, environment: ContainerEnvironment = .development, user: String, storeIdentifier: String,
                pollInterval: Duration = .milliseconds(250)) {
        self.path = path
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.user = user
        self.storeIdentifier = storeIdentifier
        self.pollInterval = pollInterval
    }

    private func opened() throws(KeyValueStoreError) -> ContainerTransport {
        do {
            let container = try Container(containerIdentifier: containerIdentifier, path: path)
            return ContainerTransport(container: container, environment: environment, user: user, storeIdentifier: storeIdentifier)
        } catch {
            throw KeyValueStoreError(.syncFailed, "\(path): \(error.reason)")
        }
    }

    public func currentUser() async throws(KeyValueStoreError) -> String { user }
    public func prepare(device: String) async throws(KeyValueStoreError) { try await opened().prepare(device: device) }
    public func fetchChanges(since token: String?) async throws(KeyValueStoreError) -> RemoteKeyChanges { try await opened().fetchChanges(since: token) }
    public func save(_ writes: [KeyWrite], device: String) async throws(KeyValueStoreError) -> [KeyWriteResult] {
        try await opened().save(writes, device: device)
    }
    public func waitForChange(device: String) async { try? await Task.sleep(for: pollInterval) }
}
