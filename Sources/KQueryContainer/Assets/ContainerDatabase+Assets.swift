import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// An asset field a client wants to upload to (Web Services `assets/upload`'s token request).
public struct AssetFieldRequest: Hashable, Sendable {
    /// nil: a new UUID, which the client then saves its record under.
    public var recordName: String?
    public var recordType: String?
    public var fieldName: String

    public init(recordName: String? = nil, recordType: String? = nil, fieldName: String) {
        self.recordName = recordName
        self.recordType = recordType
        self.fieldName = fieldName
    }
}

extension ContainerDatabase {
    // MARK: Uploading

    /// Hands out upload URLs' tokens (Web Services `assets/upload`), one per field, in order. Each
    /// takes the bytes of one asset for `policy.uploadLifetime` (`Container.beginAssetUpload`), and
    /// its receipt can be saved only into that field of that record, in `zoneID` of this database.
    public func requestAssetUploads(_ fields: [AssetFieldRequest], in zoneID: ZoneID = .default) throws(ContainerError) -> [AssetUploadTicket] {
        let policy = container.assetPolicy
        guard !fields.isEmpty else { throw ContainerError(.badRequest, "assets/upload needs at least one token request") }
        guard fields.count <= policy.maximumTokens else {
            throw ContainerError(.badRequest, "assets/upload takes at most \(policy.maximumTokens) tokens, not \(fields.count)")
        }
        for (index, field) in fields.enumerated() {
            guard !field.fieldName.isEmpty else { throw ContainerError(.badRequest, "tokens[\(index)] needs a \"fieldName\"") }
            // (As the save it is for will check them: nothing is kept for a field no record can have.)
            guard FieldKey.isValidName(field.fieldName) else { throw ContainerError(.badRequest, "tokens[\(index)]: invalid field name '\(field.fieldName)'") }
            if let name = field.recordName, name.isEmpty { throw ContainerError(.badRequest, "tokens[\(index)]: the recordName must not be empty") }
            if let name = field.recordName, name.utf16.count > RecordID.maximumNameLength {
                throw ContainerError(.badRequest, "tokens[\(index)]: a record name is at most \(RecordID.maximumNameLength) characters, not \(name.utf16.count)")
            }
        }
        let zoneID = canonical(zoneID)
        guard try zone(zoneID) != nil else { throw ContainerError(.zoneNotFound, "zone '\(zoneID.zoneName)' does not exist") }
        let expires = container.clock() + policy.uploadLifetime
        let tickets = fields.map { field in
            AssetUploadTicket(
                token: AssetSecrets.token(),
                binding: AssetBinding(database: key, zoneID: zoneID, recordName: field.recordName ?? UUID().uuidString, fieldName: field.fieldName),
                recordType: field.recordType, expires: expires, state: .waiting)
        }
        try container.write(durably: true) { _, tx throws(ContainerError) in
            for ticket in tickets { try tx.saveAssetUpload(ticket) }
        }
        return tickets
    }

    /// Uploads `bytes` for a field of a record (the three steps' first two, in process): what a
    /// modify then saves as the field's value.
    public func uploadAsset(
        _ bytes: some Sequence<UInt8>, recordName: String, fieldName: String, recordType: String? = nil, in zoneID: ZoneID = .default,
        contentType: String? = nil
    ) throws(ContainerError) -> UploadedAsset {
        guard let ticket = try requestAssetUploads([AssetFieldRequest(recordName: recordName, recordType: recordType, fieldName: fieldName)], in: zoneID).first
        else { throw ContainerError(.internalError, "no upload ticket was made") }
        let writer = try container.beginAssetUpload(token: ticket.token, contentType: contentType)
        do throws(ContainerError) {
            var chunk: [UInt8] = []
            chunk.reserveCapacity(AssetPolicy.chunkSize)
            for byte in bytes {
                chunk.append(byte)
                if chunk.count == AssetPolicy.chunkSize {
                    try writer.append(chunk)
                    chunk.removeAll(keepingCapacity: true)
                }
            }
            if !chunk.isEmpty { try writer.append(chunk) }
            return try writer.finish()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// Fresh receipts for assets records of this database hold (Web Services `assets/rereference`),
    /// so other records can be saved with the same bytes: one result per field, in order; a
    /// missing record or field, or one that holds no asset, is NOT_FOUND. `index` picks an element
    /// of an asset list.
    public func rereferenceAssets(_ fields: [(recordName: String, fieldName: String, index: Int?)], in zoneID: ZoneID = .default)
        throws(ContainerError) -> [Result<UploadedAsset, ContainerError>] {
        let policy = container.assetPolicy
        guard fields.count <= policy.maximumTokens else {
            throw ContainerError(.badRequest, "assets/rereference takes at most \(policy.maximumTokens) assets, not \(fields.count)")
        }
        let zoneID = canonical(zoneID)
        guard try zone(zoneID) != nil else { throw ContainerError(.zoneNotFound, "zone '\(zoneID.zoneName)' does not exist") }
        let now = container.clock()
        return try container.write { _, tx throws(ContainerError) -> [Result<UploadedAsset, ContainerError>] in
            let stored = try tx.database(key)
            var results: [Result<UploadedAsset, ContainerError>] = []
            for field in fields {
                let id = RecordID(recordName: field.recordName, zoneID: zoneID)
                guard let record = try stored.flatMap({ database throws(ContainerError) in try tx.record(id, in: database) }) else {
                    results.append(.failure(ContainerError(.notFound, "record '\(field.recordName)' does not exist")))
                    continue
                }
                let texts = record.fields[field.fieldName]?.assetTexts ?? []
                let text: String?
                if let index = field.index {
                    text = texts.indices.contains(index) ? texts[index] : nil
                } else {
                    text = texts.count == 1 ? texts[0] : nil
                }
                guard let text, let asset = StoredAsset(storedText: text) else {
                    let what = field.index.map { "element \($0) of field '\(field.fieldName)'" } ?? "field '\(field.fieldName)'"
                    let hint = field.index == nil && texts.count > 1 ? " (an asset list: name an element with \"index\")" : ""
                    results.append(.failure(ContainerError(.notFound, "record '\(field.recordName)' has no asset in \(what)\(hint)")))
                    continue
                }
                // Bound to this database only: the client saves it into a record of its choosing.
                let binding = AssetBinding(database: key, zoneID: zoneID, recordName: "", fieldName: "")
                results.append(.success(try issueReceipt(for: asset, binding: binding, now: now, tx: tx)))
            }
            return results
        }
    }

    /// Makes and stores a receipt for `asset`, good for `policy.receiptLifetime`.
    func issueReceipt(for asset: StoredAsset, binding: AssetBinding, now: Int64, tx: any StorageWriteTransaction) throws(ContainerError) -> UploadedAsset {
        let receipt = AssetSecrets.token()
        try tx.saveAssetReceipt(AssetReceiptEntry(receipt: receipt, binding: binding, asset: asset, expires: now + container.assetPolicy.receiptLifetime, spent: false))
        var uploaded = UploadedAsset(fileChecksum: asset.fileChecksum, size: asset.size, receipt: receipt)
        if scope != .public {
            let wrappingKey = AssetSecrets.wrappingKey()
            uploaded.wrappingKey = wrappingKey
            uploaded.referenceChecksum = AssetSecrets.checksum(of: Array(wrappingKey.utf8))
        }
        return uploaded
    }

    // MARK: Reading

    /// The asset in a field of a record of this database (element `index` of an asset list).
    public func asset(_ recordID: RecordID, field: String, index: Int? = nil) throws(ContainerError) -> StoredAsset? {
        let results = try lookup([recordID])
        guard case .saved(let record)? = results.first else { return nil }
        let texts = record.fields[field]?.assetTexts ?? []
        let position = index ?? 0
        guard texts.indices.contains(position), index != nil || texts.count == 1 else { return nil }
        return StoredAsset(storedText: texts[position])
    }

    // MARK: Saving (a modify's part)

    /// What resolving a modify's asset values gave: the operations with every asset value in its
    /// stored form, the operations that failed (per-record BAD_REQUEST), and the receipts each
    /// operation spends when it is applied.
    struct AssetResolution {
        var operations: [RecordOperation]
        var errors: [Int: ContainerError] = [:]
        var receipts: [Int: [AssetReceiptEntry]] = [:]
    }

    /// Turns the asset values of saved records into their stored form (SPEC §12): a value with a
    /// receipt takes the receipt's asset, if the receipt is known, unspent, unexpired and bound to
    /// this database, zone, record and field (a rereferenced one: to this database); a value
    /// without one must be an asset the record already holds (a fetched record saved again).
    func resolveAssets(_ operations: [RecordOperation], tx: any StorageWriteTransaction, database: StoredDatabase?, now: Int64)
        throws(ContainerError) -> AssetResolution {
        var resolution = AssetResolution(operations: operations)
        var claimed: Set<String> = []
        for index in operations.indices {
            let operation = operations[index]
            guard operation.kind != .delete, operation.kind != .forceDelete, operation.record.holdsAssets else { continue }
            let id = operation.record.recordID
            var existing: Record??
            func held() throws(ContainerError) -> [StoredAsset] {
                if existing == nil { existing = .some(try database.flatMap { database throws(ContainerError) in try tx.record(id, in: database) }) }
                var assets: [StoredAsset] = []
                existing??.fields.forEachField { _, value in
                    for text in value.assetTexts { if let asset = StoredAsset(storedText: text) { assets.append(asset) } }
                }
                return assets
            }
            var record = operation.record
            var receipts: [AssetReceiptEntry] = []
            do throws(ContainerError) {
                for (key, value) in operation.record.fields where value.holdsAssets {
                    func resolve(_ text: String) throws(ContainerError) -> FieldValue {
                        let field = "field '\(key.name)' of record '\(id.recordName)'"
                        guard let json = try? JSON.parse(text), case .object = json else {
                            throw ContainerError(.badRequest, "\(field) must be an asset dictionary with the receipt assets/upload gave")
                        }
                        if let receipt = json["receipt"] {
                            guard let receipt = receipt.stringValue, let entry = try tx.assetReceipt(receipt) else {
                                throw ContainerError(.badRequest, "\(field): unknown asset receipt")
                            }
                            guard !entry.spent, claimed.insert(receipt).inserted else {
                                throw ContainerError(.badRequest, "\(field): the asset receipt was already used (upload again, or use assets/rereference)")
                            }
                            guard entry.expires > now else { throw ContainerError(.badRequest, "\(field): the asset receipt expired") }
                            let binding = entry.binding
                            guard binding.database == self.key else {
                                throw ContainerError(.badRequest, "\(field): the asset receipt belongs to another database")
                            }
                            if !binding.recordName.isEmpty,
                               binding.zoneID != id.zoneID || binding.recordName != id.recordName || binding.fieldName != key.name {
                                throw ContainerError(.badRequest, "\(field): the asset receipt was issued for field '\(binding.fieldName)' of record '\(binding.recordName)' in zone '\(binding.zoneID.zoneName)'")
                            }
                            receipts.append(entry)
                            return .assetID(entry.asset.storedText)
                        }
                        if let checksum = json["fileChecksum"]?.stringValue, let asset = try held().first(where: { $0.fileChecksum == checksum }) {
                            return .assetID(asset.storedText)
                        }
                        throw ContainerError(.badRequest, "\(field) needs the receipt of an upload (assets/upload) or of assets/rereference")
                    }
                    switch value {
                    case .assetID(let text): record.fields[key] = try resolve(text)
                    case .list(.assetID, let values):
                        var resolved: [FieldValue] = []
                        for element in values {
                            guard case .assetID(let text) = element else { continue }
                            resolved.append(try resolve(text))
                        }
                        record.fields[key] = .list(.assetID, resolved)
                    default: break
                    }
                }
                resolution.operations[index] = RecordOperation(kind: operation.kind, record: record)
                if !receipts.isEmpty { resolution.receipts[index] = receipts }
            } catch {
                resolution.errors[index] = error
            }
        }
        return resolution
    }

    /// Keeps each changed record's asset references (blobs go only when nothing refers to them),
    /// and spends the receipts of the operations that were applied.
    func commitAssets(_ changes: [RecordChange], receipts: [Int: [AssetReceiptEntry]], results: [RecordResult],
                      tx: any StorageWriteTransaction, database: StoredDatabase, now: Int64) throws(ContainerError) {
        for (index, entries) in receipts {
            guard case .saved = results[index] else { continue }
            for var entry in entries {
                entry.spent = true
                try tx.saveAssetReceipt(entry)
            }
        }
        for change in changes {
            switch change {
            case .created(let record):
                let hashes = record.assetContentHashes
                if !hashes.isEmpty { try tx.setAssetReferences(record.recordID, to: hashes, in: database, now: now) }
            case .updated(let before, let after):
                let hashes = after.assetContentHashes
                if hashes != before.assetContentHashes { try tx.setAssetReferences(after.recordID, to: hashes, in: database, now: now) }
            case .deleted(let record):
                if record.holdsAssets { try tx.setAssetReferences(record.recordID, to: [], in: database, now: now) }
            }
        }
    }
}
