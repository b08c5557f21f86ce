/// The sharing keys CloudKit sends beside a record's `fields` (SPEC §13): `shortGUID` on a shared
/// root and its share, and on a share (`cloudkit.share`) `publicPermission`, `participants`,
/// `owner` and the keys CloudKit adds that KQuery keeps without meaning (`denyAccessRequests`, ...).
/// They are kept as fields with CloudKit's reserved `___` prefix, so every store, change log and
/// file carries them as it carries fields, and they are written back beside `fields`, never in it.
public enum SharingKeys {
    /// The top-level key and the reserved field that keeps it.
    public static let shortGUID = ("shortGUID", "___shortGUID")
    public static let publicPermission = ("publicPermission", "___publicPermission")
    /// A JSON array, as text.
    public static let participants = ("participants", "___participants")
    /// The owner participant, as JSON text.
    public static let owner = ("owner", "___owner")
    /// The root's record name (a hierarchy share's `forRecord`).
    public static let forRecord = ("forRecord", "___forRecord")
    /// A JSON object of other keys a share was saved with, echoed back as they came.
    public static let extras = "___shareExtras"
    /// A request key: give the record a short GUID (kept until the modify reads it).
    public static let createShortGUID = ("createShortGUID", "___createShortGUID")

    /// The record type of shares, in CloudKit's spelling (accepted in any capitalisation).
    public static let shareRecordType = "cloudkit.share"
    /// The record name of a zone-wide share.
    public static let zoneShareName = "cloudkit.zoneshare"

    /// Top-level keys of a record that are not sharing keys.
    static let recordKeys: Set<String> = [
        "recordName", "recordType", "zoneID", "fields", "created", "modified", "recordChangeTag", "parent", "share", "deleted",
        "desiredKeys", "pluginFields", "shortGUID", "createShortGUID", "publicPermission", "participants", "owner", "forRecord",
        "currentUserParticipant",
    ]

    /// Whether a field name is reserved for system values (three underscores).
    @inlinable
    public static func isReserved(_ name: String) -> Bool {
        var bytes = name.utf8.makeIterator()
        return bytes.next() == 95 && bytes.next() == 95 && bytes.next() == 95
    }

    /// Whether the record type names shares (any capitalisation).
    public static func isShareType(_ recordType: String) -> Bool {
        recordType.utf8.count == shareRecordType.utf8.count && recordType.lowercased() == shareRecordType
    }

    /// Whether `name` may name a field of a record of `recordType`: a valid field name, or on a
    /// share one of CloudKit's own (`cloudkit.title`, `cloudkit.type`, ...).
    public static func isValidFieldName(_ name: String, recordType: String) -> Bool {
        FieldKey.isValidName(name) || (isShareType(recordType) && name.hasPrefix("cloudkit.") && name.utf8.count <= 255)
    }
}

extension Record {
    /// Reads the sharing keys of a record's JSON into their reserved fields.
    mutating func readSharingKeys(_ json: JSON) throws(RecordDecodingError) {
        let name = recordID.recordName
        if let value = json[SharingKeys.createShortGUID.0] {
            guard case .bool(let create) = value else { throw RecordDecodingError("record '\(name)': \"createShortGUID\" must be true or false") }
            if create { fields[SharingKeys.createShortGUID.1] = .int64(1) }
        }
        if let value = json[SharingKeys.shortGUID.0], value != .null {
            guard let text = value.stringValue, !text.isEmpty, text.utf8.count <= 64 else {
                throw RecordDecodingError("record '\(name)': \"shortGUID\" must be a string")
            }
            fields[SharingKeys.shortGUID.1] = .string(text)
        }
        guard SharingKeys.isShareType(recordType) else { return }
        recordType = SharingKeys.shareRecordType
        if let value = json[SharingKeys.publicPermission.0], value != .null {
            guard let text = value.stringValue else { throw RecordDecodingError("share '\(name)': \"publicPermission\" must be a string") }
            fields[SharingKeys.publicPermission.1] = .string(text)
        }
        if let value = json[SharingKeys.participants.0], value != .null {
            guard case .array = value else { throw RecordDecodingError("share '\(name)': \"participants\" must be an array") }
            fields[SharingKeys.participants.1] = .string(value.serialized)
        }
        if let value = json[SharingKeys.forRecord.0], value != .null {
            guard let root = value["recordName"]?.stringValue, !root.isEmpty else {
                throw RecordDecodingError("share '\(name)': \"forRecord\" needs a \"recordName\"")
            }
            fields[SharingKeys.forRecord.1] = .string(root)
        }
        if let value = json[SharingKeys.owner.0], case .object = value { fields[SharingKeys.owner.1] = .string(value.serialized) }
        if case .object(let members) = json {
            let extras = members.filter { !SharingKeys.recordKeys.contains($0.0) }
            if !extras.isEmpty { fields[SharingKeys.extras] = .string(JSON.object(extras).serialized) }
        }
    }

    /// The record's sharing keys as top-level members, in a stable order.
    var sharingMembers: [(String, JSON)] {
        var members: [(String, JSON)] = []
        if case .string(let guid)? = fields[SharingKeys.shortGUID.1] { members.append((SharingKeys.shortGUID.0, .string(guid))) }
        guard recordType == SharingKeys.shareRecordType else { return members }
        if case .string(let permission)? = fields[SharingKeys.publicPermission.1] {
            members.append((SharingKeys.publicPermission.0, .string(permission)))
        }
        for key in [SharingKeys.owner, SharingKeys.participants] {
            if case .string(let text)? = fields[key.1], let json = try? JSON.parse(text) { members.append((key.0, json)) }
        }
        let root: String? = switch fields[SharingKeys.forRecord.1] {
        case .string(let name)?: name
        case .reference(let reference)?: reference.recordID.recordName
        default: nil
        }
        if let root {
            var reference: [(String, JSON)] = [("recordName", .string(root))]
            if recordID.zoneID != .default { reference.append(("zoneID", recordID.zoneID.json)) }
            members.append((SharingKeys.forRecord.0, .object(reference)))
        }
        if case .string(let text)? = fields[SharingKeys.extras], case .object(let extras)? = try? JSON.parse(text) { members += extras }
        return members
    }
}
