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
/// Tables: `kquery_meta` (format version, next change tag, schema text, declared indexes),
/// `zones`, and `records`, one row per record: its ID and type as columns, the record itself in
/// `RecordCoding`'s binary form. The rollback journal makes each write all-or-nothing, and
/// `synchronous = FULL` makes a committed save survive a power cut.
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
                    INSERT OR IGNORE INTO kquery_meta (key, value) VALUES ('format', '\(Self.formatVersion)');
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
    func load(_ handOver: (Contents) -> Void, record: (KQuery.Record) -> Void) throws(DatabaseError) {
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
                    defer { pipeline.finish() }
                    var names = RecordCoding.FieldNames()
                    var batch: [KQuery.Record] = []
                    batch.reserveCapacity(LoadPipeline.batchSize)
                    // In key order: sorting a million bodies by type (SQLite wrote them all to a
                    // temporary file) took longer than reading them; each goes to its type's table anyway.
                    // Stepped through SQLite's C API, each body read in place: a GRDB row wrapped
                    // every body in a `Data` (an allocation per record).
                    let statement = try db.makeStatement(sql: "SELECT recordName, body FROM records")
                    let handle = statement.sqliteStatement
                    while true {
                        let code = sqlite3_step(handle)
                        if code == SQLITE_DONE { break }
                        guard code == SQLITE_ROW else {
                            throw DatabaseError(.storage, "\(path): reading the records failed: \(String(cString: sqlite3_errmsg(db.sqliteConnection)))")
                        }
                        var failure: RecordDecodingError?
                        if sqlite3_column_type(handle, 1) != SQLITE_BLOB {
                            failure = RecordDecodingError("its body is not a blob")
                        } else {
                            let bytes = UnsafeRawBufferPointer(start: sqlite3_column_blob(handle, 1), count: Int(sqlite3_column_bytes(handle, 1)))
                            do throws(RecordDecodingError) {
                                batch.append(try RecordCoding.decode(bytes, names: &names))
                            } catch {
                                failure = error
                            }
                        }
                        if let failure {
                            let name = sqlite3_column_text(handle, 0).map { String(cString: $0) } ?? "?"
                            throw DatabaseError(.storage, "\(path): record '\(name)' is corrupt: \(failure)")
                        }
                        if batch.count == LoadPipeline.batchSize {
                            pipeline.send(batch)
                            batch = []
                            batch.reserveCapacity(LoadPipeline.batchSize)
                        }
                    }
                    pipeline.send(batch)
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
            }
        } catch {
            throw Self.storageError(error, path: path)
        }
    }

    func writeIndexes(_ indexes: [IndexDeclaration]) throws(DatabaseError) {
        let text = indexes.map { "\($0.recordType)\t\($0.field.webServicesName)\t\($0.index.rawValue)" }.joined(separator: "\n")
        do {
            try queue.write { db in try Self.setMeta(db, "indexes", text) }
        } catch {
            throw Self.storageError(error, path: path)
        }
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
final class LoadPipeline: @unchecked Sendable {
    static let batchSize = 2_048
    private static let batchesInFlight = 4

    private let batches = Locked<[[KQuery.Record]]>([])
    private let sent = DispatchSemaphore(value: 0)
    private let room = DispatchSemaphore(value: LoadPipeline.batchesInFlight)
    private let done = DispatchSemaphore(value: 0)
    private var finished = false
    /// Read by the filing thread for each record, and dropped by `finish` once that thread is done:
    /// the closure is `load`'s, and must not outlive it (the dispatch block may be released later).
    private var consumer: ((KQuery.Record) -> Void)?

    init(consumer: @escaping (KQuery.Record) -> Void) {
        self.consumer = consumer
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            while true {
                sent.wait()
                let next = batches.withLock { $0.isEmpty ? nil : $0.removeFirst() }
                guard let batch = next else { break }   // finished: the empty signal
                room.signal()
                for record in batch { self.consumer?(record) }
            }
            done.signal()
        }
    }

    func send(_ batch: [KQuery.Record]) {
        guard !batch.isEmpty else { return }
        room.wait()
        batches.withLock { $0.append(batch) }
        sent.signal()
    }

    /// Ends the stream and waits for the filing thread to file what was sent.
    func finish() {
        guard !finished else { return }
        finished = true
        sent.signal()
        done.wait()
        consumer = nil
    }
}
