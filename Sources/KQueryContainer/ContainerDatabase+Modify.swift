import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension ContainerDatabase {
    /// The most operations one modify takes (CloudKit Web Services' limit).
    public static let maximumOperations = 200

    /// Applies record operations (Web Services `records/modify`, CKModifyRecordsOperation) in one
    /// transaction and returns one result per operation, in order, with the notifications the
    /// changes queued.
    ///
    /// Operations on the default zone stand alone. With `atomic` (the default), the operations on
    /// one custom zone apply all or none: when one fails, it keeps its error and its siblings in
    /// that zone fail with ATOMIC_ERROR, while other zones apply independently. Deleting a record
    /// deletes the records that hold DELETE_SELF references to it, recursively, in the same commit;
    /// those deletions appear in zone changes and fire subscriptions like any other.
    ///
    /// `device` names the device making the change (its `apnsToken`): the pushes it causes skip
    /// that device, as CloudKit's do (SPEC §10).
    ///
    /// Returns once the changes are on stable storage. With `durably: false` it returns once they
    /// are committed (visible to every reader, and kept through a kill -9, but not yet through a
    /// power cut): call `container.waitUntilDurable()` before acknowledging them, as a server
    /// committing modifies one after another and syncing them together does.
    ///
    /// Whole-request errors (thrown): more than 200 operations (LIMIT_EXCEEDED), two operations on
    /// one record or an empty record name (BAD_REQUEST), a storage failure.
    public func modify(
        _ operations: [RecordOperation], atomic: Bool = true, device: String? = nil, durably: Bool = true
    ) throws(ContainerError) -> ModifyResult {
        // The shared database changes the owners' zones, as their participants may (SPEC §13).
        if scope == .shared { return try sharedModify(operations, atomic: atomic, device: device, durably: durably) }
        // Only a private database's zones have two spellings: elsewhere the operations stand.
        let requested = scope == .private ? operations.map { RecordOperation(kind: $0.kind, record: canonical($0.record)) } : operations
        guard requested.count <= Self.maximumOperations else {
            throw ContainerError(.limitExceeded, "a modify takes at most \(Self.maximumOperations) operations, not \(operations.count)")
        }
        // The operations by zone, zones in order of first appearance. Found by comparing, not
        // hashing: a modify names a zone or a few.
        var zoneGroups: [(zone: ZoneID, indices: [Int])] = []
        var seen: Set<RecordID> = []
        // By position: enumerating copied each operation, its record with it.
        for index in requested.indices {
            let id = requested[index].record.recordID
            guard !id.recordName.isEmpty else { throw ContainerError(.badRequest, "operation \(index) has an empty recordName") }
            // (A deletion names what exists, or is answered NOT_FOUND.)
            let length = id.recordName.utf16.count
            if requested[index].kind != .delete, requested[index].kind != .forceDelete {
                if length > RecordID.maximumNameLength {
                    throw ContainerError(.badRequest, "operation \(index): a record name is at most \(RecordID.maximumNameLength) characters, not \(length)")
                }
                if let long = requested[index].record.trackedReferences.first(where: { $0.recordID.recordName.utf16.count > RecordID.maximumNameLength }) {
                    throw ContainerError(.badRequest, """
                        operation \(index): a reference names a record of \(long.recordID.recordName.utf16.count) characters; \
                        a record name is at most \(RecordID.maximumNameLength)
                        """)
                }
            }
            // A lone operation repeats no other: not hashed.
            guard requested.count == 1 || seen.insert(id).inserted else {
                throw ContainerError(.badRequest, "record '\(id.recordName)' appears in more than one operation (one operation per record)")
            }
            if let group = zoneGroups.lastIndex(where: { $0.zone == id.zoneID }) {
                zoneGroups[group].indices.append(index)
            } else {
                zoneGroups.append((id.zoneID, [index]))
            }
        }
        let now = container.clock()
        let user = actingUser
        let queryStore = container.queryStore(key)
        let savesAssets = requested.contains { $0.record.holdsAssets }
        let sharing = Self.touchesSharing(requested)
        // Who else sees these zones: their shared databases' database subscriptions fire too.
        let sharedWith = scope == .private && zoneGroups.contains(where: { !$0.zone.isDefaultZone })
            ? try container.participants(of: zoneGroups.map(\.zone), owner: key.userRecordName, environment: environment) : [:]
        // A share saved or deleted (also by a cascade) changes who sees what in shared databases:
        // their index is read again once this write has committed.
        var changesShares = false
        defer { if changesShares { container.sharingGeneration.add(1, ordering: .releasing) } }
        return try container.write(durably: durably) { state, tx throws(ContainerError) -> (ModifyResult, Container.QueryStoreUpdate?) in
            // The changes to commit, and beside each the operation that caused it.
            var changes: [RecordChange] = []
            var causes: [Int] = []
            let stored = try tx.database(key)
            // Asset values with receipts become stored assets (SPEC §12) before anything is staged.
            let assets = savesAssets ? try resolveAssets(requested, tx: tx, database: stored, now: now) : nil
            var operations = assets?.operations ?? requested
            var groups = zoneGroups
            var failed = assets?.errors ?? [:]
            var shareLinks: [RecordID: Reference?] = [:]
            // Shares are checked and their roots linked (SPEC §13); roots to update come after the request's operations.
            if sharing {
                let shares = try resolveSharing(operations, tx: tx, database: stored)
                for index in operations.count..<shares.operations.count {
                    let zone = shares.operations[index].record.recordID.zoneID
                    if let group = groups.firstIndex(where: { $0.zone == zone }) { groups[group].indices.append(index) } else { groups.append((zone, [index])) }
                }
                operations = shares.operations
                failed.merge(shares.errors) { first, _ in first }
                shareLinks = shares.links
            }
            // Each operation's result, "not applied" until the modify decides it.
            var results = operations.map { RecordResult.failed($0.record.recordID, ContainerError(.internalError, "not applied")) }
            // Change `position` of the modify takes this sequence plus `position` (a new
            // database starts at 0).
            let firstSequence = (stored?.sequence ?? 0) + 1
            for (zone, indices) in groups {
                var exists = zone.isDefaultZone
                if !exists, scope == .private, let stored { exists = try tx.zone(zone, in: stored) != nil }
                guard exists else {
                    for index in indices {
                        results[index] = .failed(operations[index].record.recordID, ContainerError(.zoneNotFound, "zone '\(zone.zoneName)' does not exist"))
                    }
                    continue
                }
                // The zones' changes follow one another.
                let links = shareLinks.isEmpty ? [:] : Dictionary(uniqueKeysWithValues: shareLinks.filter { $0.key.zoneID == zone }.map { ($0.key.recordName, $0.value) })
                let staged = try stage(operations, indices, in: zone, atomic: atomic && !zone.isDefaultZone, failed: failed, shareLinks: links, tx: tx,
                                       database: stored, user: user, now: now, firstSequence: firstSequence + Int64(changes.count))
                // One zone's changes are taken as they are rather than copied into empty lists.
                if changes.isEmpty {
                    changes = staged.changes
                    causes = staged.causes
                } else {
                    changes += staged.changes
                    causes += staged.causes
                }
                for (index, error) in staged.errors { results[index] = .failed(operations[index].record.recordID, error) }
            }
            // Operations sharing appended (roots linked to their shares) answer as part of the share's.
            guard !changes.isEmpty else { return (ModifyResult(results: Array(results.prefix(requested.count)), notifications: []), nil) }

            // The bookkeeping read above is still current: staging writes nothing.
            let database = if let stored { stored } else { try tx.existingOrNewDatabase(key) }
            // Cascaded deletions follow their root; operations keep request order across zones
            // (already in order when there is one zone: no sort). Staging tagged each saved record
            // with the sequence its place gives it: sorted, the places change, and so do the tags.
            if !zip(causes, causes.dropFirst()).allSatisfy({ $0 <= $1 }) {
                let order = causes.indices.sorted { (causes[$0], $0) < (causes[$1], $1) }
                changes = order.map { changes[$0] }
                causes = order.map { causes[$0] }
                for position in changes.indices { changes[position].setRecordChangeTag(Self.changeTag(firstSequence + Int64(position))) }
            }
            var zoneChanged: [ZoneID: Int64] = [:]
            // Saves are written in runs (a file writes a run in a few statements); a delete ends a
            // run, so a record deleted and created again in one modify is written in that order.
            var saves: [(record: Record, sequence: Int64)] = []
            for position in changes.indices {
                let sequence = firstSequence + Int64(position)
                // Read in place: a change copied out copies both its records.
                let id = changes[position].recordID
                let isDeletion = if case .deleted = changes[position] { true } else { false }
                if isDeletion {
                    if !saves.isEmpty { try tx.saveRecords(consume saves, in: database) }
                    saves = []
                    try tx.deleteRecord(changes[position].record, sequence: sequence, in: database)
                } else {
                    saves.append((changes[position].record, sequence))
                }
                let index = causes[position]
                // An operation's own change (a cascade's deletions are other records').
                if id == operations[index].record.recordID {
                    results[index] = isDeletion ? .deleted(id, recordType: changes[position].record.recordType) : .saved(changes[position].record)
                }
                if !id.zoneID.isDefaultZone { zoneChanged[id.zoneID] = sequence }
            }
            if !saves.isEmpty { try tx.saveRecords(consume saves, in: database) }
            if scope == .private, changes.contains(where: { $0.record.recordType == SharingKeys.shareRecordType }) { changesShares = true }
            if assets != nil || container.assetsHeld.load(ordering: .relaxed) {
                try commitAssets(changes, receipts: assets?.receipts ?? [:], results: results, tx: tx, database: database, now: now)
            }
            for (zoneID, sequence) in zoneChanged {
                guard var zone = try tx.zone(zoneID, in: database) else { continue }
                zone.changedSequence = sequence
                try tx.saveZone(zone, in: database)
            }
            try tx.setSequence(firstSequence + Int64(changes.count) - 1, of: database)
            if let keep = container.changeHistoryRetention, changes.contains(where: { if case .deleted = $0 { true } else { false } }) {
                _ = try tx.compactHistory(of: database, keepingLast: keep)
            }

            // The subscriptions that fire, and their pushes, from one lookup of the database's state.
            let notifications = try container.changeDatabase(key, &state, tx) { subscribed throws(ContainerError) in
                let firings = subscribed.subscriptions.apply(&changes, now: now)
                return try notify(changes, firings, database: database, tx: tx, now: now, device: device, templates: &subscribed.pushTemplates)
            }
            if results.count > requested.count { results.removeLast(results.count - requested.count) }
            let shared = sharedWith.isEmpty ? [] : try participantNotifications(changes, sharedWith: sharedWith, state: &state, tx: tx, now: now, device: device)
            return (ModifyResult(results: results, notifications: try tx.enqueue(shared.isEmpty ? notifications : notifications + shared), changes: changes),
                    Container.QueryStoreUpdate(store: queryStore, changes: changes, sequences: (firstSequence - 1, firstSequence + Int64(changes.count) - 1)))
        }
    }

    /// A record's change tag: its change sequence in base 36 (short: a small string, no allocation).
    /// Staging sets it as it makes each change, from the sequence the change will take.
    static func changeTag(_ sequence: Int64) -> String {
        guard sequence >= 0 else { return String(sequence, radix: 36) }
        // Thirteen digits hold any Int64 in base 36, written back to front.
        var digits: (UInt64, UInt64) = (0, 0)
        return withUnsafeMutableBytes(of: &digits) { buffer in
            var value = UInt64(sequence)
            var start = buffer.count
            repeat {
                start -= 1
                let digit = UInt8(value % 36)
                buffer[start] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
                value /= 36
            } while value > 0
            return String(decoding: UnsafeRawBufferPointer(rebasing: buffer[start...]), as: UTF8.self)
        }
    }

    /// Stages one zone's operations; returns the changes to commit and the failed operations.
    /// Atomic: any failure fails them all. Otherwise operations that break a reference rule are
    /// left out and the rest staged again, until none does.
    private func stage(
        _ operations: [RecordOperation], _ indices: [Int], in zone: ZoneID, atomic: Bool, failed: [Int: ContainerError],
        shareLinks: [String: Reference?], tx: any StorageTransaction, database: StoredDatabase?, user: String, now: Int64, firstSequence: Int64
    ) throws(ContainerError) -> (changes: [RecordChange], causes: [Int], errors: [Int: ContainerError]) {
        // Operations that failed before staging (their assets) stay out, as reference violations do.
        var excluded = failed.isEmpty ? [:] : failed.filter { indices.contains($0.key) }
        while true {
            var staging = ZoneStaging(zoneID: zone, tx: tx, database: database, user: user, now: now, firstSequence: firstSequence)
            staging.shareLinks = shareLinks
            staging.reserveCapacity(indices.count)
            var errors = excluded
            operations.withUnsafeBufferPointer { operations in
                for index in indices where excluded[index] == nil {
                    do throws(ContainerError) {
                        try staging.apply(index, in: operations)
                    } catch {
                        errors[index] = error
                    }
                }
            }
            let violations = try staging.referenceViolations()
            if !violations.isEmpty { errors.merge(violations) { first, _ in first } }
            if atomic {
                guard !errors.isEmpty else { return (staging.changes, staging.causes, [:]) }
                let sibling = ContainerError(.atomicError, "not applied: another operation on atomic zone '\(zone.zoneName)' failed")
                return ([], [], Dictionary(uniqueKeysWithValues: indices.map { ($0, errors[$0] ?? sibling) }))
            }
            if violations.isEmpty { return (staging.changes, staging.causes, errors) }
            excluded.merge(violations) { first, _ in first }
        }
    }

    /// The notifications committed changes produce (the firings the matcher found for each): query subscriptions once per change, zone and
    /// database subscriptions once per zone per modify (a device fetches the zone's changes once).
    /// The pushes of one change share their `nid`. firesOnce subscriptions that fired are deleted.
    private func notify(
        _ changes: [RecordChange], _ firingsOfChanges: [SubscriptionFirings], database: StoredDatabase, tx: any StorageWriteTransaction, now: Int64,
        device: String?, templates: inout QueryPushTemplates
    ) throws(ContainerError) -> [OutboxNotification] {
        var notifications: [OutboxNotification] = []
        /// A zone or database subscription and a zone it has notified about in this modify.
        struct NotifiedZone: Hashable {
            var subscriptionID: String
            var zoneID: ZoneID
        }
        // Keyed by value, not by text: formatting a key for each of a 200-record modify's changes
        // was 5% of its time.
        var notifiedZones: Set<NotifiedZone> = []
        var lastNotified: NotifiedZone?
        // By position: zipping copied every change out, though few are read.
        for position in changes.indices {
            let firings = firingsOfChanges[position]
            guard !firings.isEmpty else { continue }
            // Made for the change's first push: a zone's changes after its first notify nobody.
            var notificationID: String?
            for firing in firings {
                // Read once: each read of a firing's part assembles its parts.
                let subscriptionID = firing.subscriptionID
                if firing.options.contains(.firesOnce) { try tx.deleteSubscription(subscriptionID, in: database) }
                if !firing.isQuery {
                    let zone = NotifiedZone(subscriptionID: subscriptionID, zoneID: changes[position].recordID.zoneID)
                    // Most changes of a modify are in the zone the one before was in: compared, not hashed.
                    guard zone != lastNotified, notifiedZones.insert(zone).inserted else { continue }
                    lastNotified = zone
                }
                let sharedID = notificationID ?? UUIDText.random()
                notificationID = sharedID
                let owner = firing.owner
                let payload = firing.payload(context: pushContext(owner), notificationID: sharedID, templates: &templates)
                notifications.append(OutboxNotification(database: key, subscriptionID: subscriptionID, owner: owner, payload: payload, created: now,
                                                     excludedDevice: device))
            }
        }
        return notifications
    }
}
