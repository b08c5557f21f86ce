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
    /// The most subscriptions a set holds: slot and entry numbers stay below 2^31, so the matcher
    /// can mark them with the top bit.
    public static let capacity = Int(Int32.max)

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
        if freeSlots.isEmpty, slots.count >= Self.capacity, slot(of: subscription.subscriptionID) == nil {
            throw SubscriptionError("subscription '\(subscription.subscriptionID)': the set already holds \(Self.capacity) subscriptions, the most it can")
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

    /// The stored subscription in slot `number` (a live slot), made from its parts as a firing's is.
    private func subscription(at number: UInt32) -> Subscription {
        var infos = SharedValuesBuilder<SharedNotificationInfo>()
        var scopes = SharedValuesBuilder<SubscriptionParts.Scope>()
        let stored = slots.withUnsafeBufferPointer { slots -> SubscriptionParts? in
            Int(number) < slots.count ? slots.baseAddress.map { self.parts(of: $0 + Int(number), number: number, sole: nil, infos: &infos, scopes: &scopes) } : nil
        }
        guard let stored, let info = infos.values?[stored.notificationInfo], let scope = scopes.values?[stored.scope] else {
            return Subscription(subscriptionID: "", kind: .database(recordType: nil))
        }
        return stored.subscription(notificationInfo: info.value, scope: scope)
    }

    /// The parts of the subscription in `slot`, slot number `number`, with their notification info
    /// and scope added to a batch's. A `sole` match gives its record type and predicate, so its
    /// entry is not read.
    private func parts(
        of slot: UnsafePointer<Slot>, number: UInt32, sole: QuerySubscriptionIndex.SoleMatch?,
        infos: inout SharedValuesBuilder<SharedNotificationInfo>, scopes: inout SharedValuesBuilder<SubscriptionParts.Scope>
    ) -> SubscriptionParts {
        let info = slot.pointee.notificationInfo
        var infoPosition = infos.position(of: UInt64(info))
        if infoPosition == nil { infoPosition = infos.add(UInt64(info), notificationInfos[info] ?? SharedNotificationInfo(NotificationInfo())) }
        let entry = slot.pointee.entry
        let type: UInt32? = if slot.pointee.kind != .query {
            nil
        } else if let sole {
            sole.type
        } else if Int(entry) < index.entries.count, !index.entries[Int(entry)].isFree {
            index.entries[Int(entry)].recordType
        } else {
            nil
        }
        let predicate: PackedPredicate
        let key: UInt64
        var scope: UInt32?
        if let type {
            predicate = sole?.predicate ?? index.entries[Int(entry)].predicate
            let zone = slot.pointee.zone
            key = UInt64(type) << 32 | UInt64(zone)
            scope = scopes.position(of: key)
            if scope == nil { scope = scopes.add(key, .query(recordType: index.recordTypeName(type), zoneID: zone == 0 ? nil : zones[zone - 1])) }
        } else {
            predicate = .free
            // Zone and database subscriptions are few: each has a scope of its own.
            key = 1 << 63 | UInt64(number)
            scope = scopes.position(of: key)
            if scope == nil { scope = scopes.add(key, .given(otherKinds[number] ?? .database(recordType: nil))) }
        }
        return SubscriptionParts(
            subscriptionID: slot.pointee.subscriptionID, owner: owners[slot.pointee.owner] ?? PushContext.defaultUserRecordName,
            predicate: predicate, options: slot.pointee.options, notificationInfo: infoPosition ?? 0, scope: scope ?? 0)
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
        // The records are read through pointers: each copy of a record retains its every part.
        switch change {
        case .created(let record):
            withUnsafePointer(to: record) { firings(of: $0, before: nil, .firesOnRecordCreation, .recordCreated, now, &statistics) }
        case .updated(let old, let record):
            withUnsafePointer(to: record) { new in
                withUnsafePointer(to: old) { old in
                    firings(of: new, before: reportsRecordsLeavingResults ? old : nil, .firesOnRecordUpdate, .recordUpdated, now, &statistics)
                }
            }
        case .deleted(let record):
            withUnsafePointer(to: record) { firings(of: $0, before: nil, .firesOnRecordDeletion, .recordDeleted, now, &statistics) }
        }
    }

    /// The firings for a change to `record` that needs `required` among a subscription's options.
    /// `before` is the record before an update, when records leaving the results fire too.
    ///
    /// In three steps: probe the index and evaluate the candidates; list the subscriptions of the
    /// entries that match, with the sole matches (see `SoleMatch`), keeping those whose options
    /// and zone fire; put them in save order and make their parts. The lists live in one
    /// temporary allocation (on the stack, unless it is large).
    private func firings(
        of record: UnsafePointer<Record>, before: UnsafePointer<Record>?, _ required: SubscriptionOptions,
        _ reason: QueryNotificationReason, _ now: Int64, _ statistics: inout MatchStatistics
    ) -> SubscriptionFirings {
        let changes = before.map { FieldChanges(from: $0.pointee, to: record.pointee) } ?? FieldChanges()
        let newType = index.typeID(of: record.pointee.recordType)
        let oldType = before.flatMap { index.typeID(of: $0.pointee.recordType) }
        var found = QuerySubscriptionIndex.Found(type: newType ?? 0)
        if newType != nil {
            index.probe(record.pointee, into: &found)
            statistics.probes += 1
        }
        if let before, let oldType, index.probeReads(type: oldType, changes) {
            // A match of the old record fires too: `before` is set only when leaving the results does.
            found.type = oldType
            index.probe(before.pointee, into: &found)
            statistics.probes += 1
            // Most entries are found by both records: evaluate each once.
            found.candidates.sort()
            found.candidates.removeDuplicates()
        }
        let soleMatches = found.soleMatches
        statistics.soleMatches += soleMatches.count
        // Entries and slots are spread over hundreds of megabytes: each candidate costs a cache
        // miss or two. Asking for all of them first lets the misses overlap.
        if !soleMatches.isEmpty {
            slots.withUnsafeBufferPointer { slots in
                guard let base = slots.baseAddress else { return }
                for match in soleMatches where Int(match.slot) < slots.count { Self.prefetch(base + Int(match.slot)) }
            }
        }
        let (passing, subscriberCount) = evaluate(&found.candidates, record, before, newType, oldType, changes, now, &statistics)
        let total = subscriberCount + soleMatches.count + otherKinds.count
        guard total > 0 else { return SubscriptionFirings(batch: nil, reason: reason) }
        let recordZone = zones.isEmpty ? nil : zones.id(of: record.pointee.recordID.zoneID).map { $0 + 1 }
        let candidates = found.candidates
        /// The sole match a source stands for, if it is one.
        func soleMatch(_ source: UInt32) -> QuerySubscriptionIndex.SoleMatch? {
            source & Self.soleSource == 0 ? nil : soleMatches[Int(source & ~Self.soleSource)]
        }
        return withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 3 * total) { scratch -> SubscriptionFirings in
            // Sources: a slot number, or `Self.soleSource` and a position in `soleMatches`.
            guard let sources = scratch.baseAddress else { return SubscriptionFirings(batch: nil, reason: reason) }
            let sequences = sources + total
            let ordered = sources + 2 * total
            var count = 0
            index.entries.withUnsafeBufferPointer { entries in
                for entry in candidates.prefix(passing) {
                    entries[Int(entry)].subscribers.forEach {
                        sources[count] = $0
                        count += 1
                    }
                }
            }
            return slots.withUnsafeBufferPointer { slots -> SubscriptionFirings in
                guard let base = slots.baseAddress else { return SubscriptionFirings(batch: nil, reason: reason) }
                for position in 0..<count { Self.prefetch(base + Int(sources[position])) }
                for position in soleMatches.indices {
                    sources[count] = Self.soleSource | UInt32(position)
                    count += 1
                }
                // Keep the subscriptions whose options and zone fire, with their sequences.
                var kept = 0
                owners.withValues { owners in
                    for position in 0..<count {
                        let source = sources[position]
                        let slot = base + Int(soleMatch(source)?.slot ?? source)
                        guard slot.pointee.options.contains(required), slot.pointee.zone == 0 || slot.pointee.zone == recordZone else { continue }
                        sources[kept] = source
                        sequences[kept] = UInt32(truncatingIfNeeded: slot.pointee.sequence)
                        kept += 1
                        // The owner's name is read when the firing is made: tens of thousands of
                        // owners do not stay in cache either.
                        if let owner = owners.baseAddress, Int(slot.pointee.owner) < owners.count { kquery_prefetch(owner + Int(slot.pointee.owner)) }
                    }
                }
                for (number, kind) in otherKinds where Self.otherFires(kind, record.pointee) {
                    sources[kept] = number
                    sequences[kept] = UInt32(truncatingIfNeeded: slots[Int(number)].sequence)
                    kept += 1
                }
                // Firings come out in save order; a subscription found twice (several postings,
                // or both records) fires once.
                let firingCount: Int
                if nextSequence <= 1 << 31 && kept <= SaveOrder.rankLimit {
                    firingCount = SaveOrder.rank(sources, by: sequences, count: kept, into: ordered)
                } else {
                    firingCount = SaveOrder.sort(sources, count: kept, into: ordered) { source in
                        slots[Int(soleMatch(source)?.slot ?? source)].sequence
                    }
                }
                var infos = SharedValuesBuilder<SharedNotificationInfo>()
                var scopes = SharedValuesBuilder<SubscriptionParts.Scope>()
                let parts = [SubscriptionParts](unsafeUninitializedCapacity: firingCount) { parts, initialized in
                    guard let out = parts.baseAddress else { return }
                    for position in 0..<firingCount {
                        let source = ordered[position]
                        let sole = soleMatch(source)
                        let number = sole?.slot ?? source
                        (out + position).initialize(to: self.parts(of: base + Int(number), number: number, sole: sole, infos: &infos, scopes: &scopes))
                        initialized = position + 1
                    }
                }
                guard let infos = infos.values, let scopes = scopes.values else { return SubscriptionFirings(batch: nil, reason: reason) }
                let batch = FiringBatch(record: record.pointee, subscriptions: parts, notificationInfos: infos, scopes: scopes)
                return SubscriptionFirings(batch: batch, reason: reason)
            }
        }
    }

    /// Marks a source that is a sole match (slot numbers stay below it: see `capacity`).
    private static let soleSource: UInt32 = 1 << 31

    /// Evaluates the candidates (entries decided by the probe are not evaluated) and moves those
    /// that match to the front of `candidates`, without their flags. Returns how many match and
    /// how many subscribers they have.
    private func evaluate(
        _ candidates: inout [UInt32], _ record: UnsafePointer<Record>, _ before: UnsafePointer<Record>?, _ newType: UInt32?,
        _ oldType: UInt32?, _ changes: FieldChanges, _ now: Int64, _ statistics: inout MatchStatistics
    ) -> (passing: Int, subscribers: Int) {
        // One evaluation context per record: each record's token set is computed at most once.
        var newContext = EvaluationContext(now: now)
        var oldContext = EvaluationContext(now: now)
        var passing = 0
        var subscribers = 0
        let decided = QuerySubscriptionIndex.Found.decided
        candidates.withUnsafeMutableBufferPointer { candidates in
            index.entries.withUnsafeBufferPointer { entries in
                guard let base = entries.baseAddress else { return }
                // A decided entry is not evaluated, but its subscribers are read.
                for candidate in candidates where Int(candidate & ~decided) < entries.count { Self.prefetch(base + Int(candidate & ~decided)) }
                for position in candidates.indices {
                    let number = candidates[position] & ~decided
                    guard Int(number) < entries.count else { continue }
                    let entry = base + Int(number)
                    // Read in place through the pointer: a predicate copied out costs more than its test.
                    guard !entry.pointee.isFree else { continue }
                    var verdict = candidates[position] & decided != 0
                    let type = entry.pointee.recordType
                    if !verdict, type == newType {
                        verdict = entry.pointee.predicate.matches(record, in: &newContext)
                        statistics.evaluations += 1
                    }
                    if !verdict, let before, type == oldType {
                        if type != newType || entry.pointee.predicate.reads(changes) {
                            verdict = entry.pointee.predicate.matches(before, in: &oldContext)
                            statistics.oldEvaluations += 1
                        } else {
                            statistics.reusedVerdicts += 1
                        }
                    }
                    guard verdict else { continue }
                    candidates[passing] = number
                    passing += 1
                    subscribers += entry.pointee.subscribers.count
                }
            }
        }
        return (passing, subscribers)
    }

    /// The same answer by evaluating every subscription in turn, compiling its predicate afresh:
    /// the reference for the index and its packed predicates.
    public func naiveFirings(for change: RecordChange, now: Int64) -> [SubscriptionFiring] {
        subscriptions.compactMap { subscription in
            guard case .fired(let reason) = Self.verdict(of: subscription, for: change, now: now, reportsRecordsLeavingResults: reportsRecordsLeavingResults)
            else { return nil }
            return SubscriptionFiring(subscription: subscription, reason: reason, record: change.record)
        }
    }

    /// One subscription's verdict on a change: fired, or the first reason it did not (the
    /// console's "why did this push go out, or not"). SPEC §4's rules, as `naiveFirings(for:now:)`
    /// applies them; predicates compiled afresh.
    public static func verdict(of subscription: Subscription, for change: RecordChange, now: Int64, reportsRecordsLeavingResults: Bool) -> SubscriptionVerdict {
        guard case .query(let recordType, let condition, _) = subscription.kind else { return otherVerdict(subscription.kind, change) }
        let before: Record? = if case .updated(let old, _) = change { old } else { nil }
        let compiled = CompiledPredicate(condition)
        let verdict = queryVerdict(
            subscription, change, reportsRecordsLeavingResults: reportsRecordsLeavingResults,
            matchesNew: { change.record.recordType == recordType && compiled.matches(change.record, now: now) },
            matchedOld: { before.map { $0.recordType == recordType && compiled.matches($0, now: now) } ?? false })
        guard case .predicateFalse = verdict else { return verdict }
        // Which part was false: the type, or the first clause of the condition's conjunction.
        guard change.record.recordType == recordType else { return .wrongRecordType(expected: recordType) }
        let clauses: [Condition] = if case .and(let parts) = condition { parts } else { [condition] }
        let failing = clauses.first { !CompiledPredicate($0).matches(change.record, now: now) } ?? condition
        return .clauseFalse(failing.description)
    }

    /// `apply(_:now:)` for each change of `changes`, in order. They are reached in place (`inout`,
    /// though none is changed): each passed from its list by value was copied first, both its
    /// records retained, and destroyed again.
    package mutating func apply(_ changes: inout [RecordChange], now: Int64) -> [SubscriptionFirings] {
        var firings: [SubscriptionFirings] = []
        firings.reserveCapacity(changes.count)
        for position in changes.indices { firings.append(apply(inPlace: &changes[position], now: now)) }
        return firings
    }

    private mutating func apply(inPlace change: inout RecordChange, now: Int64) -> SubscriptionFirings {
        apply(change, now: now)
    }

    /// Finds the firings for a change and removes the firesOnce subscriptions that fired.
    public mutating func apply(_ change: RecordChange, now: Int64) -> SubscriptionFirings {
        let fired = firings(for: change, now: now)
        for firing in fired where firing.options.contains(.firesOnce) {
            remove(id: firing.subscriptionID)
        }
        return fired
    }

    /// SPEC §4's firing rules for a query subscription: create when the new record matches, update
    /// when the record matches after the change (or, with the extension, matched before it), delete
    /// when it matched before. The verdicts are asked for lazily; a refusal says which rule refused:
    /// the zone, the firesOn option, or the predicate (`.predicateFalse`, which
    /// `verdict(of:for:now:reportsRecordsLeavingResults:)` narrows down).
    private static func queryVerdict(
        _ subscription: Subscription, _ change: RecordChange, reportsRecordsLeavingResults: Bool, matchesNew: () -> Bool, matchedOld: () -> Bool
    ) -> SubscriptionVerdict {
        guard case .query(_, _, let zoneID) = subscription.kind else { return otherVerdict(subscription.kind, change) }
        if let zoneID, zoneID != change.record.recordID.zoneID { return .wrongZone(expected: zoneID) }
        let (option, reason): (SubscriptionOptions, QueryNotificationReason) = switch change {
        case .created: (.firesOnRecordCreation, .recordCreated)
        case .updated: (.firesOnRecordUpdate, .recordUpdated)
        case .deleted: (.firesOnRecordDeletion, .recordDeleted)
        }
        guard subscription.options.contains(option) else { return .notFiringOn(reason) }
        if case .updated = change {
            return matchesNew() || (reportsRecordsLeavingResults && matchedOld()) ? .fired(reason) : .predicateFalse
        }
        return matchesNew() ? .fired(reason) : .predicateFalse
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

    /// `otherFires` as a verdict: fired, or the rule that refused.
    private static func otherVerdict(_ kind: Subscription.Kind, _ change: RecordChange) -> SubscriptionVerdict {
        if otherFires(kind, change.record) { return .fired(reason(change)) }
        let record = change.record
        switch kind {
        case .recordZone(let zoneID, _) where record.recordID.zoneID != zoneID: return .wrongZone(expected: zoneID)
        // (In its zone, a zone subscription that did not fire was refused by its record type.)
        case .recordZone(_, let recordType?): return .wrongRecordType(expected: recordType)
        case .database(let recordType?) where recordType != record.recordType: return .wrongRecordType(expected: recordType)
        default: return .defaultZone
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

/// Putting firings in save order: sources (what a firing is made from) sorted by their
/// subscriptions' sequence numbers, one kept of those with equal sequences (a subscription found
/// twice, through several postings or through both records of an update).
enum SaveOrder {
    /// The most sources `rank` sorts: past it, its n² comparisons cost more than a sort's branches.
    static let rankLimit = 64

    /// Places each of `count` sources by rank: the number of sequences below its own, counted
    /// without a branch (`other - key` is negative exactly when `other < key`, as both are below
    /// 2^31). That is n² subtractions of 32 bits, four at a time in a vector register, against
    /// the n log n mispredicted branches of a comparison sort. Sources with equal sequences have
    /// equal ranks, so one overwrites the others and the ranks after it stay empty. Writes the
    /// sources in order to `output`; returns how many.
    static func rank(_ sources: UnsafePointer<UInt32>, by sequences: UnsafePointer<UInt32>, count: Int, into output: UnsafeMutablePointer<UInt32>) -> Int {
        let empty = UInt32.max
        output.update(repeating: empty, count: count)
        for position in 0..<count {
            let key = sequences[position]
            var rank: Int32 = 0
            for other in 0..<count { rank &-= Int32(bitPattern: sequences[other] &- key) >> 31 }
            output[Int(rank)] = sources[position]
        }
        var kept = 0
        for position in 0..<count where output[position] != empty {
            output[kept] = output[position]
            kept += 1
        }
        return kept
    }

    /// The same with a comparison sort, for any number of sources and sequences of 64 bits, read
    /// through `sequence`.
    static func sort(_ sources: UnsafePointer<UInt32>, count: Int, into output: UnsafeMutablePointer<UInt32>, sequence: (UInt32) -> UInt64) -> Int {
        var keyed = (0..<count).map { (sequence: sequence(sources[$0]), source: sources[$0]) }
        keyed.sort { $0.sequence < $1.sequence }
        var kept = 0
        var last: UInt64?
        for (sequence, source) in keyed where sequence != last {
            last = sequence
            output[kept] = source
            kept += 1
        }
        return kept
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

/// Whether a subscription fires for a record change, and if not, the first rule that refused it.
public enum SubscriptionVerdict: Hashable, Sendable {
    case fired(QueryNotificationReason)
    /// The subscription is for another record type.
    case wrongRecordType(expected: String)
    /// The subscription is for another zone.
    case wrongZone(expected: ZoneID)
    /// The subscription does not fire on this kind of change (its firesOn options lack it).
    case notFiringOn(QueryNotificationReason)
    /// A database subscription: changes in the default zone notify nobody.
    case defaultZone
    /// The predicate was false (before the clause is known).
    case predicateFalse
    /// The first clause of the predicate that was false, as text.
    case clauseFalse(String)
}
