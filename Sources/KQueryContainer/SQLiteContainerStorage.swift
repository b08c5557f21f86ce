import GRDB
import KQuery
import KQueryStore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A container's data in one SQLite file (or in memory).
///
/// Schema (one row per database, zone, record, tombstone, owning or validating reference,
/// subscription and queued notification; databases are numbered by `databases.id`):
/// ```
/// container_meta(key PRIMARY KEY, value)          format version, token secret
/// databases(id, environment, scope, userRecordName UNIQUE, sequence, horizon)
/// zones(databaseID, zoneName, ownerName PK, createdSequence, changedSequence)
/// zone_tombstones(databaseID, zoneName, ownerName PK, deletedSequence)
/// records(databaseID, zoneName, ownerName, recordName PK, recordType, changeSequence, body)
/// record_tombstones(databaseID, zoneName, ownerName, recordName PK, recordType, deletedSequence)
/// record_references(databaseID, zoneName, ownerName, targetName, action, sourceName PK)
/// subscriptions(databaseID, subscriptionID PK, owner, body)      rowid keeps the save order
/// outbox(id AUTOINCREMENT, environment, scope, userRecordName, subscriptionID, owner,
///        notificationID, payload, priority, pushType, created, collapseID, delivered, excludedDevice)
/// ```
/// An outbox row's `delivered` holds the bits of the `DeliveryChannel`s that acknowledged it; the
/// row is deleted when all are set. Files from before them get the three last columns on opening.
/// A record's `body` is `RecordCoding`'s binary form. A file uses WAL (readers do not wait for the
/// writer) with group commit: transactions commit with `synchronous = NORMAL`, and each write waits
/// in `waitUntilDurable` for an `fdatasync` of the log that covers it before it is acknowledged
/// (`GroupCommit`), so a committed modify survives a crash or a power cut, its outbox rows with it,
/// and concurrent writes share a sync.
///
/// Reads are answered from a mirror of the committed state in memory (`MemoryContainerStorage`,
/// loaded at open): a change fetch walks a zone's change log and hands out records already
/// decoded, where SQL had to find and decode each (ten times the aim for 10,000 changes). A write
/// runs on the file, journals what it changed, and once committed replays the journal on the
/// mirror; the container's writer lock keeps replays in commit order. Readers wait for a replay
/// (microseconds), never for a write's disk sync.
final class SQLiteContainerStorage: ContainerStorage {
    static let formatVersion = "1"

    let secret: (UInt64, UInt64)
    private let writer: any DatabaseWriter
    /// The file, or `:memory:`, for messages.
    private let name: String
    /// Syncs the write-ahead log for the writes waiting to be acknowledged (nil in memory).
    private let groupCommit: GroupCommit?
    /// Checkpoints the log (nil in memory).
    private let checkpointer: Checkpointer?
    /// The committed state, in memory (nil: not mirrored, every read is a statement).
    private let mirror: MemoryContainerStorage?

    /// Opens (creating if needed) the container file at `path`, or an in-memory one for nil.
    /// `mirrored` false: the file is read with statements, never loaded into memory (a copy
    /// reading or writing a page at a time, `ContainerCopy`); each write commits by itself.
    init(path: String?, mirrored: Bool = true) throws(ContainerError) {
        name = path ?? ":memory:"
        mirror = mirrored || path == nil ? MemoryContainerStorage() : nil
        var configuration = Configuration()
        // Statement journals (for INSERT OR REPLACE inside a transaction) in memory: on disk, SQLite
        // opened a temporary file for each statement that needed one.
        // synchronous = NORMAL: commits do not wait for the disk; `waitUntilDurable` syncs the log
        // for every write before it is acknowledged (group commit).
        // wal_autocheckpoint = 0: the log is checkpointed mostly beside the writes (`Checkpointer`),
        // not by the commit that fills it.
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY")
            if path != nil { try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        }
        groupCommit = path.map { GroupCommit(walPath: $0 + "-wal") }
        checkpointer = path.map { Checkpointer(path: $0) }
        // Another process with the file open (`kquery notifications --ack` beside a running server,
        // a server closing as the next one opens) makes SQLite wait rather than fail at once.
        configuration.busyMode = .timeout(10)
        do {
            if let path {
                writer = try DatabasePool(path: path, configuration: configuration)
            } else {
                writer = try DatabaseQueue(configuration: configuration)
            }
            secret = try writer.write { db in try Self.prepare(db, name: path ?? ":memory:") }
            if let checkpointer { writer.writeWithoutTransaction { db in checkpointer.watch(db) } }
            if let mirror { mirror.replaceState(try writer.read { db in try SQLiteTransaction(db: db, name: path ?? ":memory:").load() }) }
        } catch let error as ContainerError {
            throw error
        } catch {
            throw Self.storageError(error, name: path ?? ":memory:")
        }
    }

    deinit {
        // The hook refers to the checkpointer, which may go before the writer's connection.
        if checkpointer != nil { writer.writeWithoutTransaction { db in Checkpointer.unwatch(db) } }
    }

    /// Creates the tables of a new file, checks the format of an existing one; returns the secret.
    private static func prepare(_ db: GRDB.Database, name: String) throws -> (UInt64, UInt64) {
        let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        if !tables.isEmpty, !tables.contains("container_meta") {
            throw ContainerError(.internalError, "\(name): not a KQuery container file (it has other tables)")
        }
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS container_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS databases (
                id INTEGER PRIMARY KEY, environment INTEGER NOT NULL, scope INTEGER NOT NULL, userRecordName TEXT NOT NULL,
                sequence INTEGER NOT NULL DEFAULT 0, horizon INTEGER NOT NULL DEFAULT 0,
                UNIQUE (environment, scope, userRecordName));
            CREATE TABLE IF NOT EXISTS zones (
                databaseID INTEGER NOT NULL, zoneName TEXT NOT NULL, ownerName TEXT NOT NULL,
                createdSequence INTEGER NOT NULL, changedSequence INTEGER NOT NULL,
                PRIMARY KEY (databaseID, zoneName, ownerName)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS zones_by_change ON zones (databaseID, changedSequence);
            CREATE TABLE IF NOT EXISTS zone_tombstones (
                databaseID INTEGER NOT NULL, zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, deletedSequence INTEGER NOT NULL,
                PRIMARY KEY (databaseID, zoneName, ownerName)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS zone_tombstones_by_change ON zone_tombstones (databaseID, deletedSequence);
            CREATE TABLE IF NOT EXISTS records (
                databaseID INTEGER NOT NULL, zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, recordName TEXT NOT NULL,
                recordType TEXT NOT NULL, changeSequence INTEGER NOT NULL, body BLOB NOT NULL,
                PRIMARY KEY (databaseID, zoneName, ownerName, recordName)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS records_by_change ON records (databaseID, zoneName, ownerName, changeSequence);
            CREATE INDEX IF NOT EXISTS records_shares ON records (databaseID, changeSequence) WHERE recordType = 'cloudkit.share';
            CREATE TABLE IF NOT EXISTS record_tombstones (
                databaseID INTEGER NOT NULL, zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, recordName TEXT NOT NULL,
                recordType TEXT NOT NULL, deletedSequence INTEGER NOT NULL,
                PRIMARY KEY (databaseID, zoneName, ownerName, recordName)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS record_tombstones_by_change ON record_tombstones (databaseID, zoneName, ownerName, deletedSequence);
            CREATE TABLE IF NOT EXISTS record_references (
                databaseID INTEGER NOT NULL, zoneName TEXT NOT NULL, ownerName TEXT NOT NULL,
                targetName TEXT NOT NULL, action TEXT NOT NULL, sourceName TEXT NOT NULL,
                PRIMARY KEY (databaseID, zoneName, ownerName, targetName, action, sourceName)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS record_references_by_source ON record_references (databaseID, zoneName, ownerName, sourceName);
            CREATE TABLE IF NOT EXISTS subscriptions (
                databaseID INTEGER NOT NULL, subscriptionID TEXT NOT NULL, owner TEXT NOT NULL, body TEXT NOT NULL,
                UNIQUE (databaseID, subscriptionID));
            CREATE TABLE IF NOT EXISTS outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT, environment INTEGER NOT NULL, scope INTEGER NOT NULL,
                userRecordName TEXT NOT NULL, subscriptionID TEXT NOT NULL, owner TEXT NOT NULL, notificationID TEXT NOT NULL,
                payload TEXT NOT NULL, priority INTEGER NOT NULL, pushType TEXT NOT NULL, created INTEGER NOT NULL,
                collapseID TEXT, delivered INTEGER NOT NULL DEFAULT 0, excludedDevice TEXT);
            """)
        let outboxColumns = try Set(Row.fetchAll(db, sql: "PRAGMA table_info(outbox)").map { $0["name"] as String })
        if !outboxColumns.contains("collapseID") { try db.execute(sql: "ALTER TABLE outbox ADD COLUMN collapseID TEXT") }
        if !outboxColumns.contains("excludedDevice") { try db.execute(sql: "ALTER TABLE outbox ADD COLUMN excludedDevice TEXT") }
        if !outboxColumns.contains("delivered") { try db.execute(sql: "ALTER TABLE outbox ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0") }
        try db.execute(sql: SQLiteAssets.schema)
        // A web courier poll reads one user's pushes: by owner, in queue order.
        try db.execute(sql: "CREATE INDEX IF NOT EXISTS outbox_by_owner ON outbox (owner, id)")
        try db.execute(sql: "INSERT OR IGNORE INTO container_meta (key, value) VALUES ('format', ?)", arguments: [formatVersion])
        let format = try String.fetchOne(db, sql: "SELECT value FROM container_meta WHERE key = 'format'")
        guard format == formatVersion else {
            throw ContainerError(.internalError, "\(name): container format \(format ?? "?") is not supported (expected \(formatVersion))")
        }
        var generator = SystemRandomNumberGenerator()
        let fresh = "\(generator.next() as UInt64) \(generator.next() as UInt64)"
        try db.execute(sql: "INSERT OR IGNORE INTO container_meta (key, value) VALUES ('secret', ?)", arguments: [fresh])
        let words = try String.fetchOne(db, sql: "SELECT value FROM container_meta WHERE key = 'secret'")?.split(separator: " ").compactMap { UInt64($0) }
        guard let words, words.count == 2 else { throw ContainerError(.internalError, "\(name): corrupt token secret") }
        return (words[0], words[1])
    }

    func read<T>(_ body: (any StorageTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        guard let mirror else {
            do {
                return try writer.read { db in try body(SQLiteTransaction(db: db, name: name)) }
            } catch {
                throw Self.storageError(error, name: name)
            }
        }
        return try mirror.read { tx throws(ContainerError) -> T in try body(MirrorReadTransaction(mirror: tx, file: self)) }
    }

    /// Reads the outbox from the file: it is not mirrored (delivery reads it a page at a time).
    fileprivate func pendingNotifications(for channels: DeliveryChannel, recipient: OutboxRecipient?, limit: Int) throws(ContainerError)
        -> [OutboxNotification] {
        do {
            return try writer.read { db in
                try SQLiteTransaction(db: db, name: name).pendingNotifications(for: channels, recipient: recipient, limit: limit)
            }
        } catch {
            throw Self.storageError(error, name: name)
        }
    }

    /// Reads assets from the file: they are not mirrored (their bytes are read a chunk at a time).
    fileprivate func readAssets<T>(_ body: (SQLiteAssets) throws -> T) throws(ContainerError) -> T {
        do {
            return try writer.read { db in try body(SQLiteAssets(db: db)) }
        } catch {
            throw Self.storageError(error, name: name)
        }
    }

    func adoptSecret(_ secret: (UInt64, UInt64)) throws(ContainerError) {
        do {
            try writer.write { db in
                try db.execute(sql: "UPDATE container_meta SET value = ? WHERE key = 'secret'", arguments: ["\(secret.0) \(secret.1)"])
            }
        } catch {
            throw ContainerError(.internalError, "\(name): cannot write the token secret: \(error)")
        }
    }

    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        guard let mirror else { return try commit { db in try body(SQLiteTransaction(db: db, name: name)) } }
        let journal = Journal()
        let result = try commit { db in try body(SQLiteTransaction(db: db, name: name, journal: journal, mirror: mirror)) }
        try replay(journal, on: mirror)
        return result
    }

    /// Runs `body` with a writer whose writes join one transaction, each in a savepoint of its
    /// own: a write that throws leaves nothing, the others see what it left, and the transaction
    /// commits when `body` returns (one commit and one copy of each page changed for all of them).
    /// The mirror, which readers see, takes the writes only once they have committed. Throws when
    /// the transaction could not commit: then none of its writes happened.
    func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T {
        guard let mirror else { return try body(nil) }
        var committed: OpenBatch?
        let result = try commit { db in
            let batch = OpenBatch(db: db, name: name, mirror: mirror)
            let result = try body(batch)
            if let failure = batch.failure { throw failure }
            committed = batch
            return result
        }
        if let journal = committed?.released { try replay(journal, on: mirror) }
        return result
    }

    /// Runs `body` in one transaction on the writer's connection and commits it, counting the
    /// commit for the checkpointer (making the writer's pass when one is due) and for group commit.
    private func commit<T>(_ body: (GRDB.Database) throws -> T) throws(ContainerError) -> T {
        do {
            let result = try writer.writeWithoutTransaction { db in
                let result = try Self.transaction(db) { try body(db) }
                if checkpointer?.committed() == true { Checkpointer.writerPass(db) }
                return result
            }
            groupCommit?.committed()
            return result
        } catch {
            throw Self.storageError(error, name: name)
        }
    }

    /// Applies what a committed write changed to the mirror.
    private func replay(_ journal: Journal, on mirror: MemoryContainerStorage) throws(ContainerError) {
        guard !journal.entries.isEmpty else { return }
        do throws(ContainerError) {
            try mirror.withTransaction(undoable: false) { tx throws(ContainerError) in
                for entry in journal.entries { try entry(tx) }
            }
        } catch {
            // The file committed but the mirror refused the replay (a bug): read the mirror again
            // from the file rather than answer from a state that is not the file's.
            do {
                mirror.replaceState(try writer.read { db in try SQLiteTransaction(db: db, name: name).load() })
            } catch {
                throw Self.storageError(error, name: name)
            }
        }
    }

    func waitUntilDurable() throws(ContainerError) {
        try groupCommit?.waitUntilDurable()
    }

    func startWriteback() {
        groupCommit?.startWriteback()
    }

    func bulkWritesStarted() { checkpointer?.deferPasses() }

    func bulkWritesEnded() { checkpointer?.resumePasses() }

    /// Runs `body` in one transaction, committed when it returns and rolled back when it throws.
    /// BEGIN and COMMIT are prepared once per connection: GRDB's `write` parsed both anew for
    /// every write (7% of a one-record modify).
    private static func transaction<T>(_ db: GRDB.Database, _ body: () throws -> T) throws -> T {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            let result = try body()
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            return result
        } catch {
            // A failed COMMIT may leave the transaction open; some errors end it themselves.
            if db.isInsideTransaction { try? db.execute(sql: "ROLLBACK TRANSACTION") }
            throw error
        }
    }

    static func storageError(_ error: any Error, name: String) -> ContainerError {
        if let error = error as? ContainerError { return error }
        if let error = error as? GRDB.DatabaseError { return ContainerError(.internalError, "\(name): \(error.message ?? error.description)") }
        return ContainerError(.internalError, "\(name): \(error)")
    }
}

/// A read of a container file: the mirror's committed state, and the outbox from the file.
private struct MirrorReadTransaction: StorageTransaction {
    let mirror: any StorageTransaction
    let file: SQLiteContainerStorage

    func database(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase? { try mirror.database(key) }
    func zone(_ zoneID: ZoneID, in database: StoredDatabase) throws(ContainerError) -> StoredZone? { try mirror.zone(zoneID, in: database) }
    func zones(in database: StoredDatabase) throws(ContainerError) -> [StoredZone] { try mirror.zones(in: database) }
    func record(_ id: RecordID, in database: StoredDatabase) throws(ContainerError) -> KQuery.Record? { try mirror.record(id, in: database) }
    func records(in database: StoredDatabase) throws(ContainerError) -> [KQuery.Record] { try mirror.records(in: database) }
    func shares(in database: StoredDatabase) throws(ContainerError) -> [KQuery.Record] { try mirror.shares(in: database) }
    func referrers(to target: RecordID, action: Reference.Action, in database: StoredDatabase) throws(ContainerError) -> [String] {
        try mirror.referrers(to: target, action: action, in: database)
    }
    func recordChanges(in zone: ZoneID, of database: StoredDatabase, after sequence: Int64, includingDeletions: Bool, limit: Int)
        throws(ContainerError) -> [(sequence: Int64, change: RecordZoneChange)] {
        try mirror.recordChanges(in: zone, of: database, after: sequence, includingDeletions: includingDeletions, limit: limit)
    }
    func zoneChanges(of database: StoredDatabase, after sequence: Int64, limit: Int) throws(ContainerError)
        -> [(sequence: Int64, zoneID: ZoneID, deleted: Bool)] {
        try mirror.zoneChanges(of: database, after: sequence, limit: limit)
    }
    func allDatabases() throws(ContainerError) -> [(key: DatabaseKey, stored: StoredDatabase)] { try mirror.allDatabases() }
    func subscribedDatabases() throws(ContainerError) -> [DatabaseKey] { try mirror.subscribedDatabases() }
    func subscriptions(in database: StoredDatabase) throws(ContainerError) -> [Subscription] { try mirror.subscriptions(in: database) }
    func pendingNotifications(for channels: DeliveryChannel, recipient: OutboxRecipient?, limit: Int) throws(ContainerError) -> [OutboxNotification] {
        try file.pendingNotifications(for: channels, recipient: recipient, limit: limit)
    }
    func assetUpload(_ token: String) throws(ContainerError) -> AssetUploadTicket? {
        try file.readAssets { tx in try tx.upload(token) }
    }
    func assetReceipt(_ receipt: String) throws(ContainerError) -> AssetReceiptEntry? {
        try file.readAssets { tx in try tx.receipt(receipt) }
    }
    func assetBlob(_ contentHash: String) throws(ContainerError) -> AssetBlob? {
        try file.readAssets { tx in try tx.blob(contentHash) }
    }
    func assetChunk(_ owner: String, index: Int) throws(ContainerError) -> [UInt8]? {
        try file.readAssets { tx in try tx.chunk(owner, index: index) }
    }
    func holdsAssetBlobs() throws(ContainerError) -> Bool {
        try file.readAssets { tx in try tx.holdsBlobs() }
    }
    func assetBlobs(after contentHash: String, limit: Int) throws(ContainerError) -> [AssetBlob] {
        try file.readAssets { tx in try tx.blobs(after: contentHash, limit: limit) }
    }
    func assetUploads(after token: String, limit: Int) throws(ContainerError) -> [AssetUploadTicket] {
        try file.readAssets { tx in try tx.uploads(after: token, limit: limit) }
    }
    func assetReceipts(after receipt: String, limit: Int) throws(ContainerError) -> [AssetReceiptEntry] {
        try file.readAssets { tx in try tx.receipts(after: receipt, limit: limit) }
    }
}

/// A transaction that several writes share (`SQLiteContainerStorage.batch`), used inside the
/// batch's body only.
private final class OpenBatch: StorageBatchWriter {
    let db: GRDB.Database
    let name: String
    let mirror: MemoryContainerStorage
    /// What the writes released so far changed, in order: the mirror takes it once committed.
    let released = Journal()
    /// Why the transaction cannot commit, if a savepoint could not be undone.
    var failure: ContainerError?

    init(db: GRDB.Database, name: String, mirror: MemoryContainerStorage) {
        self.db = db
        self.name = name
        self.mirror = mirror
    }

    /// Runs one write in a savepoint; rolls it back if `body` throws.
    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        if let failure { throw failure }
        let journal = Journal()
        do {
            try db.cachedStatement(sql: "SAVEPOINT kquery_write").execute()
        } catch {
            throw SQLiteContainerStorage.storageError(error, name: name)
        }
        do throws(ContainerError) {
            let result = try body(SQLiteTransaction(db: db, name: name, journal: journal, prior: released, mirror: mirror))
            do {
                try db.cachedStatement(sql: "RELEASE kquery_write").execute()
            } catch {
                throw SQLiteContainerStorage.storageError(error, name: name)
            }
            released.absorb(journal)
            return result
        } catch {
            do {
                try db.cachedStatement(sql: "ROLLBACK TO kquery_write").execute()
                try db.cachedStatement(sql: "RELEASE kquery_write").execute()
            } catch let undoing {
                failure = SQLiteContainerStorage.storageError(undoing, name: name)
            }
            throw error
        }
    }
}

/// What a write changed, to replay on the mirror once the file has committed it.
private final class Journal {
    var entries: [(MemoryTransaction) throws(ContainerError) -> Void] = []
    /// Whether the write has changed records yet: until it has, its record reads may come from
    /// the mirror, which holds what the file committed.
    var changedRecords = false
    /// The records it saved or deleted, and the zones it deleted: for those the mirror no longer
    /// says what the file holds.
    var touched: Set<RecordID> = []
    var deletedZones: Set<ZoneID> = []
    var changedSubscriptions = false

    func add(_ entry: @escaping (MemoryTransaction) throws(ContainerError) -> Void) { entries.append(entry) }

    /// Whether the write saved or deleted the record, or deleted its zone.
    func touches(_ id: RecordID) -> Bool { touched.contains(id) || deletedZones.contains(id.zoneID) }

    /// Appends what a later write of the same transaction changed.
    func absorb(_ later: Journal) {
        entries += later.entries
        changedRecords = changedRecords || later.changedRecords
        touched.formUnion(later.touched)
        deletedZones.formUnion(later.deletedZones)
        changedSubscriptions = changedSubscriptions || later.changedSubscriptions
    }
}

/// One transaction on the container file.
private struct SQLiteTransaction: StorageWriteTransaction {
    let db: GRDB.Database
    let name: String
    /// For writes: where changes are journaled, and the mirror of the committed state.
    var journal: Journal? = nil
    /// In a batch, what the writes before this one changed (not in the mirror until the batch commits).
    var prior: Journal? = nil
    var mirror: MemoryContainerStorage? = nil

    /// Runs GRDB calls, turning their errors into the container's.
    private func sql<T>(_ body: () throws -> T) throws(ContainerError) -> T {
        do { return try body() } catch { throw SQLiteContainerStorage.storageError(error, name: name) }
    }

    private func zoneArguments(_ database: StoredDatabase, _ zone: ZoneID) -> StatementArguments {
        [database.id, zone.zoneName, zone.ownerName]
    }

    /// Decodes a stored record. `names` carries the field keys of the record decoded before, so a
    /// run of records of one type reads its field names without interning each again.
    private func decode(_ body: Data, _ recordName: String, names: inout RecordCoding.FieldNames) throws -> KQuery.Record {
        do {
            return try body.withUnsafeBytes { bytes throws(RecordDecodingError) in try RecordCoding.decode(bytes, names: &names) }
        } catch {
            throw ContainerError(.internalError, "\(name): record '\(recordName)' is corrupt: \(error)")
        }
    }

    // MARK: Reading

    /// Whether the write has written nothing yet, so the mirror (the file's committed state)
    /// answers as the file would, without a statement.
    private var mirrorIsCurrent: Bool { journal?.entries.isEmpty == true && prior?.entries.isEmpty != false }

    /// Whether the mirror holds what the file holds for the record: neither this write nor an
    /// earlier one of its batch has saved or deleted it or deleted its zone.
    private func mirrorHolds(_ id: RecordID) -> Bool {
        guard let journal else { return false }
        return !journal.touches(id) && prior?.touches(id) != true
    }

    /// Whether no record has changed in this write or its batch so far.
    private var recordsUnchanged: Bool { journal?.changedRecords == false && prior?.changedRecords != true }

    func database(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase? {
        if let mirror, mirrorIsCurrent { return try mirror.read { tx throws(ContainerError) in try tx.database(key) } }
        return try sql {
            try Row.fetchOne(db, SQLRequest(sql: "SELECT id, sequence, horizon FROM databases WHERE environment = ? AND scope = ? AND userRecordName = ?",
                             arguments: [key.environment.rawValue, key.scope.rawValue, key.userRecordName], cached: true))
                .map { StoredDatabase(id: $0[0], sequence: $0[1], horizon: $0[2]) }
        }
    }

    func zone(_ zoneID: ZoneID, in database: StoredDatabase) throws(ContainerError) -> StoredZone? {
        if let mirror, mirrorIsCurrent { return try mirror.read { tx throws(ContainerError) in try tx.zone(zoneID, in: database) } }
        return try sql {
            try Row.fetchOne(db, SQLRequest(sql: "SELECT createdSequence, changedSequence FROM zones WHERE databaseID = ? AND zoneName = ? AND ownerName = ?",
                             arguments: zoneArguments(database, zoneID), cached: true))
                .map { StoredZone(zoneID: zoneID, createdSequence: $0[0], changedSequence: $0[1]) }
        }
    }

    func zones(in database: StoredDatabase) throws(ContainerError) -> [StoredZone] {
        try sql {
            try Row.fetchAll(db, SQLRequest(sql: "SELECT zoneName, ownerName, createdSequence, changedSequence FROM zones WHERE databaseID = ? ORDER BY zoneName, ownerName",
                             arguments: [database.id], cached: true))
                .map { StoredZone(zoneID: ZoneID(zoneName: $0[0], ownerName: $0[1]), createdSequence: $0[2], changedSequence: $0[3]) }
        }
    }

    func record(_ id: RecordID, in database: StoredDatabase) throws(ContainerError) -> KQuery.Record? {
        if let mirror, mirrorHolds(id) { return try mirror.read { tx throws(ContainerError) in try tx.record(id, in: database) } }
        return try sql {
            var arguments = zoneArguments(database, id.zoneID)
            arguments += [id.recordName]
            guard let body = try Data.fetchOne(db, SQLRequest(sql: "SELECT body FROM records WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND recordName = ?",
                                               arguments: arguments, cached: true)) else { return nil }
            var names = RecordCoding.FieldNames()
            return try decode(body, id.recordName, names: &names)
        }
    }

    func records(in database: StoredDatabase) throws(ContainerError) -> [KQuery.Record] {
        try sql {
            var names = RecordCoding.FieldNames()
            return try Row.fetchAll(db, SQLRequest(sql: "SELECT recordName, body FROM records WHERE databaseID = ? ORDER BY changeSequence", arguments: [database.id], cached: true))
                .map { row in try decode(row[1], row[0], names: &names) }
        }
    }

    func shares(in database: StoredDatabase) throws(ContainerError) -> [KQuery.Record] {
        try sql {
            var names = RecordCoding.FieldNames()
            let request = SQLRequest<Row>(
                sql: "SELECT recordName, body FROM records WHERE databaseID = ? AND recordType = ? ORDER BY changeSequence",
                arguments: [database.id, SharingKeys.shareRecordType], cached: true)
            return try Row.fetchAll(db, request).map { row in try decode(row[1], row[0], names: &names) }
        }
    }

    func referrers(to target: RecordID, action: Reference.Action, in database: StoredDatabase) throws(ContainerError) -> [String] {
        if let mirror, recordsUnchanged {
            return try mirror.read { tx throws(ContainerError) in try tx.referrers(to: target, action: action, in: database) }
        }
        return try sql {
            var arguments = zoneArguments(database, target.zoneID)
            arguments += [target.recordName, action.rawValue]
            return try String.fetchAll(db, SQLRequest(sql: """
                SELECT sourceName FROM record_references
                WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND targetName = ? AND action = ? ORDER BY sourceName
                """, arguments: arguments, cached: true))
        }
    }

    func recordChanges(in zone: ZoneID, of database: StoredDatabase, after sequence: Int64, includingDeletions: Bool, limit: Int)
        throws(ContainerError) -> [(sequence: Int64, change: RecordZoneChange)] {
        try sql {
            // Each side reads at most `limit` rows in sequence order from its index, so a batch costs
            // its own size, not the size of the history after the token.
            let where_ = "databaseID = ? AND zoneName = ? AND ownerName = ?"
            var arguments = zoneArguments(database, zone)
            arguments += [sequence, limit]
            var deletions = ""
            if includingDeletions {
                deletions = """
                    UNION ALL SELECT * FROM (SELECT deletedSequence, recordName, recordType, NULL FROM record_tombstones
                    WHERE \(where_) AND deletedSequence > ? ORDER BY deletedSequence LIMIT ?)
                    """
                arguments += zoneArguments(database, zone)
                arguments += [sequence, limit]
            }
            arguments += [limit]
            var names = RecordCoding.FieldNames()
            return try Row.fetchAll(db, SQLRequest(sql: """
                SELECT * FROM (SELECT changeSequence AS s, recordName, recordType, body FROM records
                WHERE \(where_) AND changeSequence > ? ORDER BY changeSequence LIMIT ?)
                \(deletions)
                ORDER BY s LIMIT ?
                """, arguments: arguments, cached: true)).map { row in
                let name: String = row[1]
                if let body = row[3] as Data? {
                    return (row[0], .changed(try decode(body, name, names: &names)))
                }
                return (row[0], .deleted(RecordID(recordName: name, zoneID: zone), recordType: row[2]))
            }
        }
    }

    func zoneChanges(of database: StoredDatabase, after sequence: Int64, limit: Int) throws(ContainerError)
        -> [(sequence: Int64, zoneID: ZoneID, deleted: Bool)] {
        try sql {
            try Row.fetchAll(db, SQLRequest(sql: """
                SELECT * FROM (SELECT changedSequence AS s, zoneName, ownerName, 0 FROM zones
                WHERE databaseID = ? AND changedSequence > ? ORDER BY changedSequence LIMIT ?)
                UNION ALL
                SELECT * FROM (SELECT deletedSequence, zoneName, ownerName, 1 FROM zone_tombstones
                WHERE databaseID = ? AND deletedSequence > ? ORDER BY deletedSequence LIMIT ?)
                ORDER BY s LIMIT ?
                """, arguments: [database.id, sequence, limit, database.id, sequence, limit, limit], cached: true))
                .map { ($0[0], ZoneID(zoneName: $0[1], ownerName: $0[2]), $0[3] as Bool) }
        }
    }

    func allDatabases() throws(ContainerError) -> [(key: DatabaseKey, stored: StoredDatabase)] {
        let rows = try sql { try Row.fetchAll(db, sql: "SELECT id, environment, scope, userRecordName, sequence, horizon FROM databases") }
        return try rows.map { row throws(ContainerError) in
            guard let environment = ContainerEnvironment(rawValue: row[1]), let scope = DatabaseScope(rawValue: row[2]) else {
                throw ContainerError(.internalError, "\(name): corrupt databases table")
            }
            return (DatabaseKey(environment: environment, scope: scope, userRecordName: row[3]), StoredDatabase(id: row[0], sequence: row[4], horizon: row[5]))
        }
    }

    func subscribedDatabases() throws(ContainerError) -> [DatabaseKey] {
        let rows = try sql {
            try Row.fetchAll(db, SQLRequest(sql: """
                SELECT DISTINCT d.environment, d.scope, d.userRecordName FROM databases d JOIN subscriptions s ON s.databaseID = d.id
                """, cached: true))
        }
        var keys: [DatabaseKey] = []
        for row in rows {
            guard let environment = ContainerEnvironment(rawValue: row[0]), let scope = DatabaseScope(rawValue: row[1]) else {
                throw ContainerError(.internalError, "\(name): corrupt databases table")
            }
            keys.append(DatabaseKey(environment: environment, scope: scope, userRecordName: row[2]))
        }
        return keys
    }

    func subscriptions(in database: StoredDatabase) throws(ContainerError) -> [Subscription] {
        // Until the write changes subscriptions the mirror's are the file's, already parsed.
        if let mirror, journal?.changedSubscriptions == false, prior?.changedSubscriptions != true {
            return try mirror.read { tx throws(ContainerError) in try tx.subscriptions(in: database) }
        }
        let bodies = try sql { try String.fetchAll(db, SQLRequest(sql: "SELECT body FROM subscriptions WHERE databaseID = ? ORDER BY rowid", arguments: [database.id], cached: true)) }
        var subscriptions: [Subscription] = []
        for body in bodies {
            let json: JSON
            do { json = try JSON.parse(body) } catch { throw ContainerError(.internalError, "\(name): a stored subscription is not JSON: \(error)") }
            subscriptions.append(try Subscription(storedJSON: json))
        }
        return subscriptions
    }

    func pendingNotifications(for channels: DeliveryChannel, recipient: OutboxRecipient?, limit: Int) throws(ContainerError) -> [OutboxNotification] {
        let rows = try sql {
            if let recipient {
                return try Row.fetchAll(db, SQLRequest(sql: """
                    SELECT id, environment, scope, userRecordName, subscriptionID, owner, payload, priority, pushType, created, collapseID,
                           excludedDevice
                    FROM outbox WHERE owner = ?3 AND environment = ?4 AND delivered & ?1 != ?1 ORDER BY id LIMIT ?2
                    """, arguments: [channels.rawValue, limit, recipient.owner, recipient.environment.rawValue], cached: true))
            }
            return try Row.fetchAll(db, SQLRequest(sql: """
                SELECT id, environment, scope, userRecordName, subscriptionID, owner, payload, priority, pushType, created, collapseID,
                       excludedDevice
                FROM outbox WHERE delivered & ?1 != ?1 ORDER BY id LIMIT ?2
                """, arguments: [channels.rawValue, limit], cached: true))
        }
        var notifications: [OutboxNotification] = []
        for row in rows {
            guard let environment = ContainerEnvironment(rawValue: row[1]), let scope = DatabaseScope(rawValue: row[2]),
                  let payload = try? JSON.parse(row[6] as String)
            else { throw ContainerError(.internalError, "\(name): outbox entry \(row[0] as Int64) is corrupt") }
            notifications.append(OutboxNotification(
                id: row[0], database: DatabaseKey(environment: environment, scope: scope, userRecordName: row[3]),
                subscriptionID: row[4], owner: row[5], payload: payload, priority: row[7], pushType: row[8], created: row[9],
                collapseID: row[10], excludedDevice: row[11]))
        }
        return notifications
    }

    /// The file's state (all but the outbox) in memory, for the mirror.
    func load() throws -> MemoryState {
        let state = MemoryState()
        for row in try Row.fetchAll(db, sql: "SELECT id, environment, scope, userRecordName, sequence, horizon FROM databases") {
            guard let environment = ContainerEnvironment(rawValue: row[1]), let scope = DatabaseScope(rawValue: row[2]) else {
                throw ContainerError(.internalError, "\(name): corrupt databases table")
            }
            let database = MemoryDatabase(key: DatabaseKey(environment: environment, scope: scope, userRecordName: row[3]), id: row[0])
            database.stored.sequence = row[4]
            database.stored.horizon = row[5]
            state.databases[database.stored.id] = database
            state.databaseIDs[database.key] = database.stored.id
        }
        func database(_ id: Int64) throws -> MemoryDatabase {
            guard let database = state.databases[id] else { throw ContainerError(.internalError, "\(name): rows of a database \(id) that does not exist") }
            return database
        }
        func recordZone(_ database: MemoryDatabase, _ zoneID: ZoneID) -> MemoryZone {
            if let zone = database.recordZones[zoneID] { return zone }
            let zone = MemoryZone()
            database.recordZones[zoneID] = zone
            return zone
        }
        for row in try Row.fetchAll(db, sql: "SELECT databaseID, zoneName, ownerName, createdSequence, changedSequence FROM zones") {
            let zoneID = ZoneID(zoneName: row[1], ownerName: row[2])
            try database(row[0]).zones[zoneID] = StoredZone(zoneID: zoneID, createdSequence: row[3], changedSequence: row[4])
        }
        for row in try Row.fetchAll(db, sql: "SELECT databaseID, zoneName, ownerName, deletedSequence FROM zone_tombstones") {
            try database(row[0]).zoneTombstones[ZoneID(zoneName: row[1], ownerName: row[2])] = row[3]
        }
        var names = RecordCoding.FieldNames()
        let records = try Row.fetchCursor(db, sql: "SELECT databaseID, zoneName, ownerName, recordName, changeSequence, body FROM records")
        while let row = try records.next() {
            let recordName: String = row[3]
            let record = try decode(row[5], recordName, names: &names)
            let zone = recordZone(try database(row[0]), ZoneID(zoneName: row[1], ownerName: row[2]))
            let references = record.trackedReferences
            if record.recordType == SharingKeys.shareRecordType { zone.shareNames.insert(recordName) }
            zone.records[recordName] = (record, row[4])
            if !references.isEmpty { zone.index(references, of: recordName, adding: true) }
        }
        for row in try Row.fetchAll(db, sql: "SELECT databaseID, zoneName, ownerName, recordName, recordType, deletedSequence FROM record_tombstones") {
            recordZone(try database(row[0]), ZoneID(zoneName: row[1], ownerName: row[2])).tombstones[row[3]] = (row[4], row[5])
        }
        for row in try Row.fetchAll(db, sql: "SELECT databaseID, body FROM subscriptions ORDER BY rowid") {
            let json: JSON
            do { json = try JSON.parse(row[1] as String) } catch { throw ContainerError(.internalError, "\(name): a stored subscription is not JSON: \(error)") }
            let subscription = try Subscription(storedJSON: json)
            let database = try database(row[0])
            database.subscriptions[subscription.subscriptionID] = (database.nextSubscriptionOrder, subscription)
            database.nextSubscriptionOrder += 1
        }
        for database in state.databases.values {
            database.zoneLog.rebuild(database.zones.map { ($0.value.changedSequence, $0.key) } + database.zoneTombstones.map { ($0.value, $0.key) })
            for zone in database.recordZones.values {
                zone.log.rebuild(zone.records.map { ($0.value.sequence, $0.key) } + zone.tombstones.map { ($0.value.sequence, $0.key) })
            }
        }
        return state
    }

    // MARK: Writing

    func createDatabase(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase {
        try sql {
            try db.cachedStatement(sql: "INSERT INTO databases (environment, scope, userRecordName) VALUES (?, ?, ?)")
                .execute(arguments: [key.environment.rawValue, key.scope.rawValue, key.userRecordName])
            let id = db.lastInsertedRowID
            journal?.add { $0.createDatabase(key, id: id) }
            return StoredDatabase(id: id, sequence: 0, horizon: 0)
        }
    }

    func setHorizon(_ horizon: Int64, of database: StoredDatabase) throws(ContainerError) {
        try sql { try db.execute(sql: "UPDATE databases SET horizon = ? WHERE id = ?", arguments: [horizon, database.id]) }
        journal?.add { tx throws(ContainerError) in try tx.setHorizon(horizon, of: database) }
    }

    func setSequence(_ sequence: Int64, of database: StoredDatabase) throws(ContainerError) {
        try sql {
            let update = try db.cachedStatement(sql: "UPDATE databases SET sequence = ? WHERE id = ?")
            var parameters = try StatementParameters(update, name: name)
            try parameters.bind(sequence)
            try parameters.bind(database.id)
            try update.execute()
        }
        journal?.add { tx throws(ContainerError) in try tx.setSequence(sequence, of: database) }
    }

    func saveZone(_ zone: StoredZone, in database: StoredDatabase) throws(ContainerError) {
        try sql {
            var arguments = zoneArguments(database, zone.zoneID)
            arguments += [zone.createdSequence, zone.changedSequence]
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO zones (databaseID, zoneName, ownerName, createdSequence, changedSequence) VALUES (?, ?, ?, ?, ?)")
                .execute(arguments: arguments)
            try db.cachedStatement(sql: "DELETE FROM zone_tombstones WHERE databaseID = ? AND zoneName = ? AND ownerName = ?")
                .execute(arguments: zoneArguments(database, zone.zoneID))
        }
        journal?.add { tx throws(ContainerError) in try tx.saveZone(zone, in: database) }
    }

    func deleteZone(_ zoneID: ZoneID, sequence: Int64, in database: StoredDatabase) throws(ContainerError) {
        try sql {
            let arguments = zoneArguments(database, zoneID)
            for table in ["records", "record_tombstones", "record_references", "zones"] {
                try db.cachedStatement(sql: "DELETE FROM \(table) WHERE databaseID = ? AND zoneName = ? AND ownerName = ?").execute(arguments: arguments)
            }
            var tombstone = arguments
            tombstone += [sequence]
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO zone_tombstones (databaseID, zoneName, ownerName, deletedSequence) VALUES (?, ?, ?, ?)")
                .execute(arguments: tombstone)
        }
        journal?.changedRecords = true
        journal?.deletedZones.insert(zoneID)
        journal?.add { tx throws(ContainerError) in try tx.deleteZone(zoneID, sequence: sequence, in: database) }
    }

    func saveRecord(_ record: KQuery.Record, sequence: Int64, in database: StoredDatabase) throws(ContainerError) {
        try saveRecords([(record, sequence)], in: database)
    }

    /// The most rows one INSERT writes (7 parameters each, well under SQLite's limit).
    private static let rowsPerInsert = 50

    func saveRecords(_ records: consuming [(record: KQuery.Record, sequence: Int64)], in database: StoredDatabase) throws(ContainerError) {
        let records = records
        // What the file holds for a record this write has not touched is what the mirror holds:
        // the statements that would delete nothing are skipped (two of the four a record took).
        var leftovers = [(tombstone: Bool, references: Bool)](repeating: (true, true), count: records.count)
        if let mirror, journal != nil {
            mirror.inspect { tx in
                for (position, (record, _)) in records.enumerated() {
                    let id = record.recordID
                    guard mirrorHolds(id) else { continue }
                    leftovers[position] = tx.leftovers(of: id, in: database)
                }
            }
        }
        try sql {
            var start = 0
            while start < records.count {
                let run = records[start..<min(start + Self.rowsPerInsert, records.count)]
                let values = Array(repeating: "(?, ?, ?, ?, ?, ?, ?)", count: run.count).joined(separator: ", ")
                let insert = try db.cachedStatement(sql: """
                    INSERT OR REPLACE INTO records (databaseID, zoneName, ownerName, recordName, recordType, changeSequence, body)
                    VALUES \(values)
                    """)
                // Bound through SQLite's C API: GRDB's arguments (boxed values, checked, then
                // bound) were a quarter of a 200-record modify.
                var parameters = try StatementParameters(insert, name: name)
                for (record, sequence) in run {
                    let id = record.recordID
                    try parameters.bind(database.id)
                    try parameters.bind(id.zoneID.zoneName)
                    try parameters.bind(id.zoneID.ownerName)
                    try parameters.bind(id.recordName)
                    try parameters.bind(record.recordType)
                    try parameters.bind(sequence)
                    try parameters.bind(RecordCoding.encode(record))
                }
                try insert.execute()
                start += run.count
            }
            for (position, (record, _)) in records.enumerated() {
                let id = record.recordID
                if leftovers[position].tombstone {
                    var key = zoneArguments(database, id.zoneID)
                    key += [id.recordName]
                    try db.cachedStatement(sql: "DELETE FROM record_tombstones WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND recordName = ?")
                        .execute(arguments: key)
                }
                try indexReferences(of: record, in: database, replacing: leftovers[position].references)
            }
        }
        guard let journal else { return }
        journal.changedRecords = true
        journal.touched.reserveCapacity(journal.touched.count + records.count)
        for (record, _) in records { journal.touched.insert(record.recordID) }
        // One entry for the run: a closure per record was an allocation per record.
        journal.add { tx throws(ContainerError) in try tx.saveRecords(records, in: database) }
    }

    func deleteRecord(_ record: KQuery.Record, sequence: Int64, in database: StoredDatabase) throws(ContainerError) {
        try sql {
            let id = record.recordID
            var key = zoneArguments(database, id.zoneID)
            key += [id.recordName]
            try db.cachedStatement(sql: "DELETE FROM records WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND recordName = ?")
                .execute(arguments: key)
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND sourceName = ?")
                .execute(arguments: key)
            var tombstone = key
            tombstone += [record.recordType, sequence]
            try db.cachedStatement(sql: """
                INSERT OR REPLACE INTO record_tombstones (databaseID, zoneName, ownerName, recordName, recordType, deletedSequence)
                VALUES (?, ?, ?, ?, ?, ?)
                """).execute(arguments: tombstone)
        }
        journal?.changedRecords = true
        journal?.touched.insert(record.recordID)
        journal?.add { tx throws(ContainerError) in try tx.deleteRecord(record, sequence: sequence, in: database) }
    }

    /// Replaces the index rows of the record's owning and validating references (within its zone).
    /// `replacing`: whether the record may have index rows to delete first.
    private func indexReferences(of record: KQuery.Record, in database: StoredDatabase, replacing: Bool) throws {
        let id = record.recordID
        if replacing {
            var key = zoneArguments(database, id.zoneID)
            key += [id.recordName]
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE databaseID = ? AND zoneName = ? AND ownerName = ? AND sourceName = ?")
                .execute(arguments: key)
        }
        let references = record.trackedReferences
        guard !references.isEmpty else { return }
        let insert = try db.cachedStatement(sql: """
            INSERT OR IGNORE INTO record_references (databaseID, zoneName, ownerName, targetName, action, sourceName) VALUES (?, ?, ?, ?, ?, ?)
            """)
        for reference in references {
            var row = zoneArguments(database, id.zoneID)
            row += [reference.recordID.recordName, reference.action.rawValue, id.recordName]
            try insert.execute(arguments: row)
        }
    }

    func saveSubscription(_ subscription: Subscription, in database: StoredDatabase) throws(ContainerError) {
        let body = try subscription.storedJSON().serialized
        try sql {
            try db.cachedStatement(sql: "DELETE FROM subscriptions WHERE databaseID = ? AND subscriptionID = ?").execute(arguments: [database.id, subscription.subscriptionID])
            try db.cachedStatement(sql: "INSERT INTO subscriptions (databaseID, subscriptionID, owner, body) VALUES (?, ?, ?, ?)")
                .execute(arguments: [database.id, subscription.subscriptionID, subscription.owner, body])
        }
        journal?.changedSubscriptions = true
        journal?.add { tx throws(ContainerError) in try tx.keepSubscription(subscription, in: database) }
    }

    func deleteSubscription(_ subscriptionID: String, in database: StoredDatabase) throws(ContainerError) {
        try sql { try db.cachedStatement(sql: "DELETE FROM subscriptions WHERE databaseID = ? AND subscriptionID = ?").execute(arguments: [database.id, subscriptionID]) }
        journal?.changedSubscriptions = true
        journal?.add { tx throws(ContainerError) in try tx.deleteSubscription(subscriptionID, in: database) }
    }

    func enqueue(_ notifications: consuming [OutboxNotification]) throws(ContainerError) -> [OutboxNotification] {
        var queued = notifications
        try sql {
            let insert = try db.cachedStatement(sql: """
                INSERT INTO outbox (environment, scope, userRecordName, subscriptionID, owner, notificationID, payload, priority, pushType, created,
                                    collapseID, excludedDevice)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            for position in queued.indices {
                let new = queued[position]
                let key = new.database
                let payload = new.payload
                // Bound through SQLite's C calls, the payload as its UTF-8 bytes (GRDB's boxed
                // arguments and a String of the payload were most of a push's enqueueing).
                var parameters = try StatementParameters(insert, name: name)
                try parameters.bind(Int64(key.environment.rawValue))
                try parameters.bind(Int64(key.scope.rawValue))
                try parameters.bind(key.userRecordName)
                try parameters.bind(new.subscriptionID)
                try parameters.bind(new.owner)
                try parameters.bind(payload["ck"]?["nid"]?.stringValue ?? "")
                try parameters.bind(text: payload.serializedBytes)
                try parameters.bind(Int64(new.priority))
                try parameters.bind(new.pushType)
                try parameters.bind(new.created)
                try parameters.bind(new.collapseID)
                try parameters.bind(new.excludedDevice)
                try insert.execute()
                queued[position].id = db.lastInsertedRowID
            }
        }
        return queued
    }

    func acknowledge(_ ids: [Int64], on channels: DeliveryChannel) throws(ContainerError) {
        try sql {
            let mark = try db.cachedStatement(sql: "UPDATE outbox SET delivered = delivered | ? WHERE id = ?")
            let delete = try db.cachedStatement(sql: "DELETE FROM outbox WHERE id = ?1 AND delivered & ?2 = ?2")
            for id in ids {
                try mark.execute(arguments: [channels.rawValue, id])
                try delete.execute(arguments: [id, DeliveryChannel.all.rawValue])
            }
        }
    }

    func compactHistory(of database: StoredDatabase, keepingLast count: Int) throws(ContainerError) -> Int64 {
        journal?.add { tx throws(ContainerError) in _ = try tx.compactHistory(of: database, keepingLast: count) }
        return try sql {
            let newestDropped = try Int64.fetchOne(db, SQLRequest(sql: """
                SELECT s FROM (SELECT deletedSequence AS s FROM record_tombstones WHERE databaseID = ?
                               UNION ALL SELECT deletedSequence FROM zone_tombstones WHERE databaseID = ?)
                ORDER BY s DESC LIMIT 1 OFFSET ?
                """, arguments: [database.id, database.id, max(count, 0)], cached: true))
            guard let newestDropped else { return database.horizon }
            try db.cachedStatement(sql: "DELETE FROM record_tombstones WHERE databaseID = ? AND deletedSequence <= ?").execute(arguments: [database.id, newestDropped])
            try db.cachedStatement(sql: "DELETE FROM zone_tombstones WHERE databaseID = ? AND deletedSequence <= ?").execute(arguments: [database.id, newestDropped])
            let horizon = max(database.horizon, newestDropped)
            try db.cachedStatement(sql: "UPDATE databases SET horizon = ? WHERE id = ?").execute(arguments: [horizon, database.id])
            return horizon
        }
    }
}

/// A file transaction's assets: SQL on the file, never journaled (the mirror holds no assets).
extension SQLiteTransaction {
    private var assets: SQLiteAssets { SQLiteAssets(db: db) }

    func assetUpload(_ token: String) throws(ContainerError) -> AssetUploadTicket? { try sql { try assets.upload(token) } }
    func assetReceipt(_ receipt: String) throws(ContainerError) -> AssetReceiptEntry? { try sql { try assets.receipt(receipt) } }
    func assetBlob(_ contentHash: String) throws(ContainerError) -> AssetBlob? { try sql { try assets.blob(contentHash) } }
    func assetChunk(_ owner: String, index: Int) throws(ContainerError) -> [UInt8]? { try sql { try assets.chunk(owner, index: index) } }
    func holdsAssetBlobs() throws(ContainerError) -> Bool { try sql { try assets.holdsBlobs() } }
    func assetBlobs(after contentHash: String, limit: Int) throws(ContainerError) -> [AssetBlob] {
        try sql { try assets.blobs(after: contentHash, limit: limit) }
    }
    func assetUploads(after token: String, limit: Int) throws(ContainerError) -> [AssetUploadTicket] {
        try sql { try assets.uploads(after: token, limit: limit) }
    }
    func assetReceipts(after receipt: String, limit: Int) throws(ContainerError) -> [AssetReceiptEntry] {
        try sql { try assets.receipts(after: receipt, limit: limit) }
    }
    func saveAssetUpload(_ ticket: AssetUploadTicket) throws(ContainerError) { try sql { try assets.saveUpload(ticket) } }
    func saveAssetChunk(_ owner: String, index: Int, bytes: [UInt8]) throws(ContainerError) {
        try sql { try assets.saveChunk(owner, index: index, bytes: bytes) }
    }
    func deleteAssetChunks(_ owner: String) throws(ContainerError) { try sql { try assets.deleteChunks(owner) } }
    func moveAssetChunks(from owner: String, to newOwner: String) throws(ContainerError) { try sql { try assets.moveChunks(from: owner, to: newOwner) } }
    func saveAssetBlob(_ blob: AssetBlob) throws(ContainerError) { try sql { try assets.saveBlob(blob) } }
    func saveAssetReceipt(_ entry: AssetReceiptEntry) throws(ContainerError) { try sql { try assets.saveReceipt(entry) } }
    func setAssetReferences(_ record: RecordID, to hashes: Set<String>, in database: StoredDatabase, now: Int64) throws(ContainerError) {
        try sql { try assets.setReferences(record, to: hashes, database: database.id, now: now) }
    }
    func deleteAssetReferences(in zoneID: ZoneID, of database: StoredDatabase, now: Int64) throws(ContainerError) {
        try sql { try assets.deleteReferences(in: zoneID, database: database.id, now: now) }
    }
    func collectAssets(now: Int64, gracePeriod: Int64) throws(ContainerError) -> AssetCollection {
        try sql { try assets.collect(now: now, gracePeriod: gracePeriod) }
    }
}
