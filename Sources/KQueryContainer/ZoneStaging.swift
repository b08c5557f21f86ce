import KQuery

/// The operations of one modify on one zone, applied to a staged copy of the zone's records:
/// what they would change, including the deletions they cascade to, before anything is written.
///
/// Records are read from storage when first needed; the staged ones shadow them. Reference rules
/// that depend on the whole group (a VALIDATE target saved by a later operation, a referrer
/// deleted by a later one) are checked on the final state by `referenceViolations()`.
struct ZoneStaging {
    /// The most DELETE_SELF references one record may be the target of (CloudKit's limit).
    static let maximumOwningReferences = 750

    let zoneID: ZoneID
    let tx: any StorageTransaction
    let database: StoredDatabase?
    let user: String
    let now: Int64
    /// The sequence the group's first change takes (each change the next): a saved record's
    /// change tag is its change's sequence, set as the record is made rather than on the change
    /// when it commits (changing a change in place copies its records).
    let firstSequence: Int64

    /// A record the group has read or changed: as storage holds it (once `isRead`), and the change
    /// that leaves it as the group leaves it (its position in `changes`; -1: none yet). A flag
    /// beside a plain optional: testing a `Record??` copied the record out first. The staged record
    /// is read from its change rather than kept here too (a copy for every record saved).
    private struct Entry {
        let name: String
        var isRead = false
        var stagedBy = -1
        var stored: Record?

        init(name: String) {
            self.name = name
        }
    }
    /// The records read or changed, in the order first met. A modify names a record or a few:
    /// found by comparing names, until `positions` indexes them (a group of more than
    /// `indexedFrom`), rather than hashed into two tables for each record.
    private var entries: [Entry] = []
    private var positions: [String: Int] = [:]
    private static let indexedFrom = 8
    /// The changes in order, and beside each the operation that caused it (a cascade: the root
    /// delete's). Two lists, so the changes are handed on as they are, not copied out of pairs.
    private(set) var changes: [RecordChange] = []
    private(set) var causes: [Int] = []
    /// The operation whose delete removed each deleted record (directly or by cascade).
    private var deletedBy: [String: Int] = [:]
    /// Whether a record saved holds a DELETE_SELF or VALIDATE reference.
    private var savesReferences = false
    /// The `share` sharing gives records this modify (nil inside: cleared), by name. A record's
    /// `share` is the server's: clients never set it, and otherwise it stays as stored.
    var shareLinks: [String: Reference?] = [:]

    init(zoneID: ZoneID, tx: any StorageTransaction, database: StoredDatabase?, user: String, now: Int64, firstSequence: Int64) {
        self.zoneID = zoneID
        self.tx = tx
        self.database = database
        self.user = user
        self.now = now
        self.firstSequence = firstSequence
    }

    /// Makes room for `count` operations' records and changes at once, rather than growing (and
    /// rehashing) through a 200-record modify.
    mutating func reserveCapacity(_ count: Int) {
        entries.reserveCapacity(count)
        changes.reserveCapacity(count)
        causes.reserveCapacity(count)
        if count > Self.indexedFrom { positions.reserveCapacity(count) }
    }

    /// The position of `name`'s entry, made (with nothing read or staged) if it has none.
    private mutating func entry(_ name: String) -> Int {
        if entries.count > Self.indexedFrom {
            if let position = positions[name] { return position }
        } else if let position = entries.firstIndex(where: { $0.name == name }) {
            return position
        }
        entries.append(Entry(name: name))
        let position = entries.count - 1
        if entries.count > Self.indexedFrom {
            // Past the threshold: index every entry once, then each new one as it comes.
            if positions.isEmpty {
                for (position, entry) in entries.enumerated() { positions[entry.name] = position }
            } else {
                positions[name] = position
            }
        }
        return position
    }

    private mutating func storedRecord(_ name: String) throws(ContainerError) -> Record? {
        try storedRecord(at: entry(name))
    }

    /// The record as storage holds it. Kept in its entry unless `keeping` is false: the operation
    /// on a record reads it once and stages it (a copy kept for every record); a later read of the
    /// stored record, which few modifies make, reads storage again, which staging leaves as it is.
    /// Inlined: every operation reads through it, and as a call the flag cost 100 instructions.
    @inline(__always)
    private mutating func storedRecord(at position: Int, keeping: Bool = true) throws(ContainerError) -> Record? {
        if entries[position].isRead { return entries[position].stored }
        let id = RecordID(recordName: entries[position].name, zoneID: zoneID)
        let record = try database.flatMap { database throws(ContainerError) in try tx.record(id, in: database) }
        if keeping {
            entries[position].stored = record
            entries[position].isRead = true
        }
        return record
    }

    /// The record as the group leaves it so far (nil: deleted or missing); a record read from
    /// storage is kept in its entry as `storedRecord(at:keeping:)` says.
    private mutating func current(_ name: String, keepingStored: Bool = true) throws(ContainerError) -> Record? {
        let position = entry(name)
        let change = entries[position].stagedBy
        if change >= 0 { return isDeletion(change) ? nil : changes[change].record }
        return try storedRecord(at: position, keeping: keepingStored)
    }

    /// Whether change `position` deletes its record.
    private func isDeletion(_ position: Int) -> Bool {
        if case .deleted = changes[position] { true } else { false }
    }

    /// The records that now hold a reference with `action` to `target`, by name.
    private mutating func referrers(to target: String, action: Reference.Action) throws(ContainerError) -> [String] {
        var candidates = Set(try database.map { database throws(ContainerError) in
            try tx.referrers(to: RecordID(recordName: target, zoneID: zoneID), action: action, in: database)
        } ?? [])
        for entry in entries where entry.stagedBy >= 0 && !isDeletion(entry.stagedBy) { candidates.insert(entry.name) }
        var referrers: [String] = []
        for name in candidates.sorted() {
            if let record = try current(name), record.references(target, action: action) { referrers.append(name) }
        }
        return referrers
    }

    // MARK: Operations

    /// Applies operation `index` of `operations` to the staged records, or throws the error it
    /// fails with.
    mutating func apply(_ index: Int, in operations: UnsafeBufferPointer<RecordOperation>) throws(ContainerError) {
        // The operation is read where it lies, through a pointer: passed as a value it was copied
        // (its record retaining all it holds) and destroyed again.
        guard let base = operations.baseAddress, operations.indices.contains(index) else {
            throw ContainerError(.internalError, "operation \(index) is not among the \(operations.count) staged")
        }
        let operation = base + index
        let name = operation.pointee.record.recordID.recordName
        let existing = try current(name, keepingStored: false)
        for reference in operation.pointee.record.trackedReferences where reference.recordID.zoneID != zoneID {
            throw ContainerError(.badRequest, "record '\(name)': a \(reference.action.rawValue) reference must point into its own zone, not to '\(reference.recordID.recordName)' in zone '\(reference.recordID.zoneID.zoneName)'")
        }
        func checkTag(_ existing: Record) throws(ContainerError) {
            guard let tag = operation.pointee.record.recordChangeTag else {
                throw ContainerError(.badRequest, "\(operation.pointee.kind.rawValue) of record '\(name)' needs its recordChangeTag (force\(operation.pointee.kind.rawValue.prefix(1).uppercased() + operation.pointee.kind.rawValue.dropFirst()) does not)")
            }
            guard tag == existing.recordChangeTag else {
                throw ContainerError(.conflict, "record '\(name)' has changed: recordChangeTag '\(tag)' is not the server's '\(existing.recordChangeTag ?? "")'")
            }
        }
        func checkType(_ existing: Record) throws(ContainerError) {
            guard existing.recordType == operation.pointee.record.recordType else {
                throw ContainerError(.badRequest, "record '\(name)' is a '\(existing.recordType)' and cannot become a '\(operation.pointee.record.recordType)'")
            }
        }
        switch operation.pointee.kind {
        case .create:
            guard existing == nil else { throw ContainerError(.exists, "record '\(name)' already exists") }
            save(index, created(operation.pointee.record.fields), before: nil)
        case .update, .forceUpdate, .replace, .forceReplace:
            guard let existing else {
                guard operation.pointee.kind == .forceUpdate || operation.pointee.kind == .forceReplace else {
                    throw ContainerError(.notFound, "record '\(name)' does not exist")
                }
                save(index, created(operation.pointee.record.fields), before: nil)
                return
            }
            if operation.pointee.kind == .update || operation.pointee.kind == .replace { try checkTag(existing) }
            try checkType(existing)
            var record = existing
            if operation.pointee.kind == .update || operation.pointee.kind == .forceUpdate {
                for (key, value) in operation.pointee.record.fields { record.fields[key] = value }
                if let parent = operation.pointee.record.parent { record.parent = parent }
            } else {
                // A replace keeps the record's system values (its short GUID) and takes the rest as sent.
                let guid = existing.fields[ContainerDatabase.shortGUIDKey]
                record.fields = operation.pointee.record.fields
                if record.fields[ContainerDatabase.shortGUIDKey] == nil, let guid { record.fields[ContainerDatabase.shortGUIDKey] = guid }
                record.parent = operation.pointee.record.parent
            }
            if let link = shareLinks[name] { record.share = link }
            record.modificationDate = now
            record.lastModifiedUserRecordName = user
            save(index, record, before: existing)
        case .delete, .forceDelete:
            guard let existing else { throw ContainerError(.notFound, "record '\(name)' does not exist") }
            if operation.pointee.kind == .delete { try checkTag(existing) }
            try delete(index, existing)
        }

        /// A new record of the operation's type and ID with `fields` and its parent, stamped now by the user.
        func created(_ fields: Fields) -> Record {
            var record = Record(recordType: operation.pointee.record.recordType, recordID: operation.pointee.record.recordID, fields: fields, creationDate: now,
                                creatorUserRecordName: user, modificationDate: now, lastModifiedUserRecordName: user)
            if let parent = operation.pointee.record.parent { record.parent = parent }
            if let link = shareLinks[name] { record.share = link }
            return record
        }
    }

    private mutating func save(_ index: Int, _ record: consuming Record, before: consuming Record?) {
        record.recordChangeTag = ContainerDatabase.changeTag(firstSequence + Int64(changes.count))
        let position = entry(record.recordID.recordName)
        entries[position].stagedBy = changes.count
        if !savesReferences { savesReferences = !record.trackedReferences.isEmpty }
        if let before = consume before {
            changes.append(.updated(before: before, after: record))
        } else {
            changes.append(.created(record))
        }
        causes.append(index)
    }

    /// Deletes `record` and, recursively, every record holding a DELETE_SELF reference to a deleted
    /// one (each once, so cycles and diamonds end).
    private mutating func delete(_ index: Int, _ record: Record) throws(ContainerError) {
        remove(record, by: index)
        var pending = [record.recordID.recordName]
        while let target = pending.popLast() {
            // `referrers` lists only records still staged, so each is removed once.
            for owner in try referrers(to: target, action: .deleteSelf) {
                guard let owned = try current(owner) else { continue }
                remove(owned, by: index)
                pending.append(owner)
            }
        }
    }

    private mutating func remove(_ record: Record, by index: Int) {
        let name = record.recordID.recordName
        let position = entry(name)
        entries[position].stagedBy = changes.count
        deletedBy[name] = index
        changes.append(.deleted(record))
        causes.append(index)
    }

    // MARK: Final checks

    /// The operations that break a reference rule in the state the group leaves: a VALIDATE
    /// reference to a record that does not exist, a deleted record a VALIDATE reference still
    /// points at, a target of more than 750 DELETE_SELF references.
    mutating func referenceViolations() throws(ContainerError) -> [Int: ContainerError] {
        // Without deletions or saved references no rule can break (most modifies).
        guard !deletedBy.isEmpty || savesReferences else { return [:] }
        // Each saving operation's record, in operation order.
        let saved: [(operation: Int, record: Record)] = zip(causes, changes).compactMap { operation, change in
            switch change {
            case .created(let record), .updated(_, let record): (operation, record)
            case .deleted: nil
            }
        }
        var errors: [Int: ContainerError] = [:]
        var owned: Set<String> = []
        for (index, record) in saved {
            let name = record.recordID.recordName
            guard try current(name) != nil else { continue }
            for reference in record.trackedReferences {
                let target = reference.recordID.recordName
                if reference.action == .validate, try current(target) == nil, errors[index] == nil {
                    errors[index] = ContainerError(.validatingReferenceError, "record '\(name)' has a VALIDATE reference to '\(target)', which does not exist")
                }
                if reference.action == .deleteSelf { owned.insert(target) }
            }
        }
        for target in owned.sorted() {
            let owners = try referrers(to: target, action: .deleteSelf)
            guard owners.count > Self.maximumOwningReferences else { continue }
            for (index, record) in saved where record.references(target, action: .deleteSelf) {
                let name = record.recordID.recordName
                guard try !(storedRecord(name)?.references(target, action: .deleteSelf) ?? false) else { continue }
                errors[index] = ContainerError(.limitExceeded, "Limit exceeded for number of owning references to single record ('\(target)' would have \(owners.count), at most \(Self.maximumOwningReferences))")
            }
        }
        for (name, index) in deletedBy.sorted(by: { ($0.value, $0.key) < ($1.value, $1.key) }) where errors[index] == nil {
            guard try current(name) == nil, let referrer = try referrers(to: name, action: .validate).first else { continue }
            errors[index] = ContainerError(.validatingReferenceError, "Record delete would violate validating reference ('\(referrer)' refers to '\(name)')")
        }
        return errors
    }
}
