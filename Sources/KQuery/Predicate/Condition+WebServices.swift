/// A condition with no CloudKit Web Services form (an extended-profile shape).
public struct WebServicesMappingError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

extension Condition {
    /// The Web Services `filterBy` list (SPEC §2.1, comparator column): an AND of filter dictionaries,
    /// `{"comparator": ..., "fieldName": ..., "fieldValue": {"value": ..., "type": ...}}`.
    /// `now` (milliseconds) replaces `now()`, as a device does when it sends the query.
    public func webServicesFilters(now: Int64) throws(WebServicesMappingError) -> [JSON] {
        var filters: [JSON] = []
        try appendFilters(to: &filters, now: now)
        return filters
    }

    private func appendFilters(to filters: inout [JSON], now: Int64) throws(WebServicesMappingError) {
        switch self {
        case .constant(true):
            break
        case .constant(false):
            // Nothing has a record ID in the empty list: CloudKit's way of matching nothing.
            filters.append(Self.filter("IN", field: .recordID, value: .list(.reference, [])))
        case .and(let conditions):
            for condition in conditions { try condition.appendFilters(to: &filters, now: now) }
        case .or:
            throw WebServicesMappingError(message: "OR has no Web Services form (CloudKit supports only AND)")
        case .not(.field(let field, let test)):
            filters.append(try Self.filter(field, test, negated: true, now: now))
        case .not:
            throw WebServicesMappingError(message: "NOT around this predicate has no Web Services form")
        case .field(let field, .between(let lower, let upper)):
            filters.append(try Self.filter(field, .compare(.greaterThanOrEqual, lower, []), negated: false, now: now))
            filters.append(try Self.filter(field, .compare(.lessThanOrEqual, upper, []), negated: false, now: now))
        case .field(let field, let test):
            filters.append(try Self.filter(field, test, negated: false, now: now))
        case .tokens(let match, let text):
            filters.append(.object([
                ("comparator", .string(match == .all ? "CONTAINS_ALL_TOKENS" : "CONTAINS_ANY_TOKENS")),
                ("fieldValue", FieldValue.string(text).typedJSON),
            ]))
        case .distance(let field, let center, let relation, let radius):
            // `<` and `<=` make the same NEAR filter (CloudKit's translator does not tell them
            // apart); the distance is the predicate's number as written, in kilometres.
            guard relation == .lessThan || relation == .lessThanOrEqual else {
                throw WebServicesMappingError(message: "a distance compared with \(relation.op.info.canonical) has no Web Services form")
            }
            filters.append(.object([
                ("comparator", .string("NEAR")), ("fieldName", .string(field.webServicesName)),
                ("fieldValue", FieldValue.location(center).typedJSON), ("distance", .double(radius)),
            ]))
        }
    }

    private static func filter(_ comparator: String, field: FieldReference, value: FieldValue?) -> JSON {
        .object([
            ("comparator", .string(comparator)), ("fieldName", .string(field.webServicesName)),
            ("fieldValue", value?.typedJSON ?? .object([("value", .null)])),
        ])
    }

    private static func filter(_ field: FieldReference, _ test: FieldTest, negated: Bool, now: Int64) throws(WebServicesMappingError) -> JSON {
        func pick(_ op: ComparisonOperator) throws(WebServicesMappingError) -> String {
            guard let name = negated ? op.info.negatedComparator : op.info.comparator else {
                throw WebServicesMappingError(message: "\(negated ? "NOT " : "")\(op.info.canonical) has no Web Services form")
            }
            return name
        }
        func value(_ operand: Operand) -> FieldValue {
            switch operand {
            case .value(let value): value
            case .now: .timestamp(now)
            }
        }
        func list(_ operands: [Operand]) -> FieldValue {
            let values = operands.map(value)
            let types = Set(values.map(\.type))
            if types == [.int64, .double] {
                return .list(.double, values.map { if case .int64(let i) = $0 { .double(Double(i)) } else { $0 } })
            }
            return .list(values.first?.type ?? .string, values)
        }
        let extended = WebServicesMappingError(message: "this \(field.name) test is extended-profile only and has no Web Services form")
        switch test {
        case .isNil: return filter(negated ? "NOT_EQUALS" : "EQUALS", field: field, value: nil)
        case .isNotNil: return filter(negated ? "EQUALS" : "NOT_EQUALS", field: field, value: nil)
        case .compare(let relation, let operand, []): return filter(try pick(relation.op), field: field, value: value(operand))
        case .oneOf(let operands, []): return filter(try pick(.in), field: field, value: list(operands))
        case .string(.beginsWith, let prefix, []): return filter(try pick(.beginsWith), field: field, value: .string(prefix))
        case .members(.any, .compare(.equal, let operand, [])): return filter(try pick(.contains), field: field, value: value(operand))
        case .members(.any, .oneOf(let operands, [])):
            return filter(negated ? "NOT_LIST_CONTAINS_ANY" : "LIST_CONTAINS_ANY", field: field, value: list(operands))
        case .members(.any, .string(.beginsWith, let prefix, [])):
            return filter(negated ? "NOT_LIST_MEMBER_BEGINS_WITH" : "LIST_MEMBER_BEGINS_WITH", field: field, value: .string(prefix))
        case .containsAll(let operands):
            return filter(negated ? "NOT_LIST_CONTAINS_ALL" : "LIST_CONTAINS_ALL", field: field, value: list(operands))
        case .between:
            throw WebServicesMappingError(message: "BETWEEN maps to two filters and cannot be negated")
        default:
            throw extended
        }
    }
}
