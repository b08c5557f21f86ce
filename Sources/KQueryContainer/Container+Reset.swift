import KQuery

/// What resetting an environment removed.
public struct EnvironmentReset: Sendable {
    /// The databases (public and users' private ones) that were emptied.
    public var databases = 0
    /// Custom zones deleted (their records with them).
    public var zones = 0
    /// Records deleted from default zones.
    public var records = 0
    public var subscriptions = 0
    /// The pushes the deletions queued (database subscriptions hear of each deleted zone, query
    /// subscriptions of each deleted record), as any client's deletions queue them.
    public var notifications: [OutboxNotification] = []
    /// The record deletions, for whoever keeps a log of changes.
    public var changes: [(database: DatabaseKey, change: RecordChange)] = []

    public init() {}
}

extension Container {
    /// Empties an environment, as CloudKit Console's "Reset Development Environment" does for
    /// its data: every custom zone of every private database is deleted, every default zone's
    /// records are deleted, and every subscription goes. It is done with the operations clients
    /// use, one commit at a time, so the container stays open and served throughout: clients
    /// holding change tokens see the zones and records go in their change feeds, and the pushes
    /// those deletions cause are queued (before the subscriptions go). Shared databases are views
    /// of the owners' zones and empty with them; each user's `Users` record in the public database
    /// stays (it is who they are). Assets no record refers to any more are then
    /// collected after their grace period, as always.
    public func reset(_ environment: ContainerEnvironment) throws(ContainerError) -> EnvironmentReset {
        var reset = EnvironmentReset()
        let databases = try storage.read { tx throws(ContainerError) in try tx.allDatabases() }
        for (key, _) in databases where key.environment == environment && key.scope != .shared {
            let database = try self.database(key.scope, environment: environment, user: key.userRecordName.isEmpty ? nil : key.userRecordName)
            reset.databases += 1
            for zoneID in try database.zones() where !zoneID.isDefaultZone {
                do throws(ContainerError) {
                    reset.notifications += try database.deleteZone(zoneID)
                    reset.zones += 1
                } catch where error.code == .zoneNotFound {
                    // Deleted by a client meanwhile.
                }
            }
            try deleteRecords(inDefaultZoneOf: database, into: &reset)
            // The public database holds many users' subscriptions: each is deleted by its owner.
            for subscription in try database.allSubscriptions() {
                do throws(ContainerError) {
                    let owner = subscription.owner.isEmpty ? nil : subscription.owner
                    try self.database(key.scope, environment: environment, user: owner ?? (key.userRecordName.isEmpty ? nil : key.userRecordName))
                        .deleteSubscription(subscription.subscriptionID)
                    reset.subscriptions += 1
                } catch where error.code == .notFound {
                    // Deleted by a client meanwhile.
                }
            }
        }
        return reset
    }

    /// Deletes the default zone's records a page at a time, read in change order from storage
    /// (the default zone has no change feed): each page's records in one modify (not atomic: a
    /// record a cascade or a client deleted meanwhile is skipped).
    private func deleteRecords(inDefaultZoneOf database: ContainerDatabase, into reset: inout EnvironmentReset) throws(ContainerError) {
        var after: Int64 = 0
        while true {
            let key = database.key
            let page = try storage.read { tx throws(ContainerError) -> [(sequence: Int64, change: RecordZoneChange)] in
                guard let stored = try tx.database(key) else { return [] }
                return try tx.recordChanges(in: .default, of: stored, after: after, includingDeletions: false, limit: ContainerDatabase.maximumOperations)
            }
            guard let last = page.last else { return }
            let operations = page.compactMap { entry -> RecordOperation? in
                // Each user's `Users` record is their identity in the public database: it stays.
                guard case .changed(let record) = entry.change, !(database.scope == .public && record.recordType == "Users") else { return nil }
                return RecordOperation(kind: .forceDelete, record: Record(recordType: record.recordType, recordID: record.recordID))
            }
            if !operations.isEmpty {
                let result = try database.modify(operations, atomic: false)
                reset.records += result.results.filter { if case .deleted = $0 { true } else { false } }.count
                reset.notifications += result.notifications
                reset.changes += result.changes.map { (database.key, $0) }
            }
            after = last.sequence
        }
    }
}
