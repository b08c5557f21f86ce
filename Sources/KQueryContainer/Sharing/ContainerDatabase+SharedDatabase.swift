import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A share one user accepted, as the shared database sees it.
struct AcceptedShare: Sendable {
    var owner: String
    var zoneID: ZoneID
    var shareID: RecordID
    /// A hierarchy share's root; nil for a zone-wide share.
    var root: RecordID?
    /// READ_ONLY or READ_WRITE.
    var permission: String
    /// Whether the participant administers the share (changes its participants and settings).
    var isAdministrator = false
}

/// The accepted shares of one environment, by participant, as of a sharing generation.
struct ShareIndex: Sendable {
    var generation: Int
    var accepted: [String: [AcceptedShare]]
}

extension Container {
    /// The shares each user has accepted in `environment`, read from the owners' private databases
    /// and kept until a modify touches sharing.
    func acceptedShares(of user: String, environment: ContainerEnvironment) throws(ContainerError) -> [AcceptedShare] {
        let generation = sharingGeneration.load(ordering: .acquiring)
        // Other nodes' modifies do not move this node's generation: a shared storage reads the shares each time.
        if !storage.isShared, let index = shareIndexes.withLock({ $0[environment] }), index.generation == generation { return index.accepted[user] ?? [] }
        var accepted: [String: [AcceptedShare]] = [:]
        try storage.read { tx throws(ContainerError) in
            for (key, stored) in try tx.allDatabases() where key.scope == .private && key.environment == environment {
                for record in try tx.shares(in: stored) {
                    guard case .string(let text)? = record.fields[ContainerDatabase.participantsKey], case .array(let entries)? = try? JSON.parse(text) else { continue }
                    let root: RecordID? = if case .reference(let reference)? = record.fields[ContainerDatabase.forRecordKey] { reference.recordID } else { nil }
                    for entry in entries where entry["type"]?.stringValue != "OWNER" && entry["acceptanceStatus"]?.stringValue == "ACCEPTED" {
                        guard let user = entry["userIdentity"]?["userRecordName"]?.stringValue, user != key.userRecordName else { continue }
                        let permission = entry["permission"]?.stringValue ?? "READ_ONLY"
                        guard permission == "READ_ONLY" || permission == "READ_WRITE" else { continue }
                        accepted[user, default: []].append(AcceptedShare(
                            owner: key.userRecordName, zoneID: record.recordID.zoneID, shareID: record.recordID, root: root, permission: permission,
                            isAdministrator: entry["type"]?.stringValue == "ADMINISTRATOR"))
                    }
                }
            }
        }
        shareIndexes.withLock { $0[environment] = ShareIndex(generation: generation, accepted: accepted) }
        return accepted[user] ?? []
    }
}

/// The shared database (SPEC §13): each owner zone a user accepted a share in, as
/// `{zoneName, ownerRecordName: <owner>}`, holding only what is shared (the hierarchy under a
/// share's root, or the whole zone) and the share; READ_WRITE participants change those records
/// through it, stamped as themselves.
extension ContainerDatabase {
    /// The shares this user accepted in `zoneID` (whose owner name is the sharer's).
    func acceptedShares(in zoneID: ZoneID) throws(ContainerError) -> [AcceptedShare] {
        guard let user = userRecordName else { return [] }
        return try container.acceptedShares(of: user, environment: environment).filter { $0.zoneID == zoneID }
    }

    /// The owner's private database, acting as this user.
    func ownerDatabase(_ owner: String) -> ContainerDatabase {
        ContainerDatabase(container: container, key: DatabaseKey(environment: environment, scope: .private, userRecordName: owner), userRecordName: userRecordName)
    }

    /// The shared zones, by name and owner.
    func sharedZones() throws(ContainerError) -> [ZoneID] {
        guard let user = userRecordName else { return [] }
        let zones = Set(try container.acceptedShares(of: user, environment: environment).map(\.zoneID))
        return zones.sorted { ($0.zoneName, $0.ownerName) < ($1.zoneName, $1.ownerName) }
    }

    /// The share of `shares` that gives this user `record` (nil: the record is not shared with them).
    func share(covering record: Record, in shares: [AcceptedShare], owner: ContainerDatabase) throws(ContainerError) -> AcceptedShare? {
        if let zoneShare = shares.first(where: { $0.root == nil }) { return zoneShare }
        if let own = shares.first(where: { $0.shareID == record.recordID }) { return own }
        var current = record
        // A parent chain is walked up to a root; a long or circular one is not shared.
        for _ in 0..<Self.maximumParentDepth {
            if let covering = shares.first(where: { $0.root == current.recordID }) { return covering }
            guard let parent = current.parent?.recordID, parent.zoneID == record.recordID.zoneID, let next = try owner.record(parent) else { return nil }
            current = next
        }
        return nil
    }

    static let maximumParentDepth = 64

    /// The shares this user accepted in a zone and its owner's database (acting as this user), or
    /// ZONE_NOT_FOUND when none was shared with them.
    func sharedZone(_ zoneID: ZoneID) throws(ContainerError) -> (shares: [AcceptedShare], owner: ContainerDatabase) {
        let shares = try acceptedShares(in: zoneID)
        guard let first = shares.first else { throw sharedZoneNotFound(zoneID) }
        return (shares, ownerDatabase(first.owner))
    }

    func sharedZoneNotFound(_ zoneID: ZoneID) -> ContainerError {
        ContainerError(.zoneNotFound, "zone '\(zoneID.zoneName)' of '\(zoneID.ownerName)' is not shared with you")
    }

    /// `lookup` in the shared database.
    func sharedLookup(_ ids: [RecordID]) throws(ContainerError) -> [RecordResult] {
        var results: [RecordResult] = []
        for id in ids {
            let shares = try acceptedShares(in: id.zoneID)
            guard let first = shares.first else {
                results.append(.failed(id, sharedZoneNotFound(id.zoneID)))
                continue
            }
            let owner = ownerDatabase(first.owner)
            if let record = try owner.record(id), try share(covering: record, in: shares, owner: owner) != nil {
                results.append(.saved(record))
            } else {
                results.append(.failed(id, ContainerError(.notFound, "record '\(id.recordName)' does not exist")))
            }
        }
        return results
    }

    /// `query` in the shared database: a shared zone's records that are shared with this user.
    func sharedQuery(_ query: Query, cursor: QueryCursor?, now: Int64?) throws(ContainerError) -> QueryResult {
        guard let zoneID = query.zoneID, !zoneID.isDefaultZone else {
            throw ContainerError(.badRequest, "a query in the shared database names a shared zone (zoneID with its ownerRecordName)")
        }
        let (shares, owner) = try sharedZone(zoneID)
        var result = try owner.query(query, cursor: cursor, now: now)
        if shares.contains(where: { $0.root == nil }) { return result }
        var visible: [Record] = []
        for record in result.records where try share(covering: record, in: shares, owner: owner) != nil { visible.append(record) }
        result.records = visible
        return result
    }

    /// `zoneChanges` in the shared database: the owner zone's changes, those the user may not see
    /// as deletions (a record that leaves the shared hierarchy leaves the participant's copy).
    func sharedZoneChanges(_ zoneID: ZoneID, since token: SyncToken?, resultsLimit: Int) throws(ContainerError) -> ZoneChanges {
        let (shares, owner) = try sharedZone(zoneID)
        var changes = try owner.zoneChanges(zoneID, since: token, resultsLimit: resultsLimit)
        if shares.contains(where: { $0.root == nil }) { return changes }
        var visible: [RecordZoneChange] = []
        for change in changes.changes {
            if case .changed(let record) = change, try share(covering: record, in: shares, owner: owner) == nil {
                visible.append(.deleted(record.recordID, recordType: record.recordType))
            } else {
                visible.append(change)
            }
        }
        changes.changes = visible
        return changes
    }

    /// `modify` in the shared database: READ_WRITE participants save and delete shared records
    /// (a new record under a shared parent, or anywhere in a zone shared whole); an administrator
    /// also changes the share; deleting the share leaves it; the root's deletion, others' changes
    /// to the share and records outside the share are refused (ACCESS_DENIED), READ_ONLY ones too.
    func sharedModify(_ operations: [RecordOperation], atomic: Bool, device: String?, durably: Bool) throws(ContainerError) -> ModifyResult {
        var refusals: [Int: ContainerError] = [:]
        var owners: Set<String> = []
        /// Operations answered here rather than by the owner's database: leaving, administering.
        /// They run once the whole request is known to be applied (one owner, nothing refused in
        /// an atomic one), never before.
        var deferred: [Int: DeferredSharedOperation] = [:]
        for (index, operation) in operations.enumerated() {
            let id = operation.record.recordID
            let shares = try acceptedShares(in: id.zoneID)
            guard let first = shares.first else {
                refusals[index] = sharedZoneNotFound(id.zoneID)
                continue
            }
            owners.insert(first.owner)
            let owner = ownerDatabase(first.owner)
            let isDeletion = operation.kind == .delete || operation.kind == .forceDelete
            let existing = try owner.record(id)
            // The share decides by the record as stored, or for a new one by its parent.
            var covering: AcceptedShare?
            if let existing {
                covering = try share(covering: existing, in: shares, owner: owner)
            } else if !isDeletion {
                covering = try share(covering: operation.record, in: shares, owner: owner)
            }
            guard let covering else {
                refusals[index] = existing == nil && isDeletion
                    ? ContainerError(.notFound, "record '\(id.recordName)' does not exist")
                    : ContainerError(.accessDenied, "record '\(id.recordName)' is not shared with you")
                continue
            }
            if isDeletion, id == covering.shareID {
                // A participant deleting the share leaves it; the share stays for the others.
                deferred[index] = .leave(covering)
            } else if id == covering.shareID, covering.isAdministrator, SharingKeys.isShareType(operation.record.recordType) {
                // An administrator changes participants and settings as the owner would (the owner stays the owner).
                let asOwner = try container.database(.private, environment: environment, user: covering.owner)
                deferred[index] = .administer(asOwner)
            } else if covering.permission != "READ_WRITE" {
                refusals[index] = ContainerError(.accessDenied, "you may read this share, not change it (READ_ONLY)")
            } else if id == covering.shareID || SharingKeys.isShareType(operation.record.recordType) {
                refusals[index] = ContainerError(.accessDenied, "only the owner changes a share")
            } else if id == covering.root, isDeletion {
                refusals[index] = ContainerError(.accessDenied, "only the owner deletes the root of a share")
            }
        }
        guard owners.count <= 1 else { throw ContainerError(.badRequest, "a modify in the shared database changes one owner's zones at a time") }
        let refused = { (index: Int) -> RecordResult in .failed(operations[index].record.recordID, refusals[index]!) }
        if !refusals.isEmpty, atomic {
            let sibling = ContainerError(.atomicError, "not applied: another operation on an atomic zone failed")
            return ModifyResult(results: operations.indices.map { refusals[$0] == nil ? .failed(operations[$0].record.recordID, sibling) : refused($0) }, notifications: [])
        }
        var handled: [Int: RecordResult] = [:]
        for (index, operation) in deferred.sorted(by: { $0.key < $1.key }) {
            let id = operations[index].record.recordID
            switch operation {
            case .leave(let covering):
                try leave(covering)
                handled[index] = .deleted(id, recordType: SharingKeys.shareRecordType)
            case .administer(let asOwner):
                handled[index] = try asOwner.modify([operations[index]], device: device, durably: durably).results.first
                    ?? .failed(id, ContainerError(.internalError, "the share was not saved"))
            }
        }
        let allowed = operations.indices.filter { refusals[$0] == nil && handled[$0] == nil }
        var results = operations.indices.map { index -> RecordResult in
            if let result = handled[index] { return result }
            return refusals[index] == nil ? .failed(operations[index].record.recordID, ContainerError(.internalError, "not applied")) : refused(index)
        }
        guard let owner = owners.first, !allowed.isEmpty else { return ModifyResult(results: results, notifications: []) }
        let applied = try ownerDatabase(owner).modify(allowed.map { operations[$0] }, atomic: atomic, device: device, durably: durably)
        for (position, index) in allowed.enumerated() { results[index] = applied.results[position] }
        return ModifyResult(results: results, notifications: applied.notifications, changes: applied.changes)
    }
}

/// A shared-database operation the participant's request makes on the share itself.
enum DeferredSharedOperation {
    /// Deleting the share: the participant leaves it.
    case leave(AcceptedShare)
    /// An administrator's change to the share, saved as its owner (that database).
    case administer(ContainerDatabase)
}

extension ContainerDatabase {
    /// `databaseChanges` in the shared database: the shared zones that appeared or changed since
    /// `token`, and those that left (SPEC §13). The token is this user's own: it lists each shared
    /// zone with the owner zone's creation and last change, so what moved is found by comparing.
    func sharedDatabaseChanges(since token: SyncToken?) throws(ContainerError) -> DatabaseChanges {
        let binding = "\(key)|shared database"
        let secret = container.storage.secret
        var seen: [ZoneID: (created: Int64, changed: Int64)] = [:]
        if let token { seen = try Self.sharedState(token, binding: binding, secret: secret) }
        var current: [ZoneID: (created: Int64, changed: Int64)] = [:]
        let zones = try sharedZones()
        try container.storage.read { tx throws(ContainerError) in
            // What the user sees of each zone changed last at the sequence their shared database
            // noted (`markViewChanged`): changes to the zone outside their shares do not list it.
            let view = try tx.database(key)
            for zoneID in zones {
                let ownerKey = DatabaseKey(environment: environment, scope: .private, userRecordName: zoneID.ownerName)
                guard let database = try tx.database(ownerKey), let zone = try tx.zone(zoneID, in: database) else { continue }
                let seen = try view.flatMap { view throws(ContainerError) in try tx.zone(zoneID, in: view) }
                current[zoneID] = (zone.createdSequence, seen?.changedSequence ?? 0)
            }
        }
        let order = { (a: ZoneID, b: ZoneID) in (a.zoneName, a.ownerName) < (b.zoneName, b.ownerName) }
        let changed = current.filter { zone, state in seen[zone].map { $0 != state } ?? true }.keys.sorted(by: order)
        let deleted = seen.keys.filter { current[$0] == nil }.sorted(by: order)
        return DatabaseChanges(changedZones: changed, deletedZones: deleted, syncToken: Self.sharedToken(current, binding: binding, secret: secret),
                               moreComing: false)
    }

    private static let sharedTokenPrefix = "shared1."

    static func sharedToken(_ state: [ZoneID: (created: Int64, changed: Int64)], binding: String, secret: (UInt64, UInt64)) -> SyncToken {
        let entries = state.sorted { ($0.key.zoneName, $0.key.ownerName) < ($1.key.zoneName, $1.key.ownerName) }.map { zone, sequences in
            JSON.array([.string(zone.zoneName), .string(zone.ownerName), .int(sequences.created), .int(sequences.changed)])
        }
        let body = AssetSecrets.base64URL(Array(JSON.array(entries).serialized.utf8))
        let tag = SipHash.tag(Array((body + binding).utf8), key: secret.0, secret.1)
        return SyncToken(text: sharedTokenPrefix + body + "." + String(tag, radix: 16))
    }

    static func sharedState(_ token: SyncToken, binding: String, secret: (UInt64, UInt64)) throws(ContainerError) -> [ZoneID: (created: Int64, changed: Int64)] {
        guard token.text.hasPrefix(sharedTokenPrefix), token.text.utf8.count <= 1 << 20 else { throw ContainerError.invalidSyncToken }
        let parts = token.text.dropFirst(sharedTokenPrefix.count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, UInt64(parts[1], radix: 16) == SipHash.tag(Array((String(parts[0]) + binding).utf8), key: secret.0, secret.1) else {
            throw ContainerError.invalidSyncToken
        }
        var base64 = parts[0].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), case .array(let entries)? = try? JSON.parse(String(decoding: data, as: UTF8.self)) else {
            throw ContainerError.invalidSyncToken
        }
        var state: [ZoneID: (created: Int64, changed: Int64)] = [:]
        for entry in entries {
            guard let name = entry[0]?.stringValue, let owner = entry[1]?.stringValue, let created = entry[2]?.int64Value, let changed = entry[3]?.int64Value
            else { throw ContainerError.invalidSyncToken }
            state[ZoneID(zoneName: name, ownerName: owner)] = (created, changed)
        }
        return state
    }
}

extension Container {
    /// The users who accepted a share in each of `zones` of `owner`'s private database, each with
    /// the shares they accepted there.
    func participants(of zones: [ZoneID], owner: String, environment: ContainerEnvironment) throws(ContainerError)
        -> [ZoneID: [(user: String, shares: [AcceptedShare])]] {
        let custom = Set(zones.filter { !$0.isDefaultZone })
        guard !custom.isEmpty else { return [:] }
        // Builds (or reuses) the environment's index; any user name serves.
        _ = try acceptedShares(of: owner, environment: environment)
        guard let index = shareIndexes.withLock({ $0[environment] }) else { return [:] }
        var found: [ZoneID: [(user: String, shares: [AcceptedShare])]] = [:]
        for (user, shares) in index.accepted {
            for zone in custom {
                let accepted = shares.filter { $0.owner == owner && $0.zoneID == zone }
                if !accepted.isEmpty { found[zone, default: []].append((user, accepted)) }
            }
        }
        return found.mapValues { $0.sorted { $0.user < $1.user } }
    }
}

extension ContainerDatabase {
    /// What the participants see changed in the zones a modify changed: each one's shared database
    /// notes it (its database changes list the zone again), and its database subscriptions push
    /// (`dbs` 3) once per subscription and zone, as the owner's own.
    func participantNotifications(
        _ changes: [RecordChange], sharedWith: [ZoneID: [(user: String, shares: [AcceptedShare])]], state: inout Container.WriterState,
        tx: any StorageWriteTransaction, now: Int64, device: String?
    ) throws(ContainerError) -> [OutboxNotification] {
        var zones: [ZoneID] = []
        for change in changes where !zones.contains(change.recordID.zoneID) { zones.append(change.recordID.zoneID) }
        guard let stored = try tx.database(key) else { return [] }
        var notifications: [OutboxNotification] = []
        for zone in zones {
            for (participant, shares) in sharedWith[zone] ?? [] {
                // Only a change to what the participant sees (a record entering, changing in or
                // leaving a shared hierarchy, or the share) concerns them.
                var concerned = false
                for change in changes where change.recordID.zoneID == zone {
                    if case .updated(let before, let after) = change {
                        concerned = try Self.shares(shares, cover: after, tx: tx, database: stored)
                        if !concerned { concerned = try Self.shares(shares, cover: before, tx: tx, database: stored) }
                    } else {
                        concerned = try Self.shares(shares, cover: change.record, tx: tx, database: stored)
                    }
                    if concerned { break }
                }
                guard concerned else { continue }
                let key = DatabaseKey(environment: environment, scope: .shared, userRecordName: participant)
                try Self.markViewChanged(zone, in: key, tx: tx)
                let fired = try container.changeSubscriptionSet(key, &state, tx) { set throws(ContainerError) -> [Subscription] in
                    let fired = set.subscriptions.filter { if case .database(nil) = $0.kind { true } else { false } }
                    for subscription in fired where subscription.options.contains(.firesOnce) { set.remove(id: subscription.subscriptionID) }
                    return fired
                }
                guard !fired.isEmpty else { continue }
                let context = PushContext(containerIdentifier: container.containerIdentifier, environment: environment, database: .shared, userRecordName: participant)
                for subscription in fired {
                    let payload = PushPayload.database(subscriptionID: subscription.subscriptionID, zoneID: zone, notificationInfo: subscription.notificationInfo, context: context)
                    notifications.append(OutboxNotification(database: key, subscriptionID: subscription.subscriptionID, owner: subscription.owner, payload: payload,
                                                         created: now, excludedDevice: device))
                    if subscription.options.contains(.firesOnce), let stored = try tx.database(key) { try tx.deleteSubscription(subscription.subscriptionID, in: stored) }
                }
            }
        }
        return notifications
    }
}

extension ContainerDatabase {
    /// Notes in a participant's shared database (`key`) that what they see of an owner's zone
    /// changed: the zone's entry there takes the database's next sequence, which its database
    /// change tokens compare (a change outside what they see leaves it as it was).
    static func markViewChanged(_ zone: ZoneID, in key: DatabaseKey, tx: any StorageWriteTransaction) throws(ContainerError) {
        var view = try tx.existingOrNewDatabase(key)
        view.sequence += 1
        try tx.setSequence(view.sequence, of: view)
        let created = try tx.zone(zone, in: view)?.createdSequence ?? view.sequence
        try tx.saveZone(StoredZone(zoneID: zone, createdSequence: created, changedSequence: view.sequence), in: view)
    }

    /// Whether `shares` (one participant's in a zone) give `record`: a zone-wide share, the share
    /// itself, or a root its parent chain leads to as the write transaction `tx` has it.
    static func shares(_ shares: [AcceptedShare], cover record: Record, tx: any StorageTransaction, database: StoredDatabase) throws(ContainerError) -> Bool {
        if shares.contains(where: { $0.root == nil || $0.shareID == record.recordID }) { return true }
        var current = record
        for _ in 0..<maximumParentDepth {
            if shares.contains(where: { $0.root == current.recordID }) { return true }
            guard let parent = current.parent?.recordID, parent.zoneID == record.recordID.zoneID, let next = try tx.record(parent, in: database) else { return false }
            current = next
        }
        return false
    }

    /// Takes this user out of a share they accepted (REMOVED), saved by the owner's database: the
    /// zone leaves their shared database unless another share of it remains.
    func leave(_ accepted: AcceptedShare) throws(ContainerError) {
        guard let user = userRecordName else { return }
        let owner = try container.database(.private, environment: environment, user: accepted.owner)
        guard var share = try owner.record(accepted.shareID), case .string(let text)? = share.fields[Self.participantsKey],
              case .array(var entries)? = try? JSON.parse(text) else { return }
        for position in entries.indices where entries[position]["userIdentity"]?["userRecordName"]?.stringValue == user {
            guard case .object(var members) = entries[position], let at = members.firstIndex(where: { $0.0 == "acceptanceStatus" }) else { continue }
            members[at].1 = .string("REMOVED")
            entries[position] = .object(members)
        }
        share.fields[Self.participantsKey] = .string(JSON.array(entries).serialized)
        let result = try owner.modify([RecordOperation(kind: .forceUpdate, record: share)])
        if let error = result.results.first?.error { throw error }
    }

    /// `zones/modify` delete in the shared database: leaves every share of that zone.
    func leaveSharedZone(_ zoneID: ZoneID) throws(ContainerError) {
        let shares = try acceptedShares(in: zoneID)
        guard !shares.isEmpty else { throw sharedZoneNotFound(zoneID) }
        for share in shares { try leave(share) }
    }
}
