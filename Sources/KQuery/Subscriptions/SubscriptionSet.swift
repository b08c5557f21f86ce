import CKQuerySupport

/// The subscriptions of one database, and the matcher that finds which fire for a record change.
///
/// Query subscriptions are indexed (`QuerySubscriptionIndex`): a change evaluates only the
/// predicates its record could satisfy, not every subscription. `naiveFirings(for:now:)` is the
/// plain loop over every subscription, kept as the reference the index is tested against.
///
/// Storage is sized for a server holding millions: each subscription is a `Slot` of numbers (its
/// index entry, interned owner, notification info and zone) plus its ID, found by ID and by
/// identity through `SlotHashTable`s that store slot numbers, not keys. Slots are reused after
/// removal; a sequence number keeps the saved order, in which firings come out.
public struct SubscriptionSet: Sendable {
    public let database: DatabaseScope
    /// Optional extension (off by default, as in CloudKit): an update that takes a record out of a
    /// query subscription's results also fires it.
    public var reportsRecordsLeavingResults: Bool

    /// 48 bytes: a slot read at random spans one cache line half the time, two the other half
    /// (with a kind byte of its own it took 56, and spanned two three times in four).
    struct Slot: Sendable {
        enum Kind: UInt8, Sendable {
            case free, query, other
        }

        var subscriptionID: String
        /// Save order.
        var sequence: UInt64
        /// For a query subscription, its entry in the index; else `Slot.other` or `Slot.free`
        /// (entry numbers stay far below both: each entry takes tens of bytes).
        var entry: UInt32
        var owner: UInt32
        var notificationInfo: UInt32
        /// 0 for none, else the zone's number + 1.
        var zone: UInt32
        var options: SubscriptionOptions

        static let free = UInt32.max
        static let other = UInt32.max - 1

        var kind: Kind { entry == Self.free ? .free : entry == Self.other ? .other : .query }

        static let empty = Slot(subscriptionID: "", sequence: 0, entry: free, owner: 0, notificationInfo: 0, zone: 0, options: [])
    }

    /// What makes two subscriptions duplicates (SPEC §4): owner, type and predicate (one index
    /// entry), zone and options; for zone and database subscriptions, their kind.
    struct Identity: Hashable {
        var owner: UInt32
        var entry: UInt32
        var other: Subscription.Kind?
        var zone: UInt32
        var options: Int
    }

    /// What one match did, for tests: index probes and predicate evaluations made or saved.
    struct MatchStatistics: Sendable {
        var probes = 0
        var evaluations = 0
        /// Evaluations against the record before an update (`reportsRecordsLeavingResults`).
        var oldEvaluations = 0
        /// Verdicts on the record before an update reused because the predicate reads no changed field.
        var reusedVerdicts = 0
        /// Matches whose firings were made from their interval alone (see `SoleMatch`).
        var soleMatches = 0
    }

    private var slots: [Slot] = []
    private var freeSlots: [UInt32] = []
    private var slotByID = SlotHashTable()
    private var slotByIdentity = SlotHashTable()
    private var owners = InternTable<String>()
    private var notificationInfos = InternTable<SharedNotificationInfo>()
    private var zones = InternTable<ZoneID>()
    /// Zone and database subscriptions: few per database, checked directly.
    private var otherKinds: [UInt32: Subscription.Kind] = [:]
    private var index = QuerySubscriptionIndex()
    private var nextSequence: UInt64 = 0
    public private(set) var count = 0

    public init(database: DatabaseScope, reportsRecordsLeavingResults: Bool = false) {
        self.database = database
        self.reportsRecordsLeavingResults = reportsRecordsLeavingResults
    }

    public var subscriptions: [Subscription] {
        slots.indices.filter { slots[$0].kind != .free }
            .sorted { slots[$0].sequence < slots[$1].sequence }
            .map { subscription(at: UInt32($0)) }
    }

    public subscript(id: String) -> Subscription? { slot(of: id).map { subscription(at: $0) } }

    /// Saves a subscription: a new ID adds it, an existing ID replaces it. Refuses kinds the
    /// database does not support, empty options, and duplicates of another subscription.
    public mutating func save(_ subscription: Subscription) throws(SubscriptionError) {
        try subscription.validate(in: database)
        var key: QuerySubscriptionIndex.EntryKey?
        if case .query(let recordType, let condition, _) = subscription.kind {
            key = QuerySubscriptionIndex.EntryKey(recordType: recordType, predicate: PackedPredicate(condition))
        }
        if let identity = existingIdentity(of: subscription, key: key),
           let existing = slotByIdentity.first(hash: identity.hashValue, where: { self.identity(ofSlot: $0) == identity }),
           slots[Int(existing)].subscriptionID != subscription.subscriptionID {
            throw SubscriptionError("subscription is duplicate of '\(slots[Int(existing)].subscriptionID)'")
        }
        remove(id: subscription.subscriptionID)
        let number: UInt32
        if let reused = freeSlots.popLast() {
            number = reused
        } else {
            number = UInt32(slots.count)
            slots.appendAdvisingHugePages(.empty)
        }
        var slot = Slot(
            subscriptionID: subscription.subscriptionID, sequence: nextSequence, entry: Slot.other, owner: owners.retain(subscription.owner),
            notificationInfo: notificationInfos.retain(SharedNotificationInfo(subscription.notificationInfo)), zone: 0,
            options: subscription.options)
        nextSequence += 1
        if case .query(_, _, let zoneID) = subscription.kind, let key {
            slot.zone = zoneID.map { zones.retain($0) + 1 } ?? 0
            slot.entry = index.insert(number, key: key)
        } else {
            otherKinds[number] = subscription.kind
        }
        slots[Int(number)] = slot
        slotByID.insert(number, hash: subscription.subscriptionID.hashValue)
        slotByIdentity.insert(number, hash: identity(ofSlot: number).hashValue)
        count += 1
    }

    /// Removes a subscription; returns whether it existed.
    @discardableResult
    public mutating func remove(id: String) -> Bool {
        guard let number = slot(of: id) else { return false }
        let slot = slots[Int(number)]
        slotByIdentity.remove(number, hash: identity(ofSlot: number).hashValue)
        slotByID.remove(number, hash: slot.subscriptionID.hashValue)
        if slot.kind == .query {
            index.remove(number, entry: slot.entry)
            if slot.zone != 0 { zones.release(slot.zone - 1) }
        } else {
            otherKinds[number] = nil
        }
        owners.release(slot.owner)
        notificationInfos.release(slot.notificationInfo)
        slots[Int(number)] = .empty
        freeSlots.append(number)
        count -= 1
        return true
    }

    private func slot(of id: String) -> UInt32? {
        slotByID.first(hash: id.hashValue) { slots[Int($0)].subscriptionID == id }
    }

    private func identity(ofSlot number: UInt32) -> Identity {
        let slot = slots[Int(number)]
        return Identity(owner: slot.owner, entry: slot.kind == .query ? slot.entry : .max, other: otherKinds[number],
                        zone: slot.zone, options: slot.options.rawValue)
    }

    /// The identity a new subscription would have, or nil when no saved one can share it (its
    /// owner, zone or predicate entry is not stored yet).
    private func existingIdentity(of subscription: Subscription, key: QuerySubscriptionIndex.EntryKey?) -> Identity? {
        guard let owner = owners.id(of: subscription.owner) else { return nil }
        guard case .query(_, _, let zoneID) = subscription.kind else {
            return Identity(owner: owner, entry: .max, other: subscription.kind, zone: 0, options: subscription.options.rawValue)
        }
        guard let key, let entry = index.entry(for: key) else { return nil }
        var zone: UInt32 = 0
        if let zoneID {
            guard let id = zones.id(of: zoneID) else { return nil }
            zone = id + 1
        }
        return Identity(owner: owner, entry: entry, other: nil, zone: zone, options: subscription.options.rawValue)
    }

    /// The stored subscription in slot `number`.
    private func subscription(at number: UInt32) -> Subscription {
        let info = notificationInfos[slots[Int(number)].notificationInfo]?.value ?? NotificationInfo()
        return parts(at: number, notificationInfo: 0).subscription(notificationInfo: info)
    }

    /// The stored subscription in slot `number`, as cheap parts whose notification info is at
    /// `notificationInfo` in their batch. A `sole` match gives its record type and predicate, so
    /// its entry is not read.
    private func parts(at number: UInt32, notificationInfo: UInt32, sole: QuerySubscriptionIndex.SoleMatch? = nil) -> SubscriptionParts {
        // Read in place: a slot copied out would retain its ID twice.
        slots.withUnsafeBufferPointer { slots in
            let slot = slots.baseAddress.map { $0 + Int(number) }
            let kind: SubscriptionParts.Kind
            if let slot, let sole, slot.pointee.kind == .query {
                kind = .query(recordType: index.recordTypeName(sole.type), predicate: sole.predicate,
                              zoneID: slot.pointee.zone == 0 ? nil : zones[slot.pointee.zone - 1])
            } else if let slot, slot.pointee.kind == .query, !index.entries[Int(slot.pointee.entry)].isFree {
                let entry = slot.pointee.entry
                kind = .query(recordType: index.recordType(of: entry), predicate: index.entries[Int(entry)].predicate,
                              zoneID: slot.pointee.zone == 0 ? nil : zones[slot.pointee.zone - 1])
            } else {
                kind = .given(otherKinds[number] ?? .database(recordType: nil))
            }
            return SubscriptionParts(
                subscriptionID: slot?.pointee.subscriptionID ?? "", kind: kind, options: slot?.pointee.options ?? [],
                notificationInfo: notificationInfo, owner: slot.flatMap { owners[$0.pointee.owner] } ?? PushContext.defaultUserRecordName)
        }
    }

    /// Checks that every table agrees with the slots (for tests): each live slot is found by its
    /// ID and its identity, and is a subscriber of its index entry; free slots are free.
    func _checkInvariants() -> [String] {
        var problems: [String] = []
        var live = 0
        for number in slots.indices {
            let slot = slots[number]
            if slot.kind == .free {
                if !freeSlots.contains(UInt32(number)) { problems.append("slot \(number) is free but not listed") }
                continue
            }
            live += 1
            if self.slot(of: slot.subscriptionID) != UInt32(number) { problems.append("'\(slot.subscriptionID)' not found by ID") }
            let identity = identity(ofSlot: UInt32(number))
            if slotByIdentity.first(hash: identity.hashValue, where: { self.identity(ofSlot: $0) == identity }) == nil {
                problems.append("'\(slot.subscriptionID)' not found by identity")
            }
            if slot.kind == .query {
                var subscribed = false
                index.entries[Int(slot.entry)].subscribers.forEach { if $0 == UInt32(number) { subscribed = true } }
                if !subscribed { problems.append("'\(slot.subscriptionID)' missing from its entry") }
            }
        }
        problems += index._checkSoleSubscribers()
        if live != count || slotByID.count != count || slotByIdentity.count != count {
            problems.append("count \(count), live slots \(live), by ID \(slotByID.count), by identity \(slotByIdentity.count)")
        }
        return problems
    }

    // MARK: Matching

    /// The subscriptions that fire for `change`, using the index, in the order they were saved.
    /// Each candidate predicate is evaluated once, however many subscriptions share it.
    public func firings(for change: RecordChange, now: Int64) -> SubscriptionFirings {
        var statistics = MatchStatistics()
        return firings(for: change, now: now, statistics: &statistics)
    }

    /// `firings(for:now:)`, counting its work in `statistics`.
    ///
    /// On an update with `reportsRecordsLeavingResults`, a candidate that does not match the new
    /// record is evaluated on the old one only if it reads a field the update changed: otherwise
    /// the two verdicts are equal. Likewise the index is probed with the old record only when a
    /// field probing reads has changed (else it would find the same entries).
    func firings(for change: RecordChange, now: Int64, statistics: inout MatchStatistics) -> SubscriptionFirings {
        let record = change.record
        let (required, reason): (SubscriptionOptions, QueryNotificationReason) = switch change {
        case .created: (.firesOnRecordCreation, .recordCreated)
        case .updated: (.firesOnRecordUpdate, .recordUpdated)
        case .deleted: (.firesOnRecordDeletion, .recordDeleted)
        }
        var before: Record?
        if case .updated(let old, _) = change, reportsRecordsLeavingResults { before = old }
        let changes = before.map { FieldChanges(from: $0, to: record) } ?? FieldChanges()
        let newType = index.typeID(of: record.recordType)
        let oldType = before.flatMap { index.typeID(of: $0.recordType) }
        // One evaluation context per record: each record's token set is computed at most once.
        var newContext = EvaluationContext(now: now)
        var oldContext = EvaluationContext(now: now)
        // Candidates are evaluated; matches (found by a range that decides them) are not.
        var candidates: [UInt32] = []
        var matches: [UInt32] = []
        var soleMatches: [QuerySubscriptionIndex.SoleMatch] = []
        candidates.reserveCapacity(256)
        matches.reserveCapacity(64)
        soleMatches.reserveCapacity(64)
        if let newType {
            index.candidates(type: newType, record: record, into: &candidates, matches: &matches, soleMatches: &soleMatches)
            statistics.probes += 1
        }
        if let before, let oldType, index.probeReads(type: oldType, changes) {
            // A match of the old record fires too: `before` is set only when leaving the results does.
            index.candidates(type: oldType, record: before, into: &candidates, matches: &matches, soleMatches: &soleMatches)
            statistics.probes += 1
            // Most entries are found by both records: evaluate each once.
            candidates.sort()
            candidates.removeDuplicates()
        }
        statistics.soleMatches += soleMatches.count
        // Entries and slots are spread over hundreds of megabytes: each candidate costs a cache
        // miss or two. Asking for all of them first lets the misses overlap.
        if !soleMatches.isEmpty {
            slots.withUnsafeBufferPointer { slots in
                guard let base = slots.baseAddress else { return }
                for match in soleMatches where Int(match.slot) < slots.count { Self.prefetch(base + Int(match.slot)) }
            }
        }
        var hits: [UInt32] = []
        hits.reserveCapacity(candidates.count + matches.count + soleMatches.count)
        index.entries.withUnsafeBufferPointer { entries in
            guard let base = entries.baseAddress else { return }
            for candidate in candidates { Self.prefetch(base + Int(candidate)) }
            // A match is not evaluated, but its subscribers are read now and its predicate later.
            for match in matches { Self.prefetch(base + Int(match)) }
            withUnsafePointer(to: record) { new in
                withUnsafePointer(to: before ?? record) { old in
                    for candidate in candidates {
                        let entry = base + Int(candidate)
                        // Read in place through the pointer: a predicate copied out costs more than its test.
                        guard !entry.pointee.isFree else { continue }
                        let type = entry.pointee.recordType
                        var verdict = false
                        if type == newType {
                            verdict = entry.pointee.predicate.matches(new, in: &newContext)
                            statistics.evaluations += 1
                        }
                        if !verdict, before != nil, type == oldType {
                            if type != newType || entry.pointee.predicate.reads(changes) {
                                verdict = entry.pointee.predicate.matches(old, in: &oldContext)
                                statistics.oldEvaluations += 1
                            } else {
                                statistics.reusedVerdicts += 1
                            }
                        }
                        if verdict { entry.pointee.subscribers.forEach { hits.append($0) } }
                    }
                }
            }
            for match in matches { base[Int(match)].subscribers.forEach { hits.append($0) } }
        }
        // Sole matches come last in `hits`: their firings are made without reading their entries.
        let soleStart = hits.count
        for match in soleMatches { hits.append(match.slot) }
        let recordZone = zones.isEmpty ? nil : zones.id(of: record.recordID.zoneID).map { $0 + 1 }
        // Firings come out in save order. While sequences fit 31 bits (unless billions of
        // subscriptions were saved), (sequence << 32 | position in hits) sorts as a plain integer
        // below 2^63 (see `sortDistinctKeys`), and the position tells a sole match.
        let compact = nextSequence < 1 << 31
        var keys: [UInt64] = []
        var wide: [(sequence: UInt64, slot: UInt32)] = []
        keys.reserveCapacity(hits.count)
        owners.withValues { owners in
            slots.withUnsafeBufferPointer { slots in
                guard let base = slots.baseAddress else { return }
                for number in hits { Self.prefetch(base + Int(number)) }
                for (position, number) in hits.enumerated() {
                    let slot = base + Int(number)
                    guard slot.pointee.options.contains(required), slot.pointee.zone == 0 || slot.pointee.zone == recordZone else { continue }
                    if compact { keys.append(slot.pointee.sequence << 32 | UInt64(position)) } else { wide.append((slot.pointee.sequence, number)) }
                    // The owner's name is read when the firing is made: tens of thousands of
                    // owners do not stay in cache either.
                    if let owner = owners.baseAddress, Int(slot.pointee.owner) < owners.count { kquery_prefetch(owner + Int(slot.pointee.owner)) }
                }
            }
        }
        for (number, kind) in otherKinds where Self.otherFires(kind, record) {
            let sequence = slots[Int(number)].sequence
            hits.append(number)
            if compact { keys.append(sequence << 32 | UInt64(hits.count - 1)) } else { wide.append((sequence, number)) }
        }
        // An entry found twice (several postings, or both records) fires once.
        var ordered: [UInt32] = []
        /// For each firing in `ordered`, the position in `soleMatches` of the match it comes from,
        /// or a negative number (empty when there are no sole matches).
        var known: [Int] = []
        if compact {
            keys.sortDistinctKeys()
            ordered.reserveCapacity(keys.count)
            if !soleMatches.isEmpty { known.reserveCapacity(keys.count) }
            var last = UInt64.max
            for key in keys where key >> 32 != last {
                last = key >> 32
                let position = Int(truncatingIfNeeded: key & 0xFFFF_FFFF)
                ordered.append(hits[position])
                if !soleMatches.isEmpty { known.append(position >= soleStart && position - soleStart < soleMatches.count ? position - soleStart : -1) }
            }
        } else {
            wide.sort { $0.sequence < $1.sequence }
            var last: UInt64?
            for (sequence, number) in wide where sequence != last {
                last = sequence
                ordered.append(number)
            }
        }
        var parts: [SubscriptionParts] = []
        parts.reserveCapacity(ordered.count)
        var infos = BatchNotificationInfos()
        for (position, number) in ordered.enumerated() {
            let info = infos.position(of: slots[Int(number)].notificationInfo, in: notificationInfos)
            let sole = known.isEmpty || known[position] < 0 ? nil : soleMatches[known[position]]
            parts.append(self.parts(at: number, notificationInfo: info, sole: sole))
        }
        guard !parts.isEmpty else { return SubscriptionFirings(batch: nil, reason: reason) }
        return SubscriptionFirings(batch: FiringBatch(record: record, subscriptions: parts, notificationInfos: infos.infos), reason: reason)
    }

    /// The same answer by evaluating every subscription in turn, compiling its predicate afresh:
    /// the reference for the index and its packed predicates.
    public func naiveFirings(for change: RecordChange, now: Int64) -> [SubscriptionFiring] {
        var firings: [SubscriptionFiring] = []
        let before: Record? = if case .updated(let old, _) = change { old } else { nil }
        for subscription in subscriptions {
            let reason: QueryNotificationReason?
            if case .query(let recordType, let condition, _) = subscription.kind {
                let compiled = CompiledPredicate(condition)
                reason = queryReason(
                    subscription, change,
                    matchesNew: { change.record.recordType == recordType && compiled.matches(change.record, now: now) },
                    matchedOld: { before.map { $0.recordType == recordType && compiled.matches($0, now: now) } ?? false })
            } else {
                reason = Self.otherFires(subscription.kind, change.record) ? Self.reason(change) : nil
            }
            if let reason { firings.append(SubscriptionFiring(subscription: subscription, reason: reason, record: change.record)) }
        }
        return firings
    }

    /// Finds the firings for a change and removes the firesOnce subscriptions that fired.
    public mutating func apply(_ change: RecordChange, now: Int64) -> SubscriptionFirings {
        let fired = firings(for: change, now: now)
        for firing in fired where firing.parts.options.contains(.firesOnce) {
            remove(id: firing.parts.subscriptionID)
        }
        return fired
    }

    /// SPEC §4's firing rules for a query subscription: create when the new record matches, update
    /// when the record matches after the change (or, with the extension, matched before it), delete
    /// when it matched before. The verdicts are asked for lazily.
    private func queryReason(
        _ subscription: Subscription, _ change: RecordChange, matchesNew: () -> Bool, matchedOld: () -> Bool
    ) -> QueryNotificationReason? {
        guard case .query(_, _, let zoneID) = subscription.kind else { return nil }
        let options = subscription.options
        switch change {
        case .created(let record):
            guard zoneID.map({ $0 == record.recordID.zoneID }) ?? true, options.contains(.firesOnRecordCreation), matchesNew() else { return nil }
            return .recordCreated
        case .updated(_, let record):
            guard zoneID.map({ $0 == record.recordID.zoneID }) ?? true, options.contains(.firesOnRecordUpdate) else { return nil }
            return matchesNew() || (reportsRecordsLeavingResults && matchedOld()) ? .recordUpdated : nil
        case .deleted(let record):
            guard zoneID.map({ $0 == record.recordID.zoneID }) ?? true, options.contains(.firesOnRecordDeletion), matchesNew() else { return nil }
            return .recordDeleted
        }
    }

    /// Asks the CPU to start loading the element at `address`: every cache line it spans. An
    /// element need not start a line (a 56-byte slot spans two lines three times in four, an
    /// 88-byte entry three lines one time in four), so the line of its last byte is asked for too.
    private static func prefetch<T>(_ address: UnsafePointer<T>) {
        let start = UnsafeRawPointer(address)
        var offset = 0
        while offset < MemoryLayout<T>.size {
            kquery_prefetch(start + offset)
            offset += 64
        }
        kquery_prefetch(start + MemoryLayout<T>.size - 1)
    }

    /// Zone subscriptions fire for any change in their zone; database subscriptions for any change
    /// in a custom zone; both optionally only for one record type.
    private static func otherFires(_ kind: Subscription.Kind, _ record: Record) -> Bool {
        switch kind {
        case .query:
            return false
        case .recordZone(let zoneID, let recordType):
            return record.recordID.zoneID == zoneID && (recordType.map { $0 == record.recordType } ?? true)
        case .database(let recordType):
            return !record.recordID.zoneID.isDefaultZone && (recordType.map { $0 == record.recordType } ?? true)
        }
    }

    private static func reason(_ change: RecordChange) -> QueryNotificationReason {
        switch change {
        case .created: .recordCreated
        case .updated: .recordUpdated
        case .deleted: .recordDeleted
        }
    }
}

/// The distinct notification infos of a batch of firings, in order of first use, found by their
/// number in the set's intern table (the last one first: most firings share one).
private struct BatchNotificationInfos {
    private(set) var infos: [SharedNotificationInfo] = []
    private var ids: [UInt32] = []
    /// Built once there are enough infos for a linear search to be slow.
    private var positions: [UInt32: UInt32] = [:]
    private var last: (id: UInt32, position: UInt32) = (.max, 0)

    mutating func position(of id: UInt32, in table: InternTable<SharedNotificationInfo>) -> UInt32 {
        if id == last.id { return last.position }
        let position: UInt32
        if ids.count <= 8, let found = ids.firstIndex(of: id) {
            position = UInt32(found)
        } else if ids.count > 8, let found = positions[id] {
            position = found
        } else {
            position = UInt32(infos.count)
            infos.append(table[id] ?? SharedNotificationInfo(NotificationInfo()))
            ids.append(id)
            if ids.count > 8 {
                if positions.isEmpty { for (known, number) in ids.enumerated() { positions[number] = UInt32(known) } }
                positions[id] = position
            }
        }
        last = (id, position)
        return position
    }
}

extension Array where Element == UInt64 {
    /// Sorts keys that are distinct and below 2^63.
    ///
    /// Up to 64 keys are placed by rank: each key's position is the number of keys below it,
    /// counted without a branch (`other - key` is negative exactly when `other < key`, since both
    /// are below 2^63). That is n² subtractions, which the compiler vectorizes, against the
    /// n log n mispredicted branches of a comparison sort: for the forty-odd firings of a typical
    /// change, about half the time.
    mutating func sortDistinctKeys() {
        guard count > 1 else { return }
        guard count <= 64 else { return sort() }
        var sorted = [UInt64](repeating: 0, count: count)
        sorted.withUnsafeMutableBufferPointer { output in
            withUnsafeBufferPointer { keys in
                for key in keys {
                    var rank = 0
                    for other in keys { rank &-= Int(truncatingIfNeeded: Int64(bitPattern: other &- key) >> 63) }
                    output[rank] = key
                }
            }
        }
        self = sorted
    }
}

extension Array where Element: Equatable {
    /// Removes adjacent duplicates (all duplicates, once sorted).
    fileprivate mutating func removeDuplicates() {
        guard count > 1 else { return }
        var kept = 1
        for position in 1..<count where self[position] != self[kept - 1] {
            self[kept] = self[position]
            kept += 1
        }
        removeLast(count - kept)
    }
}
