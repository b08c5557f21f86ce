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
    /// The parent and share, rarely set, in a box that exists only when one is: each would take 56
    /// bytes in every record held in memory.
    private var links: Links?

    /// The record's parent (CKRecord.parent; Web Services `parent`), the `___parent` system field.
    public var parent: Reference? {
        get { links?.parent }
        set { setLinks(parent: newValue, share: share) }
    }

    /// The record's share (CKRecord.share; Web Services `share`), the `shareID` / `___share` system field.
    public var share: Reference? {
        get { links?.share }
        set { setLinks(parent: parent, share: newValue) }
    }

    /// Immutable once made: a change makes a new box (records are values).
    final class Links: Sendable {
        let parent: Reference?
        let share: Reference?

        init(parent: Reference?, share: Reference?) {
            self.parent = parent
            self.share = share
        }
    }

    private mutating func setLinks(parent: Reference?, share: Reference?) {
        links = parent == nil && share == nil ? nil : Links(parent: parent, share: share)
    }

    public subscript(name: String) -> FieldValue? {
        get { fields[name] }
        set { fields[name] = newValue }
    }

    /// Every property takes part, as a synthesized equality would (references by record ID, as
    /// `Reference` compares).
    public static func == (a: Record, b: Record) -> Bool {
        a.recordType == b.recordType && a.recordID == b.recordID && a.fields == b.fields
            && a.creationDate == b.creationDate && a.creatorUserRecordName == b.creatorUserRecordName
            && a.modificationDate == b.modificationDate && a.lastModifiedUserRecordName == b.lastModifiedUserRecordName
            && a.recordChangeTag == b.recordChangeTag && a.parent == b.parent && a.share == b.share
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(recordType)
        hasher.combine(recordID)
        hasher.combine(fields)
        hasher.combine(creationDate)
        hasher.combine(creatorUserRecordName)
        hasher.combine(modificationDate)
        hasher.combine(lastModifiedUserRecordName)
        hasher.combine(recordChangeTag)
        hasher.combine(parent)
        hasher.combine(share)
    }
}

// The initializers sit in an extension so that the compiler makes the memberwise one, which they call:
// one that set each stored property itself built the record on the stack and returned a copy of it
// (a retain of every string in it and a release of each again, about 450 instructions a record).
extension Record {
    public init(
        recordType: String, recordID: RecordID, fields: Fields = Fields(),
        creationDate: Int64? = nil, creatorUserRecordName: String? = nil,
        modificationDate: Int64? = nil, lastModifiedUserRecordName: String? = nil,
        recordChangeTag: String? = nil
    ) {
        self.init(recordType: recordType, recordID: recordID, fields: fields, creationDate: creationDate,
                  creatorUserRecordName: creatorUserRecordName, modificationDate: modificationDate,
                  lastModifiedUserRecordName: lastModifiedUserRecordName, recordChangeTag: recordChangeTag, links: nil)
    }

    /// A record with no system fields that takes its parts as they are (a store making many).
    package init(taking recordType: consuming String, recordID: consuming RecordID, fields: consuming Fields) {
        self.init(recordType: recordType, recordID: recordID, fields: fields, creationDate: nil, creatorUserRecordName: nil,
                  modificationDate: nil, lastModifiedUserRecordName: nil, recordChangeTag: nil, links: nil)
    }

    public init(recordType: String, recordName: String, fields: [String: FieldValue] = [:]) {
        self.init(recordType: recordType, recordID: RecordID(recordName: recordName), fields: Fields(fields.map { ($0, $1) }))
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
    case recordChangeTag
    case share
    case parent

    /// The system fields: their predicate key path and their Web Services name. The one table
    /// behind `init(name:)`, `name`, `init(webServicesName:)` and `webServicesName`. CloudKit's
    /// translator maps the first seven names to the `___` keys and lets the `___` keys through as
    /// they are, so a predicate may name a system field either way (`___parent` has only that name).
    public static let systemFields: [(field: FieldReference, name: String, webServicesName: String)] = [
        (.recordID, "recordID", "___recordID"),
        (.creationDate, "creationDate", "___createTime"),
        (.modificationDate, "modificationDate", "___modTime"),
        (.creatorUserRecordID, "creatorUserRecordID", "___createdBy"),
        (.lastModifiedUserRecordID, "lastModifiedUserRecordID", "___modifiedBy"),
        (.recordChangeTag, "recordChangeTag", "___etag"),
        (.share, "shareID", "___share"),
        (.parent, "___parent", "___parent"),
    ]

    public init(name: String) {
        // A few small-string comparisons: cheaper than hashing the name a second time.
        self = FieldReference.systemFields.first { $0.name == name || $0.webServicesName == name }?.field ?? .user(FieldKey(name))
    }

    /// The only fields CloudKit lets a predicate compare with nil (`___parent == nil`, `___share != nil`).
    public var acceptsNil: Bool { self == .parent || self == .share }

    /// The field a Web Services name denotes: `___recordID`, `___createTime`, ... or a user field.
    public init(webServicesName: String) {
        self = FieldReference.systemFields.first { $0.webServicesName == webServicesName }?.field ?? FieldReference(name: webServicesName)
    }

    public var name: String {
        if case .user(let key) = self { return key.name }
        return FieldReference.systemFields.first { $0.field == self }?.name ?? ""
    }

    /// The field name Web Services uses: system fields have `___` names.
    public var webServicesName: String {
        if case .user(let key) = self { return key.name }
        return FieldReference.systemFields.first { $0.field == self }?.webServicesName ?? ""
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
        case .recordChangeTag: return recordChangeTag.map(FieldValue.string)
        case .share: return share.map(FieldValue.reference)
        case .parent: return parent.map(FieldValue.reference)
        }
    }
}
