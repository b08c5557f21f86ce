import KQuery
import KQueryStore

/// One database of a container (CKDatabase), as one user sees it: its zones, records, changes and
/// subscriptions. A value: cheap to make and to pass between tasks.
public struct ContainerDatabase: Sendable {
    public let container: Container
    public let key: DatabaseKey
    /// The user making the requests: the owner of a private or shared database; in the public
    /// database, nil for requests no user signs (a server-to-server key).
    public let userRecordName: String?

    public var scope: DatabaseScope { key.scope }
    public var environment: ContainerEnvironment { key.environment }

    /// Who saves records and subscriptions through this value.
    var actingUser: String { userRecordName ?? PushContext.defaultUserRecordName }

    // MARK: Zones

    /// Creates a custom zone (CKDatabase.save(CKRecordZone), Web Services `zones/modify` create).
    /// Only private databases hold custom zones. Saving a zone that exists changes nothing.
    public func createZone(_ zoneID: ZoneID) throws(ContainerError) {
        let zoneID = canonical(zoneID)
        try checkCustomZone(zoneID)
        try container.write { _, tx throws(ContainerError) in
            let database = try tx.existingOrNewDatabase(key)
            guard try tx.zone(zoneID, in: database) == nil else { return }
            let sequence = database.sequence + 1
            try tx.saveZone(StoredZone(zoneID: zoneID, createdSequence: sequence, changedSequence: sequence), in: database)
            try tx.setSequence(sequence, of: database)
        }
    }

    /// Deletes a custom zone and every record in it. Database change fetches report it deleted,
    /// and the database's database subscriptions (those for every record type) fire for it; their
    /// notifications are returned, as a modify's are.
    @discardableResult
    public func deleteZone(_ zoneID: ZoneID) throws(ContainerError) -> [OutboxNotification] {
        // In the shared database, deleting a zone leaves its shares (the owner's zone stays).
        if scope == .shared {
            try leaveSharedZone(zoneID)
            return []
        }
        let zoneID = canonical(zoneID)
        guard !zoneID.isDefaultZone else { throw ContainerError(.badRequest, "the default zone cannot be deleted") }
        try checkCustomZone(zoneID)
        let queryStore = container.queryStore(key)
        // The zone's shares go with it.
        defer { container.sharingGeneration.add(1, ordering: .releasing) }
        return try container.write { state, tx throws(ContainerError) -> ([OutboxNotification], Container.QueryStoreUpdate?) in
            guard let database = try tx.database(key), try tx.zone(zoneID, in: database) != nil else {
                throw ContainerError(.zoneNotFound, "zone '\(zoneID.zoneName)' does not exist")
            }
            let sequence = database.sequence + 1
            try tx.deleteZone(zoneID, sequence: sequence, in: database)
            if container.assetsHeld.load(ordering: .relaxed) { try tx.deleteAssetReferences(in: zoneID, of: database, now: container.clock()) }
            try tx.setSequence(sequence, of: database)
            if let keep = container.changeHistoryRetention { _ = try tx.compactHistory(of: database, keepingLast: keep) }
            let fired = try container.changeSubscriptionSet(key, &state, tx) { set throws(ContainerError) -> [Subscription] in
                let fired = set.subscriptions.filter { if case .database(nil) = $0.kind { true } else { false } }
                for subscription in fired where subscription.options.contains(.firesOnce) { set.remove(id: subscription.subscriptionID) }
                return fired
            }
            let now = container.clock()
            var notifications: [OutboxNotification] = []
            for subscription in fired {
                let payload = PushPayload.database(subscriptionID: subscription.subscriptionID, zoneID: zoneID,
                                                   notificationInfo: subscription.notificationInfo, context: pushContext(subscription.owner))
                notifications.append(OutboxNotification(database: key, subscriptionID: subscription.subscriptionID, owner: subscription.owner,
                                                     payload: payload, created: now))
                if subscription.options.contains(.firesOnce) { try tx.deleteSubscription(subscription.subscriptionID, in: database) }
            }
            return (try tx.enqueue(notifications), Container.QueryStoreUpdate(store: queryStore, changes: [], deletedZones: [zoneID], sequences: (sequence - 1, sequence)))
        }
    }

    /// The zone, if it exists (the default zone always does).
    public func zone(_ zoneID: ZoneID) throws(ContainerError) -> ZoneID? {
        if scope == .shared { return try sharedZones().contains(zoneID) ? zoneID : nil }
        let zoneID = canonical(zoneID)
        if zoneID.isDefaultZone { return zoneID }
        return try container.storage.read { tx throws(ContainerError) in
            try tx.database(key).flatMap { database throws(ContainerError) in try tx.zone(zoneID, in: database)?.zoneID }
        }
    }

    /// The default zone, then the custom zones by name.
    public func zones() throws(ContainerError) -> [ZoneID] {
        // The shared database shows the zones shared with its user, and no default zone.
        if scope == .shared { return try sharedZones() }
        let custom = try container.storage.read { tx throws(ContainerError) in
            try tx.database(key).map { database throws(ContainerError) in try tx.zones(in: database).map(\.zoneID) } ?? []
        }
        return [.default] + custom
    }

    /// Refuses zones outside private databases (native `badDatabase`) and invalid zone names.
    func checkCustomZone(_ zoneID: ZoneID) throws(ContainerError) {
        guard !zoneID.isDefaultZone else { return }
        guard scope == .private else {
            throw ContainerError(.badRequest, "custom zones exist only in private databases, not in the \(scope.name) database (zone '\(zoneID.zoneName)')")
        }
        try Self.validateZoneName(zoneID.zoneName)
        guard !zoneID.ownerName.isEmpty else { throw ContainerError(.badRequest, "zone '\(zoneID.zoneName)' has an empty ownerRecordName") }
    }

    /// A zone name is 1 to 255 letters, digits, `.`, `-` and `_`, starting with a letter or digit
    /// (names starting with `_` are CloudKit's, like `_defaultZone`).
    static func validateZoneName(_ name: String) throws(ContainerError) {
        let bytes = Array(name.utf8)
        func isAlphanumeric(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        guard (1...255).contains(bytes.count), isAlphanumeric(bytes[0]),
              bytes.allSatisfy({ isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
        else {
            throw ContainerError(.badRequest, "invalid zone name '\(name)': a zone name is 1 to 255 letters, digits, '.', '-' or '_', starting with a letter or digit")
        }
    }

    func pushContext(_ owner: String) -> PushContext {
        PushContext(containerIdentifier: container.containerIdentifier, environment: environment, database: scope, userRecordName: owner)
    }

    // MARK: Reading records

    /// The record, if it exists.
    public func record(_ id: RecordID) throws(ContainerError) -> Record? {
        if scope == .shared, case .saved(let record)? = try sharedLookup([id]).first { return record }
        if scope == .shared { return nil }
        let id = canonical(id)
        return try container.storage.read { tx throws(ContainerError) in
            try tx.database(key).flatMap { database throws(ContainerError) in try tx.record(id, in: database) }
        }
    }

    /// Web Services `records/lookup`: each record, or NOT_FOUND, in the order asked, from one
    /// committed state.
    public func lookup(_ ids: [RecordID]) throws(ContainerError) -> [RecordResult] {
        if scope == .shared { return try sharedLookup(ids) }
        let ids = ids.map(canonical)
        return try container.storage.read { tx throws(ContainerError) in
            let database = try tx.database(key)
            var results: [RecordResult] = []
            for id in ids {
                if let database, let record = try tx.record(id, in: database) {
                    results.append(.saved(record))
                } else {
                    results.append(.failed(id, ContainerError(.notFound, "record '\(id.recordName)' does not exist")))
                }
            }
            return results
        }
    }

    /// Whether queries find this database's records in memory already: a query then costs
    /// microseconds, while the first one reads every record from storage.
    public var queriesAreInMemory: Bool {
        container.queryStore(key).isBuilt.withLock { $0 }
    }

    /// Runs a query (Web Services `records/query`) on the committed records: one page, and a
    /// cursor when more follow. `now` is the time `now()` in the predicate stands for. A query in
    /// a custom zone that does not exist is ZONE_NOT_FOUND, as saves and change fetches there are
    /// (an empty answer would let a client take a missing zone for an empty one).
    public func query(_ query: Query, cursor: QueryCursor? = nil, now: Int64? = nil) throws(ContainerError) -> QueryResult {
        if scope == .shared { return try sharedQuery(query, cursor: cursor, now: now) }
        let now = now ?? container.clock()
        var query = query
        query.zoneID = query.zoneID.map(canonical)
        if let zoneID = query.zoneID, !zoneID.isDefaultZone, try zone(zoneID) == nil {
            throw ContainerError(.zoneNotFound, "zone '\(zoneID.zoneName)' does not exist")
        }
        let canonicalQuery = query
        if container.storage.runsQueries {
            // In the storage (PostgreSQL): nothing of the database is kept in memory.
            if let cursor, !canonicalQuery.accepts(cursor) { throw ContainerError(.badRequest, "the cursor belongs to a different query") }
            return try container.storage.query(canonicalQuery, cursor: cursor, in: key, now: now)
        }
        return try container.withQueryStore(key) { store throws(ContainerError) in
            do throws(DatabaseError) {
                return try store.perform(canonicalQuery, cursor: cursor, now: now)
            } catch {
                throw ContainerError(.badRequest, error.message)
            }
        }
    }

    /// `query` answered without holding a thread while the storage works (PostgreSQL), when it
    /// can be; nil: call `query`. Only a query in the default zone of a public or private
    /// database (a custom zone's existence, and the shared database's shares, are read first).
    public func queryWithoutBlocking(_ query: Query, cursor: QueryCursor? = nil, now: Int64? = nil) async throws(ContainerError) -> QueryResult? {
        guard scope != .shared, container.storage.runsQueries, query.zoneID?.isDefaultZone ?? true else { return nil }
        var query = query
        query.zoneID = query.zoneID.map(canonical)
        // (The storage refuses another query's cursor, as `query` does; a database it does not
        // know yet is left to `query`.)
        return try await container.storage.queryWithoutBlocking(query, cursor: cursor, in: key, now: now ?? container.clock())
    }

    // MARK: Subscriptions

    /// Saves a subscription for the acting user (Web Services `subscriptions/modify` create or
    /// update): refused when the database does not support its kind, its options are empty, its
    /// zone does not exist, or it duplicates another (SPEC §4).
    @discardableResult
    public func saveSubscription(_ subscription: Subscription) throws(ContainerError) -> Subscription {
        var subscription = canonical(subscription)
        subscription.owner = actingUser
        let zoneID: ZoneID? = switch subscription.kind {
        case .query(_, _, let zoneID): zoneID
        case .recordZone(let zoneID, _): zoneID
        case .database: nil
        }
        let saved = subscription
        try container.write { state, tx throws(ContainerError) in
            // The set checks this too, but only after the zone, which a subscription the database
            // cannot hold should not get to.
            do throws(SubscriptionError) { try saved.validate(in: scope) } catch { throw ContainerError(.badRequest, error.message) }
            if let existing = try container.subscriptionSet(key, &state, tx)[saved.subscriptionID], existing.owner != saved.owner {
                throw ContainerError(.exists, "subscription '\(saved.subscriptionID)' belongs to another user")
            }
            let database = try tx.existingOrNewDatabase(key)
            if let zoneID, !zoneID.isDefaultZone, try tx.zone(zoneID, in: database) == nil {
                throw ContainerError(.zoneNotFound, "subscription '\(saved.subscriptionID)': zone '\(zoneID.zoneName)' does not exist")
            }
            try container.changeSubscriptionSet(key, &state, tx) { set throws(ContainerError) in
                do throws(SubscriptionError) { try set.save(saved) } catch { throw ContainerError(.badRequest, error.message) }
            }
            try tx.saveSubscription(saved, in: database)
        }
        return saved
    }

    /// The acting user's subscription with this ID, if there is one.
    public func subscription(_ subscriptionID: String) throws(ContainerError) -> Subscription? {
        try subscriptions().first { $0.subscriptionID == subscriptionID }
    }

    /// The acting user's subscriptions, in the order they were saved.
    public func subscriptions() throws(ContainerError) -> [Subscription] {
        let owner = actingUser
        return try container.storage.read { tx throws(ContainerError) in
            try tx.database(key).map { database throws(ContainerError) in try tx.subscriptions(in: database) }?.filter { $0.owner == owner } ?? []
        }
    }

    /// Every user's subscriptions in this database (the public database holds many users'), in
    /// the order they were saved: those a change here is matched against.
    public func allSubscriptions() throws(ContainerError) -> [Subscription] {
        try container.storage.read { tx throws(ContainerError) in
            try tx.database(key).map { database throws(ContainerError) in try tx.subscriptions(in: database) } ?? []
        }
    }

    /// Deletes one of the acting user's subscriptions; NOT_FOUND when there is none with this ID.
    public func deleteSubscription(_ subscriptionID: String) throws(ContainerError) {
        let owner = actingUser
        try container.write { state, tx throws(ContainerError) in
            guard try container.subscriptionSet(key, &state, tx)[subscriptionID]?.owner == owner, let database = try tx.database(key) else {
                throw ContainerError(.notFound, "subscription '\(subscriptionID)' does not exist")
            }
            try tx.deleteSubscription(subscriptionID, in: database)
            try container.changeSubscriptionSet(key, &state, tx) { set in _ = set.remove(id: subscriptionID) }
        }
    }
}
