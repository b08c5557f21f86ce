import KQuery

/// One entry of a zone change fetch: a record's current version, or its deletion.
public enum RecordZoneChange: Hashable, Sendable {
    case changed(Record)
    /// CKFetchRecordZoneChangesOperation's `recordWithIDWasDeletedBlock` carries the record type too.
    case deleted(RecordID, recordType: String)

    public var recordID: RecordID {
        switch self {
        case .changed(let record): record.recordID
        case .deleted(let id, _): id
        }
    }
}
