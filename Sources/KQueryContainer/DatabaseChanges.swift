import KQuery

/// One batch of a database's zone changes (CKFetchDatabaseChangesOperation, `changes/database`).
public struct DatabaseChanges: Hashable, Sendable {
    /// Zones created, or whose records changed, in change order.
    public var changedZones: [ZoneID]
    public var deletedZones: [ZoneID]
    public var syncToken: SyncToken
    public var moreComing: Bool
}
