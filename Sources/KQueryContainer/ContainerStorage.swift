import KQuery

/// Where a container keeps its data: the one boundary between the container's rules (zones,
/// change tags, references, atomic zones, subscriptions) and a database engine.
///
/// `SQLiteContainerStorage` (a file) and `MemoryContainerStorage` (no file) implement it, with the
/// same semantics (the container's suites run on both); a PostgreSQL one will implement the same
/// operations (`package`: the PostgreSQL storage is in its own target). Everything a request does happens in one transaction: `write` bodies run one at a
/// time and commit whole or not at all, `read` bodies see a consistent committed snapshot and may
/// run while a write is under way.
package protocol ContainerStorage: Sendable {
    /// The key sync tokens are tagged with, kept with the data so tokens survive a restart.
    var secret: (UInt64, UInt64) { get }
    func read<T>(_ body: (any StorageTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T
    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T
    /// Returns once every write committed before the call is on stable storage. `write` may return
    /// as soon as its transaction is visible to readers (a file storage then shares one disk sync
    /// among the writes that wait here together); a write is acknowledged only after this.
    func waitUntilDurable() throws(ContainerError)
    /// Starts putting what was committed so far on stable storage, without waiting (a hint: a
    /// long series of writes then waits less in `waitUntilDurable`).
    func startWriteback()
    /// A long series of large writes (an asset's bytes) starts or ends: a file storage defers
    /// copying its log into the database until the last such series ends (a hint).
    func bulkWritesStarted()
    func bulkWritesEnded()
    /// Runs `body` with a writer whose writes share one transaction: each write still applies
    /// whole or not at all, and sees the ones before it; they commit together when `body`
    /// returns, and become visible to readers then. Throws when that commit fails: none of the
    /// writes happened. A nil writer: the storage commits each write (`write`) by itself.
    func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T
    /// Whether other processes write the same data (PostgreSQL under several `kquery serve`
    /// nodes): the container then keeps nothing in memory that their writes could make stale.
    var isShared: Bool { get }
    /// Whether queries run in the storage itself (`StorageTransaction.query`: PostgreSQL, as SQL)
    /// rather than on an in-memory copy of each database's records.
    var runsQueries: Bool { get }
    /// One page of `query` on the database `key` (none: no records), for a storage that
    /// `runsQueries`; the default reads the database and runs the query in one read transaction.
    func query(_ query: Query, cursor: QueryCursor?, in key: DatabaseKey, now: Int64) throws(ContainerError) -> QueryResult
    /// `query` answered without holding a thread while the storage works, when the storage can
    /// (PostgreSQL, for a page a few statements answer); nil: call `query`. The default: nil.
    func queryWithoutBlocking(_ query: Query, cursor: QueryCursor?, in key: DatabaseKey, now: Int64) async throws(ContainerError) -> QueryResult?
    /// Brings the planner's statistics up to date after a bulk load (`kquery migrate`): a
    /// database planning from none can pick the wrong index for a point lookup.
    func refreshStatistics() throws(ContainerError)
    /// Makes `secret` the one the storage keeps, so a copy reads the tokens its source issued
    /// (`kquery migrate`: clients keep their sync tokens). The storage open now keeps the one it
    /// read; the storage opened next uses the new one.
    func adoptSecret(_ secret: (UInt64, UInt64)) throws(ContainerError)
    /// A copy into the storage (`ContainerCopy`) starts: a storage may put off its secondary
    /// indexes until `loadFinished`, which builds whatever a crashed copy left unbuilt.
    func loadStarted() throws(ContainerError)
    func loadFinished() throws(ContainerError)
    /// The work on a copy's page of record changes that needs no transaction, done ahead of the
    /// page's write (`ContainerCopy` does it on its reading thread while the page before is
    /// written), for `appendRecordChanges` to write; nil when a storage has none.
    func prepareRecordChanges(_ page: [(sequence: Int64, change: RecordZoneChange)], in database: StoredDatabase) throws(ContainerError) -> (any Sendable)?
}

/// The writes of a batch in progress (`ContainerStorage.batch`), valid only inside its body.
package protocol StorageBatchWriter: AnyObject {
    /// One write of the batch, in a transaction of its own within the batch's.
    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T
    /// Reads the records of the database `key` ahead of the writes that will read them one at a
    /// time: a storage across a network reads them in one round trip, not one each.
    func prefetchRecords(_ ids: [RecordID], in key: DatabaseKey) throws(ContainerError)
}

extension StorageBatchWriter {
    /// A storage in this process reads a record as fast one at a time.
    package func prefetchRecords(_ ids: [RecordID], in key: DatabaseKey) throws(ContainerError) {}
}

extension ContainerStorage {
    /// Storages whose writes are durable when `write` returns (or never, in memory) have nothing to wait for.
    func waitUntilDurable() throws(ContainerError) {}

    func startWriteback() {}

    package func bulkWritesStarted() {}

    package func bulkWritesEnded() {}

    /// Storages whose commits cost nothing to share commit each write by itself.
    func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T { try body(nil) }

    /// A file or memory is written by this process alone.
    package var isShared: Bool { false }

    /// A file or memory is queried in memory.
    package var runsQueries: Bool { false }

    package func queryWithoutBlocking(_ query: Query, cursor: QueryCursor?, in key: DatabaseKey, now: Int64) async throws(ContainerError) -> QueryResult? {
        nil
    }

    package func query(_ query: Query, cursor: QueryCursor?, in key: DatabaseKey, now: Int64) throws(ContainerError) -> QueryResult {
        try read { tx throws(ContainerError) in
            guard let database = try tx.database(key) else { return QueryResult(records: [], cursor: nil) }
            return try tx.query(query, cursor: cursor, in: database, now: now) ?? QueryResult(records: [], cursor: nil)
        }
    }

    /// SQLite's queries are planned by the engine's own planner: nothing to refresh.
    func refreshStatistics() throws(ContainerError) {}

    /// Memory keeps its secret for its life.
    func adoptSecret(_ secret: (UInt64, UInt64)) throws(ContainerError) {}

    /// A file or memory maintains its indexes as it goes.
    package func loadStarted() throws(ContainerError) {}

    package func loadFinished() throws(ContainerError) {}

    /// A file or memory writes a page as it comes.
    package func prepareRecordChanges(_ page: [(sequence: Int64, change: RecordZoneChange)], in database: StoredDatabase) throws(ContainerError) -> (any Sendable)? {
        nil
    }
}

/// A database's change bookkeeping, as stored.
package struct StoredDatabase: Hashable, Sendable {
    /// The storage's own number for the database.
    package var id: Int64
    /// The last change sequence given out: every record change, zone creation and zone deletion
    /// takes the next one.
    package var sequence: Int64
    /// Tokens below this sequence are expired: the tombstones they would need were compacted away.
    package var horizon: Int64
    /// On a shared storage, a count of the changes to the database's subscriptions, which tells a
    /// node whether the set it read is still current (0 where storages keep none).
    package var subscriptionsVersion: Int64

    package init(id: Int64, sequence: Int64, horizon: Int64, subscriptionsVersion: Int64 = 0) {
        self.id = id
        self.sequence = sequence
        self.horizon = horizon
        self.subscriptionsVersion = subscriptionsVersion
    }
}

/// A custom zone, as stored.
package struct StoredZone: Hashable, Sendable {
    package var zoneID: ZoneID
    /// The sequence that created the zone: zone tokens carry it, so one from a deleted zone of the
    /// same name is refused.
    package var createdSequence: Int64
    /// The sequence of the zone's latest change (creation or a record change): database change
    /// fetches list zones changed after a token by it.
    package var changedSequence: Int64

    package init(zoneID: ZoneID, createdSequence: Int64, changedSequence: Int64) {
        self.zoneID = zoneID
        self.createdSequence = createdSequence
        self.changedSequence = changedSequence
    }
}

/// The reads a request makes, inside one transaction.
package protocol StorageTransaction: AssetReads {
    func database(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase?
    func zone(_ zoneID: ZoneID, in database: StoredDatabase) throws(ContainerError) -> StoredZone?
    func zones(in database: StoredDatabase) throws(ContainerError) -> [StoredZone]
    func record(_ id: RecordID, in database: StoredDatabase) throws(ContainerError) -> Record?
    /// Every record of the database, for building its query store, in change order (by the
    /// sequence of each one's last change; sequences are unique in a database): the order a store
    /// that saw the same records saved would have filed them in, whichever storage lists them.
    func records(in database: StoredDatabase) throws(ContainerError) -> [Record]
    /// The database's shares (`cloudkit.share` records), found without reading its other records:
    /// who sees what in shared databases, and which share a short GUID names, come from them.
    func shares(in database: StoredDatabase) throws(ContainerError) -> [Record]
    /// The names of the records of `target`'s zone that hold a reference with `action` to it.
    func referrers(to target: RecordID, action: Reference.Action, in database: StoredDatabase) throws(ContainerError) -> [String]
    /// The zone's changes after `sequence`, in sequence order: each record's current version or,
    /// when `includingDeletions`, its tombstone; at most `limit`.
    func recordChanges(in zone: ZoneID, of database: StoredDatabase, after sequence: Int64, includingDeletions: Bool, limit: Int)
        throws(ContainerError) -> [(sequence: Int64, change: RecordZoneChange)]
    /// The zones changed or deleted after `sequence`, in sequence order, at most `limit`.
    func zoneChanges(of database: StoredDatabase, after sequence: Int64, limit: Int) throws(ContainerError)
        -> [(sequence: Int64, zoneID: ZoneID, deleted: Bool)]
    /// Every database the storage holds.
    func allDatabases() throws(ContainerError) -> [(key: DatabaseKey, stored: StoredDatabase)]
    /// The databases that have subscriptions.
    func subscribedDatabases() throws(ContainerError) -> [DatabaseKey]
    /// The database's subscriptions, in the order they were saved.
    func subscriptions(in database: StoredDatabase) throws(ContainerError) -> [Subscription]
    /// The oldest notifications not yet acknowledged on one of `channels` (on a single channel:
    /// not acknowledged there; on `.all`: still queued).
    /// With `recipient`, only the notifications for that user in that environment.
    func pendingNotifications(for channels: DeliveryChannel, recipient: OutboxRecipient?, limit: Int) throws(ContainerError) -> [OutboxNotification]
    /// One page of `query` run by the storage itself, as the in-memory store answers it (same
    /// records, order and cursors); nil when the storage does not run queries (`runsQueries`).
    func query(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> QueryResult?
    /// How many records of each type the database holds, counted by the storage; nil when the
    /// storage does not run queries.
    func recordCounts(in database: StoredDatabase) throws(ContainerError) -> [String: Int]?
    /// How the storage would run `query`, in words (its statements and their plans); nil when the
    /// storage does not run queries.
    func explain(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> String?
    /// How far a copy into the storage (`ContainerCopy`) got in the zone: the sequence of the
    /// newest record change it holds there, every change before it held too (the copy writes a
    /// zone's changes in sequence order, a page a transaction), so a resumed copy continues after
    /// it. 0: the copy writes every change again (`appendRecordChanges` then upserts).
    func copiedThrough(_ zone: ZoneID, of database: StoredDatabase) throws(ContainerError) -> Int64
}

extension StorageTransaction {
    package func copiedThrough(_ zone: ZoneID, of database: StoredDatabase) throws(ContainerError) -> Int64 { 0 }

    package func query(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> QueryResult? { nil }

    package func recordCounts(in database: StoredDatabase) throws(ContainerError) -> [String: Int]? { nil }

    package func explain(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> String? { nil }
}

/// The writes a request makes, inside one transaction.
package protocol StorageWriteTransaction: StorageTransaction, AssetWrites {
    func createDatabase(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase
    func setSequence(_ sequence: Int64, of database: StoredDatabase) throws(ContainerError)
    /// Creates or updates the zone (and forgets a tombstone of its name).
    func saveZone(_ zone: StoredZone, in database: StoredDatabase) throws(ContainerError)
    /// Deletes the zone, its records and their tombstones, and leaves a zone tombstone at `sequence`.
    func deleteZone(_ zoneID: ZoneID, sequence: Int64, in database: StoredDatabase) throws(ContainerError)
    /// Creates or replaces the record, changed at `sequence`, with its references indexed.
    func saveRecord(_ record: Record, sequence: Int64, in database: StoredDatabase) throws(ContainerError)
    /// Saves records as `saveRecord` does each, in order (a file writes them in fewer statements).
    func saveRecords(_ records: consuming [(record: Record, sequence: Int64)], in database: StoredDatabase) throws(ContainerError)
    /// Deletes the record and leaves a tombstone (its ID and type) at `sequence`.
    func deleteRecord(_ record: Record, sequence: Int64, in database: StoredDatabase) throws(ContainerError)
    func saveSubscription(_ subscription: Subscription, in database: StoredDatabase) throws(ContainerError)
    func deleteSubscription(_ subscriptionID: String, in database: StoredDatabase) throws(ContainerError)
    /// Queues notifications (their `id`s are ignored); returns them with their outbox IDs.
    func enqueue(_ notifications: consuming [OutboxNotification]) throws(ContainerError) -> [OutboxNotification]
    /// Marks the notifications delivered on `channels`, and removes those every channel has
    /// delivered (unknown IDs are ignored).
    func acknowledge(_ ids: [Int64], on channels: DeliveryChannel) throws(ContainerError)
    /// Drops all but the newest `count` tombstones (record and zone) of the database and raises its
    /// horizon past the dropped ones; returns the new horizon.
    func compactHistory(of database: StoredDatabase, keepingLast count: Int) throws(ContainerError) -> Int64
    /// Sets the database's horizon (a copy takes its source's: tokens from before it stay
    /// CHANGE_TOKEN_EXPIRED, since the deletions before it are gone).
    func setHorizon(_ horizon: Int64, of database: StoredDatabase) throws(ContainerError)
    /// Writes a page of a copy's record changes in one zone (`ContainerCopy`), in sequence order,
    /// as `saveRecords` and `deleteRecord` would: each new to the storage unless the source
    /// changed while it was copied (a storage then writes the page as those do). `prepared`: what
    /// the storage's `prepareRecordChanges` made of the page, if anything.
    func appendRecordChanges(_ page: [(sequence: Int64, change: RecordZoneChange)], prepared: (any Sendable)?, in database: StoredDatabase) throws(ContainerError)
}

extension StorageWriteTransaction {
    package func appendRecordChanges(
        _ page: [(sequence: Int64, change: RecordZoneChange)], prepared: (any Sendable)?, in database: StoredDatabase
    ) throws(ContainerError) {
        try writeRecordChanges(page, in: database)
    }

    /// Writes record changes with `saveRecords` and `deleteRecord`, in order.
    package func writeRecordChanges(_ page: [(sequence: Int64, change: RecordZoneChange)], in database: StoredDatabase) throws(ContainerError) {
        var saved: [(record: Record, sequence: Int64)] = []
        for (sequence, change) in page {
            switch change {
            case .changed(let record): saved.append((record, sequence))
            case .deleted(let id, let recordType):
                if !saved.isEmpty {
                    try saveRecords(saved, in: database)
                    saved = []
                }
                try deleteRecord(Record(recordType: recordType, recordID: id), sequence: sequence, in: database)
            }
        }
        if !saved.isEmpty { try saveRecords(saved, in: database) }
    }
}

extension StorageWriteTransaction {
    /// The database's bookkeeping, created on its first write.
    func existingOrNewDatabase(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase {
        if let database = try database(key) { return database }
        return try createDatabase(key)
    }
}

extension StorageTransaction {
    /// A storage without an index of shares finds them among all records.
    func shares(in database: StoredDatabase) throws(ContainerError) -> [Record] {
        try records(in: database).filter { $0.recordType == SharingKeys.shareRecordType }
    }

    func pendingNotifications(for channels: DeliveryChannel, limit: Int) throws(ContainerError) -> [OutboxNotification] {
        try pendingNotifications(for: channels, recipient: nil, limit: limit)
    }
}
