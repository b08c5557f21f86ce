import KQuery

import GRDB
import GRDBSQLite
import Dispatch

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The SQLite file behind a persistent `Database`: the durable copy, written one transaction per
/// save and read once at open.
///
/// Tables: `kquery_meta` (format version, next change tag, schema text, declared indexes, the
/// generation), `zones`, `records`, one row per record: its ID and type as columns, the record
/// itself in `RecordCoding`'s binary form, and `index_snapshots`, a large table's indexes as they
/// were built at an open (`IndexSnapshot`). The rollback journal makes each write all-or-nothing,
/// and `synchronous = FULL` makes a committed save survive a power cut.
///
/// The generation counts the writes: every transaction that changes records, zones, the schema or
/// the declared indexes adds one to it, so a snapshot written at another generation is stale.
final class DatabaseFile {
    static let formatVersion = "1"

    let path: String
    private let queue: DatabaseQueue

    struct Contents {
        /// How many records each type has (to size tables before `load` hands them over).
        var recordCounts: [String: Int] = [:]
        var zones: [ZoneID] = []
        var schema: Schema?
        var indexes: [IndexDeclaration] = []
        var nextChangeTag: Int64 = 1
        /// The file's generation when it was read, and the index snapshots written at it, by type.
        var generation: Int64 = 0
        var snapshots: [String: [UInt8]] = [:]
    }

    init(path: String) throws(DatabaseError) {
        self.path = path
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        do {
            queue = try DatabaseQueue(path: path, configuration: configuration)
            try queue.write { db in
                let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
                if !tables.isEmpty, !tables.contains("kquery_meta") {
                    throw DatabaseError(.storage, "\(path): not a KQuery database (it has other tables)")
                }
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS kquery_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                    CREATE TABLE IF NOT EXISTS zones (zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, PRIMARY KEY (zoneName, ownerName));
                    CREATE TABLE IF NOT EXISTS records (
                        zoneName TEXT NOT NULL, ownerName TEXT NOT NULL, recordName TEXT NOT NULL,
                        recordType TEXT NOT NULL, body BLOB NOT NULL,
                        PRIMARY KEY (zoneName, ownerName, recordName)) WITHOUT ROWID;
                    CREATE TABLE IF NOT EXISTS index_snapshots (recordType TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL, body BLOB NOT NULL);
                    INSERT OR IGNORE INTO kquery_meta (key, value) VALUES ('format', '\(Self.formatVersion)');
                    INSERT OR IGNORE INTO kquery_meta (key, value) VALUES ('generation', '0');
                    """)
                let format = try String.fetchOne(db, sql: "SELECT value FROM kquery_meta WHERE key = 'format'")
                if format != Self.formatVersion {
                    throw DatabaseError(.storage, "\(path): KQuery file format \(format ?? "?") is not supported (expected \(Self.formatVersion))")
                }
            }
        } catch let error as DatabaseError {
            throw error
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    /// Reads everything but the records, which go to `record` one at a time as they are decoded
    /// (after `contents` has been handed over, so tables can be sized first).
    func load(_ handOver: (Contents) -> Void, record: (borrowing KQuery.Record) -> Void) throws(DatabaseError) {
        do {
            try queue.read { db in
                var contents = Contents()
                var meta: [String: String] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT key, value FROM kquery_meta") {
                    guard let key = Self.text(row, 0), let value = Self.text(row, 1) else { throw DatabaseError(.storage, "\(path): corrupt kquery_meta table") }
                    meta[key] = value
                }
                if let tag = meta["nextChangeTag"] {
                    guard let value = Int64(tag) else { throw DatabaseError(.storage, "\(path): corrupt nextChangeTag '\(tag)'") }
                    contents.nextChangeTag = value
                }
                if let text = meta["schema"] {
                    do {
                        contents.schema = try Schema(text: text)
                    } catch {
                        throw DatabaseError(.storage, "\(path): the stored schema does not parse: \(error)")
                    }
                }
                if let text = meta["indexes"] { contents.indexes = try Self.indexes(from: text, path: path) }
                if let text = meta["generation"] {
                    guard let value = Int64(text) else { throw DatabaseError(.storage, "\(path): corrupt generation '\(text)'") }
                    contents.generation = value
                }
                // Read in the transaction that reads the records: a snapshot and the records it
                // describes are of one moment.
                // Bodies copied once, through SQLite's C API (a GRDB row would copy them twice).
                let snapshots = try db.makeStatement(sql: "SELECT recordType, body FROM index_snapshots WHERE generation = \(contents.generation)")
                let handle = snapshots.sqliteStatement
                while sqlite3_step(handle) == SQLITE_ROW {
                    // A damaged row (not text and a blob) is ignored: its indexes are rebuilt.
                    guard sqlite3_column_type(handle, 0) == SQLITE_TEXT, sqlite3_column_type(handle, 1) == SQLITE_BLOB,
                          let type = sqlite3_column_text(handle, 0).map({ String(cString: $0) }) else { continue }
                    contents.snapshots[type] = Array(UnsafeRawBufferPointer(start: sqlite3_column_blob(handle, 1), count: Int(sqlite3_column_bytes(handle, 1))))
                }
                for row in try Row.fetchAll(db, sql: "SELECT zoneName, ownerName FROM zones") {
                    guard let zoneName = Self.text(row, 0), let ownerName = Self.text(row, 1) else { throw DatabaseError(.storage, "\(path): corrupt zones table") }
                    contents.zones.append(ZoneID(zoneName: zoneName, ownerName: ownerName))
                }
                for row in try Row.fetchAll(db, sql: "SELECT recordType, count(*) FROM records GROUP BY recordType") {
                    guard let type = Self.text(row, 0), let count = Int.fromDatabaseValue(row[1] as DatabaseValue) else {
                        throw DatabaseError(.storage, "\(path): corrupt records table")
                    }
                    contents.recordCounts[type] = count
                }
                handOver(contents)
                // Two stages on two threads: this one reads and decodes, another takes the
                // decoded records in batches (filing each in its table and indexes is as much work).
                try withoutActuallyEscaping(record) { record throws in
                    let pipeline = LoadPipeline(consumer: record)
                    var names = RecordCoding.FieldNames()
                    // In key order: sorting a million bodies by type (SQLite wrote them all to a
                    // temporary file) took longer than reading them; each goes to its type's table anyway.
                    // Stepped through SQLite's C API, each body read in place: a GRDB row wrapped
                    // every body in a `Data` (an allocation per record).
                    // Bodies only: a damaged record's name is looked up by its place in the same order.
                    let statement = try db.makeStatement(sql: "SELECT body FROM records")
                    let handle = statement.sqliteStatement
                    var position = 0
                    do {
                        while true {
                            let code = sqlite3_step(handle)
                            if code == SQLITE_DONE { break }
                            guard code == SQLITE_ROW else {
                                throw DatabaseError(.storage, "\(path): reading the records failed: \(String(cString: sqlite3_errmsg(db.sqliteConnection)))")
                            }
                            var failure: RecordDecodingError?
                            if sqlite3_column_type(handle, 0) != SQLITE_BLOB {
                                failure = RecordDecodingError("its body is not a blob")
                            } else {
                                let bytes = UnsafeRawBufferPointer(start: sqlite3_column_blob(handle, 0), count: Int(sqlite3_column_bytes(handle, 0)))
                                do throws(RecordDecodingError) {
                                    pipeline.append(try RecordCoding.decode(bytes, names: &names))
                                } catch {
                                    failure = error
                                }
                            }
                            if let failure {
                                let name = try? String.fetchOne(db, sql: "SELECT recordName FROM records LIMIT 1 OFFSET ?", arguments: [position])
                                throw DatabaseError(.storage, "\(path): record '\(name ?? "?")' is corrupt: \(failure)")
                            }
                            position += 1
                        }
                    } catch {
                        pipeline.abandon()
                        throw error
                    }
                    pipeline.finish()
                }
            }
        } catch let error as DatabaseError {
            throw error
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    /// Writes a batch of changes in one transaction. `progress` hears how many are written.
    func write(_ changes: [RecordChange], newZones: [ZoneID], nextChangeTag: Int64, progress: ((Int) -> Void)? = nil) throws(DatabaseError) {
        do {
            try queue.write { db in
                for zone in newZones {
                    try db.execute(sql: "INSERT OR IGNORE INTO zones (zoneName, ownerName) VALUES (?, ?)", arguments: [zone.zoneName, zone.ownerName])
                }
                let upsert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO records (zoneName, ownerName, recordName, recordType, body) VALUES (?, ?, ?, ?, ?)")
                let delete = try db.cachedStatement(sql: "DELETE FROM records WHERE zoneName = ? AND ownerName = ? AND recordName = ?")
                for (index, change) in changes.enumerated() {
                    switch change {
                    case .created(let record), .updated(_, let record):
                        let id = record.recordID
                        try upsert.execute(arguments: [id.zoneID.zoneName, id.zoneID.ownerName, id.recordName, record.recordType, Data(RecordCoding.encode(record))])
                    case .deleted(let record):
                        let id = record.recordID
                        try delete.execute(arguments: [id.zoneID.zoneName, id.zoneID.ownerName, id.recordName])
                    }
                    if let progress, (index + 1) % 10_000 == 0 { progress(index + 1) }
                }
                try Self.setMeta(db, "nextChangeTag", String(nextChangeTag))
                try Self.advanceGeneration(db)
            }
            progress?(changes.count)
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    func deleteZone(_ zone: ZoneID, nextChangeTag: Int64) throws(DatabaseError) {
        do {
            try queue.write { db in
                try db.execute(sql: "DELETE FROM records WHERE zoneName = ? AND ownerName = ?", arguments: [zone.zoneName, zone.ownerName])
                try db.execute(sql: "DELETE FROM zones WHERE zoneName = ? AND ownerName = ?", arguments: [zone.zoneName, zone.ownerName])
                try Self.setMeta(db, "nextChangeTag", String(nextChangeTag))
                try Self.advanceGeneration(db)
            }
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    func writeSchema(_ schema: Schema?) throws(DatabaseError) {
        do {
            try queue.write { db in
                if let schema {
                    try Self.setMeta(db, "schema", schema.text)
                } else {
                    try db.execute(sql: "DELETE FROM kquery_meta WHERE key = 'schema'")
                }
                try Self.advanceGeneration(db)
            }
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    func writeIndexes(_ indexes: [IndexDeclaration]) throws(DatabaseError) {
        let text = indexes.map { "\($0.recordType)\t\($0.field.webServicesName)\t\($0.index.rawValue)" }.joined(separator: "\n")
        do {
            try queue.write { db in
                try Self.setMeta(db, "indexes", text)
                try Self.advanceGeneration(db)
            }
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    /// Stores index snapshots made from what was read at `generation`, replacing older ones, unless
    /// the file has been written since (then they would describe other records, and are dropped).
    /// Returns whether they were stored.
    @discardableResult
    func writeSnapshots(_ snapshots: [(recordType: String, body: [UInt8])], generation: Int64) throws(DatabaseError) -> Bool {
        do {
            return try queue.write { db in
                let current = try String.fetchOne(db, sql: "SELECT value FROM kquery_meta WHERE key = 'generation'").flatMap { Int64($0) }
                guard current == generation else { return false }
                try db.execute(sql: "DELETE FROM index_snapshots WHERE generation != ?", arguments: [generation])
                for snapshot in snapshots {
                    try db.execute(sql: "INSERT OR REPLACE INTO index_snapshots (recordType, generation, body) VALUES (?, ?, ?)",
                                   arguments: [snapshot.recordType, generation, Data(snapshot.body)])
                }
                return true
            }
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    private static func advanceGeneration(_ db: GRDB.Database) throws {
        try db.execute(sql: "UPDATE kquery_meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key = 'generation'")
    }

    private static func indexes(from text: String, path: String) throws(DatabaseError) -> [IndexDeclaration] {
        var result: [IndexDeclaration] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "\t").map(String.init)
            guard parts.count == 3, let raw = UInt8(parts[2]) else {
                throw DatabaseError(.storage, "\(path): corrupt index declaration '\(line)'")
            }
            result.append(IndexDeclaration(recordType: parts[0], field: FieldReference(webServicesName: parts[1]), index: FieldSchema.Indexes(rawValue: raw)))
        }
        return result
    }

    /// A text column, or nil for NULL or any other type (GRDB's typed subscripts trap on those).
    private static func text(_ row: Row, _ index: Int) -> String? {
        String.fromDatabaseValue(row[index] as DatabaseValue)
    }

    private static func setMeta(_ db: GRDB.Database, _ key: String, _ value: String) throws {
        try db.execute(sql: "INSERT OR REPLACE INTO kquery_meta (key, value) VALUES (?, ?)", arguments: [key, value])
    }

    private static func storageError(_ error: any Error, path: String) -> DatabaseError {
        if let error = error as? DatabaseError { return error }
        if let error = error as? GRDB.DatabaseError {
            return DatabaseError(.storage, "\(path): \(error.message ?? error.description)")
        }
        return DatabaseError(.storage, "\(path): \(error)")
    }
}

/// Hands decoded records from the thread reading the file to a thread filing them, a batch at a
/// time, with at most a few batches in between (memory stays bounded). `finish` ends the stream and
/// waits until every batch sent has been filed, so when `load` returns (or throws), nothing runs on.
///
/// The batches are a few buffers allocated once and reused: the reader initializes records in one,
/// the filer reads them in place (the tables copy what they keep into their columns) and hands the
/// buffer back, and the reader destroys the records in it before filling it again. So a record is
/// made and freed on the thread that decoded it: freed by the filer, every string and buffer of it
/// went back to another thread's allocator (its locks contended) and the filer, the slower stage,
/// did the freeing.
final class LoadPipeline: @unchecked Sendable {
    static let batchSize = 2_048
    private static let batchesInFlight = 4

    /// A buffer and how many records in it are initialized.
    private typealias Batch = (buffer: UnsafeMutablePointer<KQuery.Record>, count: Int)

    /// Buffers the filer is done with (their records still to be destroyed), for the reader;
    /// filled ones, for the filer.
    private let empty = Locked<[Batch]>([])
    private let full = Locked<[Batch]>([])
    private let sent = DispatchSemaphore(value: 0)
    private let room = DispatchSemaphore(value: LoadPipeline.batchesInFlight)
    private let done = DispatchSemaphore(value: 0)
    private var finished = false
    private let buffers: [UnsafeMutablePointer<KQuery.Record>]
    /// The buffer the reader is filling, and how many records it holds.
    private var filling: UnsafeMutablePointer<KQuery.Record>?
    private var filled = 0
    /// Read by the filing thread for each record, and dropped by `finish` once that thread is done:
    /// the closure is `load`'s, and must not outlive it (the dispatch block may be released later).
    private var consumer: ((borrowing KQuery.Record) -> Void)?

    init(consumer: @escaping (borrowing KQuery.Record) -> Void) {
        self.consumer = consumer
        buffers = (0..<Self.batchesInFlight).map { _ in UnsafeMutablePointer<KQuery.Record>.allocate(capacity: Self.batchSize) }
        empty.withLock { $0 = buffers.map { ($0, 0) } }
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            while true {
                sent.wait()
                let next = full.withLock { $0.isEmpty ? nil : $0.removeFirst() }
                guard let batch = next else { break }   // finished: the empty signal
                if let consumer = self.consumer {
                    for index in 0..<batch.count { consumer(batch.buffer[index]) }
                }
                empty.withLock { $0.append(batch) }
                room.signal()
            }
            done.signal()
        }
    }

    deinit {
        for buffer in buffers { buffer.deallocate() }
    }

    /// Adds a record to the batch being filled, sending the batch when it is full.
    func append(_ record: consuming KQuery.Record) {
        if filling == nil {
            room.wait()
            let (buffer, stale) = empty.withLock { $0.removeLast() }
            buffer.deinitialize(count: stale)
            filling = buffer
            filled = 0
        }
        guard let buffer = filling else { return }
        (buffer + filled).initialize(to: record)
        filled += 1
        if filled == Self.batchSize { sendFilling() }
    }

    private func sendFilling() {
        guard let buffer = filling else { return }
        filling = nil
        full.withLock { $0.append((buffer, filled)) }
        sent.signal()
    }

    /// Sends what is left, ends the stream, waits for the filing thread to file what was sent, and
    /// destroys the records filed.
    func finish() {
        guard !finished else { return }
        finished = true
        if filled > 0 { sendFilling() } else if let buffer = filling {
            filling = nil
            empty.withLock { $0.append((buffer, 0)) }
            room.signal()   // a semaphore disposed below its starting value traps
        }
        sent.signal()
        done.wait()
        consumer = nil
        empty.withLock { batches in
            for index in batches.indices {
                batches[index].buffer.deinitialize(count: batches[index].count)
                batches[index].count = 0
            }
        }
    }

    /// Drops the records of the batch being filled (the reader failed), then finishes.
    func abandon() {
        if let buffer = filling {
            buffer.deinitialize(count: filled)
            filled = 0
        }
        finish()
    }
}
