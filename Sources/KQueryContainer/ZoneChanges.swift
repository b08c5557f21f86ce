import KQuery

/// One batch of a zone's changes (CKFetchRecordZoneChangesOperation, Web Services `changes/zone`).
public struct ZoneChanges: Hashable, Sendable {
    public var zoneID: ZoneID
    /// In change order; each record once: its current version, or its deletion.
    public var changes: [RecordZoneChange]
    /// Where the next fetch starts.
    public var syncToken: SyncToken
    /// Whether more changes follow: fetch again with `syncToken`.
    public var moreComing: Bool

    public var changedRecords: [Record] {
        changes.compactMap { if case .changed(let record) = $0 { record } else { nil } }
    }

    public var deletedRecordIDs: [RecordID] {
        changes.compactMap { if case .deleted(let id, _) = $0 { id } else { nil } }
    }
}
