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
    func validate(in database: DatabaseScope) throws(SubscriptionError) {
        guard !subscriptionID.isEmpty else { throw SubscriptionError("subscription ID must not be empty") }
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

    /// The record the change is about (after an update; before a deletion).
    public var record: Record {
        switch self {
        case .created(let record), .deleted(let record), .updated(_, let record): record
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

    /// The push CloudKit would send for this firing, to the subscription's owner.
    public func payload(context: PushContext, notificationID: String? = nil) -> PushPayload {
        let id = notificationID ?? UUIDText.random()
        let subscription = subscription
        var context = context
        context.userRecordName = subscription.owner
        switch subscription.kind {
        case .query:
            return .query(subscriptionID: subscription.subscriptionID, record: record, reason: reason,
                          notificationInfo: subscription.notificationInfo, context: context, notificationID: id)
        case .recordZone(let zoneID, _):
            return .recordZone(subscriptionID: subscription.subscriptionID, zoneID: zoneID,
                               notificationInfo: subscription.notificationInfo, context: context, notificationID: id)
        case .database:
            return .database(subscriptionID: subscription.subscriptionID, zoneID: record.recordID.zoneID,
                             notificationInfo: subscription.notificationInfo, context: context, notificationID: id)
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
    /// The notification infos of `subscriptions`, each once: most subscriptions share one, and
    /// the batch holds it once rather than each firing retaining it.
    let notificationInfos: [SharedNotificationInfo]

    init(record: Record, subscriptions: [SubscriptionParts], notificationInfos: [SharedNotificationInfo]) {
        self.record = record
        self.subscriptions = subscriptions
        self.notificationInfos = notificationInfos
    }

    convenience init(record: Record, subscription: Subscription) {
        self.init(record: record, subscriptions: [SubscriptionParts(subscription, notificationInfo: 0)],
                  notificationInfos: [SharedNotificationInfo(subscription.notificationInfo)])
    }

    func subscription(at position: Int) -> Subscription {
        let parts = subscriptions[position]
        return parts.subscription(notificationInfo: notificationInfos[Int(parts.notificationInfo)].value)
    }

    /// A batch of the firing at `position` alone, for `record`.
    func firing(_ position: Int, record: Record) -> FiringBatch {
        var parts = subscriptions[position]
        let info = notificationInfos[Int(parts.notificationInfo)]
        parts.notificationInfo = 0
        return FiringBatch(record: record, subscriptions: [parts], notificationInfos: [info])
    }
}

/// A subscription as stored parts: a query's condition packed, its notification info a position
/// in its batch's.
struct SubscriptionParts: Sendable {
    enum Kind: Sendable {
        case query(recordType: String, predicate: PackedPredicate, zoneID: ZoneID?)
        case given(Subscription.Kind)
    }

    var subscriptionID: String
    var kind: Kind
    var options: SubscriptionOptions
    var notificationInfo: UInt32
    var owner: String

    init(subscriptionID: String, kind: Kind, options: SubscriptionOptions, notificationInfo: UInt32, owner: String) {
        self.subscriptionID = subscriptionID
        self.kind = kind
        self.options = options
        self.notificationInfo = notificationInfo
        self.owner = owner
    }

    init(_ subscription: Subscription, notificationInfo: UInt32) {
        self.init(subscriptionID: subscription.subscriptionID, kind: .given(subscription.kind), options: subscription.options,
                  notificationInfo: notificationInfo, owner: subscription.owner)
    }

    func subscription(notificationInfo: NotificationInfo) -> Subscription {
        let kind: Subscription.Kind = switch self.kind {
        case .query(let recordType, let predicate, let zoneID): .query(recordType: recordType, condition: predicate.condition, zoneID: zoneID)
        case .given(let kind): kind
        }
        var subscription = Subscription(subscriptionID: subscriptionID, kind: kind, options: options, notificationInfo: notificationInfo)
        subscription.owner = owner
        return subscription
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
