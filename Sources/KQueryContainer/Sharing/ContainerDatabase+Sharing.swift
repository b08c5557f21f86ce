import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension ContainerDatabase {
    static let shortGUIDKey = FieldKey(SharingKeys.shortGUID.1)
    static let createShortGUIDKey = FieldKey(SharingKeys.createShortGUID.1)
    static let forRecordKey = FieldKey(SharingKeys.forRecord.1)
    static let participantsKey = FieldKey(SharingKeys.participants.1)
    static let ownerKey = FieldKey(SharingKeys.owner.1)
    static let publicPermissionKey = FieldKey(SharingKeys.publicPermission.1)

    /// Whether a modify's operations touch sharing (SPEC §13): a share, or a short GUID asked for
    /// or sent back.
    static func touchesSharing(_ operations: [RecordOperation]) -> Bool {
        operations.contains { operation in
            SharingKeys.isShareType(operation.record.recordType) || operation.record.recordID.recordName == SharingKeys.zoneShareName
                || operation.record.fields[createShortGUIDKey] != nil || operation.record.fields[shortGUIDKey] != nil
        }
    }

    /// What sharing makes of a modify's operations: short GUIDs given, shares checked and filled
    /// in (owner, participant IDs, the root's GUID), each new share's root pointed at it and an
    /// unshared root's `share` cleared (as operations appended after the request's), and the
    /// operations that break a sharing rule (per-record errors).
    struct ShareResolution {
        var operations: [RecordOperation]
        var errors: [Int: ContainerError] = [:]
        /// The `share` each root takes (nil inside: cleared), as `ZoneStaging.shareLinks` applies it.
        var links: [RecordID: Reference?] = [:]
    }

    func resolveSharing(_ requested: [RecordOperation], tx: any StorageTransaction, database: StoredDatabase?) throws(ContainerError) -> ShareResolution {
        // Separate variables, not one struct's: `shape` changes the operations and the links at once.
        var operations = requested
        var links: [RecordID: Reference?] = [:]
        var errors: [Int: ContainerError] = [:]
        let owner = actingUser
        func stored(_ id: RecordID) throws(ContainerError) -> Record? {
            try database.flatMap { database throws(ContainerError) in try tx.record(id, in: database) }
        }
        // Shares last: a share gives its root (wherever it sits in the request) the GUID the root settled on.
        let order = requested.indices.filter { !SharingKeys.isShareType(requested[$0].record.recordType) }
            + requested.indices.filter { SharingKeys.isShareType(requested[$0].record.recordType) }
        for index in order {
            var record = operations[index].record
            let kind = operations[index].kind
            let id = record.recordID
            do throws(ContainerError) {
                if kind == .delete || kind == .forceDelete {
                    // Unsharing: the root no longer points at the share.
                    guard SharingKeys.isShareType(record.recordType) || id.recordName == SharingKeys.zoneShareName,
                          let share = try stored(id), case .reference(let root)? = share.fields[Self.forRecordKey],
                          let rootRecord = try stored(root.recordID), rootRecord.share?.recordID == id
                    else { continue }
                    links[root.recordID] = .some(nil)
                    if !operations.contains(where: { $0.record.recordID == root.recordID }) {
                        operations.append(RecordOperation(kind: .forceUpdate, record: rootRecord))
                    }
                    continue
                }
                let existing = try stored(id)
                // A GUID is the server's to give: what a client sends back is kept only if it is the record's.
                if let sent = record.fields[Self.shortGUIDKey], sent != existing?.fields[Self.shortGUIDKey] { record.fields[Self.shortGUIDKey] = nil }
                if record.fields[Self.createShortGUIDKey] != nil {
                    record.fields[Self.createShortGUIDKey] = nil
                    record.fields[Self.shortGUIDKey] = existing?.fields[Self.shortGUIDKey] ?? .string(Self.newShortGUID())
                } else if record.fields[Self.shortGUIDKey] == nil, let guid = existing?.fields[Self.shortGUIDKey] {
                    record.fields[Self.shortGUIDKey] = guid
                }
                if SharingKeys.isShareType(record.recordType) {
                    try shape(&record, existing: existing, owner: owner, operations: &operations, links: &links, stored: stored)
                }
                operations[index] = RecordOperation(kind: kind, record: record)
            } catch {
                errors[index] = error
            }
        }
        return ShareResolution(operations: operations, errors: errors, links: links)
    }

    /// Checks a share and fills in what the server owns: the owner, participant IDs, the root's
    /// GUID, and the root's `share` (the root's operation, or one appended).
    private func shape(
        _ share: inout Record, existing: Record?, owner: String, operations: inout [RecordOperation], links: inout [RecordID: Reference?],
        stored: (RecordID) throws(ContainerError) -> Record?
    ) throws(ContainerError) {
        let id = share.recordID
        guard scope == .private, !id.zoneID.isDefaultZone else {
            throw ContainerError(.badRequest, "share '\(id.recordName)': shares live in custom zones of the private database")
        }
        let isZoneShare = id.recordName == SharingKeys.zoneShareName
        // The root, as the request names it or as the share was saved with it.
        var rootName: String?
        switch share.fields[Self.forRecordKey] {
        case .string(let name)?: rootName = name
        case .reference(let reference)?: rootName = reference.recordID.recordName
        default: if case .reference(let reference)? = existing?.fields[Self.forRecordKey] { rootName = reference.recordID.recordName }
        }
        if isZoneShare {
            guard rootName == nil else { throw ContainerError(.badRequest, "share '\(id.recordName)': a zone-wide share has no forRecord") }
        } else {
            guard let rootName else {
                throw ContainerError(.badRequest, "share '\(id.recordName)' needs \"forRecord\" (its root), or the name \(SharingKeys.zoneShareName) for a zone-wide share")
            }
            let rootID = RecordID(recordName: rootName, zoneID: id.zoneID)
            if let existingRoot = existing?.fields[Self.forRecordKey], existingRoot != .reference(Reference(recordID: rootID, action: .deleteSelf)) {
                throw ContainerError(.badRequest, "share '\(id.recordName)': its root cannot change")
            }
            if try stored(RecordID(recordName: SharingKeys.zoneShareName, zoneID: id.zoneID)) != nil {
                throw ContainerError(.badRequest, "ALREADY_SHARED: zone '\(id.zoneID.zoneName)' is shared whole; records in it cannot be shared apart")
            }
            // The root's operation in this modify, or the root as stored.
            let rootPosition = operations.firstIndex { $0.record.recordID == rootID }
            var root: Record
            if let rootPosition, operations[rootPosition].kind != .delete, operations[rootPosition].kind != .forceDelete {
                root = operations[rootPosition].record
            } else if let storedRoot = try stored(rootID) {
                root = storedRoot
            } else {
                throw ContainerError(.validatingReferenceError, "share '\(id.recordName)': its root '\(rootName)' does not exist (save them together)")
            }
            let storedRoot = try stored(rootID)
            if let other = (links[rootID] ?? storedRoot?.share)?.recordID, other != id {
                throw ContainerError(.badRequest, "ALREADY_SHARED: record '\(rootName)' is already in share '\(other.recordName)' (a record takes part in one share)")
            }
            // The share carries its root's GUID (a share URL stays the same across reshares).
            let guid = root.fields[Self.shortGUIDKey] ?? storedRoot?.fields[Self.shortGUIDKey] ?? .string(Self.newShortGUID())
            root.fields[Self.shortGUIDKey] = guid
            root.fields[Self.createShortGUIDKey] = nil
            links[rootID] = .some(Reference(recordID: id))
            share.fields[Self.shortGUIDKey] = guid
            // The share goes with its root (a DELETE_SELF reference: deleting the root deletes it).
            share.fields[Self.forRecordKey] = .reference(Reference(recordID: rootID, action: .deleteSelf))
            if let rootPosition {
                operations[rootPosition] = RecordOperation(kind: operations[rootPosition].kind, record: root)
            } else if storedRoot?.share?.recordID != id || storedRoot?.fields[Self.shortGUIDKey] != guid {
                operations.append(RecordOperation(kind: .forceUpdate, record: root))
            }
        }
        if isZoneShare {
            share.fields[Self.shortGUIDKey] = existing?.fields[Self.shortGUIDKey] ?? .string(Self.newShortGUID())
        }
        let permission: String
        switch share.fields[Self.publicPermissionKey] ?? existing?.fields[Self.publicPermissionKey] {
        case .string(let value)?:
            guard ShareParticipants.permissions.contains(value) else {
                throw ContainerError(.badRequest, "share '\(id.recordName)': publicPermission must be NONE, READ_ONLY or READ_WRITE")
            }
            permission = value
        default: permission = "NONE"
        }
        share.fields[Self.publicPermissionKey] = .string(permission)
        var previous: [JSON] = []
        if case .string(let text)? = existing?.fields[Self.participantsKey], case .array(let entries)? = try? JSON.parse(text) { previous = entries }
        let sent: String? = if case .string(let text)? = share.fields[Self.participantsKey] { text } else { nil }
        let participants = try ShareParticipants.normalized(sent, owner: owner, previous: previous)
        share.fields[Self.participantsKey] = .string(JSON.array(participants).serialized)
        share.fields[Self.ownerKey] = .string(ShareParticipants.owner(owner).serialized)
    }

    /// A short GUID: 20 URL-safe random characters.
    static func newShortGUID() -> String {
        let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        var generator = SystemRandomNumberGenerator()
        return String((0..<20).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }
}
