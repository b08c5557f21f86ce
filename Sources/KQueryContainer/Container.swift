import KQuery
import KQueryStore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A CloudKit container (CKContainer): per environment a public database and, per user, a private
/// and a shared one, with their zones, records, change history, subscriptions and the outbox of
/// notifications their changes produced, kept in one SQLite file (or in memory).
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
    let queryStores = Locked<[DatabaseKey: QueryStore]>([:])

    struct WriterState {
        /// The subscriptions of each database: those stored, restored at open; a database without
        /// any gets its set at its first write.
        private(set) var subscriptionSets: [DatabaseKey: SubscriptionSet] = [:]
        /// The sets the running write replaced, put back if it does not commit. Kept per set
        /// rather than as a copy of the whole state, which would make every write copy the
        /// dictionary of all databases.
        private var replaced: [DatabaseKey: SubscriptionSet?] = [:]

        /// Makes `set` the database's, undoably until the write ends.
        mutating func install(_ set: SubscriptionSet, for key: DatabaseKey) {
            if replaced[key] == nil { replaced[key] = .some(subscriptionSets[key]) }
            subscriptionSets[key] = set
        }

        /// Ends a write: keeps what it installed, or with `rollingBack` puts back what it replaced.
        mutating func end(rollingBack: Bool) {
            if rollingBack {
                for (key, set) in replaced { subscriptionSets[key] = set }
            }
            replaced = [:]
        }
    }

    /// Opens the container kept in the SQLite file at `path` (created if missing), or a new one in
    /// memory when `path` is nil.
    ///
    /// `changeHistoryRetention` keeps at most that many deletions (of records and zones) per
    /// database: each write that deletes compacts older ones away, and a token from before them is
    /// CHANGE_TOKEN_EXPIRED. nil keeps every deletion until `compactChangeHistory` is called.
    public init(
        containerIdentifier: String, path: String? = nil, changeHistoryRetention: Int? = nil,
        clock: @escaping @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
    ) throws(ContainerError) {
        self.containerIdentifier = containerIdentifier
        storage = try SQLiteContainerStorage(path: path)
        self.changeHistoryRetention = changeHistoryRetention.map { max($0, 0) }
        self.clock = clock
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
    public func pendingNotifications(for channel: DeliveryChannel, limit: Int = 100) throws(ContainerError) -> [OutboxNotification] {
        try storage.read { tx throws(ContainerError) in try tx.pendingNotifications(for: channel, limit: max(limit, 0)) }
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

    // MARK: Writing

    /// Runs `body` in a write transaction, then `committed` with its result once it has
    /// committed, holding the writer lock throughout (so the memory `committed` updates follows
    /// the commit order). What `body` changes in `state` is undone if the transaction does not commit.
    /// Returns once the write is durable: after the lock is released, so the next write runs
    /// while this one waits for the disk, and writes waiting together share one sync.
    func write<T: Sendable>(
        _ body: (inout WriterState, any StorageWriteTransaction) throws(ContainerError) -> T, committed: (T) -> Void = { _ in }
    ) throws(ContainerError) -> T {
        let result = try writer.withLock { state throws(ContainerError) -> T in
            let result: T
            do throws(ContainerError) {
                result = try storage.write { tx throws(ContainerError) -> T in try body(&state, tx) }
            } catch {
                state.end(rollingBack: true)
                throw error
            }
            state.end(rollingBack: false)
            committed(result)
            return result
        }
        try storage.waitUntilDurable()
        return result
    }

    /// The database's subscriptions: those in memory, else those stored.
    func subscriptionSet(_ key: DatabaseKey, _ state: inout WriterState, _ tx: any StorageTransaction) throws(ContainerError) -> SubscriptionSet {
        if let set = state.subscriptionSets[key] { return set }
        var set = SubscriptionSet(database: key.scope)
        if let database = try tx.database(key) {
            for subscription in try tx.subscriptions(in: database) {
                do throws(SubscriptionError) {
                    try set.save(subscription)
                } catch {
                    throw ContainerError(.internalError, "stored subscription '\(subscription.subscriptionID)' no longer saves: \(error.message)")
                }
            }
        }
        return set
    }

    // MARK: Query stores

    /// One database's records in memory; queries and the writes that update it take turns.
    final class QueryStore: Sendable {
        let store = Locked<KQueryStore.Database?>(nil)
    }

    func queryStore(_ key: DatabaseKey) -> QueryStore {
        queryStores.withLock { stores in
            if let store = stores[key] { return store }
            let store = QueryStore()
            stores[key] = store
            return store
        }
    }

    /// Runs `body` on the database's query store, building it from storage first if needed.
    func withQueryStore<T: Sendable>(_ key: DatabaseKey, _ body: (KQueryStore.Database) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try queryStore(key).store.withLock { store throws(ContainerError) -> T in
            if store == nil {
                let records = try storage.read { tx throws(ContainerError) in try tx.database(key).map { db throws(ContainerError) in try tx.records(in: db) } ?? [] }
                let built = KQueryStore.Database()
                do throws(DatabaseError) { try built.importRecords(records) } catch { throw ContainerError(.internalError, "loading the query store: \(error.message)") }
                store = built
            }
            return try body(store!)
        }
    }

    /// Brings a built query store up to date with committed changes (a store not built yet will
    /// read them from storage when it is).
    func updateQueryStore(_ key: DatabaseKey, changes: [RecordChange], deletedZones: [ZoneID] = []) {
        queryStore(key).store.withLock { store in
            guard let store else { return }
            var final: [RecordID: Record?] = [:]
            for change in changes {
                if case .deleted(let record) = change { final[record.recordID] = .some(nil) } else { final[change.record.recordID] = change.record }
            }
            // Deleted first: those gone, and those a modify deleted and created again as another
            // type, which the store would refuse to import over the old one.
            let deletions = final.filter { id, record in store.record(id).map { $0.recordType != record?.recordType } ?? false }
                .map { RecordOperation(kind: .forceDelete, record: Record(recordType: "_deleted", recordID: $0.key)) }
            // Neither call can fail here: only records the store holds are deleted, and the
            // records imported were checked by the modify that committed them.
            if !deletions.isEmpty { _ = try? store.save(deletions) }
            try? store.importRecords(final.values.compactMap { $0 })
            for zone in deletedZones where store.zones.contains(zone) { try? store.deleteZone(zone) }
        }
    }
}
