import Foundation
import GRDB
import KQuery

/// One item as this device last synced it: where it is, its content hash and the server change
/// tag it was based on (nil: not on the server yet), the file's size and modification time as
/// written (so an unchanged file is not read again), and whether its bytes are on the device.
struct LocalItem: Hashable, Sendable {
    var id: String
    var path: String
    var kind: ItemKind
    var contentHash: String?
    var tag: String?
    var size: Int64
    /// Nanoseconds since 1970.
    var mtime: Int64
    var downloaded: Bool
}

/// A device's sync state, in a SQLite file beside the folder (never inside it): the zone change
/// token, the server's records as last pulled, and the local items. Every change is one
/// transaction, so kill -9 leaves either the state before or after it; the sync pass is written
/// so that either one leads to the same result (a file written but not yet recorded is found
/// equal to the server's and adopted).
final class SyncState: Sendable {
    let queue: DatabaseQueue

    init(path: String) throws(DocumentsError) {
        do {
            // WAL with NORMAL syncs: a committed change survives kill -9 (the kernel has it) without
            // a disk sync per item, which made a first sync of many files wait on the disk.
            var configuration = Configuration()
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            queue = try DatabaseQueue(path: path, configuration: configuration)
            try queue.write { db in
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                    CREATE TABLE IF NOT EXISTS remote (id TEXT PRIMARY KEY, type TEXT NOT NULL, json TEXT NOT NULL);
                    CREATE TABLE IF NOT EXISTS local (id TEXT PRIMARY KEY, path TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, contentHash TEXT,
                        tag TEXT, size INTEGER NOT NULL, mtime INTEGER NOT NULL, downloaded INTEGER NOT NULL);
                    """)
            }
        } catch {
            throw DocumentsError(.localStorage, "\(path): cannot open the sync state (\(error))")
        }
    }

    private func write<T>(_ body: (Database) throws -> T) throws(DocumentsError) -> T {
        do { return try queue.write(body) } catch { throw DocumentsError(.localStorage, "the sync state: \(error)") }
    }

    private func read<T>(_ body: (Database) throws -> T) throws(DocumentsError) -> T {
        do { return try queue.read(body) } catch { throw DocumentsError(.localStorage, "the sync state: \(error)") }
    }

    func meta(_ key: String) throws(DocumentsError) -> String? {
        try read { db in try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [key]) }
    }

    func setMeta(_ key: String, _ value: String) throws(DocumentsError) {
        try write { db in try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", arguments: [key, value]) }
    }

    /// Applies a page of zone changes and its token in one transaction.
    func applyRemote(_ changes: [RecordZoneChangeEntry], token: String) throws(DocumentsError) {
        try write { db in
            try Self.apply(changes, db)
            try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('token', ?)", arguments: [token])
        }
    }

    /// Records what the server answered to this device's own modify, with the local items it
    /// acknowledged and forgot, in one transaction (one per answer, not one per item).
    func recordRemote(_ changes: [RecordZoneChangeEntry], put items: [LocalItem] = [], forget forgotten: [String] = []) throws(DocumentsError) {
        try write { db in
            try Self.apply(changes, db)
            for item in items { try Self.put(item, db) }
            for id in forgotten { try db.execute(sql: "DELETE FROM local WHERE id = ?", arguments: [id]) }
        }
    }

    private static func apply(_ changes: [RecordZoneChangeEntry], _ db: Database) throws {
        for change in changes {
            switch change {
            case .saved(let id, let type, let json):
                try db.execute(sql: "INSERT OR REPLACE INTO remote (id, type, json) VALUES (?, ?, ?)", arguments: [id, type, json])
            case .deleted(let id):
                try db.execute(sql: "DELETE FROM remote WHERE id = ?", arguments: [id])
            }
        }
    }

    func remoteRecords() throws(DocumentsError) -> [KQuery.Record] {
        let rows = try read { db in try Row.fetchAll(db, sql: "SELECT json FROM remote") }
        var records: [KQuery.Record] = []
        for row in rows {
            let text: String = row["json"]
            guard let json = try? JSON.parse(text), let record = try? KQuery.Record(json: json) else { continue }
            records.append(record)
        }
        return records
    }

    func localItems() throws(DocumentsError) -> [LocalItem] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM local").compactMap { row -> LocalItem? in
                guard let kind = ItemKind(rawValue: row["kind"]) else { return nil }
                return LocalItem(id: row["id"], path: row["path"], kind: kind, contentHash: row["contentHash"], tag: row["tag"], size: row["size"],
                                 mtime: row["mtime"], downloaded: (row["downloaded"] as Int64) != 0)
            }
        }
    }

    func put(_ item: LocalItem) throws(DocumentsError) {
        try write { db in try Self.put(item, db) }
    }

    /// Many items in one transaction.
    func put(_ items: [LocalItem]) throws(DocumentsError) {
        guard !items.isEmpty else { return }
        try write { db in
            for item in items { try Self.put(item, db) }
        }
    }

    private static func put(_ item: LocalItem, _ db: Database) throws {
        try db.execute(sql: "DELETE FROM local WHERE path = ? AND id != ?", arguments: [item.path, item.id])
        try db.execute(
            sql: "INSERT OR REPLACE INTO local (id, path, kind, contentHash, tag, size, mtime, downloaded) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            arguments: [item.id, item.path, item.kind.rawValue, item.contentHash, item.tag, item.size, item.mtime, item.downloaded ? 1 : 0])
    }

    /// A change to the local items, kept to be committed with others in one transaction.
    enum Change {
        case put(LocalItem)
        case forget(String)
    }

    func commit(_ changes: [Change]) throws(DocumentsError) {
        guard !changes.isEmpty else { return }
        try write { db in
            for change in changes {
                switch change {
                case .put(let item): try Self.put(item, db)
                case .forget(let id): try db.execute(sql: "DELETE FROM local WHERE id = ?", arguments: [id])
                }
            }
        }
    }

    func forget(id: String) throws(DocumentsError) {
        try write { db in try db.execute(sql: "DELETE FROM local WHERE id = ?", arguments: [id]) }
    }

    /// Moves the recorded paths under `from` to under `to` (a folder moved on disk).
    func movePrefix(from: String, to: String) throws(DocumentsError) {
        try write { db in
            let rows = try Row.fetchAll(db, sql: "SELECT id, path FROM local WHERE path LIKE ? ESCAPE '\\'", arguments: [Self.likePrefix(from)])
            for row in rows {
                let path: String = row["path"]
                try db.execute(sql: "UPDATE local SET path = ? WHERE id = ?", arguments: [to + path.dropFirst(from.count), row["id"] as String])
            }
        }
    }

    static func likePrefix(_ path: String) -> String {
        path.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_") + "/%"
    }
}

/// A zone change as the sync state keeps it.
enum RecordZoneChangeEntry {
    case saved(id: String, type: String, json: String)
    case deleted(id: String)

    init(_ record: KQuery.Record) {
        self = .saved(id: record.recordID.recordName, type: record.recordType, json: record.json().serialized)
    }
}
