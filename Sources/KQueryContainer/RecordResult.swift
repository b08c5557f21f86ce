import KQuery

/// What became of one operation of a modify, or one ID of a lookup.
public enum RecordResult: Hashable, Sendable {
    /// The record as saved (or found), with its new `recordChangeTag` and its dates and users.
    case saved(Record)
    /// A deleted record, and the type it had (clients read a deletion without a type as an error).
    case deleted(RecordID, recordType: String)
    /// The operation was not applied (CloudKit's RecordFetchError).
    case failed(RecordID, ContainerError)

    public var recordID: RecordID {
        switch self {
        case .saved(let record): record.recordID
        case .deleted(let id, _), .failed(let id, _): id
        }
    }

    public var error: ContainerError? {
        if case .failed(_, let error) = self { return error }
        return nil
    }
}
