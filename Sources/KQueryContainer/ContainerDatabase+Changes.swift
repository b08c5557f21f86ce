import KQuery

extension ContainerDatabase {
    /// The most changes one fetch returns.
    public static let maximumChangesLimit = 200

    /// The zone's changes since `token` (nil: from the beginning, the zone's records without
    /// deletions), at most `resultsLimit` (CKFetchRecordZoneChangesOperation). Only custom zones
    /// track changes.
    ///
    /// A token from another database or zone, or altered, is BAD_REQUEST "invalid sync token"; one
    /// older than the history kept (see `compactChangeHistory`), or from a zone since deleted, is
    /// CHANGE_TOKEN_EXPIRED: refetch from nil.
    public func zoneChanges(_ zoneID: ZoneID, since token: SyncToken?, resultsLimit: Int = maximumChangesLimit) throws(ContainerError) -> ZoneChanges {
        guard scope != .public else { throw ContainerError(.badRequest, "zone changes are fetched from private and shared databases, not the public one") }
        guard !zoneID.isDefaultZone else { throw ContainerError(.badRequest, "the default zone does not track changes: fetch changes of a custom zone") }
        if scope == .shared { return try sharedZoneChanges(zoneID, since: token, resultsLimit: resultsLimit) }
        let zoneID = canonical(zoneID)
        let limit = min(max(resultsLimit, 1), Self.maximumChangesLimit)
        let binding = ["\(key)", "zone", zoneID.zoneName, zoneID.ownerName].joined(separator: SyncToken.bindingSeparator)
        let secret = container.storage.secret
        return try container.storage.read { tx throws(ContainerError) -> ZoneChanges in
            guard let database = try tx.database(key), let zone = try tx.zone(zoneID, in: database) else {
                throw ContainerError(.zoneNotFound, "zone '\(zoneID.zoneName)' does not exist")
            }
            var since: Int64 = 0
            if let token {
                let contents = try token.contents(kind: .zone, binding: binding, secret: secret)
                guard contents.incarnation == zone.createdSequence, contents.isCurrent(in: database) else {
                    throw ContainerError.expiredSyncToken
                }
                since = contents.sequence
            }
            // A fetch from no token starts an empty cache: deletions do not concern it.
            let fetched = try tx.recordChanges(in: zoneID, of: database, after: since, includingDeletions: token != nil, limit: limit + 1)
            let moreComing = fetched.count > limit
            let batch = fetched.prefix(limit)
            let last = moreComing ? batch.last!.sequence : database.sequence
            let next = SyncToken(SyncToken.Contents(kind: .zone, sequence: last, horizon: database.horizon, incarnation: zone.createdSequence), binding: binding, secret: secret)
            return ZoneChanges(zoneID: zoneID, changes: batch.map(\.change), syncToken: next, moreComing: moreComing)
        }
    }

    /// The zones created, changed or deleted since `token` (nil: from the beginning), at most
    /// `resultsLimit` (CKFetchDatabaseChangesOperation; private and shared databases). Tokens as
    /// for `zoneChanges`.
    public func databaseChanges(since token: SyncToken?, resultsLimit: Int = maximumChangesLimit) throws(ContainerError) -> DatabaseChanges {
        guard scope != .public else { throw ContainerError(.badRequest, "database changes are fetched from private and shared databases, not the public one") }
        if scope == .shared { return try sharedDatabaseChanges(since: token) }
        let limit = min(max(resultsLimit, 1), Self.maximumChangesLimit)
        let binding = ["\(key)", "database"].joined(separator: SyncToken.bindingSeparator)
        let secret = container.storage.secret
        return try container.storage.read { tx throws(ContainerError) -> DatabaseChanges in
            let database = try tx.database(key) ?? StoredDatabase(id: -1, sequence: 0, horizon: 0)
            var since: Int64 = 0
            if let token {
                let contents = try token.contents(kind: .database, binding: binding, secret: secret)
                guard contents.isCurrent(in: database) else { throw ContainerError.expiredSyncToken }
                since = contents.sequence
            }
            let fetched = try tx.zoneChanges(of: database, after: since, limit: limit + 1)
            let moreComing = fetched.count > limit
            let batch = fetched.prefix(limit)
            let last = moreComing ? batch.last!.sequence : database.sequence
            return DatabaseChanges(
                changedZones: batch.filter { !$0.deleted }.map(\.zoneID), deletedZones: batch.filter(\.deleted).map(\.zoneID),
                syncToken: SyncToken(SyncToken.Contents(kind: .database, sequence: last, horizon: database.horizon, incarnation: 0), binding: binding, secret: secret),
                moreComing: moreComing)
        }
    }

    /// Forgets all but the newest `count` deletions (of records and zones) of this database.
    /// Tokens from before the oldest deletion forgotten become CHANGE_TOKEN_EXPIRED; current
    /// records are kept, so a fetch from nil still gives the whole zone.
    public func compactChangeHistory(keepingLast count: Int) throws(ContainerError) {
        try container.write { _, tx throws(ContainerError) in
            guard let database = try tx.database(key) else { return }
            _ = try tx.compactHistory(of: database, keepingLast: count)
        }
    }
}
