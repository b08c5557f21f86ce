import KQuery

/// A container's data in memory, for a container with no file (`Container(path: nil)`): the same
/// operations and rules as `SQLiteContainerStorage`, gone when the process ends.
///
/// The state's classes (`MemoryState`, `MemoryDatabase`, `MemoryZone`, `UndoLog`) are reached only
/// under `lock`, which already makes every access exclusive: their properties skip Swift's run-time
/// exclusivity checks (`@exclusivity(unchecked)`), which were 4% of a one-record modify.
///
/// One lock: a write holds it from its first change to its commit, a read for its whole body, so
/// a read sees the last committed state. A write changes the state in place and logs how to undo
/// each change; a write that throws replays the log backwards, so it commits whole or not at all.
///
/// Change fetches read per-zone change logs: every record change and tombstone appends
/// (sequence, name) in sequence order, an entry is live while the record's (or tombstone's)
/// sequence is still the entry's, and a fetch binary-searches the log for the token's sequence.
final class MemoryContainerStorage: ContainerStorage, @unchecked Sendable {
    let secret: (UInt64, UInt64)
    /// Guards `state` (the unchecked Sendable is this lock).
    private let lock = Locked(MemoryState())

    init() {
        var generator = SystemRandomNumberGenerator()
        secret = (generator.next(), generator.next())
    }

    func read<T>(_ body: (any StorageTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try lock.withLock { state throws(ContainerError) -> T in try body(MemoryTransaction(state: state, undo: readUndo)) }
    }

    /// The undo log of reads, which change nothing: one for all, as reads hold the lock, rather
    /// than one made for each (a file modify reads the mirror once per record).
    private let readUndo = UndoLog(keeps: false)
    /// The undo log of writes: one for all, as writes hold the lock, emptied when each ends (a
    /// write then allocates nothing for its log once the log has grown).
    private let writeUndo = UndoLog()

    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try withTransaction { tx throws(ContainerError) -> T in try body(tx) }
    }

    /// A write on the concrete transaction, for `SQLiteContainerStorage`, which replays its
    /// committed writes here (with the numbers its file gave out).
    ///
    /// Without `undoable` a body that throws leaves its changes half made: for a replay, whose
    /// failure makes the file storage load the state again anyway.
    func withTransaction<T>(undoable: Bool = true, _ body: (MemoryTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try lock.withLock { state throws(ContainerError) -> T in
            let undo = writeUndo
            undo.begin(keeping: undoable)
            defer { undo.end() }
            do throws(ContainerError) {
                let result = try body(MemoryTransaction(state: state, undo: undo))
                state.tidy(after: undo)
                return result
            } catch {
                undo.takeBack()
                throw error
            }
        }
    }

    /// Reads the state through the concrete transaction (for what the protocol does not ask).
    func inspect<T>(_ body: (MemoryTransaction) -> T) -> T {
        lock.withLock { state in body(MemoryTransaction(state: state, undo: readUndo)) }
    }

    /// Replaces the whole state (a file's, loaded at open).
    func replaceState(_ loaded: MemoryState) {
        lock.withLock { $0 = loaded }
    }
}

/// How to take back a write's changes, in the order they were made.
final class UndoLog {
    /// One change to take back. Those every modify makes are cases of their own, logged without
    /// allocating a closure; the rest are closures.
    enum Action {
        /// A record saved or deleted: its zone's log length before, what the name held before, and
        /// the references indexed for it before and after.
        case record(MemoryZone, name: String, logCount: Int, old: (record: Record, sequence: Int64)?,
                    tombstone: (recordType: String, sequence: Int64)?, references: (old: [Reference], new: [Reference]))
        /// A database's sequence moved on from this one.
        case sequence(MemoryDatabase, Int64)
        /// Notifications queued after the outbox's first `count` entries.
        case outbox(MemoryState, count: Int)
        case closure(() -> Void)

        func takeBack() {
            switch self {
            case let .record(zone, name, logCount, old, tombstone, references):
                zone.log.truncate(to: logCount)
                zone.records[name] = old
                zone.tombstones[name] = tombstone
                if !references.old.isEmpty || !references.new.isEmpty {
                    zone.index(references.new, of: name, adding: false)
                    zone.index(references.old, of: name, adding: true)
                }
            case let .sequence(database, sequence):
                database.stored.sequence = sequence
            case let .outbox(state, count):
                state.outbox.removeSubrange(count...)
            case let .closure(action):
                action()
            }
        }
    }

    /// Whether undo entries are kept at all.
    @exclusivity(unchecked) private(set) var keeps: Bool
    @exclusivity(unchecked) private(set) var actions: [Action] = []
    /// The zones and databases whose change logs the write appended to: tidied when it commits.
    @exclusivity(unchecked) private(set) var zones: [MemoryZone] = []
    @exclusivity(unchecked) private(set) var databases: [MemoryDatabase] = []

    init(keeps: Bool = true) {
        self.keeps = keeps
    }

    /// Starts a write's log.
    func begin(keeping: Bool) {
        keeps = keeping
    }

    /// Ends a write's log, committed or taken back: forgets its entries, keeping the room they took
    /// unless a large write grew it.
    func end() {
        guard actions.capacity <= 1024 else {
            actions = []
            zones = []
            databases = []
            return
        }
        // Emptied from the end: `removeAll(keepingCapacity:)` went through the generic
        // `replaceSubrange`, about 900 instructions for a one-record modify's few entries.
        while !actions.isEmpty { actions.removeLast() }
        while !zones.isEmpty { zones.removeLast() }
        while !databases.isEmpty { databases.removeLast() }
    }

    @inline(__always)
    func add(_ action: @escaping () -> Void) {
        if keeps { actions.append(.closure(action)) }
    }

    @inline(__always)
    func add(_ action: Action) {
        if keeps { actions.append(action) }
    }

    /// Takes back every change logged, newest first.
    func takeBack() {
        for action in actions.reversed() { action.takeBack() }
    }

    /// Notes a zone whose change log the write appended to (once per run of changes to it, not
    /// once per record).
    func touch(_ zone: MemoryZone) {
        if zones.last !== zone { zones.append(zone) }
    }

    /// Notes a database whose zone log the write appended to.
    func touch(_ database: MemoryDatabase) {
        if databases.last !== database { databases.append(database) }
    }
}

/// Names in change order: (sequence, name) entries sorted by sequence. An entry goes stale when its
/// name changes again; `stale` counts those, so the log is rebuilt once they are most of it.
struct ChangeLog<Name: Hashable> {
    private(set) var entries: [(sequence: Int64, name: Name)] = []
    var stale = 0

    /// Adds an entry. A write's sequences all follow the state before it, so the entry goes after
    /// every entry older writes made (undoing truncates back to them), though possibly before
    /// entries its own write made (a modify stamps its zones after their records).
    mutating func append(_ sequence: Int64, _ name: Name) {
        // Nearly always after every entry: appended, not inserted.
        guard let last = entries.last?.sequence, last > sequence else { return entries.append((sequence, name)) }
        var position = entries.count
        while position > 0, entries[position - 1].sequence > sequence { position -= 1 }
        entries.insert((sequence, name), at: position)
    }

    mutating func truncate(to count: Int) {
        entries.removeSubrange(count...)
    }

    /// The position of the first entry after `sequence`.
    func start(after sequence: Int64) -> Int {
        var low = 0, high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].sequence <= sequence { low = middle + 1 } else { high = middle }
        }
        return low
    }

    var needsRebuild: Bool { stale > 64 && stale > entries.count / 2 }

    mutating func rebuild(_ live: [(sequence: Int64, name: Name)]) {
        entries = live.sorted { $0.sequence < $1.sequence }
        stale = 0
    }
}

/// A reference target as the zone's reference index keys it: the target's name and the action.
struct ReferenceKey: Hashable {
    var target: String
    var action: Reference.Action
}

/// One zone's records (the default zone's too), tombstones, change log and reference index.
final class MemoryZone {
    @exclusivity(unchecked) var records: [String: (record: Record, sequence: Int64)] = [:]
    @exclusivity(unchecked) var tombstones: [String: (recordType: String, sequence: Int64)] = [:]
    @exclusivity(unchecked) var log = ChangeLog<String>()
    /// The records holding an owning or validating reference to each target, by name.
    @exclusivity(unchecked) var referrers: [ReferenceKey: Set<String>] = [:]
    /// The names of the zone's shares (`cloudkit.share` records): who sees what in shared
    /// databases is read from them, without going through every record.
    @exclusivity(unchecked) var shareNames: Set<String> = []

    /// Notes that `name` is (or is no longer) a share, undoably; nothing when that is unchanged.
    func markShare(_ name: String, _ isShare: Bool, undo: UndoLog) {
        guard shareNames.contains(name) != isShare else { return }
        if isShare { shareNames.insert(name) } else { shareNames.remove(name) }
        undo.add { [self] in
            if isShare { shareNames.remove(name) } else { shareNames.insert(name) }
        }
    }

    func index(_ references: [Reference], of source: String, adding: Bool) {
        for reference in references {
            let key = ReferenceKey(target: reference.recordID.recordName, action: reference.action)
            if adding {
                referrers[key, default: []].insert(source)
            } else if referrers[key]?.remove(source) != nil, referrers[key]?.isEmpty == true {
                referrers[key] = nil
            }
        }
    }

    func tidy() {
        guard log.needsRebuild else { return }
        // Read by position: mapping the records copied each one out (retaining all it holds)
        // through the generic tuple copy, most of a rebuild's cost.
        var live: [(sequence: Int64, name: String)] = []
        live.reserveCapacity(records.count + tombstones.count)
        for index in records.indices { live.append((records.values[index].sequence, records.keys[index])) }
        for (name, tombstone) in tombstones { live.append((tombstone.sequence, name)) }
        log.rebuild(live)
    }
}

final class MemoryDatabase {
    let key: DatabaseKey
    @exclusivity(unchecked) var stored: StoredDatabase
    @exclusivity(unchecked) var zones: [ZoneID: StoredZone] = [:]
    @exclusivity(unchecked) var zoneTombstones: [ZoneID: Int64] = [:]
    @exclusivity(unchecked) var zoneLog = ChangeLog<ZoneID>()
    /// Records by zone, created with a zone's first record.
    @exclusivity(unchecked) var recordZones: [ZoneID: MemoryZone] = [:] {
        didSet { lastZone = nil }
    }
    /// The zone `recordZone(_:)` found last: a modify reads and writes its records in one zone,
    /// found by comparing its ID instead of hashing it at each step.
    @exclusivity(unchecked) private var lastZone: (id: ZoneID, zone: MemoryZone)?

    /// The zone's records, if it has any.
    func recordZone(_ id: ZoneID) -> MemoryZone? {
        if let lastZone, lastZone.id == id { return lastZone.zone }
        let zone = recordZones[id]
        if let zone { lastZone = (id, zone) }
        return zone
    }
    /// Subscriptions by ID, with the number that keeps their save order (a replaced one moves last).
    @exclusivity(unchecked) var subscriptions: [String: (order: Int64, subscription: Subscription)] = [:]
    @exclusivity(unchecked) var nextSubscriptionOrder: Int64 = 0

    init(key: DatabaseKey, id: Int64) {
        self.key = key
        stored = StoredDatabase(id: id, sequence: 0, horizon: 0)
    }

    func tidy() {
        guard zoneLog.needsRebuild else { return }
        zoneLog.rebuild(zones.map { ($0.value.changedSequence, $0.key) } + zoneTombstones.map { ($0.value, $0.key) })
    }
}

final class MemoryState {
    @exclusivity(unchecked) var databaseIDs: [DatabaseKey: Int64] = [:] {
        didSet { lastDatabase = nil }
    }
    @exclusivity(unchecked) var databases: [Int64: MemoryDatabase] = [:] {
        didSet { lastDatabase = nil }
    }
    /// The database found last: a write reaches one database many times, found by comparing
    /// instead of hashing.
    @exclusivity(unchecked) private var lastDatabase: MemoryDatabase?
    /// The outbox in queue order: entry `id` at `id - outboxBase`, nil once acknowledged.
    @exclusivity(unchecked) var outbox: [OutboxNotification?] = []
    @exclusivity(unchecked) var outboxBase: Int64 = 1
    /// The first entry of `outbox` that may still be pending.
    @exclusivity(unchecked) var outboxHead = 0
    /// The `DeliveryChannel` bits of entries some channels have acknowledged but not all.
    @exclusivity(unchecked) var outboxDelivered: [Int64: Int] = [:]
    /// Uploads, receipts, blobs and references (SPEC §12).
    let assets = MemoryAssets()

    func database(_ stored: StoredDatabase) -> MemoryDatabase? {
        if let lastDatabase, lastDatabase.stored.id == stored.id { return lastDatabase }
        let database = databases[stored.id]
        if let database { lastDatabase = database }
        return database
    }

    func database(_ key: DatabaseKey) -> MemoryDatabase? {
        if let lastDatabase, lastDatabase.key == key { return lastDatabase }
        guard let id = databaseIDs[key], let database = databases[id] else { return nil }
        lastDatabase = database
        return database
    }

    /// After a commit: rebuilds change logs gone mostly stale and drops acknowledged entries from
    /// the front of the outbox.
    func tidy(after undo: UndoLog) {
        for zone in undo.zones { zone.tidy() }
        for database in undo.databases { database.tidy() }
        // Tested in place: `outbox[i] == nil` copies the whole entry out first.
        while outboxHead < outbox.count, outbox.withUnsafeBufferPointer({ if case .none = $0[outboxHead] { true } else { false } }) { outboxHead += 1 }
        if outboxHead > 1024, outboxHead > outbox.count / 2 {
            outbox.removeFirst(outboxHead)
            outboxBase += Int64(outboxHead)
            outboxHead = 0
        }
    }
}

struct MemoryTransaction: StorageWriteTransaction {
    let state: MemoryState
    let undo: UndoLog

    private func database(_ stored: StoredDatabase) throws(ContainerError) -> MemoryDatabase {
        guard let database = state.database(stored) else { throw ContainerError(.internalError, "database \(stored.id) does not exist") }
        return database
    }

    // MARK: Reading

    func database(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase? {
        state.database(key)?.stored
    }

    func zone(_ zoneID: ZoneID, in database: StoredDatabase) throws(ContainerError) -> StoredZone? {
        state.database(database)?.zones[zoneID]
    }

    func zones(in database: StoredDatabase) throws(ContainerError) -> [StoredZone] {
        (state.database(database)?.zones.values).map { $0.sorted { ($0.zoneID.zoneName, $0.zoneID.ownerName) < ($1.zoneID.zoneName, $1.zoneID.ownerName) } } ?? []
    }

    func record(_ id: RecordID, in database: StoredDatabase) throws(ContainerError) -> Record? {
        // Found by index and read in place: `records[name]?.record` copied the whole entry out,
        // then the record out of it.
        guard let zone = state.database(database)?.recordZone(id.zoneID), let index = zone.records.index(forKey: id.recordName) else { return nil }
        return zone.records.values[index].record
    }

    func shares(in database: StoredDatabase) throws(ContainerError) -> [Record] {
        guard let database = state.database(database) else { return [] }
        var shares: [Record] = []
        for zone in database.recordZones.values {
            for name in zone.shareNames.sorted() { if let share = zone.records[name]?.record { shares.append(share) } }
        }
        return shares
    }

    func records(in database: StoredDatabase) throws(ContainerError) -> [Record] {
        guard let database = state.database(database) else { return [] }
        // In change order, as the file lists them: where each record lies is sorted by its
        // sequence, then each is copied out once (sorting the records themselves moved them all).
        let zones = Array(database.recordZones.values)
        var places: [(sequence: Int64, zone: Int, index: Dictionary<String, (record: Record, sequence: Int64)>.Index)] = []
        places.reserveCapacity(zones.reduce(0) { $0 + $1.records.count })
        for (position, zone) in zones.enumerated() {
            for index in zone.records.indices { places.append((zone.records.values[index].sequence, position, index)) }
        }
        places.sort { $0.sequence < $1.sequence }
        return places.map { zones[$0.zone].records.values[$0.index].record }
    }

    func referrers(to target: RecordID, action: Reference.Action, in database: StoredDatabase) throws(ContainerError) -> [String] {
        guard let names = state.database(database)?.recordZone(target.zoneID)?.referrers[ReferenceKey(target: target.recordName, action: action)] else { return [] }
        return names.sorted()
    }

    func recordChanges(in zoneID: ZoneID, of database: StoredDatabase, after sequence: Int64, includingDeletions: Bool, limit: Int)
        throws(ContainerError) -> [(sequence: Int64, change: RecordZoneChange)] {
        guard let zone = state.database(database)?.recordZone(zoneID) else { return [] }
        var changes: [(sequence: Int64, change: RecordZoneChange)] = []
        changes.reserveCapacity(min(limit, zone.log.entries.count))
        var position = zone.log.start(after: sequence)
        let entries = zone.log.entries
        while position < entries.count, changes.count < limit {
            let (sequence, name) = entries[position]
            position += 1
            if let current = zone.records[name] {
                if current.sequence == sequence { changes.append((sequence, .changed(current.record))) }
            } else if includingDeletions, let tombstone = zone.tombstones[name], tombstone.sequence == sequence {
                changes.append((sequence, .deleted(RecordID(recordName: name, zoneID: zoneID), recordType: tombstone.recordType)))
            }
        }
        return changes
    }

    func zoneChanges(of database: StoredDatabase, after sequence: Int64, limit: Int) throws(ContainerError)
        -> [(sequence: Int64, zoneID: ZoneID, deleted: Bool)] {
        guard let database = state.database(database) else { return [] }
        var changes: [(sequence: Int64, zoneID: ZoneID, deleted: Bool)] = []
        var position = database.zoneLog.start(after: sequence)
        let entries = database.zoneLog.entries
        while position < entries.count, changes.count < limit {
            let (sequence, zoneID) = entries[position]
            position += 1
            if database.zones[zoneID]?.changedSequence == sequence {
                changes.append((sequence, zoneID, false))
            } else if database.zoneTombstones[zoneID] == sequence {
                changes.append((sequence, zoneID, true))
            }
        }
        return changes
    }

    func allDatabases() throws(ContainerError) -> [(key: DatabaseKey, stored: StoredDatabase)] {
        state.databases.values.map { ($0.key, $0.stored) }
    }

    func subscribedDatabases() throws(ContainerError) -> [DatabaseKey] {
        state.databases.values.filter { !$0.subscriptions.isEmpty }.map(\.key)
    }

    func subscriptions(in database: StoredDatabase) throws(ContainerError) -> [Subscription] {
        (state.database(database)?.subscriptions.values.sorted { $0.order < $1.order }.map(\.subscription)) ?? []
    }

    func pendingNotifications(for channels: DeliveryChannel, recipient: OutboxRecipient?, limit: Int) throws(ContainerError) -> [OutboxNotification] {
        var pending: [OutboxNotification] = []
        var position = state.outboxHead
        while position < state.outbox.count, pending.count < limit {
            if let notification = state.outbox[position], (state.outboxDelivered[notification.id] ?? 0) & channels.rawValue != channels.rawValue,
               recipient.map({ $0.owner == notification.owner && $0.environment == notification.database.environment }) ?? true {
                pending.append(notification)
            }
            position += 1
        }
        return pending
    }

    /// Whether the record has a tombstone, and whether its current version holds tracked
    /// references: what saving it must clear away.
    func leftovers(of id: RecordID, in database: StoredDatabase) -> (tombstone: Bool, references: Bool) {
        guard let zone = state.database(database)?.recordZone(id.zoneID) else { return (false, false) }
        return (zone.tombstones[id.recordName] != nil, zone.records[id.recordName].map { !$0.record.trackedReferences.isEmpty } ?? false)
    }

    // MARK: Writing

    func createDatabase(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase {
        createDatabase(key, id: (state.databases.keys.max() ?? 0) + 1)
    }

    /// Creates the database with the number the file gave it.
    @discardableResult
    func createDatabase(_ key: DatabaseKey, id: Int64) -> StoredDatabase {
        let state = state
        let database = MemoryDatabase(key: key, id: id)
        state.databases[id] = database
        state.databaseIDs[key] = id
        undo.add {
            state.databases[id] = nil
            state.databaseIDs[key] = nil
        }
        return database.stored
    }

    func setHorizon(_ horizon: Int64, of stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        let old = database.stored.horizon
        database.stored.horizon = horizon
        undo.add { database.stored.horizon = old }
    }

    func setSequence(_ sequence: Int64, of stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        let old = database.stored.sequence
        database.stored.sequence = sequence
        undo.add(.sequence(database, old))
    }

    /// The zone's change log, its length noted so undoing truncates it back.
    private func appendZoneLog(_ database: MemoryDatabase, _ sequence: Int64, _ zoneID: ZoneID, replacing: Bool) {
        let count = database.zoneLog.entries.count
        database.zoneLog.append(sequence, zoneID)
        if replacing { database.zoneLog.stale += 1 }
        undo.add { database.zoneLog.truncate(to: count) }
        undo.touch(database)
    }

    func saveZone(_ zone: StoredZone, in stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        let zoneID = zone.zoneID
        let old = database.zones[zoneID]
        let tombstone = database.zoneTombstones[zoneID]
        database.zones[zoneID] = zone
        database.zoneTombstones[zoneID] = nil
        undo.add {
            database.zones[zoneID] = old
            database.zoneTombstones[zoneID] = tombstone
        }
        if old?.changedSequence != zone.changedSequence {
            appendZoneLog(database, zone.changedSequence, zoneID, replacing: old != nil || tombstone != nil)
        }
    }

    func deleteZone(_ zoneID: ZoneID, sequence: Int64, in stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        let old = database.zones[zoneID]
        let tombstone = database.zoneTombstones[zoneID]
        let records = database.recordZones[zoneID]
        database.zones[zoneID] = nil
        database.recordZones[zoneID] = nil
        database.zoneTombstones[zoneID] = sequence
        undo.add {
            database.zones[zoneID] = old
            database.recordZones[zoneID] = records
            database.zoneTombstones[zoneID] = tombstone
        }
        appendZoneLog(database, sequence, zoneID, replacing: old != nil || tombstone != nil)
    }

    /// The zone's records, created (undoably) if it has none yet.
    private func recordZone(_ zoneID: ZoneID, of database: MemoryDatabase) -> MemoryZone {
        if let zone = database.recordZone(zoneID) { return zone }
        let zone = MemoryZone()
        database.recordZones[zoneID] = zone
        undo.add { database.recordZones[zoneID] = nil }
        return zone
    }

    /// Logs a record's save or deletion at `sequence` in its zone's change log, with one undo entry
    /// for both: what the name held before (`old`, `tombstone`) and the references indexed for it
    /// before and now. They are handed over (`consuming`): passed borrowed, the old record was
    /// copied into the undo entry, about 1,100 instructions a modify.
    private func logChange(
        _ zone: MemoryZone, _ name: String, _ sequence: Int64, old: consuming (record: Record, sequence: Int64)?,
        tombstone: consuming (recordType: String, sequence: Int64)?, references: consuming (old: [Reference], new: [Reference])
    ) {
        let logCount = zone.log.entries.count
        zone.log.append(sequence, name)
        if old != nil || tombstone != nil { zone.log.stale += 1 }
        undo.touch(zone)
        undo.add(.record(zone, name: name, logCount: logCount, old: old, tombstone: tombstone, references: references))
    }

    func saveRecord(_ record: Record, sequence: Int64, in stored: StoredDatabase) throws(ContainerError) {
        save(record, sequence: sequence, in: recordZone(record.recordID.zoneID, of: try database(stored)))
    }

    /// Saves records in order, finding their zone once per run of records in one zone (a file's
    /// modify replays its saves here, 200 at a time).
    func saveRecords(_ records: consuming [(record: Record, sequence: Int64)], in stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        var current: (zoneID: ZoneID, zone: MemoryZone)?
        // The list is handed over: its records are moved out of it, in order, into their zones
        // (read in place, each was copied once more before the copy `save` keeps).
        var records = records
        records.reverse()
        while let (record, sequence) = records.popLast() {
            let zone: MemoryZone
            if let current, current.zoneID == record.recordID.zoneID {
                zone = current.zone
            } else {
                let zoneID = record.recordID.zoneID
                zone = recordZone(zoneID, of: database)
                current = (zoneID, zone)
            }
            save(record, sequence: sequence, in: zone)
        }
    }

    private func save(_ record: consuming Record, sequence: Int64, in zone: MemoryZone) {
        let name = record.recordID.recordName
        let newReferences = record.trackedReferences
        let isShare = record.recordType == SharingKeys.shareRecordType
        // The record moves in (read above, not after).
        let old = zone.records.updateValue((consume record, sequence), forKey: name)
        // Most zones keep no tombstone: not hashed for then.
        let tombstone = zone.tombstones.isEmpty ? nil : zone.tombstones.removeValue(forKey: name)
        // A zone no record refers in holds no record with references: not looked for then.
        let oldReferences = zone.referrers.isEmpty ? [] : old?.record.trackedReferences ?? []
        if !oldReferences.isEmpty || !newReferences.isEmpty {
            zone.index(oldReferences, of: name, adding: false)
            zone.index(newReferences, of: name, adding: true)
        }
        if isShare || !zone.shareNames.isEmpty { zone.markShare(name, isShare, undo: undo) }
        logChange(zone, name, sequence, old: old, tombstone: tombstone, references: (oldReferences, newReferences))
    }

    func deleteRecord(_ record: Record, sequence: Int64, in stored: StoredDatabase) throws(ContainerError) {
        let zone = recordZone(record.recordID.zoneID, of: try database(stored))
        let name = record.recordID.recordName
        let old = zone.records.removeValue(forKey: name)
        let tombstone = zone.tombstones[name]
        let oldReferences = old?.record.trackedReferences ?? []
        zone.index(oldReferences, of: name, adding: false)
        if !zone.shareNames.isEmpty { zone.markShare(name, false, undo: undo) }
        zone.tombstones[name] = (record.recordType, sequence)
        logChange(zone, name, sequence, old: old, tombstone: tombstone, references: (oldReferences, []))
    }

    func saveSubscription(_ subscription: Subscription, in stored: StoredDatabase) throws(ContainerError) {
        // Stored subscriptions must read back as saved, in memory as in a file.
        _ = try subscription.storedJSON()
        try keepSubscription(subscription, in: stored)
    }

    /// Saves a subscription already checked (by the file that stored it).
    func keepSubscription(_ subscription: Subscription, in stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        let id = subscription.subscriptionID
        let old = database.subscriptions[id]
        let order = database.nextSubscriptionOrder
        database.subscriptions[id] = (order, subscription)
        database.nextSubscriptionOrder += 1
        undo.add {
            database.subscriptions[id] = old
            database.nextSubscriptionOrder = order
        }
    }

    func deleteSubscription(_ subscriptionID: String, in stored: StoredDatabase) throws(ContainerError) {
        let database = try database(stored)
        guard let old = database.subscriptions.removeValue(forKey: subscriptionID) else { return }
        undo.add { database.subscriptions[subscriptionID] = old }
    }

    func enqueue(_ notifications: consuming [OutboxNotification]) throws(ContainerError) -> [OutboxNotification] {
        let state = state
        // Numbered where they lie (the caller's list, handed over, is not copied).
        var queued = notifications
        let first = state.outboxBase + Int64(state.outbox.count)
        for position in queued.indices { queued[position].id = first + Int64(position) }
        let count = state.outbox.count
        // One by one: appending a lazy map of them went through the generic sequence append.
        for position in queued.indices { state.outbox.append(queued[position]) }
        undo.add(.outbox(state, count: count))
        return queued
    }

    func acknowledge(_ ids: [Int64], on channels: DeliveryChannel) throws(ContainerError) {
        let state = state
        for id in ids {
            let position = Int(clamping: id - state.outboxBase)
            guard position >= 0, position < state.outbox.count, let old = state.outbox[position] else { continue }
            let oldBits = state.outboxDelivered[id]
            let bits = (oldBits ?? 0) | channels.rawValue
            if bits & DeliveryChannel.all.rawValue == DeliveryChannel.all.rawValue {
                state.outbox[position] = nil
                state.outboxDelivered[id] = nil
            } else {
                state.outboxDelivered[id] = bits
            }
            undo.add {
                state.outbox[position] = old
                state.outboxDelivered[id] = oldBits
            }
        }
    }

    func compactHistory(of stored: StoredDatabase, keepingLast count: Int) throws(ContainerError) -> Int64 {
        let database = try database(stored)
        var sequences = database.zoneTombstones.values.map { $0 }
        for zone in database.recordZones.values { sequences += zone.tombstones.values.map(\.sequence) }
        let keep = max(count, 0)
        guard sequences.count > keep else { return database.stored.horizon }
        sequences.sort(by: >)
        let newestDropped = sequences[keep]
        let oldZoneTombstones = database.zoneTombstones
        database.zoneTombstones = database.zoneTombstones.filter { $0.value > newestDropped }
        var oldRecordTombstones: [(MemoryZone, [String: (recordType: String, sequence: Int64)])] = []
        for zone in database.recordZones.values where zone.tombstones.values.contains(where: { $0.sequence <= newestDropped }) {
            oldRecordTombstones.append((zone, zone.tombstones))
            zone.tombstones = zone.tombstones.filter { $0.value.sequence > newestDropped }
            zone.log.stale += oldRecordTombstones.last.map { $0.1.count - zone.tombstones.count } ?? 0
            undo.touch(zone)
        }
        let oldHorizon = database.stored.horizon
        database.stored.horizon = max(oldHorizon, newestDropped)
        undo.add {
            database.zoneTombstones = oldZoneTombstones
            for (zone, tombstones) in oldRecordTombstones { zone.tombstones = tombstones }
            database.stored.horizon = oldHorizon
        }
        undo.touch(database)
        return database.stored.horizon
    }
}
