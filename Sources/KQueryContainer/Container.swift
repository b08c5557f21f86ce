import KQuery
import KQueryStore
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A CloudKit container (CKContainer): per environment a public database and, per user, a private
/// and a shared one, with their zones, records, change history, subscriptions and the outbox of
/// notifications their changes produced, kept in one SQLite file, or in memory for a container
/// with no file (gone when the process ends, as for tests, previews and benchmarks).
///
/// Safe to use from many threads and tasks. Writes (modifies, zone and subscription changes) run
/// one at a time, each one transaction; reads (lookups, change fetches, subscription lists) run
/// concurrently on the last committed state, and never see half a write.
///
/// ```swift
/// let container = try Container(containerIdentifier: "iCloud.com.example.Notes", path: "notes.sqlite")
/// let db = try container.database(.private, user: "_u1")
/// try db.createZone(ZoneID(zoneName: "Notes"))
/// let result = try db.modify([RecordOperation(kind: .create, record: note)])
/// let changes = try db.zoneChanges(ZoneID(zoneName: "Notes"), since: nil)
/// for push in try container.pendingNotifications(limit: 100) { ...; try container.acknowledge([push.id]) }
/// ```
public final class Container: Sendable {
    public let containerIdentifier: String
    let storage: any ContainerStorage
    /// The time modifies stamp records with, and `now()` in subscription predicates (milliseconds
    /// since 1970).
    let clock: @Sendable () -> Int64
    /// How many deletions each database keeps for change fetches (nil: all).
    public let changeHistoryRetention: Int?
    /// Held by every write, so writes are serialized and the memory that follows them (each
    /// database's subscriptions) changes in commit order.
    let writer = Locked(WriterState())
    /// Each database's records in memory, for queries: built from storage on the first query,
    /// then kept up to date by the writes that commit.
    let queryStores = Locked(QueryStores())
    /// The limits and lifetimes of the container's assets (SPEC §12).
    public let assetPolicy: AssetPolicy
    /// Whether any asset blob was ever stored: until then, modifies skip keeping asset references.
    let assetsHeld = Atomic<Bool>(false)
    /// The upload tokens whose bytes a request is sending now (one request per token at a time).
    let uploadsInProgress = Locked<Set<String>>([])
    /// Moves on with every modify that touches sharing: the shared databases' share index is
    /// read again after it moves (SPEC §13).
    let sharingGeneration = Atomic<Int>(0)
    /// The accepted shares of each environment, as of a sharing generation.
    let shareIndexes = Locked<[ContainerEnvironment: ShareIndex]>([:])

    struct WriterState {
        /// Each database's subscriptions, with their push templates: those stored, restored at
        /// open; a database without any gets its set at its first write. A set is changed in
        /// place: copying it for each write (so a failed one could put the copy back) made saving
        /// n subscriptions O(n²). One table for both: a modify finds them with one lookup.
        private(set) var databases: [DatabaseKey: DatabaseState] = [:]

        /// One database's subscriptions and its query push templates (`QueryPushTemplates`: a
        /// cache, each entry checked against the subscription it serves when used, so a write that
        /// fails leaves it valid).
        struct DatabaseState {
            var subscriptions: SubscriptionSet
            var pushTemplates = QueryPushTemplates()
            /// The stored set's `subscriptionsVersion` when it was read.
            var version: Int64 = 0
            /// On a shared storage, whether the set must be checked against the stored version
            /// before it is used (set at the start of each write or batch: `markStale`).
            var isStale = false
        }

        /// The database's subscriptions, if they are in memory.
        func subscriptionSet(_ key: DatabaseKey) -> SubscriptionSet? { databases[key]?.subscriptions }

        /// The databases whose subscriptions are in memory.
        var subscribedDatabases: Dictionary<DatabaseKey, DatabaseState>.Keys { databases.keys }
        /// The sets the running write changed. If it does not commit they are dropped, and read
        /// again from storage (which rolled back) when next needed: failed writes are rare, copies
        /// for every write were not. A list: a write changes one database's set, or a few.
        private var changed: [DatabaseKey] = []

        /// Runs `change` on the database's set (`load`ed if not in memory) in place. `change` must
        /// leave the set as it was when it throws (SubscriptionSet's own methods check before they
        /// change anything).
        mutating func changeSubscriptionSet<T>(
            _ key: DatabaseKey, load: () throws(ContainerError) -> (SubscriptionSet, version: Int64), _ change: (inout SubscriptionSet) throws(ContainerError) -> T
        ) throws(ContainerError) -> T {
            try changeDatabase(key, load: load) { database throws(ContainerError) in try change(&database.subscriptions) }
        }

        /// `changeSubscriptionSet` for the database's subscriptions and push templates together.
        mutating func changeDatabase<T>(
            _ key: DatabaseKey, load: () throws(ContainerError) -> (SubscriptionSet, version: Int64), _ change: (inout DatabaseState) throws(ContainerError) -> T
        ) throws(ContainerError) -> T {
            // Changed where it lies, found by one lookup: its storage stays uniquely referenced,
            // so it changes in place.
            var index = databases.index(forKey: key)
            if index == nil {
                let (set, version) = try load()
                loaded(set, version: version, for: key)
                index = databases.index(forKey: key)
            }
            guard let index else { throw ContainerError(.internalError, "the subscriptions of the \(key.scope.name) database were not kept") }
            let result = try change(&databases.values[index])
            markChanged(key)
            return result
        }

        /// Keeps a set read from storage during the write (forgotten, as a changed one, if the
        /// write does not commit: it may hold the write's own changes).
        mutating func loaded(_ set: SubscriptionSet, version: Int64, for key: DatabaseKey) {
            databases[key] = DatabaseState(subscriptions: set, version: version)
            markChanged(key)
        }

        /// Whether the database's set in memory must be checked against storage before use.
        func isStale(_ key: DatabaseKey) -> Bool { databases[key]?.isStale ?? false }

        /// The database's set is current (`stillCurrent`) or not (forgotten, read again when needed).
        mutating func checked(_ key: DatabaseKey, stillCurrent: Bool) {
            if stillCurrent { databases[key]?.isStale = false } else { databases[key] = nil }
        }

        /// On a shared storage, at the start of a write or batch: other nodes may have changed any
        /// set since, so each is checked against its stored version when first used (a read of the
        /// database's row, which the write makes anyway) rather than read again whole.
        mutating func markStale() {
            for key in databases.keys { databases[key]?.isStale = true }
            changed.removeAll()
        }

        /// On a shared storage, at the end of a write's body: each set the write changed or read
        /// takes the version the write leaves stored (its transaction counts its own changes), so
        /// the node's next write finds the set current instead of reading every subscription again
        /// (which made saving n subscriptions one request at a time O(n²) on PostgreSQL). The write
        /// changes a set in memory as it changes the stored one, so the two still agree.
        mutating func followStoredVersions(_ tx: any StorageTransaction) throws(ContainerError) {
            for key in changed where databases[key] != nil {
                if let version = try tx.database(key)?.subscriptionsVersion { databases[key]?.version = version }
            }
        }

        private mutating func markChanged(_ key: DatabaseKey) {
            if !changed.contains(key) { changed.append(key) }
        }

        /// Ends a write: keeps the sets it changed, or with `rollingBack` forgets them.
        mutating func end(rollingBack: Bool) {
            if rollingBack {
                for key in changed { databases[key] = nil }
            }
            changed.removeAll(keepingCapacity: true)
        }

        /// Forgets every set (a batch of writes did not commit): each is read again from storage
        /// when next needed.
        mutating func forgetAll() {
            databases.removeAll()
            changed.removeAll()
        }
    }

    /// Opens the container kept in the SQLite file at `path` (created if missing), or a new one in
    /// memory when `path` is nil (`MemoryContainerStorage`: the same rules, no file).
    ///
    /// `changeHistoryRetention` keeps at most that many deletions (of records and zones) per
    /// database: each write that deletes compacts older ones away, and a token from before them is
    /// CHANGE_TOKEN_EXPIRED. nil keeps every deletion until `compactChangeHistory` is called.
    public convenience init(
        containerIdentifier: String, path: String? = nil, changeHistoryRetention: Int? = nil, assetPolicy: AssetPolicy = AssetPolicy(),
        clock: @escaping @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
    ) throws(ContainerError) {
        let storage: any ContainerStorage = if let path { try SQLiteContainerStorage(path: path) } else { MemoryContainerStorage() }
        try self.init(containerIdentifier: containerIdentifier, storage: storage, changeHistoryRetention: changeHistoryRetention,
                      assetPolicy: assetPolicy, clock: clock)
    }

    /// A container on `storage` (tests run the container's suites on each storage this way; the
    /// server opens a PostgreSQL one this way).
    package init(
        containerIdentifier: String, storage: any ContainerStorage, changeHistoryRetention: Int? = nil, assetPolicy: AssetPolicy = AssetPolicy(),
        clock: @escaping @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
    ) throws(ContainerError) {
        self.containerIdentifier = containerIdentifier
        self.storage = storage
        self.changeHistoryRetention = changeHistoryRetention.map { max($0, 0) }
        self.assetPolicy = assetPolicy
        self.clock = clock
        // Another node may store the first blob: a shared storage keeps asset references from the start.
        if try storage.isShared ? true : storage.read({ tx throws(ContainerError) in try tx.holdsAssetBlobs() }) { assetsHeld.store(true, ordering: .relaxed) }
        try restoreSubscriptions()
    }

    /// A database of the container. Private and shared databases belong to `user`, which they
    /// need; the public one takes an optional user, who owns the subscriptions saved through it
    /// and stamps the records it saves.
    public func database(
        _ scope: DatabaseScope, environment: ContainerEnvironment = .development, user: String? = nil
    ) throws(ContainerError) -> ContainerDatabase {
        if scope != .public {
            guard let user, !user.isEmpty else {
                throw ContainerError(.badRequest, "the \(scope.name) database belongs to a user: name one (a user record name such as '_9f2c')")
            }
        }
        if let user, user.isEmpty { throw ContainerError(.badRequest, "the user record name must not be empty") }
        return ContainerDatabase(container: self, key: DatabaseKey(environment: environment, scope: scope, userRecordName: user ?? ""),
                                 userRecordName: user)
    }

    // MARK: Outbox

    /// The oldest `limit` notifications not yet acknowledged on every channel, in the order they
    /// were queued.
    public func pendingNotifications(limit: Int = 100) throws(ContainerError) -> [OutboxNotification] {
        try pendingNotifications(for: .all, limit: limit)
    }

    /// The oldest `limit` notifications `channel` has not acknowledged, in the order they were queued.
    /// With `recipient`, only that user's, in that environment.
    public func pendingNotifications(
        for channel: DeliveryChannel, recipient: OutboxRecipient? = nil, limit: Int = 100
    ) throws(ContainerError) -> [OutboxNotification] {
        try storage.read { tx throws(ContainerError) in try tx.pendingNotifications(for: channel, recipient: recipient, limit: max(limit, 0)) }
    }

    /// Removes delivered notifications from the outbox, for every channel (unknown IDs are
    /// ignored, so a retried acknowledgement is harmless).
    public func acknowledge(_ ids: [Int64]) throws(ContainerError) {
        try acknowledge(ids, channel: .all)
    }

    /// Records that `channel` delivered (or definitively refused) the notifications; each is
    /// removed once every channel has acknowledged it.
    public func acknowledge(_ ids: [Int64], channel: DeliveryChannel) throws(ContainerError) {
        try write { _, tx throws(ContainerError) in try tx.acknowledge(ids, on: channel) }
    }

    /// Queues a push for `owner` that no change made (the console's test push): delivered, and
    /// acknowledged, as any other. Returns it as queued, numbered.
    public func enqueue(_ payload: PushPayload, to owner: String, database: DatabaseKey, subscriptionID: String) throws(ContainerError) -> OutboxNotification {
        let notification = OutboxNotification(database: database, subscriptionID: subscriptionID, owner: owner, payload: payload, created: clock())
        let queued = try write { _, tx throws(ContainerError) in try tx.enqueue([notification]) }
        guard let first = queued.first else { throw ContainerError(.internalError, "the outbox did not queue the push") }
        return first
    }

    // MARK: Writing

    /// Runs `body` in a write transaction, holding the writer lock. What `body` changes in
    /// `state` is undone if the transaction does not commit. Returns once the write is durable:
    /// after the lock is released, so the next write runs while this one waits for the disk, and
    /// writes waiting together share one sync. With `durably: false` it returns once committed,
    /// and the caller must `waitUntilDurable()` before it acknowledges the write to anyone.
    ///
    /// Inside `batchingWrites` on this container, the write joins the batch: it returns once
    /// applied in the batch's transaction (whatever `durably` says).
    func write<T: Sendable>(
        durably: Bool = true, _ body: (inout WriterState, any StorageWriteTransaction) throws(ContainerError) -> T
    ) throws(ContainerError) -> T {
        try write(durably: durably) { state, tx throws(ContainerError) -> (T, QueryStoreUpdate?) in (try body(&state, tx), nil) }
    }

    /// `write(durably:_:)` for a body that also returns what its changes do to a query store:
    /// applied once the write commits, still holding the writer lock (so query stores change in
    /// commit order); in a batch, when the batch commits.
    func write<T: Sendable>(
        durably: Bool = true, _ body: (inout WriterState, any StorageWriteTransaction) throws(ContainerError) -> (T, QueryStoreUpdate?)
    ) throws(ContainerError) -> T {
        // The task-local is read only while some thread runs a batch (reading it costs more than
        // the atomic, on every write).
        if batchesRunning.load(ordering: .relaxed) > 0, let batch = Self.currentBatch, batch.container == ObjectIdentifier(self) {
            let state = batch.state
            let (result, update) = try Self.write(&state.pointee, storage, batch.writer, body)
            if let update { batch.updates.append(update) }
            return result
        }
        let result = try writer.withLock { state throws(ContainerError) -> T in
            var (result, update) = try Self.write(&state, storage, nil, body)
            update?.apply()
            return result
        }
        if durably { try storage.waitUntilDurable() }
        return result
    }

    /// What a committed write's changes do to its database's query store (a value, not a closure:
    /// a closure capturing them was allocated for every modify).
    struct QueryStoreUpdate: Sendable {
        let store: QueryStore
        private(set) var changes: [RecordChange]
        var deletedZones: [ZoneID] = []
        /// The database's change sequence before and after the write: on a shared storage, a store
        /// built at the one before is current at the one after once the changes are in (another
        /// node's write in between leaves it behind, and the next query builds it again).
        var sequences: (before: Int64, after: Int64)?

        init(store: QueryStore, changes: [RecordChange], deletedZones: [ZoneID] = [], sequences: (before: Int64, after: Int64)? = nil) {
            self.store = store
            self.changes = changes
            self.deletedZones = deletedZones
            self.sequences = sequences
        }

        /// Brings a built store up to date (a store not built yet will read the changes from
        /// storage when it is). The changes are handed over (the update is left without them):
        /// the store moves them out of the only reference to their list instead of copying them.
        mutating func apply() {
            var changes: [RecordChange] = []
            swap(&changes, &self.changes)
            store.store.withLock { store in
                guard let store else { return }
                var taken: [RecordChange] = []
                swap(&taken, &changes)
                store.applyCommitted(consume taken)
                for zone in deletedZones where store.zones.contains(zone) { try? store.deleteZone(zone) }
                if let sequences = self.sequences {
                    self.store.builtAtSequence.withLock { built in
                        if built == sequences.before { built = sequences.after }
                    }
                }
            }
        }
    }

    /// One write on the storage (through `batch` when it is one of a storage batch's), holding the
    /// writer lock: `state` keeps what it changed only if it applied.
    private static func write<T>(
        _ state: inout WriterState, _ storage: any ContainerStorage, _ batch: (any StorageBatchWriter)?,
        _ body: (inout WriterState, any StorageWriteTransaction) throws(ContainerError) -> T
    ) throws(ContainerError) -> T {
        let result: T
        // Other nodes may have changed subscriptions since: check them inside this write's
        // transaction (which holds the container's write lock, so what it reads stays current).
        // A batch's writes share one transaction, which marked them once, at its start.
        if storage.isShared && batch == nil { state.markStale() }
        do throws(ContainerError) {
            let shared = storage.isShared
            func run(_ tx: any StorageWriteTransaction) throws(ContainerError) -> T {
                let result = try body(&state, tx)
                if shared { try state.followStoredVersions(tx) }
                return result
            }
            if let batch {
                result = try batch.write { tx throws(ContainerError) -> T in try run(tx) }
            } else {
                result = try storage.write { tx throws(ContainerError) -> T in try run(tx) }
            }
        } catch {
            state.end(rollingBack: true)
            throw error
        }
        state.end(rollingBack: false)
        return result
    }

    /// Runs `body`, whose writes to this container (on the calling thread) share one storage
    /// transaction on a file (in memory each commits by itself): each write applies whole or not
    /// at all as ever, and sees the ones before it; all commit together when `body` returns, in
    /// one commit that writes each changed page once, and readers see them from then on. Other
    /// threads' writes wait for the batch.
    ///
    /// A write in the batch returns before the batch commits: its result may be acknowledged only
    /// once this returns without throwing and `waitUntilDurable()` has returned. When the commit
    /// fails this throws, and none of the batch's writes happened.
    ///
    /// `prefetching`: the records the writes will read, by database, which a storage across a
    /// network reads together first (`StorageBatchWriter.prefetchRecords`).
    package func batchingWrites<T>(prefetching: [DatabaseKey: [RecordID]] = [:], _ body: () -> T) throws(ContainerError) -> T {
        try writer.withLock { state throws(ContainerError) -> T in
            batchesRunning.add(1, ordering: .relaxed)
            defer { batchesRunning.subtract(1, ordering: .relaxed) }
            return try withUnsafeMutablePointer(to: &state) { pointer throws(ContainerError) -> T in
                var updates: [QueryStoreUpdate] = []
                let result: T
                do throws(ContainerError) {
                    result = try storage.batch { writer throws(ContainerError) -> T in
                        // Other nodes may have changed subscriptions since the last batch: check
                        // them in this one's transaction, which holds the write lock till the end
                        // (a subscription set checked by the set's first write then serves the
                        // rest: each write read it anew, most of a modify's statements).
                        if storage.isShared && writer != nil { pointer.pointee.markStale() }
                        if let writer { for (key, ids) in prefetching { try writer.prefetchRecords(ids, in: key) } }
                        let batch = WriteBatch(container: ObjectIdentifier(self), state: pointer, writer: writer)
                        let result = Self.$currentBatch.withValue(batch) { body() }
                        updates = batch.updates
                        return result
                    }
                } catch {
                    // The writes' subscription changes went with the transaction: read them again.
                    pointer.pointee.forgetAll()
                    throw error
                }
                for index in updates.indices { updates[index].apply() }
                return result
            }
        }
    }

    /// The batch the current thread is running (`batchingWrites`).
    @TaskLocal static var currentBatch: WriteBatch?
    /// How many threads are running a batch on this container: while none is, no write is part
    /// of one, and `write` does not read `currentBatch`.
    private let batchesRunning = Atomic<Int>(0)

    /// A batch of writes in progress, used only by the thread running it (which holds the writer
    /// lock, whose state `state` points to, for the batch's duration).
    final class WriteBatch: @unchecked Sendable {
        let container: ObjectIdentifier
        let state: UnsafeMutablePointer<WriterState>
        /// The storage's batch the writes join (nil: each commits by itself).
        let writer: (any StorageBatchWriter)?
        /// The writes' query store updates, in order, applied once the batch has committed.
        var updates: [QueryStoreUpdate] = []

        init(container: ObjectIdentifier, state: UnsafeMutablePointer<WriterState>, writer: (any StorageBatchWriter)?) {
            self.container = container
            self.state = state
            self.writer = writer
        }
    }

    /// Returns once every write committed before the call is on stable storage (at once in memory).
    /// Writes sync together: a call made while another's sync runs waits for the next one, which
    /// covers every write committed meanwhile.
    public func waitUntilDurable() throws(ContainerError) {
        try storage.waitUntilDurable()
    }

    /// The database's subscriptions: those in memory, else those stored.
    func subscriptionSet(_ key: DatabaseKey, _ state: inout WriterState, _ tx: any StorageTransaction) throws(ContainerError) -> SubscriptionSet {
        try check(key, &state, tx)
        if let set = state.subscriptionSet(key) { return set }
        let (set, version) = try storedSubscriptionSet(key, tx)
        state.loaded(set, version: version, for: key)
        return set
    }

    /// On a shared storage, keeps the database's set in memory only if no node changed the stored
    /// one since it was read: re-reading every subscription at each batch cost a round trip, and
    /// with many subscriptions more than the batch itself.
    private func check(_ key: DatabaseKey, _ state: inout WriterState, _ tx: any StorageTransaction) throws(ContainerError) {
        guard state.isStale(key) else { return }
        let stored = try tx.database(key)?.subscriptionsVersion
        state.checked(key, stillCurrent: stored == state.databases[key]?.version)
    }

    /// Changes the database's subscriptions in place (see `WriterState.changeSubscriptionSet`).
    func changeSubscriptionSet<T>(
        _ key: DatabaseKey, _ state: inout WriterState, _ tx: any StorageTransaction, _ change: (inout SubscriptionSet) throws(ContainerError) -> T
    ) throws(ContainerError) -> T {
        try check(key, &state, tx)
        return try state.changeSubscriptionSet(key, load: { () throws(ContainerError) in try storedSubscriptionSet(key, tx) }, change)
    }

    /// Changes the database's subscriptions and push templates in place (see
    /// `WriterState.changeDatabase`).
    func changeDatabase<T>(
        _ key: DatabaseKey, _ state: inout WriterState, _ tx: any StorageTransaction, _ change: (inout WriterState.DatabaseState) throws(ContainerError) -> T
    ) throws(ContainerError) -> T {
        try check(key, &state, tx)
        return try state.changeDatabase(key, load: { () throws(ContainerError) in try storedSubscriptionSet(key, tx) }, change)
    }

    /// The database's subscriptions as stored, and their version.
    private func storedSubscriptionSet(_ key: DatabaseKey, _ tx: any StorageTransaction) throws(ContainerError) -> (SubscriptionSet, version: Int64) {
        var set = SubscriptionSet(database: key.scope)
        let database = try tx.database(key)
        if let database {
            for subscription in try tx.subscriptions(in: database) {
                do throws(SubscriptionError) {
                    try set.save(subscription)
                } catch {
                    throw ContainerError(.internalError, "stored subscription '\(subscription.subscriptionID)' no longer saves: \(error.message)")
                }
            }
        }
        return (set, database?.subscriptionsVersion ?? 0)
    }

    // MARK: Query stores

    /// One database's records in memory; queries and the writes that update it take turns.
    final class QueryStore: Sendable {
        let store = Locked<KQueryStore.Database?>(nil)
        /// On a shared storage, the database's change sequence `store` was built at: a query that
        /// finds the database at another one builds it again (another node, or this one, wrote).
        let builtAtSequence = Locked<Int64?>(nil)
        /// Whether `store` is built: asked without waiting for a build in progress (which holds
        /// `store`'s lock for as long as it reads every record).
        let isBuilt = Locked(false)
    }

    /// The query stores by database, and the one asked for last: a server's requests, and an app's,
    /// mostly go to one database, found by comparing its key instead of hashing it.
    struct QueryStores {
        var stores: [DatabaseKey: QueryStore] = [:]
        var last: (key: DatabaseKey, store: QueryStore)?
    }

    func queryStore(_ key: DatabaseKey) -> QueryStore {
        queryStores.withLock { stores in
            if let last = stores.last, last.key == key { return last.store }
            let store = stores.stores[key] ?? QueryStore()
            stores.stores[key] = store
            stores.last = (key, store)
            return store
        }
    }

    /// Runs `body` on the database's query store, building it from storage first if needed.
    func withQueryStore<T: Sendable>(_ key: DatabaseKey, _ body: (KQueryStore.Database) throws(ContainerError) -> T) throws(ContainerError) -> T {
        let queryStore = queryStore(key)
        return try queryStore.store.withLock { store throws(ContainerError) -> T in
            if storage.isShared {
                let sequence = try storage.read { tx throws(ContainerError) in try tx.database(key)?.sequence ?? 0 }
                if queryStore.builtAtSequence.withLock({ $0 }) != sequence { store = nil }
            }
            if store == nil {
                let (records, sequence) = try storage.read { tx throws(ContainerError) in
                    guard let db = try tx.database(key) else { return ([Record](), Int64(0)) }
                    return (try tx.records(in: db), db.sequence)
                }
                queryStore.builtAtSequence.withLock { $0 = sequence }
                let built = KQueryStore.Database()
                do throws(DatabaseError) { try built.importRecords(records) } catch { throw ContainerError(.internalError, "loading the query store: \(error.message)") }
                store = built
                queryStore.isBuilt.withLock { $0 = true }
            }
            return try body(store!)
        }
    }

}
