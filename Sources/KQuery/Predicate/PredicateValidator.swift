/// Checks a bound predicate against a profile's rules and lowers it to a `Condition`.
///
/// CloudKit's rules (SPEC §2.1): an AND of comparisons and NOT-comparisons, no OR, options only on
/// TOKENMATCHES, BEGINSWITH as the only string operator, and specific shapes for lists, tokens and
/// distances. The extended profile lifts those restrictions (SPEC §2.2).
public struct PredicateValidator {
    public let profile: PredicateProfile

    public init(profile: PredicateProfile = .cloudkit) { self.profile = profile }

    public func validate(_ predicate: PredicateSyntax) throws(InvalidPredicateError) -> Condition {
        try lower(predicate)
    }

    private var isCloudKit: Bool { profile == .cloudkit }

    private func lower(_ predicate: PredicateSyntax) throws(InvalidPredicateError) -> Condition {
        switch predicate {
        case .constant(let value, _):
            return .constant(value)
        case .comparison(let comparison):
            return try lower(comparison)
        case .and(let operands, _):
            return .and(try lower(operands))
        case .or(let operands, let span):
            if isCloudKit { throw InvalidPredicateError("Invalid compound predicate type: OR (CloudKit supports only AND)", at: orSpan(operands, span)) }
            return .or(try lower(operands))
        case .not(let operand, let span):
            if isCloudKit { try checkNegatable(operand, notSpan: span) }
            return .not(try lower(operand))
        }
    }

    /// The operands of an AND or OR.
    private func lower(_ operands: [PredicateSyntax]) throws(InvalidPredicateError) -> [Condition] {
        var conditions: [Condition] = []
        conditions.reserveCapacity(operands.count)
        for index in operands.indices { conditions.append(try lower(operands[index])) }
        return conditions
    }

    /// Points an OR error at the second operand's start, where the OR is.
    private func orSpan(_ operands: [PredicateSyntax], _ span: SourceSpan) -> SourceSpan {
        operands.count > 1 ? SourceSpan(start: operands[0].span.end, end: operands[1].span.start) : span
    }

    private func checkNegatable(_ operand: PredicateSyntax, notSpan: SourceSpan) throws(InvalidPredicateError) {
        let at = SourceSpan(start: notSpan.start, end: notSpan.start + 3)
        switch operand {
        case .comparison(let comparison):
            if comparison.op == .between {
                throw InvalidPredicateError("Unsupported predicate: NOT around BETWEEN", at: at)
            }
            if comparison.op == .tokenMatches || comparison.involvesTokens {
                throw InvalidPredicateError("Unsupported predicate: NOT around a token search", at: at)
            }
            if comparison.involvesDistance {
                throw InvalidPredicateError("Unsupported predicate: NOT around distanceToLocation:fromLocation:", at: at)
            }
        case .and, .or:
            throw InvalidPredicateError("Invalid compound predicate type: NOT around a compound predicate", at: at)
        case .not:
            throw InvalidPredicateError("Invalid compound predicate type: NOT around NOT", at: at)
        case .constant:
            throw InvalidPredicateError("<\(operand.canonicalText)> is not a comparison predicate", at: operand.span)
        }
    }

    // MARK: Comparisons

    private func lower(_ comparison: Comparison) throws(InvalidPredicateError) -> Condition {
        let op = comparison.op
        if isCloudKit, !op.isCloudKitOperator {
            throw InvalidPredicateError("Unsupported operator: \(op.info.canonical)", at: comparison.operatorSpan)
        }
        if comparison.left.mayHoldPlaceholders { try checkBound(comparison.left) }
        if comparison.right.mayHoldPlaceholders { try checkBound(comparison.right) }
        if !comparison.options.isEmpty || op == .tokenMatches { try checkOptions(comparison) }
        // Token searches and distances have TOKENMATCHES, SELF or a function call; most comparisons
        // have none, and skip both without building an optional Condition.
        if op == .tokenMatches || comparison.left.isEvaluatedObject || comparison.left.isFunctionCall || comparison.right.isFunctionCall {
            if let condition = try lowerTokenSearch(comparison) { return condition }
            if let condition = try lowerDistance(comparison) { return condition }
        }
        if op == .tokenMatches {
            throw InvalidPredicateError("TOKENMATCHES compares allTokens with a string, as in allTokens TOKENMATCHES[cdl] 'words'", at: comparison.operatorSpan)
        }
        if !comparison.left.isPlainOperand { try checkPlainOperand(comparison.left) }
        if !comparison.right.isPlainOperand { try checkPlainOperand(comparison.right) }

        // Normalize to: field on the left, value on the right. The value side is passed in place,
        // not copied out: copying expressions was a large part of validation's time.
        if let field = try fieldReference(comparison.left) {
            if try fieldReference(comparison.right) != nil {
                throw InvalidPredicateError("comparing two fields is not supported: one side must be a constant", at: comparison.right.span)
            }
            let test = try lowerTest(
                comparison, field: field, op: op, value: comparison.right, fieldModifier: comparison.modifier, valueModifier: .direct)
            return .field(field, test)
        }
        if let field = try fieldReference(comparison.right) {
            guard let mirrored = op.mirroredOperator else {
                throw InvalidPredicateError("the field must be on the left of \(op.info.canonical)", at: comparison.right.span)
            }
            let test = try lowerTest(
                comparison, field: field, op: mirrored, value: comparison.left, fieldModifier: .direct, valueModifier: comparison.modifier)
            return .field(field, test)
        }
        throw InvalidPredicateError("<\(comparison.canonicalText)> is not a comparison predicate: one side must be a field", at: comparison.span)
    }

    /// Format arguments and variables must be bound before validation (see `PredicateSyntax.binding`).
    private func checkBound(_ expression: ExpressionSyntax) throws(InvalidPredicateError) {
        switch expression {
        case .argument(let argument, let span):
            throw InvalidPredicateError("missing argument \(argument.index + 1) for \(argument.spelling)", at: span)
        case .variable(let name, let span):
            throw InvalidPredicateError("no value for variable $\(name)", at: span)
        case .aggregate(let elements, _), .function(_, let elements, _):
            for element in elements { try checkBound(element) }
        default:
            break
        }
    }

    /// allTokens and SELF only appear in the token-search shapes, handled before this.
    private func checkPlainOperand(_ side: ExpressionSyntax) throws(InvalidPredicateError) {
        if side.isAllTokens {
            throw InvalidPredicateError("allTokens can only be used with tokenize(...) or TOKENMATCHES", at: side.span)
        }
        if case .evaluatedObject(let span) = side {
            throw InvalidPredicateError("SELF can only be used as SELF CONTAINS 'text'", at: span)
        }
    }

    private func checkOptions(_ comparison: Comparison) throws(InvalidPredicateError) {
        let options = comparison.options
        guard !options.isEmpty else {
            if comparison.op == .tokenMatches, isCloudKit {
                throw InvalidPredicateError("TOKENMATCHES needs the options [cdl]", at: comparison.operatorSpan)
            }
            return
        }
        if comparison.op == .tokenMatches {
            let required: ComparisonOptions = [.caseInsensitive, .diacriticInsensitive, .localeSensitive]
            if isCloudKit, !options.isSuperset(of: required) {
                throw InvalidPredicateError("Unsupported comparison options: \(options.spelled) (TOKENMATCHES needs [cdl])", at: comparison.operatorSpan)
            }
            return
        }
        if isCloudKit {
            throw InvalidPredicateError("Unsupported comparison options: \(options.spelled)", at: comparison.operatorSpan)
        }
        guard comparison.op.isRelational || comparison.op.isStringOperator || comparison.op == .in else {
            throw InvalidPredicateError("Unsupported comparison options: \(options.spelled) on \(comparison.op.info.canonical)", at: comparison.operatorSpan)
        }
    }

    /// A key path as a field; nil for anything else. Dotted key paths are errors (CloudKit has none).
    private func fieldReference(_ expression: ExpressionSyntax) throws(InvalidPredicateError) -> FieldReference? {
        guard case .keyPath(let path, let span) = expression else { return nil }
        if let cached = KeyPathCache.reference(for: path) { return cached }
        guard let hash = FieldKey.validNameHash(path) else {
            if path.utf8.contains(UInt8(ascii: ".")) {
                throw InvalidPredicateError("Invalid key path '\(path)': CloudKit fields have no key paths", at: span)
            }
            throw InvalidPredicateError("Invalid field name '\(path)' (expected [a-zA-Z][0-9a-zA-Z_]*)", at: span)
        }
        let length = path.utf8.count
        if length == 9, path == "allTokens" { return nil }
        let reference = PredicateValidator.systemNameLengths & (1 << length) == 0 ? .user(FieldKey(path, hash: hash)) : FieldReference(name: path)
        KeyPathCache.remember(path, reference)
        return reference
    }

    /// The lengths of the system field names, as bits: a name of another length is a user field,
    /// found without comparing it with each system name.
    private static let systemNameLengths: UInt64 = FieldReference.systemFields.reduce(0) { $0 | 1 << $1.name.utf8.count }

    private func lowerTest(
        _ comparison: Comparison, field: FieldReference, op: ComparisonOperator, value: ExpressionSyntax,
        fieldModifier: ComparisonModifier, valueModifier: ComparisonModifier
    ) throws(InvalidPredicateError) -> FieldTest {
        let options = comparison.options.intersection([.caseInsensitive, .diacriticInsensitive])

        // A quantifier on the value side: ANY {a, b} == K, ANY {a, b} IN K, ALL {a, b} IN K, NONE ...
        if valueModifier != .direct {
            let values = try operandList(value, for: op)
            switch (valueModifier, op) {
            case (.any, .equal): return .oneOf(values, options)
            case (.any, .contains): return .members(.any, .oneOf(values, options))
            case (.all, .contains): return .containsAll(values)
            case (.none, .contains) where !isCloudKit: return .members(.none, .oneOf(values, options))
            default: throw unsupported(comparison)
            }
        }

        // A quantifier on the field side: the field is a list and the test applies to its members.
        if fieldModifier != .direct {
            let member = try scalarTest(comparison, op: op, value: value, options: options, asMember: true)
            if isCloudKit {
                switch (fieldModifier, member) {
                case (.any, .compare(.equal, _, _)), (.any, .string(.beginsWith, _, _)), (.any, .oneOf): break
                default: throw unsupported(comparison)
                }
            }
            return .members(Quantifier(fieldModifier), member)
        }

        switch op {
        case .contains:
            if case .aggregate = value {
                throw InvalidPredicateError("Invalid argument value: CONTAINS takes one value; use ANY {...} IN \(field.name) or ALL {...} IN \(field.name)", at: value.span)
            }
            let operand = try self.operand(value, for: op)
            return isCloudKit ? .members(.any, .compare(.equal, operand, [])) : .contains(operand, options)
        default:
            return try scalarTest(comparison, op: op, value: value, options: options, asMember: false)
        }
    }

    /// The test of one scalar value (a field, or a list member under ANY/ALL/NONE).
    private func scalarTest(
        _ comparison: Comparison, op: ComparisonOperator, value: ExpressionSyntax, options: ComparisonOptions, asMember: Bool
    ) throws(InvalidPredicateError) -> FieldTest {
        switch op {
        case .equal, .notEqual, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            let relation = Relation(op) ?? .equal
            if case .constant(.null, let span) = value {
                guard !asMember else { throw InvalidPredicateError("Invalid argument value: list members are never nil", at: span) }
                switch relation {
                case .equal: return .isNil
                case .notEqual: return .isNotNil
                default: throw InvalidPredicateError("Invalid argument value: nil can only be compared with == or !=", at: span)
                }
            }
            if case .aggregate = value {
                throw InvalidPredicateError("Invalid argument value: a list can't be compared with \(op.info.canonical); use IN", at: value.span)
            }
            return .compare(relation, try operand(value, for: op), options)
        case .between:
            guard case .aggregate(let bounds, _) = value, bounds.count == 2 else {
                throw InvalidPredicateError("Invalid argument value: BETWEEN needs two bounds, as in BETWEEN {1, 10}", at: value.span)
            }
            return .between(try operand(bounds[0], for: op), try operand(bounds[1], for: op))
        case .in:
            return .oneOf(try operandList(value, for: op), options)
        case .beginsWith, .endsWith, .like, .matches, .contains:
            guard case .constant(.value(.string(let text)), _) = value else {
                throw InvalidPredicateError("Invalid argument value: \(op.info.canonical) needs a string", at: value.span)
            }
            let operation: StringOperation = switch op {
            case .beginsWith: .beginsWith
            case .endsWith: .endsWith
            case .like: .like
            case .matches: .matches
            default: .contains
            }
            if operation == .matches { try checkRegularExpression(text, options: options, at: value.span) }
            return .string(operation, text, options)
        case .tokenMatches:
            throw unsupported(comparison)
        }
    }

    private func unsupported(_ comparison: Comparison) -> InvalidPredicateError {
        InvalidPredicateError("Unsupported operator: \(comparison.shapeDescription)", at: comparison.operatorSpan)
    }

    private func checkRegularExpression(_ pattern: String, options: ComparisonOptions, at span: SourceSpan) throws(InvalidPredicateError) {
        do {
            _ = try RegularExpression(pattern: pattern, caseInsensitive: options.contains(.caseInsensitive))
        } catch {
            // Point into the pattern: skip the opening quote, then the reported offset.
            let start = span.start + 1 + error.offset
            throw InvalidPredicateError("Invalid regular expression: \(error.message)", at: SourceSpan(start: start, end: start + 1))
        }
    }

    private func operand(_ expression: ExpressionSyntax, for op: ComparisonOperator) throws(InvalidPredicateError) -> Operand {
        switch expression {
        case .constant(let constant, let span):
            guard let value = constant.fieldValue else {
                throw InvalidPredicateError("Invalid argument value: nil can't be used with \(op.info.canonical)", at: span)
            }
            if case .list = value {
                throw InvalidPredicateError("Invalid argument value: a list can't be used here", at: span)
            }
            return .value(value)
        case .function(Functions.now, let arguments, let span):
            guard arguments.isEmpty else { throw InvalidPredicateError("now() takes no arguments", at: span) }
            return .now
        case .function(let name, _, let span):
            throw InvalidPredicateError("Unsupported function: \(name)", at: span)
        case .argument(let argument, let span):
            throw InvalidPredicateError("no value bound for \(argument.spelling)", at: span)
        case .variable(let name, let span):
            throw InvalidPredicateError("no value bound for $\(name)", at: span)
        case .aggregate(_, let span):
            throw InvalidPredicateError("Invalid argument value: a list can't be used here", at: span)
        case .keyPath(_, let span), .evaluatedObject(let span):
            throw InvalidPredicateError("expected a constant", at: span)
        }
    }

    private func operandList(_ expression: ExpressionSyntax, for op: ComparisonOperator) throws(InvalidPredicateError) -> [Operand] {
        guard case .aggregate(let elements, _) = expression else {
            if case .argument(let argument, let span) = expression {
                throw InvalidPredicateError("no value bound for \(argument.spelling)", at: span)
            }
            throw InvalidPredicateError("Invalid argument value: \(op.info.canonical) needs a list, as in {'a', 'b'}", at: expression.span)
        }
        var operands: [Operand] = []
        operands.reserveCapacity(elements.count)
        var firstType: FieldType?
        var mixed = false
        for element in elements {
            let operand = try operand(element, for: op)
            let type: FieldType = if case .value(let value) = operand { value.type } else { .timestamp }
            if let firstType, firstType != type, !(firstType.isNumeric && type.isNumeric) { mixed = true }
            firstType = firstType ?? type
            operands.append(operand)
        }
        if isCloudKit, mixed {
            var types = Set<FieldType>()
            for operand in operands { if case .value(let value) = operand { types.insert(value.type) } else { types.insert(.timestamp) } }
            throw InvalidPredicateError(
                "Invalid argument value: the list mixes \(types.map(\.rawValue).sorted().joined(separator: " and "))", at: expression.span)
        }
        return operands
    }

    // MARK: Token search and distance

    /// `ALL/ANY tokenize(s, 'Cdl') IN allTokens`, `ANY allTokens IN tokenize(...)`, TOKENMATCHES, `SELF CONTAINS`.
    private func lowerTokenSearch(_ comparison: Comparison) throws(InvalidPredicateError) -> Condition? {
        let (left, right) = (comparison.left, comparison.right)
        if case .evaluatedObject = left, comparison.op == .contains, comparison.modifier == .direct {
            return .tokens(.any, text: try tokenText(right, context: "SELF CONTAINS"))
        }
        if comparison.op == .tokenMatches {
            switch (left, right) {
            case (.keyPath("allTokens", _), _) where comparison.modifier != .all && comparison.modifier != .none:
                return .tokens(.all, text: try tokenText(right, context: "TOKENMATCHES"))
            case (_, .keyPath("allTokens", _)) where comparison.modifier == .direct:
                return .tokens(.all, text: try tokenText(left, context: "TOKENMATCHES"))
            default:
                return nil
            }
        }
        let tokenizeSide: ExpressionSyntax
        switch (left, right) {
        case (.function(Functions.tokenize, _, _), .keyPath("allTokens", _)) where comparison.op == .in:
            tokenizeSide = left
        case (.keyPath("allTokens", _), .function(Functions.tokenize, _, _)) where comparison.op == .in && comparison.modifier == .any:
            tokenizeSide = right
        case (.function(Functions.tokenize, _, _), _), (_, .function(Functions.tokenize, _, _)):
            throw InvalidPredicateError(
                "tokenize(...) is used as ALL tokenize(s, 'Cdl') IN allTokens or ANY tokenize(s, 'Cdl') IN allTokens", at: comparison.span)
        default:
            return nil
        }
        guard case .function(_, let arguments, let span) = tokenizeSide, arguments.count == 2 else {
            throw InvalidPredicateError("tokenize takes a string and options, as in tokenize('words', 'Cdl')", at: tokenizeSide.span)
        }
        let text = try tokenText(arguments[0], context: "tokenize")
        guard case .constant(.value(.string(let options)), let optionsSpan) = arguments[1] else {
            throw InvalidPredicateError("tokenize needs its options as a string, as in 'Cdl'", at: arguments[1].span)
        }
        let letters = Set(options.lowercased())
        if isCloudKit, !letters.isSuperset(of: ["c", "d", "l"]) {
            throw InvalidPredicateError("Unsupported comparison options: '\(options)' (tokenize needs 'Cdl')", at: optionsSpan)
        }
        guard letters.isSubset(of: ["c", "d", "l", "n"]) else {
            throw InvalidPredicateError("unknown tokenize option in '\(options)'", at: optionsSpan)
        }
        switch comparison.modifier {
        case .all where tokenizeSide == left: return .tokens(.all, text: text)
        case .any: return .tokens(.any, text: text)
        default:
            throw InvalidPredicateError("tokenize needs ALL or ANY in front, as in ALL tokenize(s, 'Cdl') IN allTokens", at: span)
        }
    }

    private func tokenText(_ expression: ExpressionSyntax, context: String) throws(InvalidPredicateError) -> String {
        guard case .constant(.value(.string(let text)), _) = expression else {
            throw InvalidPredicateError("Invalid argument value: \(context) needs a string", at: expression.span)
        }
        return text
    }

    /// `distanceToLocation:fromLocation:(K, L) < r`, with K and L in either order and r on either side.
    private func lowerDistance(_ comparison: Comparison) throws(InvalidPredicateError) -> Condition? {
        let distanceOnLeft: Bool
        let call: ExpressionSyntax
        if comparison.left.isDistanceCall {
            (distanceOnLeft, call) = (true, comparison.left)
        } else if comparison.right.isDistanceCall {
            (distanceOnLeft, call) = (false, comparison.right)
        } else {
            return nil
        }
        guard case .function(_, let arguments, let span) = call, arguments.count == 2 else {
            throw InvalidPredicateError("distanceToLocation:fromLocation: takes a field and a location", at: call.span)
        }
        guard comparison.modifier == .direct, var relation = Relation(comparison.op) else {
            throw InvalidPredicateError("Unsupported operator: distance compared with \(comparison.op.info.canonical) (use <)", at: comparison.operatorSpan)
        }
        if !distanceOnLeft { relation = Relation(relation.op.info.mirrored ?? relation.op) ?? relation }
        if isCloudKit, relation != .lessThan {
            throw InvalidPredicateError("Unsupported operator: distance compared with \(comparison.op.info.canonical) (CloudKit supports only <)", at: comparison.operatorSpan)
        }
        var field: FieldReference?
        var center: Location?
        for argument in arguments {
            if case .constant(.value(.location(let location)), _) = argument {
                center = location
            } else if let reference = try fieldReference(argument) {
                field = reference
            }
        }
        guard let field, let center else {
            throw InvalidPredicateError("distanceToLocation:fromLocation: needs a LOCATION field and a location(lat, lon)", at: span)
        }
        let radiusExpression = distanceOnLeft ? comparison.right : comparison.left
        let radius: Double
        switch radiusExpression {
        case .constant(.value(.int64(let i)), _): radius = Double(i)
        case .constant(.value(.double(let d)), _): radius = d
        default: throw InvalidPredicateError("Invalid argument value: the distance must be a number of metres", at: radiusExpression.span)
        }
        guard radius >= 0 else {
            throw InvalidPredicateError("Invalid argument value: the distance must not be negative", at: radiusExpression.span)
        }
        return .distance(field, center: center, relation, radius: radius)
    }
}

extension FieldType {
    package var isNumeric: Bool { self == .int64 || self == .double }
}

extension Quantifier {
    init(_ modifier: ComparisonModifier) {
        switch modifier {
        case .all: self = .all
        case .none: self = .none
        default: self = .any
        }
    }
}

extension Comparison {
    var involvesTokens: Bool {
        if case .evaluatedObject = left { return true }
        return left.isTokenOperand || right.isTokenOperand
    }

    var involvesDistance: Bool {
        left.isDistanceCall || right.isDistanceCall
    }

    /// How an unsupported shape is named in errors: `ALL tags == ...` → `ALL ... ==`.
    var shapeDescription: String {
        (modifier == .direct ? "" : modifier.rawValue + " ") + op.info.canonical + options.spelled
    }
}

/// Cheap tests of an operand's shape: they look at the case (and a name's length) before comparing
/// strings, because every comparison the validator lowers asks them.
extension ExpressionSyntax {
    var isTokenOperand: Bool { isAllTokens || isCall(Functions.tokenize) }
    var isDistanceCall: Bool { isCall(Functions.distance) }

    var isAllTokens: Bool {
        if case .keyPath(let path, _) = self { return path.utf8.count == 9 && path == "allTokens" }
        return false
    }

    var isEvaluatedObject: Bool {
        if case .evaluatedObject = self { return true }
        return false
    }

    var isFunctionCall: Bool {
        if case .function = self { return true }
        return false
    }

    /// A constant, or a key path not spelled `allTokens`: what `checkPlainOperand` lets through
    /// without a look.
    @inline(__always)
    var isPlainOperand: Bool {
        switch self {
        case .constant: true
        case .keyPath(let path, _): path.utf8.count != 9
        default: false
        }
    }

    /// Whether an unbound argument or variable can be in it: key paths and constants, the
    /// common operands, skip `checkBound`'s call.
    @inline(__always)
    var mayHoldPlaceholders: Bool {
        switch self {
        case .keyPath, .constant, .evaluatedObject: false
        case .argument, .variable, .aggregate, .function: true
        }
    }

    func isCall(_ function: String) -> Bool {
        if case .function(let name, _, _) = self { return name == function }
        return false
    }
}
