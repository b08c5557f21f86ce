/// A CloudKit record: type, identity, user fields and system fields.
public struct Record: Hashable, Sendable {
    public var recordType: String
    public var recordID: RecordID
    public var fields: Fields
    /// Milliseconds since 1970.
    public var creationDate: Int64?
    public var creatorUserRecordName: String?
    /// Milliseconds since 1970.
    public var modificationDate: Int64?
    public var lastModifiedUserRecordName: String?
    public var recordChangeTag: String?

    public init(
        recordType: String, recordID: RecordID, fields: Fields = Fields(),
        creationDate: Int64? = nil, creatorUserRecordName: String? = nil,
        modificationDate: Int64? = nil, lastModifiedUserRecordName: String? = nil,
        recordChangeTag: String? = nil
    ) {
        self.recordType = recordType
        self.recordID = recordID
        self.fields = fields
        self.creationDate = creationDate
        self.creatorUserRecordName = creatorUserRecordName
        self.modificationDate = modificationDate
        self.lastModifiedUserRecordName = lastModifiedUserRecordName
        self.recordChangeTag = recordChangeTag
    }

    public init(recordType: String, recordName: String, fields: [String: FieldValue] = [:]) {
        self.init(recordType: recordType, recordID: RecordID(recordName: recordName), fields: Fields(fields.map { ($0, $1) }))
    }

    public subscript(name: String) -> FieldValue? {
        get { fields[name] }
        set { fields[name] = newValue }
    }
}

/// What a predicate's key path names: a user field or one of the system fields.
public enum FieldReference: Hashable, Sendable, CustomStringConvertible {
    case user(FieldKey)
    case recordID
    case creationDate
    case modificationDate
    case creatorUserRecordID
    case lastModifiedUserRecordID

    public init(name: String) {
        // A switch over five small strings is cheaper than hashing the name a second time.
        switch name {
        case "recordID": self = .recordID
        case "creationDate": self = .creationDate
        case "modificationDate": self = .modificationDate
        case "creatorUserRecordID": self = .creatorUserRecordID
        case "lastModifiedUserRecordID": self = .lastModifiedUserRecordID
        default: self = .user(FieldKey(name))
        }
    }

    public var name: String {
        switch self {
        case .user(let key): key.name
        case .recordID: "recordID"
        case .creationDate: "creationDate"
        case .modificationDate: "modificationDate"
        case .creatorUserRecordID: "creatorUserRecordID"
        case .lastModifiedUserRecordID: "lastModifiedUserRecordID"
        }
    }

    public var description: String { name }
}

extension Record {
    /// The value a predicate sees for `field`: system fields as timestamps and references.
    @inlinable
    public func value(of field: FieldReference) -> FieldValue? {
        switch field {
        case .user(let key): return fields[key]
        case .recordID: return .reference(Reference(recordID: recordID))
        case .creationDate: return creationDate.map(FieldValue.timestamp)
        case .modificationDate: return modificationDate.map(FieldValue.timestamp)
        case .creatorUserRecordID: return creatorUserRecordName.map { .reference(Reference(recordID: RecordID(recordName: $0))) }
        case .lastModifiedUserRecordID:
            return lastModifiedUserRecordName.map { .reference(Reference(recordID: RecordID(recordName: $0))) }
        }
    }
}
