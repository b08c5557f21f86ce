extension Subscription {
    /// Reads a CloudKit Web Services subscription object: `subscriptionID`, `subscriptionType`
    /// (`query`, `zone`, `database`), `query.recordType` with `query.filterBy` (or, as a KQuery
    /// extension, `predicate` with a predicate string), `zoneID`, `firesOn` (`create`, `update`,
    /// `delete`), `firesOnce` and `notificationInfo`, plus the KQuery extension `ownerRecordName`
    /// (the user the subscription belongs to). Query predicates are validated in the cloudkit profile.
    public init(webServicesJSON json: JSON) throws(SubscriptionError) {
        guard case .object = json else { throw SubscriptionError("a subscription must be a JSON object") }
        guard let id = json["subscriptionID"]?.stringValue, !id.isEmpty else {
            throw SubscriptionError("subscription has no \"subscriptionID\" string")
        }
        func fail(_ message: String) -> SubscriptionError { SubscriptionError("subscription '\(id)': \(message)") }
        var zoneID: ZoneID?
        if let zoneJSON = json["zoneID"] {
            do { zoneID = try ZoneID(json: zoneJSON) } catch { throw fail(error.message) }
        }
        var notificationInfo = NotificationInfo()
        if let infoJSON = json["notificationInfo"] {
            do { notificationInfo = try NotificationInfo(json: infoJSON) } catch { throw fail(error.message) }
        }
        var options: SubscriptionOptions = []
        if let firesOn = json["firesOn"] {
            guard case .array(let events) = firesOn else { throw fail("\"firesOn\" must be an array") }
            for event in events {
                switch event.stringValue {
                case "create": options.insert(.firesOnRecordCreation)
                case "update": options.insert(.firesOnRecordUpdate)
                case "delete": options.insert(.firesOnRecordDeletion)
                default: throw fail("\"firesOn\" takes \"create\", \"update\" and \"delete\", not \(event.serialized)")
                }
            }
        } else {
            options = .default
        }
        if case .bool(true)? = json["firesOnce"] { options.insert(.firesOnce) }

        let kind: Kind
        switch json["subscriptionType"]?.stringValue {
        case "query":
            guard let recordType = json["query"]?["recordType"]?.stringValue, !recordType.isEmpty else {
                throw fail("a query subscription needs \"query\": {\"recordType\": ...}")
            }
            let condition: Condition
            if let text = json["predicate"]?.stringValue ?? json["query"]?["predicate"]?.stringValue {
                do {
                    condition = try ValidatedPredicate(text, profile: .cloudkit).condition
                } catch {
                    throw fail(error.located(in: text))
                }
            } else if case .array(let filters)? = json["query"]?["filterBy"] {
                do { condition = try Condition(webServicesFilters: filters) } catch { throw fail(error.message) }
            } else {
                condition = .constant(true)
            }
            kind = .query(recordType: recordType, condition: condition, zoneID: zoneID)
        case "zone":
            guard let zoneID else { throw fail("a zone subscription needs \"zoneID\"") }
            kind = .recordZone(zoneID: zoneID, recordType: json["query"]?["recordType"]?.stringValue)
        case "database":
            kind = .database(recordType: json["query"]?["recordType"]?.stringValue)
        default:
            throw fail("\"subscriptionType\" must be \"query\", \"zone\" or \"database\"")
        }
        self.init(subscriptionID: id, kind: kind, options: options, notificationInfo: notificationInfo)
        if let owner = json["ownerRecordName"]?.stringValue { self.owner = owner }
    }
}

extension Condition {
    /// Reads a Web Services `filterBy` list (an AND of filter dictionaries): the inverse of
    /// `webServicesFilters(now:)`.
    public init(webServicesFilters filters: [JSON]) throws(WebServicesMappingError) {
        var conditions: [Condition] = []
        for (index, filter) in filters.enumerated() {
            func fail(_ message: String) -> WebServicesMappingError { WebServicesMappingError(message: "filterBy[\(index)]: \(message)") }
            guard let comparator = filter["comparator"]?.stringValue else { throw fail("no \"comparator\"") }
            let valueJSON = filter["fieldValue"]
            if comparator == "CONTAINS_ALL_TOKENS" || comparator == "CONTAINS_ANY_TOKENS" {
                guard let text = valueJSON?["value"]?.stringValue ?? valueJSON?.stringValue else { throw fail("\(comparator) needs a string fieldValue") }
                conditions.append(.tokens(comparator == "CONTAINS_ALL_TOKENS" ? .all : .any, text: text))
                continue
            }
            guard let name = filter["fieldName"]?.stringValue else { throw fail("no \"fieldName\"") }
            let field = FieldReference(webServicesName: name)
            guard FieldKey.isValidName(field.name) else { throw fail("invalid field name '\(name)'") }
            var value: FieldValue?
            if let valueJSON {
                do { value = try FieldValue(fieldJSON: valueJSON) } catch { throw fail(error.message) }
            }
            func scalar() throws(WebServicesMappingError) -> Operand {
                guard let value, !value.isList else { throw fail("\(comparator) needs a single value") }
                return .value(value)
            }
            func list() throws(WebServicesMappingError) -> [Operand] {
                guard case .list(_, let values)? = value else { throw fail("\(comparator) needs a list value") }
                return values.map(Operand.value)
            }
            func prefix() throws(WebServicesMappingError) -> String {
                guard case .string(let text)? = value else { throw fail("\(comparator) needs a string value") }
                return text
            }
            let negated = comparator.hasPrefix("NOT_") && comparator != "NOT_EQUALS"
            let base = negated ? String(comparator.dropFirst(4)) : comparator
            let test: FieldTest
            switch base {
            case "EQUALS": test = value == nil ? .isNil : .compare(.equal, try scalar(), [])
            case "NOT_EQUALS": test = value == nil ? .isNotNil : .compare(.notEqual, try scalar(), [])
            case "LESS_THAN": test = .compare(.lessThan, try scalar(), [])
            case "LESS_THAN_OR_EQUALS": test = .compare(.lessThanOrEqual, try scalar(), [])
            case "GREATER_THAN": test = .compare(.greaterThan, try scalar(), [])
            case "GREATER_THAN_OR_EQUALS": test = .compare(.greaterThanOrEqual, try scalar(), [])
            case "IN": test = .oneOf(try list(), [])
            case "BEGINS_WITH": test = .string(.beginsWith, try prefix(), [])
            case "LIST_CONTAINS": test = .members(.any, .compare(.equal, try scalar(), []))
            case "LIST_CONTAINS_ANY": test = .members(.any, .oneOf(try list(), []))
            case "LIST_CONTAINS_ALL": test = .containsAll(try list())
            case "LIST_MEMBER_BEGINS_WITH": test = .members(.any, .string(.beginsWith, try prefix(), []))
            case "NEAR":
                guard !negated, case .location(let center)? = value, let radius = filter["distance"]?.doubleValue, radius >= 0 else {
                    throw fail("NEAR needs a LOCATION fieldValue and a non-negative \"distance\"")
                }
                conditions.append(.distance(field, center: center, .lessThan, radius: radius))
                continue
            default:
                throw fail("Unsupported comparator: \(comparator)")
            }
            conditions.append(negated ? .not(.field(field, test)) : .field(field, test))
        }
        // An empty list filters nothing out: TRUEPREDICATE, as a missing `filterBy` is (an empty
        // AND would print as no predicate at all, which nothing reads back).
        switch conditions.count {
        case 0: self = .constant(true)
        case 1: self = conditions[0]
        default: self = .and(conditions)
        }
    }
}
