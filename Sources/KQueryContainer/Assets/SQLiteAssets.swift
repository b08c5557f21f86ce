import GRDB
import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A container file's assets (SPEC §12), as SQL on one connection inside the caller's transaction.
///
/// ```
/// asset_uploads(token PK, environment, scope, userRecordName, zoneName, ownerName, recordName,
///               fieldName, recordType, expires, state)
/// asset_receipts(receipt PK, environment, scope, userRecordName, zoneName, ownerName, recordName,
///                fieldName, contentHash, fileChecksum, size, expires, spent)
/// asset_blobs(contentHash PK, size, fileChecksum, contentType, released)
/// asset_chunks(owner, chunk PK, bytes)        owner: a blob's content hash, or "upload:<token>"
/// asset_blob_chunks(contentHash PK, owner UNIQUE)   a blob whose chunks are kept under its upload's owner
/// asset_references(databaseID, zoneName, ownerName, recordName, contentHash PK)
/// ```
/// A finished upload's chunks stay where they were written: the blob names their owner in
/// `asset_blob_chunks`. Renaming the owner instead would rewrite every chunk (SQLite rewrites a
/// whole row, blob included, to change one column): twice the bytes through the log for each
/// upload. Blobs stored under their own hash (no row there) read as before.
/// Bytes live in chunks of `AssetPolicy.chunkSize` in the same file as the records, so an asset is
/// as durable as the modify that commits it, and a copy of the file is a copy of everything.
struct SQLiteAssets {
    let db: GRDB.Database

    static let schema = """
        CREATE TABLE IF NOT EXISTS asset_uploads (
            token TEXT PRIMARY KEY NOT NULL, environment INTEGER NOT NULL, scope INTEGER NOT NULL, userRecordName TEXT NOT NULL,
            zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, recordName TEXT NOT NULL, fieldName TEXT NOT NULL, recordType TEXT,
            expires INTEGER NOT NULL, state INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS asset_receipts (
            receipt TEXT PRIMARY KEY NOT NULL, environment INTEGER NOT NULL, scope INTEGER NOT NULL, userRecordName TEXT NOT NULL,
            zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, recordName TEXT NOT NULL, fieldName TEXT NOT NULL,
            contentHash TEXT NOT NULL, fileChecksum TEXT NOT NULL, size INTEGER NOT NULL, expires INTEGER NOT NULL, spent INTEGER NOT NULL)
            WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS asset_receipts_by_blob ON asset_receipts (contentHash);
        CREATE TABLE IF NOT EXISTS asset_blobs (
            contentHash TEXT PRIMARY KEY NOT NULL, size INTEGER NOT NULL, fileChecksum TEXT NOT NULL, contentType TEXT NOT NULL,
            released INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS asset_chunks (owner TEXT NOT NULL, chunk INTEGER NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY (owner, chunk));
        CREATE TABLE IF NOT EXISTS asset_blob_chunks (contentHash TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL UNIQUE) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS asset_references (
            databaseID INTEGER NOT NULL, zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, recordName TEXT NOT NULL, contentHash TEXT NOT NULL,
            PRIMARY KEY (databaseID, zoneName, ownerName, recordName, contentHash)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS asset_references_by_blob ON asset_references (contentHash);
        """

    private static func key(_ row: Row, from column: Int) throws -> DatabaseKey {
        guard let environment = ContainerEnvironment(rawValue: row[column]), let scope = DatabaseScope(rawValue: row[column + 1]) else {
            throw ContainerError(.internalError, "corrupt asset row (environment \(row[column] as Int), scope \(row[column + 1] as Int))")
        }
        return DatabaseKey(environment: environment, scope: scope, userRecordName: row[column + 2])
    }

    private static func binding(_ row: Row, from column: Int) throws -> AssetBinding {
        AssetBinding(
            database: try key(row, from: column), zoneID: ZoneID(zoneName: row[column + 3], ownerName: row[column + 4]),
            recordName: row[column + 5], fieldName: row[column + 6])
    }

    private static func arguments(_ binding: AssetBinding) -> StatementArguments {
        [binding.database.environment.rawValue, binding.database.scope.rawValue, binding.database.userRecordName,
         binding.zoneID.zoneName, binding.zoneID.ownerName, binding.recordName, binding.fieldName]
    }

    // MARK: Reading

    func upload(_ token: String) throws -> AssetUploadTicket? {
        try Row.fetchOne(try db.cachedStatement(sql: """
            SELECT environment, scope, userRecordName, zoneName, ownerName, recordName, fieldName, recordType, expires, state
            FROM asset_uploads WHERE token = ?
            """), arguments: [token]).map { row in try Self.ticket(token, row) }
    }

    /// The tickets whose token sorts after `token`, in order, at most `limit`.
    func uploads(after token: String, limit: Int) throws -> [AssetUploadTicket] {
        try Row.fetchAll(try db.cachedStatement(sql: """
            SELECT environment, scope, userRecordName, zoneName, ownerName, recordName, fieldName, recordType, expires, state, token
            FROM asset_uploads WHERE token > ? ORDER BY token LIMIT ?
            """), arguments: [token, limit]).map { row in try Self.ticket(row[10], row) }
    }

    private static func ticket(_ token: String, _ row: Row) throws -> AssetUploadTicket {
        guard let state = AssetUploadTicket.State(rawValue: row[9]) else { throw ContainerError(.internalError, "corrupt upload state") }
        return AssetUploadTicket(token: token, binding: try binding(row, from: 0), recordType: row[7], expires: row[8], state: state)
    }

    func receipt(_ receipt: String) throws -> AssetReceiptEntry? {
        try Row.fetchOne(try db.cachedStatement(sql: """
            SELECT environment, scope, userRecordName, zoneName, ownerName, recordName, fieldName, contentHash, fileChecksum, size, expires, spent
            FROM asset_receipts WHERE receipt = ?
            """), arguments: [receipt]).map { row in try Self.receiptEntry(receipt, row) }
    }

    /// The receipts sorting after `receipt`, in order, at most `limit`.
    func receipts(after receipt: String, limit: Int) throws -> [AssetReceiptEntry] {
        try Row.fetchAll(try db.cachedStatement(sql: """
            SELECT environment, scope, userRecordName, zoneName, ownerName, recordName, fieldName, contentHash, fileChecksum, size, expires, spent,
                   receipt
            FROM asset_receipts WHERE receipt > ? ORDER BY receipt LIMIT ?
            """), arguments: [receipt, limit]).map { row in try Self.receiptEntry(row[12], row) }
    }

    private static func receiptEntry(_ receipt: String, _ row: Row) throws -> AssetReceiptEntry {
        AssetReceiptEntry(
            receipt: receipt, binding: try binding(row, from: 0),
            asset: StoredAsset(fileChecksum: row[8], size: row[9], contentHash: row[7]), expires: row[10], spent: row[11])
    }

    func blob(_ contentHash: String) throws -> AssetBlob? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT size, fileChecksum, contentType, released FROM asset_blobs WHERE contentHash = ?"), arguments: [contentHash])
            .map { AssetBlob(contentHash: contentHash, size: $0[0], fileChecksum: $0[1], contentType: $0[2], released: $0[3]) }
    }

    func chunk(_ owner: String, index: Int) throws -> [UInt8]? {
        try Data.fetchOne(try db.cachedStatement(sql: """
            SELECT bytes FROM asset_chunks WHERE owner = COALESCE((SELECT owner FROM asset_blob_chunks WHERE contentHash = ?), ?) AND chunk = ?
            """), arguments: [owner, owner, index]).map { [UInt8]($0) }
    }

    func blobs(after contentHash: String, limit: Int) throws -> [AssetBlob] {
        try Row.fetchAll(try db.cachedStatement(sql: """
            SELECT contentHash, size, fileChecksum, contentType, released FROM asset_blobs WHERE contentHash > ? ORDER BY contentHash LIMIT ?
            """), arguments: [contentHash, limit])
            .map { AssetBlob(contentHash: $0[0], size: $0[1], fileChecksum: $0[2], contentType: $0[3], released: $0[4]) }
    }

    func holdsBlobs() throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM asset_blobs)")) ?? false
    }

    // MARK: Writing

    func saveUpload(_ ticket: AssetUploadTicket) throws {
        var arguments = Self.arguments(ticket.binding)
        arguments += [ticket.token, ticket.recordType, ticket.expires, ticket.state.rawValue]
        try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO asset_uploads
            (environment, scope, userRecordName, zoneName, ownerName, recordName, fieldName, token, recordType, expires, state)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: arguments)
    }

    func saveChunk(_ owner: String, index: Int, bytes: [UInt8]) throws {
        // The bytes are lent to SQLite for the statement (it copies what it binds), not copied into a `Data` first.
        try bytes.withUnsafeBytes { buffer in
            let lent = buffer.baseAddress.map { Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: $0), count: buffer.count, deallocator: .none) } ?? Data()
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO asset_chunks (owner, chunk, bytes) VALUES (?, ?, ?)").execute(arguments: [owner, index, lent])
        }
    }

    /// Deletes a blob's chunks (wherever they are kept) or an upload's (unless a blob kept them).
    func deleteChunks(_ owner: String) throws {
        if let kept = try String.fetchOne(try db.cachedStatement(sql: "SELECT owner FROM asset_blob_chunks WHERE contentHash = ?"), arguments: [owner]) {
            try db.cachedStatement(sql: "DELETE FROM asset_chunks WHERE owner = ?").execute(arguments: [kept])
            try db.cachedStatement(sql: "DELETE FROM asset_blob_chunks WHERE contentHash = ?").execute(arguments: [owner])
        }
        try db.cachedStatement(sql: """
            DELETE FROM asset_chunks WHERE owner = ? AND NOT EXISTS (SELECT 1 FROM asset_blob_chunks WHERE owner = ?)
            """).execute(arguments: [owner, owner])
    }

    /// Makes an upload's chunks the blob's, where they lie.
    func moveChunks(from owner: String, to newOwner: String) throws {
        try deleteChunks(newOwner)
        try db.cachedStatement(sql: "INSERT INTO asset_blob_chunks (contentHash, owner) VALUES (?, ?)").execute(arguments: [newOwner, owner])
    }

    func saveBlob(_ blob: AssetBlob) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO asset_blobs (contentHash, size, fileChecksum, contentType, released) VALUES (?, ?, ?, ?, ?)").execute(arguments: [blob.contentHash, blob.size, blob.fileChecksum, blob.contentType, blob.released])
    }

    func saveReceipt(_ entry: AssetReceiptEntry) throws {
        var arguments = Self.arguments(entry.binding)
        arguments += [entry.receipt, entry.asset.contentHash, entry.asset.fileChecksum, entry.asset.size, entry.expires, entry.spent]
        try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO asset_receipts
            (environment, scope, userRecordName, zoneName, ownerName, recordName, fieldName, receipt, contentHash, fileChecksum, size, expires, spent)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: arguments)
    }

    func setReferences(_ record: RecordID, to hashes: Set<String>, database: Int64, now: Int64) throws {
        let place: StatementArguments = [database, record.zoneID.zoneName, record.zoneID.ownerName, record.recordName]
        let old = Set(try String.fetchAll(try db.cachedStatement(sql: """
            SELECT contentHash FROM asset_references WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND recordName = ?
            """), arguments: place))
        for hash in old.subtracting(hashes) {
            var arguments = place
            arguments += [hash]
            try db.cachedStatement(sql: """
                DELETE FROM asset_references WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND recordName = ? AND contentHash = ?
                """).execute(arguments: arguments)
            try db.cachedStatement(sql: "UPDATE asset_blobs SET released = ? WHERE contentHash = ?").execute(arguments: [now, hash])
        }
        for hash in hashes.subtracting(old) {
            var arguments = place
            arguments += [hash]
            try db.cachedStatement(sql: "INSERT INTO asset_references (databaseID, zoneName, ownerName, recordName, contentHash) VALUES (?, ?, ?, ?, ?)").execute(arguments: arguments)
        }
    }

    func deleteReferences(in zoneID: ZoneID, database: Int64, now: Int64) throws {
        let zone: StatementArguments = [database, zoneID.zoneName, zoneID.ownerName]
        var arguments: StatementArguments = [now]
        arguments += zone
        try db.cachedStatement(sql: """
            UPDATE asset_blobs SET released = ? WHERE contentHash IN
            (SELECT contentHash FROM asset_references WHERE databaseID = ? AND zoneName = ? AND ownerName = ?)
            """).execute(arguments: arguments)
        try db.cachedStatement(sql: "DELETE FROM asset_references WHERE databaseID = ? AND zoneName = ? AND ownerName = ?").execute(arguments: zone)
    }

    func collect(now: Int64, gracePeriod: Int64) throws -> AssetCollection {
        var collection = AssetCollection()
        let expiredUploads = try String.fetchAll(
            db, sql: "SELECT token FROM asset_uploads WHERE expires <= ? AND (state != ? OR expires <= ?)",
            arguments: [now, AssetUploadTicket.State.receiving.rawValue, now - AssetChunks.receivingGrace])
        for token in expiredUploads {
            try deleteChunks(AssetChunks.uploadOwner(token))
            try db.cachedStatement(sql: "DELETE FROM asset_uploads WHERE token = ?").execute(arguments: [token])
        }
        collection.uploads = expiredUploads.count
        try db.cachedStatement(sql: "DELETE FROM asset_receipts WHERE spent != 0 OR expires <= ?").execute(arguments: [now])
        collection.receipts = db.changesCount
        let orphans = try Row.fetchAll(try db.cachedStatement(sql: """
            SELECT contentHash, size FROM asset_blobs b WHERE released + ? <= ?
            AND NOT EXISTS (SELECT 1 FROM asset_references r WHERE r.contentHash = b.contentHash)
            AND NOT EXISTS (SELECT 1 FROM asset_receipts r WHERE r.contentHash = b.contentHash)
            """), arguments: [gracePeriod, now])
        for row in orphans {
            let hash: String = row[0]
            try deleteChunks(hash)
            try db.cachedStatement(sql: "DELETE FROM asset_blobs WHERE contentHash = ?").execute(arguments: [hash])
            collection.blobs += 1
            collection.bytes += row[1]
        }
        return collection
    }
}
