/// A Web Services modify operation (`records/modify`): an operation type and a record.
public struct RecordOperation: Hashable, Sendable {
    public enum Kind: String, Hashable, Sendable, CaseIterable {
        case create, update, forceUpdate, replace, forceReplace, delete, forceDelete
    }

    public var kind: Kind
    public var record: Record

    public init(kind: Kind, record: Record) {
        self.kind = kind
        self.record = record
    }

    /// Reads `{"operationType": "create", "record": {...}}`. A delete may give only
    /// `recordName` (and `zoneID`, `recordChangeTag`) in its record.
    public init(json: JSON) throws(RecordDecodingError) {
        guard let name = json["operationType"]?.stringValue, let kind = Kind(rawValue: name) else {
            throw RecordDecodingError("\"operationType\" must be one of \(Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard case .object(var members)? = json["record"] else { throw RecordDecodingError("the operation has no \"record\" object") }
        if kind == .delete || kind == .forceDelete, !members.contains(where: { $0.0 == "recordType" }) {
            members.append(("recordType", .string("_deleted")))
        }
        self.init(kind: kind, record: try Record(json: .object(members)))
    }
}
