/// When a query subscription fires (CKQuerySubscription.Options, with CloudKit's raw values).
public struct SubscriptionOptions: OptionSet, Hashable, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let firesOnRecordCreation = SubscriptionOptions(rawValue: 1)
    public static let firesOnRecordUpdate = SubscriptionOptions(rawValue: 2)
    public static let firesOnRecordDeletion = SubscriptionOptions(rawValue: 4)
    public static let firesOnce = SubscriptionOptions(rawValue: 8)
    /// CloudKit's default: create, update and delete.
    public static let `default`: SubscriptionOptions = [.firesOnRecordCreation, .firesOnRecordUpdate, .firesOnRecordDeletion]
}

/// A refused subscription or change, with CloudKit's wording where it has one.
public struct SubscriptionError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A subscription (CKQuerySubscription, CKRecordZoneSubscription, CKDatabaseSubscription).
public struct Subscription: Hashable, Sendable {
    public enum Kind: Hashable, Sendable {
        /// Fires for records of `recordType` (in `zoneID`, when set) that match `condition`.
        case query(recordType: String, condition: Condition, zoneID: ZoneID?)
        /// Fires for any change in the zone (of `recordType`, when set).
        case recordZone(zoneID: ZoneID, recordType: String?)
        /// Fires for any change in a custom zone of the database (of `recordType`, when set).
        case database(recordType: String?)
    }

    public var subscriptionID: String
    public var kind: Kind
    public var options: SubscriptionOptions
    public var notificationInfo: NotificationInfo
    /// The user who saved the subscription, and who receives its pushes (`ckuserid`). A server
    /// matches many users' subscriptions at once; the duplicate rule applies per user.
    public var owner: String = PushContext.defaultUserRecordName

    /// A query subscription. The predicate is validated in the cloudkit profile now, so an invalid
    /// one is refused when saved rather than silently ignored later.
    public static func query(
        _ subscriptionID: String, recordType: String, predicate: String, arguments: [Constant] = [],
        options: SubscriptionOptions = .default, zoneID: ZoneID? = nil, notificationInfo: NotificationInfo = NotificationInfo(),
        owner: String = PushContext.defaultUserRecordName
    ) throws(InvalidPredicateError) -> Subscription {
        let validated = try ValidatedPredicate(predicate, arguments: arguments, profile: .cloudkit)
        var subscription = Subscription(
            subscriptionID: subscriptionID, kind: .query(recordType: recordType, condition: validated.condition, zoneID: zoneID),
            options: options, notificationInfo: notificationInfo)
        subscription.owner = owner
        return subscription
    }

    public init(subscriptionID: String, kind: Kind, options: SubscriptionOptions = .default, notificationInfo: NotificationInfo = NotificationInfo()) {
        self.subscriptionID = subscriptionID
        self.kind = kind
        self.options = options
        self.notificationInfo = notificationInfo
    }

    /// Checks what CloudKit checks when a subscription is saved (SPEC §4).
    public func validate(in database: DatabaseScope) throws(SubscriptionError) {
        guard !subscriptionID.isEmpty else { throw SubscriptionError("subscription ID must not be empty") }
        // (As a record name: a subscription ID is stored and indexed as one.)
        guard subscriptionID.utf16.count <= RecordID.maximumNameLength else {
            throw SubscriptionError("a subscription ID is at most \(RecordID.maximumNameLength) characters, not \(subscriptionID.utf16.count)")
        }
        switch kind {
        case .query(let recordType, _, _):
            guard !recordType.isEmpty else { throw SubscriptionError("subscription '\(subscriptionID)': query subscriptions need a record type") }
            guard !options.intersection(.default).isEmpty else {
                throw SubscriptionError("subscription '\(subscriptionID)': options must fire on at least one of creation, update or deletion")
            }
            guard database != .shared else {
                throw SubscriptionError("subscription '\(subscriptionID)': query subscriptions are not supported in the shared database")
            }
        case .recordZone:
            guard database == .private else {
                throw SubscriptionError("subscription '\(subscriptionID)': zone subscriptions are only supported in the private database")
            }
        case .database:
            guard database != .public else {
                throw SubscriptionError("subscription '\(subscriptionID)': database subscriptions are not supported in the public database")
            }
        }
    }
}

/// A change to a record, as the subscription matcher sees it.
public enum RecordChange: Hashable, Sendable {
    case created(Record)
    /// The record before and after the change.
    case updated(before: Record, after: Record)
    /// The record as it was before deletion.
    case deleted(Record)

    /// The ID of the record the change is about.
    public var recordID: RecordID {
        switch self {
        case .created(let record), .deleted(let record), .updated(_, let record): record.recordID
        }
    }

    /// The record the change is about (after an update; before a deletion).
    public var record: Record {
        switch self {
        case .created(let record), .deleted(let record), .updated(_, let record): record
        }
    }

    /// Sets the created or updated record's change tag, in place (a deletion keeps its record as
    /// it was).
    public mutating func setRecordChangeTag(_ tag: String) {
        switch consume self {
        case .created(var record):
            record.recordChangeTag = tag
            self = .created(record)
        case .updated(let before, var record):
            record.recordChangeTag = tag
            self = .updated(before: before, after: record)
        case .deleted(let record):
            self = .deleted(record)
        }
    }
}

/// One subscription firing for one change: enough to build the push.
public struct SubscriptionFiring: Hashable, Sendable {
    /// The change's record and the subscriptions that fired, shared by all the change's firings
    /// (a firing is a reference and a position: making one copies no record and no subscription).
    private var batch: FiringBatch
    private var position: Int
    /// For query subscriptions: why (created, updated, deleted).
    public var reason: QueryNotificationReason

    /// The subscription that fired, assembled from its stored parts.
    public var subscription: Subscription {
        get { batch.subscription(at: position) }
        set {
            batch = FiringBatch(record: record, subscription: newValue)
            position = 0
        }
    }

    /// The record the push describes.
    public var record: Record {
        get { batch.record }
        set {
            batch = batch.firing(position, record: newValue)
            position = 0
        }
    }

    var parts: SubscriptionParts { batch.subscriptions[position] }

    init(subscription: Subscription, reason: QueryNotificationReason, record: Record) {
        self.init(batch: FiringBatch(record: record, subscription: subscription), position: 0, reason: reason)
    }

    init(batch: FiringBatch, position: Int, reason: QueryNotificationReason) {
        self.batch = batch
        self.position = position
        self.reason = reason
    }

    public static func == (lhs: SubscriptionFiring, rhs: SubscriptionFiring) -> Bool {
        lhs.reason == rhs.reason && lhs.record == rhs.record && lhs.subscription == rhs.subscription
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(subscription)
        hasher.combine(reason)
        hasher.combine(record)
    }

    /// The ID of the subscription that fired (read without assembling the subscription).
    public var subscriptionID: String { batch.subscriptions[position].subscriptionID }
    /// The owner of the subscription that fired.
    public var owner: String { batch.subscriptions[position].owner }
    public var options: SubscriptionOptions { batch.subscriptions[position].options }
    /// Whether a query subscription fired (zone and database subscriptions fire once per zone).
    public var isQuery: Bool { batch.isQuery(at: position) }

    /// The push `payload(context:notificationID:)` makes, from the subscription's template in
    /// `templates` when it has one (made there on first use).
    public func payload(context: PushContext, notificationID: String, templates: inout QueryPushTemplates) -> PushPayload {
        if batch.isQuery(at: position) {
            var context = context
            context.userRecordName = batch.subscriptions[position].owner
            if let template = templates.template(batch.subscriptions[position].subscriptionID, batch.sharedNotificationInfo(at: position), context),
               let payload = template.payload(record: batch.record, reason: reason, notificationID: notificationID) {
                return payload
            }
        }
        return payload(context: context, notificationID: notificationID)
    }

    /// The push CloudKit would send for this firing, to the subscription's owner. Made from the
    /// subscription's parts: a query's predicate is not unpacked.
    public func payload(context: PushContext, notificationID: String? = nil) -> PushPayload {
        let id = notificationID ?? UUIDText.random()
        let parts = parts
        let notificationInfo = batch.notificationInfo(at: position)
        var context = context
        context.userRecordName = parts.owner
        switch batch.scope(at: position) {
        case .query, .given(.query):
            return .query(subscriptionID: parts.subscriptionID, record: record, reason: reason,
                          notificationInfo: notificationInfo, context: context, notificationID: id)
        case .given(.recordZone(let zoneID, _)):
            return .recordZone(subscriptionID: parts.subscriptionID, zoneID: zoneID,
                               notificationInfo: notificationInfo, context: context, notificationID: id)
        case .given(.database):
            return .database(subscriptionID: parts.subscriptionID, zoneID: record.recordID.zoneID,
                             notificationInfo: notificationInfo, context: context, notificationID: id)
        }
    }
}

/// The firings of one record change, in the order their subscriptions were saved.
///
/// A collection over one shared batch (the change's record and the parts of the subscriptions
/// that fired): making it takes one reference, however many subscriptions fired, and each
/// `SubscriptionFiring` is made when it is read.
public struct SubscriptionFirings: RandomAccessCollection, Hashable, Sendable {
    /// Nil when nothing fired.
    private let batch: FiringBatch?
    /// Why the change fires its query subscriptions (the same for all of one change's firings).
    public let reason: QueryNotificationReason

    init(batch: FiringBatch?, reason: QueryNotificationReason) {
        self.batch = batch
        self.reason = reason
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { batch?.subscriptions.count ?? 0 }

    public subscript(position: Int) -> SubscriptionFiring {
        guard let batch, batch.subscriptions.indices.contains(position) else {
            preconditionFailure("firing \(position) out of range 0..<\(count)")
        }
        return SubscriptionFiring(batch: batch, position: position, reason: reason)
    }

    public static func == (lhs: SubscriptionFirings, rhs: SubscriptionFirings) -> Bool {
        lhs.elementsEqual(rhs)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        for firing in self { hasher.combine(firing) }
    }
}

/// The record of one change and the subscriptions it fired, shared by the firings.
final class FiringBatch: Sendable {
    let record: Record
    let subscriptions: [SubscriptionParts]
    /// What the subscriptions share, each once (the batch holds it once rather than each firing
    /// retaining it): their notification infos (most share one) and scopes.
    private let notificationInfos: SharedValues<SharedNotificationInfo>
    private let scopes: SharedValues<SubscriptionParts.Scope>

    init(record: Record, subscriptions: [SubscriptionParts], notificationInfos: SharedValues<SharedNotificationInfo>,
         scopes: SharedValues<SubscriptionParts.Scope>) {
        self.record = record
        self.subscriptions = subscriptions
        self.notificationInfos = notificationInfos
        self.scopes = scopes
    }

    convenience init(record: Record, subscription: Subscription) {
        let (parts, scope) = SubscriptionParts.split(subscription)
        self.init(record: record, subscriptions: [parts], notificationInfos: SharedValues(SharedNotificationInfo(subscription.notificationInfo)),
                  scopes: SharedValues(scope))
    }

    func notificationInfo(at position: Int) -> NotificationInfo { notificationInfos[subscriptions[position].notificationInfo].value }

    /// The shared object holding the notification info at `position`, not copied out.
    func sharedNotificationInfo(at position: Int) -> SharedNotificationInfo { notificationInfos[subscriptions[position].notificationInfo] }

    func scope(at position: Int) -> SubscriptionParts.Scope { scopes[subscriptions[position].scope] }

    /// Whether the subscription at `position` is a query subscription, read in place (`scope(at:)`
    /// copies the scope out, retaining what it holds).
    func isQuery(at position: Int) -> Bool { scopes.isQuery(subscriptions[position].scope) }

    func subscription(at position: Int) -> Subscription {
        let parts = subscriptions[position]
        return parts.subscription(notificationInfo: notificationInfos[parts.notificationInfo].value, scope: scopes[parts.scope])
    }

    /// A batch of the firing at `position` alone, for `record`.
    func firing(_ position: Int, record: Record) -> FiringBatch {
        var parts = subscriptions[position]
        let (info, scope) = (notificationInfos[parts.notificationInfo], scopes[parts.scope])
        parts.notificationInfo = 0
        parts.scope = 0
        return FiringBatch(record: record, subscriptions: [parts], notificationInfos: SharedValues(info), scopes: SharedValues(scope))
    }
}

/// A subscription as stored parts: a query's condition packed; its notification info and scope
/// positions in its batch's.
struct SubscriptionParts: Sendable {
    /// What a subscription fires for, apart from a query's predicate. A batch's firings share
    /// few (most fire for one record type, in no zone).
    enum Scope: Sendable {
        case query(recordType: String, zoneID: ZoneID?)
        case given(Subscription.Kind)
    }

    var subscriptionID: String
    var owner: String
    /// A query subscription's predicate; `PackedPredicate.free` for other kinds.
    var predicate: PackedPredicate
    var options: SubscriptionOptions
    var notificationInfo: UInt32
    var scope: UInt32

    /// A subscription's parts (in a batch of its own), and its scope.
    static func split(_ subscription: Subscription) -> (SubscriptionParts, Scope) {
        let parts = SubscriptionParts(subscriptionID: subscription.subscriptionID, owner: subscription.owner, predicate: .free,
                                      options: subscription.options, notificationInfo: 0, scope: 0)
        return (parts, .given(subscription.kind))
    }

    func subscription(notificationInfo: NotificationInfo, scope: Scope) -> Subscription {
        let kind: Subscription.Kind = switch scope {
        case .query(let recordType, let zoneID): .query(recordType: recordType, condition: predicate.condition, zoneID: zoneID)
        case .given(let kind): kind
        }
        var subscription = Subscription(subscriptionID: subscriptionID, kind: kind, options: options, notificationInfo: notificationInfo)
        subscription.owner = owner
        return subscription
    }
}

/// Values the firings of a batch share, each stored once: the first, then the others (usually
/// none, so no array is made).
struct SharedValues<Value: Sendable>: Sendable {
    private let first: Value
    private let others: [Value]

    init(_ first: Value, others: [Value] = []) {
        self.first = first
        self.others = others
    }

    subscript(position: UInt32) -> Value { position == 0 ? first : others[Int(position) - 1] }

    /// `body` on the value at `position`, borrowed where it lies.
    func withValue<Result>(at position: UInt32, _ body: (borrowing Value) -> Result) -> Result {
        position == 0 ? body(first) : others.withUnsafeBufferPointer { body($0[Int(position) - 1]) }
    }
}

extension SharedValues where Value == SubscriptionParts.Scope {
    /// Whether the scope at `position` is a query subscription's.
    func isQuery(_ position: UInt32) -> Bool {
        withValue(at: position) { scope in
            switch scope {
            case .query, .given(.query): true
            case .given: false
            }
        }
    }
}

/// Collects the values a batch's firings share, in order of first use, each found by a key
/// (the last one first: most firings share one).
struct SharedValuesBuilder<Value: Sendable> {
    private var first: Value?
    private var others: [Value] = []
    /// No key is `UInt64.max`.
    private var last: (key: UInt64, position: UInt32) = (.max, 0)
    /// The keys in order, once there are several.
    private var keys: [UInt64] = []
    /// Built once there are enough values for a linear search to be slow.
    private var positions: [UInt64: UInt32] = [:]

    var values: SharedValues<Value>? { first.map { SharedValues($0, others: others) } }

    /// The position of the value with `key`, if it has been added.
    @inline(__always)
    func position(of key: UInt64) -> UInt32? {
        key == last.key ? last.position : nil
    }

    /// Adds `value` with `key` unless a value with that key is there; returns its position. (The
    /// value is made by the caller: a closure making it would capture, and copy, what it reads.)
    mutating func add(_ key: UInt64, _ value: Value) -> UInt32 {
        let position: UInt32
        if first == nil {
            first = value
            position = 0
        } else {
            if keys.isEmpty { keys.append(last.key) }
            if keys.count <= 8, let found = keys.firstIndex(of: key) {
                position = UInt32(found)
            } else if keys.count > 8, let found = positions[key] {
                position = found
            } else {
                position = UInt32(keys.count)
                others.append(value)
                keys.append(key)
                if keys.count > 8 {
                    if positions.isEmpty { for (known, number) in keys.enumerated() { positions[number] = UInt32(known) } }
                    positions[key] = position
                }
            }
        }
        last = (key, position)
        return position
    }
}

/// A notification info stored once for every subscription that has it (most share one).
final class SharedNotificationInfo: Hashable, Sendable {
    let value: NotificationInfo

    init(_ value: NotificationInfo) { self.value = value }

    static func == (lhs: SharedNotificationInfo, rhs: SharedNotificationInfo) -> Bool { lhs.value == rhs.value }
    func hash(into hasher: inout Hasher) { hasher.combine(value) }
}

extension PushContext {
    /// The user subscriptions belong to when none is named.
    public static let defaultUserRecordName = "_defaultUser"
}
