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

/// Records in memory with CloudKit's save rules, turning operations into `RecordChange`s.
///
/// Non-force operations check `recordChangeTag`: a stale tag is a conflict and changes nothing.
/// Every save gives the record a new change tag.
public struct RecordChangeLog: Sendable {
    public private(set) var records: [RecordID: Record] = [:]
    private var nextTag = 1

    public init(records: [Record] = []) {
        for record in records { self.records[record.recordID] = record }
    }

    public mutating func apply(_ operation: RecordOperation) throws(SubscriptionError) -> RecordChange {
        let incoming = operation.record
        let id = incoming.recordID
        let existing = records[id]
        func checkTag() throws(SubscriptionError) {
            guard let existing else { throw SubscriptionError("record '\(id)' does not exist") }
            if let tag = incoming.recordChangeTag, let current = existing.recordChangeTag, tag != current {
                throw SubscriptionError("conflict: record '\(id)' has changed (recordChangeTag '\(tag)' is stale, the server has '\(current)')")
            }
        }
        switch operation.kind {
        case .create:
            guard existing == nil else { throw SubscriptionError("record '\(id)' already exists") }
            let saved = stamped(incoming)
            records[id] = saved
            return .created(saved)
        case .update, .forceUpdate:
            if operation.kind == .update { try checkTag() }
            guard let existing else { throw SubscriptionError("record '\(id)' does not exist") }
            var saved = existing
            for (key, value) in incoming.fields { saved.fields[key] = value }
            saved = stamped(saved)
            records[id] = saved
            return .updated(before: existing, after: saved)
        case .replace, .forceReplace:
            if let existing {
                if operation.kind == .replace { try checkTag() }
                let saved = stamped(incoming)
                records[id] = saved
                return .updated(before: existing, after: saved)
            }
            let saved = stamped(incoming)
            records[id] = saved
            return .created(saved)
        case .delete, .forceDelete:
            if operation.kind == .delete { try checkTag() }
            guard let existing = records.removeValue(forKey: id) else { throw SubscriptionError("record '\(id)' does not exist") }
            return .deleted(existing)
        }
    }

    private mutating func stamped(_ record: Record) -> Record {
        var record = record
        record.recordChangeTag = "kq\(nextTag)"
        nextTag += 1
        return record
    }
}
