import KQuery
import Dispatch

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A CloudKit database: zones of records, an optional schema, indexes, and queries planned over them.
///
/// In memory by default; `Database(path:)` keeps it in a single SQLite file, where every `save`
/// is one transaction: a process killed in the middle leaves the file with the whole batch or none
/// of it. Queries always run in memory, on the records and indexes loaded at open.
///
/// ```swift
/// let database = Database()
/// try database.save([RecordOperation(kind: .create, record: artwork)])
/// let query = Query(recordType: "Artwork", predicate: try ValidatedPredicate("price > 100"))
/// let page = try database.perform(query, now: 0)   // 100 records at most, and a cursor
/// print(try database.plan(query, now: 0))          // which index it used, in words
/// ```
public final class Database {
    /// When indexes are built.
    public enum IndexPolicy: Sendable {
        /// Only the indexes a schema or `declareIndex` names.
        case declared
        /// Also, the first time a query could use one, the index it needs (then kept up to date).
        case automatic
    }

    public var indexPolicy: IndexPolicy
    /// Under automatic indexing, the fewest records a type needs before a query builds an index for
    /// it: below this a scan costs less than building.
    public var automaticIndexThreshold = 1_000
    /// The fewest deleted records that make a table compact its indexes (see `RecordTable`); tests
    /// lower it to exercise compaction.
    var minimumDeadRows = 64
    /// Whether saving into a zone that does not exist creates it (otherwise it is an error).
    public var createsMissingZones = false
    /// The fewest records a table needs for its token index to be built on a second thread beside
    /// its other indexes (small in tests, to exercise it).
    var minimumRowsForParallelIndexBuild = 50_000
    /// The time saves stamp as `creationDate` and `modificationDate` (milliseconds since 1970).
    public var clock: @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }

    public private(set) var schema: Schema?
    public private(set) var zones: Set<ZoneID> = [.default]
    /// Indexes declared without a schema (`declareIndex`), persisted with the database.
    public private(set) var declaredIndexes: [IndexDeclaration] = []

    var tables: [String: RecordTable] = [:]
    /// Counts changes to the records, so caches of query results know when they are stale.
    private(set) var generation = 0
    var pageCache: PageCache?
    /// The snapshots of the columns whose records a query returned (`ColumnsSnapshot`), detached
    /// before any table changes. Held strongly: a weak reference would move the snapshot's
    /// reference count to a side table, and every record's fields retain it. A snapshot only this
    /// list holds is no record's any more.
    private var snapshots: [ColumnsSnapshot] = []

    /// Keeps `snapshot` to detach before the tables change.
    func keep(_ snapshot: ColumnsSnapshot) {
        if snapshots.count >= 32 { dropUnreferencedSnapshots() }
        snapshots.append(snapshot)
    }

    private func dropUnreferencedSnapshots() {
        var kept = 0
        for index in snapshots.indices where !isKnownUniquelyReferenced(&snapshots[index]) {
            snapshots.swapAt(kept, index)
            kept += 1
        }
        snapshots.removeLast(snapshots.count - kept)
    }

    /// Lets every snapshot still read make its records' fields and let go of the columns, so that
    /// the tables change their columns in place rather than copy them.
    func detachSnapshots() {
        guard !snapshots.isEmpty else { return }
        dropUnreferencedSnapshots()
        for snapshot in snapshots { snapshot.detach() }
        snapshots.removeAll(keepingCapacity: true)
    }
    private var nextChangeTag: Int64 = 1
    private let file: DatabaseFile?

    /// An empty database in memory.
    public init(indexPolicy: IndexPolicy = .automatic) {
        self.indexPolicy = indexPolicy
        file = nil
    }

    /// Opens the database in the SQLite file at `path`, creating it if missing, and loads it.
    ///
    /// A record type of 50,000 records or more keeps its declared indexes in the file as they were
    /// built at an open (a snapshot): the next open loads them instead of building them again, as
    /// long as nothing was written to the file since. Any write makes the snapshot stale; the open
    /// after it builds the indexes and writes a new one.
    public convenience init(path: String, indexPolicy: IndexPolicy = .declared) throws(DatabaseError) {
        try self.init(path: path, indexPolicy: indexPolicy, minimumRowsForIndexSnapshot: 50_000)
    }

    /// `minimumRowsForIndexSnapshot`: the fewest records a type needs for its indexes to be kept in
    /// the file (small in tests).
    init(path: String, indexPolicy: IndexPolicy, minimumRowsForIndexSnapshot: Int) throws(DatabaseError) {
        self.indexPolicy = indexPolicy
        let file = try DatabaseFile(path: path)
        self.file = file
        var snapshots: [String: [UInt8]] = [:]
        var generation: Int64 = 0
        try file.load({ contents in
            schema = contents.schema
            declaredIndexes = contents.indexes
            nextChangeTag = contents.nextChangeTag
            zones.formUnion(contents.zones)
            for (type, count) in contents.recordCounts {
                var table = RecordTable(recordType: type, searchableFields: contents.schema?[type]?.searchableFields)
                table.reserveCapacity(count)
                tables[type] = table
            }
            snapshots = contents.snapshots
            generation = contents.generation
        }, record: { insertLoaded($0) })
        for index in tables.indices { tables.values[index].trimExcessCapacity() }
        var made: [(recordType: String, body: [UInt8])] = []
        for type in Array(tables.keys) where !indexDeclarations(for: type).isEmpty {
            // A stale or damaged snapshot is built anew below, and replaced.
            if let snapshot = snapshots[type], case .success(let indexes) = indexes(fromSnapshot: snapshot, of: type) {
                tables[type]?.install(indexes)
                indexSnapshotTypes.insert(type)
                continue
            }
            buildDeclaredIndexes(type)
            if let count = tables[type]?.count, count >= minimumRowsForIndexSnapshot, let body = indexSnapshot(of: type) {
                made.append((type, body))
            }
        }
        // A cache: an open that cannot write it (a read-only file, another writer) still succeeds.
        if !made.isEmpty { _ = try? file.writeSnapshots(made, generation: generation) }
    }

    /// The record types whose indexes this open read from the file's snapshot rather than built.
    public private(set) var indexSnapshotTypes: Set<String> = []

    /// `type`'s indexes as an index snapshot describes them (`IndexSnapshot`), with the declarations
    /// and searchable fields they were built from.
    func indexSnapshot(of type: String) -> [UInt8]? {
        tables[type].map { IndexSnapshot.encode($0, signature: indexSnapshotSignature(type)) }
    }

    /// The indexes `snapshot` holds for `type`'s table as it is now, or why they do not fit it.
    func indexes(fromSnapshot snapshot: [UInt8], of type: String) -> Result<RecordTable.Indexes, IndexSnapshot.Mismatch> {
        guard let table = tables[type] else { return .failure(IndexSnapshot.Mismatch("no table of type '\(type)'")) }
        return IndexSnapshot.decode(snapshot, count: table.count, namesHash: table.loadedNamesHash, signature: indexSnapshotSignature(type))
    }

    private func indexSnapshotSignature(_ type: String) -> String {
        IndexSnapshot.signature(indexDeclarations(for: type), searchableFields: tables[type]?.searchableFields)
    }

    /// The file the database lives in; nil in memory.
    public var path: String? { file?.path }

    // MARK: Reading

    public var recordCount: Int { tables.values.reduce(0) { $0 + $1.count } }

    public func record(_ id: RecordID) -> Record? {
        // A record ID is unique across types; there are few types, so each is asked.
        firstTable { table in table.row(of: id).flatMap { table.record(at: $0) } }?.value
    }

    /// Record types that have records, sorted.
    public var recordTypeNames: [String] { tables.filter { $0.value.count > 0 }.keys.sorted() }

    /// The records of one type, in no particular order.
    public func records(ofType type: String) -> [Record] { tables[type]?.records ?? [] }

    /// Every record, by type, in no particular order within a type.
    public var allRecords: [Record] { recordTypeNames.flatMap { records(ofType: $0) } }

    // MARK: Saving

    /// Applies `operations` in order, all or nothing: if one fails (a conflict, a missing record, a
    /// schema violation, ...) none is applied and the error names it. Returns one change per
    /// operation, for the subscription matcher.
    @discardableResult
    public func save(_ operations: [RecordOperation]) throws(DatabaseError) -> [RecordChange] {
        var staged: [RecordID: Record?] = [:]
        var newZones: Set<ZoneID> = []
        var changes: [RecordChange] = []
        changes.reserveCapacity(operations.count)
        var tag = nextChangeTag
        let now = clock()
        for (index, operation) in operations.enumerated() {
            do throws(DatabaseError) {
                let id = operation.record.recordID
                if !zones.contains(id.zoneID), !newZones.contains(id.zoneID) {
                    guard createsMissingZones else {
                        throw DatabaseError(.zoneNotFound, "zone '\(id.zoneID.zoneName)' does not exist (create it first)")
                    }
                    newZones.insert(id.zoneID)
                }
                let current: Record? = if let stagedRecord = staged[id] { stagedRecord } else { record(id) }
                let change = try resolve(operation, current: current, tag: &tag, now: now)
                if case .deleted = change { staged[id] = .some(nil) } else { staged[id] = change.record }
                changes.append(change)
            } catch {
                var error = error
                error.operationIndex = index
                throw error
            }
        }
        try file?.write(changes, newZones: Array(newZones), nextChangeTag: tag)
        zones.formUnion(newZones)
        nextChangeTag = tag
        for change in changes { apply(change) }
        return changes
    }

    /// Applies one operation; see `save(_:)`.
    @discardableResult
    public func save(_ operation: RecordOperation) throws(DatabaseError) -> RecordChange {
        let changes = try save([operation])
        return changes[0]
    }

    /// Loads records as they are (keeping their change tags and dates), replacing any with the same
    /// ID and creating their zones: for importing an export or a fixture. One transaction.
    /// `progress` is called with the number of records written so far.
    public func importRecords(_ records: [Record], progress: ((Int) -> Void)? = nil) throws(DatabaseError) {
        if let schema {
            for (index, record) in records.enumerated() {
                do {
                    try schema.check(record)
                } catch {
                    throw DatabaseError(.schemaViolation, "record '\(record.recordID)': \(error.message)", operationIndex: index)
                }
            }
        }
        // A later record with the same ID wins, as a second save would.
        var last: [RecordID: Int] = [:]
        for (index, record) in records.enumerated() { last[record.recordID] = index }
        var changes: [RecordChange] = []
        changes.reserveCapacity(last.count)
        for (index, record) in records.enumerated() where last[record.recordID] == index {
            if let existing = self.record(record.recordID) {
                if existing.recordType != record.recordType {
                    throw DatabaseError(.invalidOperation, "record '\(record.recordID)' is a '\(existing.recordType)' and cannot become a '\(record.recordType)'", operationIndex: index)
                }
                changes.append(.updated(before: existing, after: record))
            } else {
                changes.append(.created(record))
            }
        }
        let newZones = Set(records.map(\.recordID.zoneID)).subtracting(zones)
        try file?.write(changes, newZones: Array(newZones), nextChangeTag: nextChangeTag, progress: progress)
        zones.formUnion(newZones)
        for change in changes { apply(change) }
    }

    /// Brings an in-memory store in line with changes committed elsewhere (a container keeps its
    /// records in its own storage and queries them here): each record as it is, tags and dates
    /// kept. A change the store already holds leaves it as it is, so a store built from storage
    /// just after a commit may be handed that commit's changes too.
    public func applyCommitted(_ changes: consuming [RecordChange]) {
        detachSnapshots()
        // Taken from the list one by one: handed the only reference to it, the changes are moved
        // out, where iterating copied each (both its records) and its record again.
        changes.reverse()
        while let change = changes.popLast() {
            generation += 1
            let record: Record
            let deleted: Bool
            var updatedInType = false
            switch consume change {
            case .created(let created):
                (record, deleted) = (created, false)
            case .updated(let before, let after):
                updatedInType = before.recordType == after.recordType
                (record, deleted) = (after, false)
            case .deleted(let old):
                (record, deleted) = (old, true)
            }
            // An update within its type (nearly every one) replaces the record where its table
            // holds it, found once: the zone is known, and no other table can hold it.
            if updatedInType, let table = tables.index(forKey: record.recordType), tables.values[table].replaceExisting(record) {
                continue
            }
            let id = record.recordID
            // Deleted, or moved to another type: out of the table that holds it.
            if let holder = firstTable(preferring: record.recordType, { $0.contains(id) ? () : nil })?.index,
               deleted || tables.keys[holder] != record.recordType {
                tables.values[holder].remove(id)
            }
            guard !deleted else { continue }
            if !zones.contains(id.zoneID) { zones.insert(id.zoneID) }
            tables[record.recordType, default: makeTable(record.recordType)].replace(record)
        }
    }

    /// The first table (`type`'s asked first) for which `body` gives a value, where it lies in
    /// `tables`, and the value. Each table is read in place, through its modify accessor:
    /// `tables[type]`, `tables.values[index]` and iterating `tables` each copy the whole table
    /// (every one of its arrays and indexes retained and released) first.
    private func firstTable<T>(preferring type: String? = nil, _ body: (borrowing RecordTable) -> T?)
        -> (index: Dictionary<String, RecordTable>.Index, value: T)? {
        func inPlace(_ table: inout RecordTable) -> T? { body(table) }
        let preferred = type.flatMap { tables.index(forKey: $0) }
        if let preferred, let value = inPlace(&tables.values[preferred]) { return (preferred, value) }
        var index = tables.startIndex
        while index != tables.endIndex {
            if index != preferred, let value = inPlace(&tables.values[index]) { return (index, value) }
            tables.formIndex(after: &index)
        }
        return nil
    }

    /// What an operation does to `current` (the record as the batch has left it so far).
    private func resolve(_ operation: RecordOperation, current: Record?, tag: inout Int64, now: Int64) throws(DatabaseError) -> RecordChange {
        let incoming = operation.record
        let id = incoming.recordID
        func checkTag(_ existing: Record) throws(DatabaseError) {
            if let tag = incoming.recordChangeTag, let server = existing.recordChangeTag, tag != server {
                throw DatabaseError(.conflict, "conflict: record '\(id)' has changed since recordChangeTag '\(tag)' (the database has '\(server)'); nothing was saved")
            }
        }
        func stamped(_ record: Record, createdAt: Int64?) throws(DatabaseError) -> Record {
            var record = record
            record.recordChangeTag = "kq\(tag)"
            tag += 1
            record.creationDate = createdAt ?? now
            record.modificationDate = now
            if let schema {
                do {
                    try schema.check(record)
                } catch {
                    throw DatabaseError(.schemaViolation, "record '\(id)': \(error.message)")
                }
            }
            return record
        }
        func sameType(_ existing: Record) throws(DatabaseError) {
            if existing.recordType != incoming.recordType {
                throw DatabaseError(.invalidOperation, "record '\(id)' is a '\(existing.recordType)' and cannot become a '\(incoming.recordType)'")
            }
        }
        switch operation.kind {
        case .create:
            if current != nil { throw DatabaseError(.alreadyExists, "record '\(id)' already exists") }
            return .created(try stamped(incoming, createdAt: nil))
        case .update, .forceUpdate:
            guard let existing = current else { throw DatabaseError(.notFound, "record '\(id)' does not exist") }
            if operation.kind == .update { try checkTag(existing) }
            var merged = existing
            for (key, value) in incoming.fields { merged.fields[key] = value }
            return .updated(before: existing, after: try stamped(merged, createdAt: existing.creationDate))
        case .replace, .forceReplace:
            guard let existing = current else { return .created(try stamped(incoming, createdAt: nil)) }
            if operation.kind == .replace { try checkTag(existing) }
            try sameType(existing)
            return .updated(before: existing, after: try stamped(incoming, createdAt: existing.creationDate))
        case .delete, .forceDelete:
            guard let existing = current else { throw DatabaseError(.notFound, "record '\(id)' does not exist") }
            if operation.kind == .delete { try checkTag(existing) }
            return .deleted(existing)
        }
    }

    private func apply(_ change: RecordChange) {
        detachSnapshots()
        generation += 1
        switch change {
        case .created(let record):
            tables[record.recordType, default: makeTable(record.recordType)].insert(record)
        case .updated(let stored, let record):
            // `save` read `stored` from the table just now (or staged it as the batch's change
            // before this one left it).
            tables[record.recordType, default: makeTable(record.recordType)].replace(record, stored: stored)
        case .deleted(let record):
            tables[record.recordType]?.remove(record.recordID)
        }
    }

    private func insertLoaded(_ record: borrowing Record) {
        // Through the defaulting subscript, which changes the table in place (optional chaining
        // copied the whole table, every one of its arrays retained and released, per record).
        let type = record.recordType
        tables[type, default: RecordTable(recordType: type, searchableFields: schema?[type]?.searchableFields)].insertLoaded(record)
    }

    private func makeTable(_ type: String) -> RecordTable {
        var table = RecordTable(recordType: type, searchableFields: schema?[type]?.searchableFields)
        table.minimumDeadRows = minimumDeadRows
        for declaration in indexDeclarations(for: type) { table.build(declaration) }
        return table
    }

    // MARK: Zones

    /// Creates a zone (nothing happens if it exists).
    public func createZone(_ zone: ZoneID) throws(DatabaseError) {
        guard !zones.contains(zone) else { return }
        try file?.write([], newZones: [zone], nextChangeTag: nextChangeTag)
        zones.insert(zone)
    }

    /// Deletes a zone and every record in it. The default zone cannot be deleted.
    public func deleteZone(_ zone: ZoneID) throws(DatabaseError) {
        guard zone != .default else { throw DatabaseError(.invalidOperation, "the default zone cannot be deleted") }
        guard zones.contains(zone) else { throw DatabaseError(.zoneNotFound, "zone '\(zone.zoneName)' does not exist") }
        let doomed = tables.values.flatMap { $0.records.filter { $0.recordID.zoneID == zone } }
        try file?.deleteZone(zone, nextChangeTag: nextChangeTag)
        zones.remove(zone)
        for record in doomed { apply(.deleted(record)) }
    }

    // MARK: Schema and indexes

    /// Declares (or with nil, drops) the schema. Refused if a record already stored does not fit.
    public func setSchema(_ schema: Schema?) throws(DatabaseError) {
        if let schema {
            for table in tables.values {
                for record in table.records {
                    do {
                        try schema.check(record)
                    } catch {
                        throw DatabaseError(.schemaViolation, "record '\(record.recordID)' does not fit the schema: \(error.message)")
                    }
                }
            }
        }
        try file?.writeSchema(schema)
        detachSnapshots()
        self.schema = schema
        generation += 1
        for type in Array(tables.keys) {
            tables[type]?.dropIndexes()
            tables[type]?.setSearchableFields(schema?[type]?.searchableFields)
            buildDeclaredIndexes(type)
        }
    }

    /// Declares an index (a field marked queryable, sortable or searchable) for a database without
    /// a schema; it is built now and kept, in the file too.
    public func declareIndex(_ declaration: IndexDeclaration) throws(DatabaseError) {
        guard !declaredIndexes.contains(declaration) else { return }
        try file?.writeIndexes(declaredIndexes + [declaration])
        declaredIndexes.append(declaration)
        tables[declaration.recordType]?.build(declaration)
    }

    /// The indexes a record type has by declaration: its schema's, or the declared ones.
    func indexDeclarations(for type: String) -> [IndexDeclaration] {
        if let schema {
            guard let typeSchema = schema[type] else { return [] }
            return typeSchema.fields.flatMap { field in
                FieldSchema.Indexes.keywords.compactMap { index, _ in
                    field.indexes.contains(index) ? IndexDeclaration(recordType: type, field: field.field, index: index) : nil
                }
            }
        }
        return declaredIndexes.filter { $0.recordType == type }
    }

    /// Builds the type's declared indexes. On a large table with a token index and others, the
    /// token index (the largest part) is built on a second thread from a copy of the table, which
    /// shares the records and columns and is only read, while this one builds the rest.
    private func buildDeclaredIndexes(_ type: String) {
        guard var table = tables[type] else { return }
        tables[type] = nil   // built in place: one owner, no copy of the indexes on write
        defer { tables[type] = table }
        let declarations = indexDeclarations(for: type)
        let others = declarations.map { declaration in
            var other = declaration
            other.index.remove(.searchable)
            return other
        }
        guard table.count >= minimumRowsForParallelIndexBuild, table.tokenIndex == nil,
              declarations.contains(where: { $0.index.contains(.searchable) }), others.contains(where: { !$0.index.isEmpty }) else {
            for declaration in declarations { table.build(declaration) }
            return
        }
        let tokens = Locked<TokenIndex?>(nil)
        let built = DispatchSemaphore(value: 0)
        let source = table
        DispatchQueue.global(qos: .userInitiated).async {
            var copy = source
            copy.buildTokenIndex()
            tokens.withLock { $0 = copy.tokenIndex }
            built.signal()
        }
        for declaration in others { table.build(declaration) }
        built.wait()
        if let index = tokens.withLock({ $0 }) { table.setTokenIndex(index) }
    }
}

/// An index by declaration: a field of a record type marked queryable, sortable or searchable.
public struct IndexDeclaration: Hashable, Sendable, CustomStringConvertible {
    public var recordType: String
    public var field: FieldReference
    public var index: FieldSchema.Indexes

    public init(recordType: String, field: FieldReference, index: FieldSchema.Indexes) {
        self.recordType = recordType
        self.field = field
        self.index = index
    }

    public var description: String {
        let word = index == .queryable ? "queryable" : index == .sortable ? "sortable" : "searchable"
        return "\(recordType).\(field.name) \(word)"
    }
}

extension RecordTable {
    /// Builds what a declaration asks for: queryable is an equality index (and a spatial one, for
    /// locations), sortable a range index, searchable the type's token index.
    mutating func build(_ declaration: IndexDeclaration) {
        if declaration.index.contains(.queryable) {
            buildHashIndex(on: declaration.field)
            buildSpatialIndex(on: declaration.field)
        }
        if declaration.index.contains(.sortable) { buildOrderedIndex(on: declaration.field) }
        if declaration.index.contains(.searchable) { buildTokenIndex() }
    }
}

/// A save, query or file operation the database refused, and why.
public struct DatabaseError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Hashable, Sendable {
        case conflict, notFound, alreadyExists, zoneNotFound, schemaViolation, invalidOperation, invalidQuery, storage
    }

    public var kind: Kind
    public var message: String
    /// Which operation of a batch failed (0-based), when one did.
    public var operationIndex: Int?

    public init(_ kind: Kind, _ message: String, operationIndex: Int? = nil) {
        self.kind = kind
        self.message = message
        self.operationIndex = operationIndex
    }

    public var description: String { message }
}
