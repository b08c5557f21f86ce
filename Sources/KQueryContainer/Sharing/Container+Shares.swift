import KQuery

/// Who resolves or accepts a share: a user and the lookup info the local directory knows for them
/// (an invitation names a person by email, phone or user record name).
public struct ShareCaller: Hashable, Sendable {
    public var userRecordName: String
    public var emailAddresses: [String]
    public var phoneNumbers: [String]

    public init(userRecordName: String, emailAddresses: [String] = [], phoneNumbers: [String] = []) {
        self.userRecordName = userRecordName
        self.emailAddresses = emailAddresses
        self.phoneNumbers = phoneNumbers
    }
}

/// A share as one caller sees it (`records/resolve`, `records/accept`; SPEC §13).
public struct ShareMetadata: Sendable {
    public var owner: String
    public var zoneID: ZoneID
    public var share: Record
    /// A hierarchy share's root (nil for a zone-wide share).
    public var rootRecordName: String?
    public var rootRecord: Record?
    /// The caller's entry among the participants (for the owner, the owner's).
    public var participant: JSON
    /// Whether the caller owns the share (its database scope is then PRIVATE, else SHARED).
    public var isOwner: Bool
    /// When the caller matches no participant of a private share that invited people by email or
    /// phone whom no user was matched to yet: those invitations, as
    /// `{participantId, contactInformation: {emailAddress?, phoneNumber?}}`, for the caller to
    /// verify one of them (then the share itself is not shown).
    public var potentialMatches: [JSON] = []
}

extension Container {
    /// The share a short GUID names, in `environment`, with its owner's database (read from each
    /// private database's shares: sharing links are opened rarely).
    func share(shortGUID: String, environment: ContainerEnvironment) throws(ContainerError) -> (owner: String, share: Record)? {
        guard !shortGUID.isEmpty else { return nil }
        return try storage.read { tx throws(ContainerError) -> (owner: String, share: Record)? in
            for (key, stored) in try tx.allDatabases() where key.scope == .private && key.environment == environment {
                for record in try tx.shares(in: stored) where record.fields[ContainerDatabase.shortGUIDKey] == .string(shortGUID) {
                    return (key.userRecordName, record)
                }
            }
            return nil
        }
    }

    /// The share `shortGUID` names as `caller` sees it; with `accepting`, the caller's invitation
    /// is accepted first (idempotent; on a public share the caller joins as a PUBLIC_USER).
    /// NOT_FOUND for an unknown GUID; ACCESS_DENIED when the caller is neither the owner nor a
    /// participant and the share is not public. `isVerified` tells whether some user owns an email
    /// address or phone number an invitation names (such an invitation waits for that user; the
    /// others may be the caller's, not verified yet: `potentialMatches`).
    public func resolveShare(
        shortGUID: String, environment: ContainerEnvironment, caller: ShareCaller, fetchRoot: Bool, accepting: Bool,
        isVerified: (_ emailAddress: String?, _ phoneNumber: String?) -> Bool = { _, _ in false }
    ) throws(ContainerError) -> ShareMetadata {
        guard let found = try share(shortGUID: shortGUID, environment: environment) else {
            throw ContainerError(.notFound, "no share has the short GUID '\(shortGUID)'")
        }
        let ownerDatabase = try database(.private, environment: environment, user: found.owner)
        var share = found.share
        let isOwner = caller.userRecordName == found.owner
        var participants: [JSON] = []
        if case .string(let text)? = share.fields[ContainerDatabase.participantsKey], case .array(let entries)? = try? JSON.parse(text) {
            participants = entries
        }
        var position = participants.firstIndex { Self.names($0, caller) && $0["acceptanceStatus"]?.stringValue != "REMOVED" }
        let publicPermission = share.fields[ContainerDatabase.publicPermissionKey].flatMap { if case .string(let p) = $0 { p } else { nil } } ?? "NONE"
        if isOwner {
            position = participants.firstIndex { $0["type"]?.stringValue == "OWNER" }
        } else if position == nil, publicPermission == "NONE" {
            let unverified = Self.unverifiedInvitations(participants).filter {
                !isVerified($0["contactInformation"]?["emailAddress"]?.stringValue, $0["contactInformation"]?["phoneNumber"]?.stringValue)
            }
            guard !unverified.isEmpty else {
                throw ContainerError(.accessDenied, "you are not a participant of this share (ask its owner to invite you)")
            }
            guard !accepting else {
                throw ContainerError(.accessDenied, "PARTICIPANT_MAY_NEED_VERIFICATION: the share invited an email address or phone number "
                    + "not verified as yours; add it to your user (kquery users add) and accept again")
            }
            return ShareMetadata(owner: found.owner, zoneID: share.recordID.zoneID, share: share, rootRecordName: nil, rootRecord: nil,
                                 participant: .object([]), isOwner: false, potentialMatches: unverified)
        }
        if accepting, !isOwner {
            var changed = false
            if let at = position {
                if participants[at]["acceptanceStatus"]?.stringValue != "ACCEPTED" || participants[at]["userIdentity"]?["userRecordName"] == nil {
                    participants[at] = Self.accepted(participants[at], by: caller.userRecordName)
                    changed = true
                }
            } else {
                participants.append(.object([
                    ("participantId", .string(UUIDText.random())), ("type", .string("PUBLIC_USER")), ("permission", .string(publicPermission)),
                    ("acceptanceStatus", .string("ACCEPTED")), ("userIdentity", .object([("userRecordName", .string(caller.userRecordName))])),
                ]))
                position = participants.count - 1
                changed = true
            }
            if changed {
                share.fields[ContainerDatabase.participantsKey] = .string(JSON.array(participants).serialized)
                let result = try ownerDatabase.modify([RecordOperation(kind: .forceUpdate, record: share)])
                guard case .saved(let saved)? = result.results.first else {
                    throw result.results.first?.error ?? ContainerError(.internalError, "the share was not saved")
                }
                share = saved
            }
        }
        let participant = position.map { participants[$0] }
            ?? .object([("type", .string("PUBLIC_USER")), ("permission", .string(publicPermission)), ("acceptanceStatus", .string("UNKNOWN"))])
        var rootName: String?
        var root: Record?
        if case .reference(let reference)? = share.fields[ContainerDatabase.forRecordKey] {
            rootName = reference.recordID.recordName
            if fetchRoot, case .saved(let record)? = try ownerDatabase.lookup([reference.recordID]).first { root = record }
        }
        return ShareMetadata(owner: found.owner, zoneID: share.recordID.zoneID, share: share, rootRecordName: rootName, rootRecord: root,
                             participant: participant, isOwner: isOwner)
    }

    /// The invitations still waiting for a person no user was matched to (named by email or phone
    /// only), as `potentialMatchList` entries.
    static func unverifiedInvitations(_ participants: [JSON]) -> [JSON] {
        participants.compactMap { entry -> JSON? in
            guard entry["type"]?.stringValue != "OWNER", entry["acceptanceStatus"]?.stringValue == "INVITED",
                  entry["userIdentity"]?["userRecordName"] == nil, entry["userIdentity"]?["lookupInfo"]?["userRecordName"] == nil,
                  let id = entry["participantId"]?.stringValue else { return nil }
            var contact: [(String, JSON)] = []
            for key in ["emailAddress", "phoneNumber"] {
                if let value = entry["userIdentity"]?["lookupInfo"]?[key]?.stringValue { contact.append((key, .string(value))) }
            }
            guard !contact.isEmpty else { return nil }
            return .object([("participantId", .string(id)), ("contactInformation", .object(contact))])
        }
    }

    /// Whether a participant entry names the caller (user record name, email or phone).
    static func names(_ participant: JSON, _ caller: ShareCaller) -> Bool {
        let identity = participant["userIdentity"]
        if identity?["userRecordName"]?.stringValue == caller.userRecordName { return true }
        let lookup = identity?["lookupInfo"]
        if lookup?["userRecordName"]?.stringValue == caller.userRecordName { return true }
        if let email = lookup?["emailAddress"]?.stringValue?.lowercased(), caller.emailAddresses.contains(where: { $0.lowercased() == email }) { return true }
        func digits(_ text: String) -> String { String(text.filter(\.isNumber)) }
        if let phone = lookup?["phoneNumber"]?.stringValue.map(digits), !phone.isEmpty, caller.phoneNumbers.contains(where: { digits($0) == phone }) { return true }
        return false
    }

    /// The participant entry accepted by `user` (who is then named in it).
    static func accepted(_ participant: JSON, by user: String) -> JSON {
        guard case .object(var members) = participant else { return participant }
        func set(_ key: String, _ value: JSON) {
            if let at = members.firstIndex(where: { $0.0 == key }) { members[at].1 = value } else { members.append((key, value)) }
        }
        set("acceptanceStatus", .string("ACCEPTED"))
        var identity: [(String, JSON)] = []
        if case .object(let existing)? = participant["userIdentity"] { identity = existing.filter { $0.0 != "userRecordName" } }
        set("userIdentity", .object([("userRecordName", .string(user))] + identity))
        return .object(members)
    }
}
