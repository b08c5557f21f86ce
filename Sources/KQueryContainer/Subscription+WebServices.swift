import KQuery

extension Subscription {
    /// The Web Services subscription object (what `subscriptions/list` and `lookup` answer):
    /// `subscriptionID`, `subscriptionType`, `query` (`recordType`, `filterBy`), `zoneID`, `firesOn`,
    /// `firesOnce`, `notificationInfo`, and as KQuery extensions the query's `predicate` text (which
    /// keeps `now()`, where `filterBy` holds the time of the answer) and `ownerRecordName`. Reads back
    /// through `Subscription(webServicesJSON:)`.
    public var webServicesJSON: JSON {
        var members: [(String, JSON)] = [("subscriptionID", .string(subscriptionID))]
        switch kind {
        case .query(let recordType, let condition, let zoneID):
            var query: [(String, JSON)] = [("recordType", .string(recordType))]
            if let filters = try? condition.webServicesFilters(now: 0), !condition.readsTheClock {
                query.append(("filterBy", .array(filters)))
            }
            members += [("subscriptionType", .string("query")), ("query", .object(query)), ("predicate", .string(condition.description))]
            if let zoneID { members.append(("zoneID", zoneID.json)) }
            members.append(("zoneWide", .bool(zoneID == nil)))
        case .recordZone(let zoneID, let recordType):
            members += [("subscriptionType", .string("zone")), ("zoneID", zoneID.json)]
            if let recordType { members.append(("query", .object([("recordType", .string(recordType))]))) }
        case .database(let recordType):
            members.append(("subscriptionType", .string("database")))
            if let recordType { members.append(("query", .object([("recordType", .string(recordType))]))) }
        }
        var firesOn: [JSON] = []
        if options.contains(.firesOnRecordCreation) { firesOn.append(.string("create")) }
        if options.contains(.firesOnRecordUpdate) { firesOn.append(.string("update")) }
        if options.contains(.firesOnRecordDeletion) { firesOn.append(.string("delete")) }
        members += [
            ("firesOn", .array(firesOn)), ("firesOnce", .bool(options.contains(.firesOnce))),
            ("notificationInfo", notificationInfo.json), ("ownerRecordName", .string(owner)),
        ]
        return .object(members)
    }
}

extension Condition {
    /// Whether the condition compares with `now()`, which a `filterBy` list can only hold as a time.
    var readsTheClock: Bool {
        switch self {
        case .constant, .tokens, .distance: false
        case .and(let parts), .or(let parts): parts.contains(where: \.readsTheClock)
        case .not(let inner): inner.readsTheClock
        case .field(_, let test): test.readsTheClock
        }
    }
}

extension FieldTest {
    var readsTheClock: Bool {
        switch self {
        case .compare(_, .now, _), .between(.now, _), .between(_, .now): true
        case .oneOf(let operands, _), .containsAll(let operands): operands.contains(.now)
        case .members(_, let inner): inner.readsTheClock
        case .contains(.now, _): true
        default: false
        }
    }
}

extension OutboxNotification {
    /// A pending notification as `kquery notifications` prints it: `{"id", "database": {"environment",
    /// "scope", "user"}, "subscriptionID", "owner", "payload", "priority", "pushType", "created"}`, and
    /// `"collapseID"` and `"excludedDevice"` when set.
    public var webServicesJSON: JSON {
        var target: [(String, JSON)] = [("environment", .string(database.environment.name)), ("scope", .string(database.scope.name))]
        if !database.userRecordName.isEmpty { target.append(("user", .string(database.userRecordName))) }
        var members: [(String, JSON)] = [
            ("id", .int(id)), ("database", .object(target)), ("subscriptionID", .string(subscriptionID)), ("owner", .string(owner)),
            ("payload", payload), ("priority", .int(Int64(priority))), ("pushType", .string(pushType)), ("created", .int(created)),
        ]
        if let collapseID { members.append(("collapseID", .string(collapseID))) }
        if let excludedDevice { members.append(("excludedDevice", .string(excludedDevice))) }
        return .object(members)
    }
}

extension ContainerError {
    /// The members a per-item error adds to its item: `serverErrorCode` and `reason`.
    public var webServicesMembers: [(String, JSON)] {
        [("serverErrorCode", .string(code.rawValue)), ("reason", .string(reason))]
    }
}
