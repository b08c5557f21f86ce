import KQuery
import KQueryContainer
import NIOCore
import PostgresNIO

/// A transaction's assets (SPEC §12), as the container file keeps them (`SQLiteAssets`): bytes in
/// chunks beside the records, so an asset is as durable as the modify that commits it; a finished
/// upload's chunks stay under their upload's owner, which `asset_blob_chunks` names.
extension PostgresTransaction {
    private func binding(_ environment: Int64, _ scope: Int64, _ user: String, _ zoneName: String, _ ownerName: String, _ recordName: String,
                         _ fieldName: String) throws(ContainerError) -> AssetBinding {
        guard let environment = ContainerEnvironment(rawValue: Int(environment)), let scope = DatabaseScope(rawValue: Int(scope)) else {
            throw ContainerError(.internalError, "\(name): corrupt asset row (environment \(environment), scope \(scope))")
        }
        return AssetBinding(
            database: DatabaseKey(environment: environment, scope: scope, userRecordName: user), zoneID: ZoneID(zoneName: zoneName, ownerName: ownerName),
            recordName: recordName, fieldName: fieldName)
    }

    func assetUpload(_ token: String) throws(ContainerError) -> AssetUploadTicket? {
        guard let row = try session.rows("""
            SELECT token, environment, scope, user_record_name, zone_name, owner_name, record_name, field_name, record_type, expires, state
            FROM asset_uploads WHERE container_id = \(containerID) AND token = \(token)
            """).first else { return nil }
        return try ticket(row)
    }

    func assetUploads(after token: String, limit: Int) throws(ContainerError) -> [AssetUploadTicket] {
        try session.rows("""
            SELECT token, environment, scope, user_record_name, zone_name, owner_name, record_name, field_name, record_type, expires, state
            FROM asset_uploads WHERE container_id = \(containerID) AND token > \(token) ORDER BY token LIMIT \(Int64(limit))
            """).map { row throws(ContainerError) in try ticket(row) }
    }

    private func ticket(_ row: PostgresRow) throws(ContainerError) -> AssetUploadTicket {
        let (token, environment, scope, user, zoneName, ownerName, recordName, fieldName, recordType, expires, stateNumber) =
            try session.decode(row, (String, Int64, Int64, String, String, String, String, String, String?, Int64, Int64).self)
        guard let state = AssetUploadTicket.State(rawValue: Int(stateNumber)) else { throw ContainerError(.internalError, "\(name): corrupt upload state") }
        return AssetUploadTicket(
            token: token, binding: try binding(environment, scope, user, zoneName, ownerName, recordName, fieldName), recordType: recordType,
            expires: expires, state: state)
    }

    func assetReceipt(_ receipt: String) throws(ContainerError) -> AssetReceiptEntry? {
        guard let row = try session.rows("""
            SELECT receipt, environment, scope, user_record_name, zone_name, owner_name, record_name, field_name, content_hash, file_checksum, size,
                   expires, spent
            FROM asset_receipts WHERE container_id = \(containerID) AND receipt = \(receipt)
            """).first else { return nil }
        return try receiptEntry(row)
    }

    func assetReceipts(after receipt: String, limit: Int) throws(ContainerError) -> [AssetReceiptEntry] {
        try session.rows("""
            SELECT receipt, environment, scope, user_record_name, zone_name, owner_name, record_name, field_name, content_hash, file_checksum, size,
                   expires, spent
            FROM asset_receipts WHERE container_id = \(containerID) AND receipt > \(receipt) ORDER BY receipt LIMIT \(Int64(limit))
            """).map { row throws(ContainerError) in try receiptEntry(row) }
    }

    private func receiptEntry(_ row: PostgresRow) throws(ContainerError) -> AssetReceiptEntry {
        let (receipt, environment, scope, user, zoneName, ownerName, recordName, fieldName, contentHash, checksum, size, expires, spent) =
            try session.decode(row, (String, Int64, Int64, String, String, String, String, String, String, String, Int64, Int64, Bool).self)
        return AssetReceiptEntry(
            receipt: receipt, binding: try binding(environment, scope, user, zoneName, ownerName, recordName, fieldName),
            asset: StoredAsset(fileChecksum: checksum, size: size, contentHash: contentHash), expires: expires, spent: spent)
    }

    func assetBlob(_ contentHash: String) throws(ContainerError) -> AssetBlob? {
        guard let row = try session.rows("""
            SELECT size, file_checksum, content_type, released FROM asset_blobs WHERE container_id = \(containerID) AND content_hash = \(contentHash)
            """).first else { return nil }
        let (size, checksum, contentType, released) = try session.decode(row, (Int64, String, String, Int64).self)
        return AssetBlob(contentHash: contentHash, size: size, fileChecksum: checksum, contentType: contentType, released: released)
    }

    func assetChunk(_ owner: String, index: Int) throws(ContainerError) -> [UInt8]? {
        guard let row = try session.rows("""
            SELECT bytes FROM asset_chunks WHERE container_id = \(containerID) AND chunk = \(Int64(index)) AND owner =
            COALESCE((SELECT owner FROM asset_blob_chunks WHERE container_id = \(containerID) AND content_hash = \(owner)), \(owner))
            """).first else { return nil }
        var bytes = try session.decode(row, ByteBuffer.self)
        return bytes.readBytes(length: bytes.readableBytes) ?? []
    }

    func assetBlobs(after contentHash: String, limit: Int) throws(ContainerError) -> [AssetBlob] {
        var blobs: [AssetBlob] = []
        for row in try session.rows("""
            SELECT content_hash, size, file_checksum, content_type, released FROM asset_blobs
            WHERE container_id = \(containerID) AND content_hash > \(contentHash) ORDER BY content_hash LIMIT \(Int64(limit))
            """) {
            let (hash, size, checksum, contentType, released) = try session.decode(row, (String, Int64, String, String, Int64).self)
            blobs.append(AssetBlob(contentHash: hash, size: size, fileChecksum: checksum, contentType: contentType, released: released))
        }
        return blobs
    }

    func holdsAssetBlobs() throws(ContainerError) -> Bool {
        !(try session.rows("SELECT 1 FROM asset_blobs WHERE container_id = \(containerID) LIMIT 1")).isEmpty
    }

    func saveAssetUpload(_ ticket: AssetUploadTicket) throws(ContainerError) {
        let binding = ticket.binding
        try session.run("""
            INSERT INTO asset_uploads (container_id, token, environment, scope, user_record_name, zone_name, owner_name, record_name, field_name,
                                       record_type, expires, state)
            VALUES (\(containerID), \(ticket.token), \(Int64(binding.database.environment.rawValue)), \(Int64(binding.database.scope.rawValue)),
                    \(binding.database.userRecordName), \(binding.zoneID.zoneName), \(binding.zoneID.ownerName), \(binding.recordName),
                    \(binding.fieldName), \(ticket.recordType), \(ticket.expires), \(Int64(ticket.state.rawValue)))
            ON CONFLICT (container_id, token) DO UPDATE SET environment = EXCLUDED.environment, scope = EXCLUDED.scope,
                user_record_name = EXCLUDED.user_record_name, zone_name = EXCLUDED.zone_name, owner_name = EXCLUDED.owner_name,
                record_name = EXCLUDED.record_name, field_name = EXCLUDED.field_name, record_type = EXCLUDED.record_type,
                expires = EXCLUDED.expires, state = EXCLUDED.state
            """)
    }

    func saveAssetChunk(_ owner: String, index: Int, bytes: [UInt8]) throws(ContainerError) {
        try session.run("""
            INSERT INTO asset_chunks (container_id, owner, chunk, bytes) VALUES (\(containerID), \(owner), \(Int64(index)), \(ByteBuffer(bytes: bytes)))
            ON CONFLICT (container_id, owner, chunk) DO UPDATE SET bytes = EXCLUDED.bytes
            """)
    }

    /// Deletes a blob's chunks (wherever they are kept) or an upload's (unless a blob kept them).
    func deleteAssetChunks(_ owner: String) throws(ContainerError) {
        if let row = try session.rows("""
            DELETE FROM asset_blob_chunks WHERE container_id = \(containerID) AND content_hash = \(owner) RETURNING owner
            """).first {
            let kept = try session.decode(row, String.self)
            try session.run("DELETE FROM asset_chunks WHERE container_id = \(containerID) AND owner = \(kept)")
        }
        try session.run("""
            DELETE FROM asset_chunks WHERE container_id = \(containerID) AND owner = \(owner)
            AND NOT EXISTS (SELECT 1 FROM asset_blob_chunks WHERE container_id = \(containerID) AND owner = \(owner))
            """)
    }

    func moveAssetChunks(from owner: String, to newOwner: String) throws(ContainerError) {
        try deleteAssetChunks(newOwner)
        try session.run("INSERT INTO asset_blob_chunks (container_id, content_hash, owner) VALUES (\(containerID), \(newOwner), \(owner))")
    }

    func saveAssetBlob(_ blob: AssetBlob) throws(ContainerError) {
        try session.run("""
            INSERT INTO asset_blobs (container_id, content_hash, size, file_checksum, content_type, released)
            VALUES (\(containerID), \(blob.contentHash), \(blob.size), \(blob.fileChecksum), \(blob.contentType), \(blob.released))
            ON CONFLICT (container_id, content_hash) DO UPDATE SET size = EXCLUDED.size, file_checksum = EXCLUDED.file_checksum,
                content_type = EXCLUDED.content_type, released = EXCLUDED.released
            """)
    }

    func saveAssetReceipt(_ entry: AssetReceiptEntry) throws(ContainerError) {
        let binding = entry.binding
        try session.run("""
            INSERT INTO asset_receipts (container_id, receipt, environment, scope, user_record_name, zone_name, owner_name, record_name, field_name,
                                        content_hash, file_checksum, size, expires, spent)
            VALUES (\(containerID), \(entry.receipt), \(Int64(binding.database.environment.rawValue)), \(Int64(binding.database.scope.rawValue)),
                    \(binding.database.userRecordName), \(binding.zoneID.zoneName), \(binding.zoneID.ownerName), \(binding.recordName),
                    \(binding.fieldName), \(entry.asset.contentHash), \(entry.asset.fileChecksum), \(entry.asset.size), \(entry.expires), \(entry.spent))
            ON CONFLICT (container_id, receipt) DO UPDATE SET environment = EXCLUDED.environment, scope = EXCLUDED.scope,
                user_record_name = EXCLUDED.user_record_name, zone_name = EXCLUDED.zone_name, owner_name = EXCLUDED.owner_name,
                record_name = EXCLUDED.record_name, field_name = EXCLUDED.field_name, content_hash = EXCLUDED.content_hash,
                file_checksum = EXCLUDED.file_checksum, size = EXCLUDED.size, expires = EXCLUDED.expires, spent = EXCLUDED.spent
            """)
    }

    func setAssetReferences(_ record: RecordID, to hashes: Set<String>, in database: StoredDatabase, now: Int64) throws(ContainerError) {
        let zoneID = record.zoneID
        let old: Set<String> = Set(try session.rows("""
            SELECT content_hash FROM asset_references WHERE container_id = \(containerID) AND database_id = \(database.id) AND zone_name = \(zoneID.zoneName)
            AND owner_name = \(zoneID.ownerName) AND record_name = \(record.recordName)
            """).map { row throws(ContainerError) in try session.decode(row, String.self) })
        let released = Array(old.subtracting(hashes)), added = Array(hashes.subtracting(old))
        if !released.isEmpty {
            try session.run("""
                DELETE FROM asset_references WHERE container_id = \(containerID) AND database_id = \(database.id) AND zone_name = \(zoneID.zoneName)
                AND owner_name = \(zoneID.ownerName) AND record_name = \(record.recordName) AND content_hash = ANY(\(released)::text[])
                """)
            try session.run("UPDATE asset_blobs SET released = \(now) WHERE container_id = \(containerID) AND content_hash = ANY(\(released)::text[])")
        }
        if !added.isEmpty {
            try session.run("""
                INSERT INTO asset_references (container_id, database_id, zone_name, owner_name, record_name, content_hash)
                SELECT \(containerID), \(database.id), \(zoneID.zoneName), \(zoneID.ownerName), \(record.recordName), hash
                FROM unnest(\(added)::text[]) AS h (hash)
                """)
        }
    }

    func deleteAssetReferences(in zoneID: ZoneID, of database: StoredDatabase, now: Int64) throws(ContainerError) {
        let hashes = try session.rows("""
            DELETE FROM asset_references WHERE container_id = \(containerID) AND database_id = \(database.id) AND zone_name = \(zoneID.zoneName) AND owner_name = \(zoneID.ownerName)
            RETURNING content_hash
            """).map { row throws(ContainerError) in try session.decode(row, String.self) }
        guard !hashes.isEmpty else { return }
        try session.run("UPDATE asset_blobs SET released = \(now) WHERE container_id = \(containerID) AND content_hash = ANY(\(hashes)::text[])")
    }

    func collectAssets(now: Int64, gracePeriod: Int64) throws(ContainerError) -> AssetCollection {
        var collection = AssetCollection()
        let receiving = Int64(AssetUploadTicket.State.receiving.rawValue), stale = now - AssetChunks.receivingGrace
        let expiredUploads = try session.rows("""
            SELECT token FROM asset_uploads WHERE container_id = \(containerID) AND expires <= \(now) AND (state <> \(receiving) OR expires <= \(stale))
            """)
            .map { row throws(ContainerError) in try session.decode(row, String.self) }
        for token in expiredUploads {
            try deleteAssetChunks(AssetChunks.uploadOwner(token))
            try session.run("DELETE FROM asset_uploads WHERE container_id = \(containerID) AND token = \(token)")
        }
        collection.uploads = expiredUploads.count
        collection.receipts = try session.run("DELETE FROM asset_receipts WHERE container_id = \(containerID) AND (spent OR expires <= \(now))")
        let orphans = try session.rows("""
            SELECT content_hash, size FROM asset_blobs b WHERE container_id = \(containerID) AND released + \(gracePeriod) <= \(now)
            AND NOT EXISTS (SELECT 1 FROM asset_references r WHERE r.container_id = \(containerID) AND r.content_hash = b.content_hash)
            AND NOT EXISTS (SELECT 1 FROM asset_receipts r WHERE r.container_id = \(containerID) AND r.content_hash = b.content_hash)
            """)
        for row in orphans {
            let (hash, size) = try session.decode(row, (String, Int64).self)
            try deleteAssetChunks(hash)
            try session.run("DELETE FROM asset_blobs WHERE container_id = \(containerID) AND content_hash = \(hash)")
            collection.blobs += 1
            collection.bytes += size
        }
        return collection
    }
}
