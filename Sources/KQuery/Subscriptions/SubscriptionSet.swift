/// The subscriptions of one database, and the matcher that finds which fire for a record change.
///
/// Query subscriptions are indexed (`QuerySubscriptionIndex`): a change evaluates only the
/// predicates its record could satisfy, not every subscription. `naiveFirings(for:now:)` is the
/// plain loop over every subscription, kept as the reference the index is tested against.
public struct SubscriptionSet: Sendable {
    public let database: DatabaseScope
    /// Optional extension (off by default, as in CloudKit): an update that takes a record out of a
    /// query subscription's results also fires it.
    public var reportsRecordsLeavingResults: Bool

    private var subscriptionsByID: [String: Subscription] = [:]
    private var identities: [Subscription.Identity: String] = [:]
    private var index = QuerySubscriptionIndex()
    /// Zone and database subscriptions: few per database, checked directly.
    private var otherIDs: Set<String> = []
    /// Insertion order, so firings come out in a stable order.
    private var order: [String: Int] = [:]
    private var nextOrder = 0

    public init(database: DatabaseScope, reportsRecordsLeavingResults: Bool = false) {
        self.database = database
        self.reportsRecordsLeavingResults = reportsRecordsLeavingResults
    }

    public var count: Int { subscriptionsByID.count }

    public var subscriptions: [Subscription] {
        subscriptionsByID.values.sorted { (order[$0.subscriptionID] ?? 0) < (order[$1.subscriptionID] ?? 0) }
    }

    public subscript(id: String) -> Subscription? { subscriptionsByID[id] }

    /// Saves a subscription: a new ID adds it, an existing ID replaces it. Refuses kinds the
    /// database does not support, empty options, and duplicates of another subscription.
    public mutating func save(_ subscription: Subscription) throws(SubscriptionError) {
        try subscription.validate(in: database)
        let identity = subscription.identity
        if let existing = identities[identity], existing != subscription.subscriptionID {
            throw SubscriptionError("subscription is duplicate of '\(existing)'")
        }
        if subscriptionsByID[subscription.subscriptionID] != nil { remove(id: subscription.subscriptionID) }
        subscriptionsByID[subscription.subscriptionID] = subscription
        identities[identity] = subscription.subscriptionID
        order[subscription.subscriptionID] = nextOrder
        nextOrder += 1
        if case .query(let recordType, let condition, _) = subscription.kind {
            index.insert(subscription.subscriptionID, recordType: recordType, condition: condition)
        } else {
            otherIDs.insert(subscription.subscriptionID)
        }
    }

    /// Removes a subscription; returns whether it existed.
    @discardableResult
    public mutating func remove(id: String) -> Bool {
        guard let subscription = subscriptionsByID.removeValue(forKey: id) else { return false }
        identities[subscription.identity] = nil
        order[id] = nil
        if case .query(let recordType, let condition, _) = subscription.kind {
            index.remove(id, recordType: recordType, condition: condition)
        } else {
            otherIDs.remove(id)
        }
        return true
    }

    /// The subscriptions that fire for `change`, using the index, in the order they were saved.
    /// Each candidate predicate is evaluated once, however many subscriptions share it.
    public func firings(for change: RecordChange, now: Int64) -> [SubscriptionFiring] {
        var firings: [SubscriptionFiring] = []
        let record = change.record
        var before: Record?
        if case .updated(let old, _) = change, reportsRecordsLeavingResults { before = old }
        // One evaluation context per record: each record's token set is computed at most once.
        var newContext = EvaluationContext(now: now)
        var oldContext = EvaluationContext(now: now)
        var entries = index.candidates(recordType: record.recordType, record: record, context: &newContext)
        if let before {
            var seen = Set(entries.map(\.condition))
            for entry in index.candidates(recordType: before.recordType, record: before, context: &oldContext) where seen.insert(entry.condition).inserted {
                entries.append(entry)
            }
        }
        for entry in entries {
            var matchesNew: Bool?
            var matchedOld: Bool?
            for id in entry.subscriptionIDs {
                guard let subscription = subscriptionsByID[id] else { continue }
                let reason = queryReason(
                    subscription, change,
                    matchesNew: {
                        if matchesNew == nil { matchesNew = record.recordType == entry.recordType && entry.compiled.matches(record, in: &newContext) }
                        return matchesNew ?? false
                    },
                    matchedOld: {
                        if matchedOld == nil { matchedOld = before.map { $0.recordType == entry.recordType && entry.compiled.matches($0, in: &oldContext) } ?? false }
                        return matchedOld ?? false
                    })
                if let reason { firings.append(SubscriptionFiring(subscription: subscription, reason: reason, record: record)) }
            }
        }
        for id in otherIDs {
            guard let subscription = subscriptionsByID[id], let reason = otherReason(subscription, change) else { continue }
            firings.append(SubscriptionFiring(subscription: subscription, reason: reason, record: record))
        }
        return sorted(firings)
    }

    /// The same answer by evaluating every subscription in turn: the reference for the index.
    public func naiveFirings(for change: RecordChange, now: Int64) -> [SubscriptionFiring] {
        var firings: [SubscriptionFiring] = []
        let before: Record? = if case .updated(let old, _) = change { old } else { nil }
        for subscription in subscriptionsByID.values {
            let reason: QueryNotificationReason?
            if case .query(let recordType, _, _) = subscription.kind {
                let compiled = index.compiled(subscription.subscriptionID, recordType: recordType)
                reason = queryReason(
                    subscription, change,
                    matchesNew: { change.record.recordType == recordType && compiled?.matches(change.record, now: now) == true },
                    matchedOld: { before.map { $0.recordType == recordType && compiled?.matches($0, now: now) == true } ?? false })
            } else {
                reason = otherReason(subscription, change)
            }
            if let reason { firings.append(SubscriptionFiring(subscription: subscription, reason: reason, record: change.record)) }
        }
        return sorted(firings)
    }

    /// Finds the firings for a change and removes the firesOnce subscriptions that fired.
    public mutating func apply(_ change: RecordChange, now: Int64) -> [SubscriptionFiring] {
        let fired = firings(for: change, now: now)
        for firing in fired where firing.subscription.options.contains(.firesOnce) {
            remove(id: firing.subscription.subscriptionID)
        }
        return fired
    }

    private func sorted(_ firings: [SubscriptionFiring]) -> [SubscriptionFiring] {
        firings.sorted { (order[$0.subscription.subscriptionID] ?? 0) < (order[$1.subscription.subscriptionID] ?? 0) }
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

    /// Zone subscriptions fire for any change in their zone; database subscriptions for any change
    /// in a custom zone; both optionally only for one record type.
    private func otherReason(_ subscription: Subscription, _ change: RecordChange) -> QueryNotificationReason? {
        let record = change.record
        switch subscription.kind {
        case .query:
            return nil
        case .recordZone(let zoneID, let recordType):
            guard record.recordID.zoneID == zoneID, recordType.map({ $0 == record.recordType }) ?? true else { return nil }
        case .database(let recordType):
            guard !record.recordID.zoneID.isDefaultZone, recordType.map({ $0 == record.recordType }) ?? true else { return nil }
        }
        switch change {
        case .created: return .recordCreated
        case .updated: return .recordUpdated
        case .deleted: return .recordDeleted
        }
    }
}
