/// Checks a bound predicate against a profile's rules and lowers it to a `Condition`.
///
/// CloudKit's rules (SPEC §2.1) are those of its own translator (cloudd's NSPredicate → query
/// filter code), and its rejections use that code's wording, followed as there by the predicate
/// (`Unexpected expression: name ENDSWITH "x"`). The extended profile lifts those restrictions
/// (SPEC §2.2).
public struct PredicateValidator {
    public let profile: PredicateProfile

    public init(profile: PredicateProfile = .cloudkit) { self.profile = profile }

    public func validate(_ predicate: PredicateSyntax) throws(InvalidPredicateError) -> Condition {
        try lower(predicate)
    }

    private var isCloudKit: Bool { profile == .cloudkit }

    private func lower(_ predicate: PredicateSyntax) throws(InvalidPredicateError) -> Condition {
        switch predicate {
        case .constant(let value, let span):
            if isCloudKit, !value { throw InvalidPredicateError("Unexpected predicate type: FALSEPREDICATE", at: span) }
            return .constant(value)
        case .comparison(let comparison):
            return try lower(comparison)
        case .and(let operands, _):
            return .and(try lower(operands))
        case .or(let operands, let span):
            if isCloudKit { throw InvalidPredicateError("Unexpected expression: \(predicate.canonicalText)", at: orSpan(operands, span)) }
            return .or(try lower(operands))
        case .not(let operand, let span):
            if isCloudKit { try checkNegatable(operand, not: predicate, notSpan: span) }
            return Self.negation(of: try lower(operand))
        }
    }

    /// NOT of a comparison is the comparison with the flipped comparator, as CloudKit's translator
    /// makes it (NOT `<` is `>=`, NOT `== nil` is `!= nil`). Both forms are false for a missing
    /// field (SQL-style, SPEC §2.4), so flipping changes no result and lets an index answer.
    static func negation(of condition: Condition) -> Condition {
        switch condition {
        case .field(let field, .compare(let relation, let operand, let options)):
            return .field(field, .compare(relation.negated, operand, options))
        case .field(let field, .isNil):
            return .field(field, .isNotNil)
        case .field(let field, .isNotNil):
            return .field(field, .isNil)
        default:
            return .not(condition)
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

    /// CloudKit negates one comparison that translates to one negatable filter: not a compound,
    /// and not BETWEEN (two filters), a distance (NEAR) or a token search.
    private func checkNegatable(_ operand: PredicateSyntax, not: PredicateSyntax, notSpan: SourceSpan) throws(InvalidPredicateError) {
        let at = SourceSpan(start: notSpan.start, end: notSpan.start + 3)
        guard case .comparison(let comparison) = operand else {
            throw InvalidPredicateError("Expected comparison subpredicate: \(not.canonicalText)", at: at)
        }
        if comparison.op == .between || comparison.op == .tokenMatches || comparison.involvesTokens || comparison.involvesDistance {
            throw InvalidPredicateError("Invalid NOT predicate: \(not.canonicalText)", at: at)
        }
    }

    // MARK: Comparisons

    private func lower(_ comparison: Comparison) throws(InvalidPredicateError) -> Condition {
        let op = comparison.op
        // NSPredicate's NONE is NOT(ANY ...), and CloudKit translates it as that NOT: the flipped
        // list filter (NONE tags == 'x' is NOT_LIST_CONTAINS).
        if isCloudKit, comparison.modifier == .none {
            var any = comparison
            any.modifier = .any
            let inner = try lower(any)
            guard case .field = inner else {
                throw InvalidPredicateError("Invalid NOT predicate: \(comparison.canonicalText)", at: comparison.span)
            }
            return .not(inner)
        }
        if isCloudKit, !op.isCloudKitOperator {
            throw InvalidPredicateError("Unexpected expression: \(comparison.canonicalText)", at: comparison.operatorSpan)
        }
        if comparison.left.mayHoldPlaceholders { try checkBound(comparison.left) }
        if comparison.right.mayHoldPlaceholders { try checkBound(comparison.right) }
        // Token searches and distances have TOKENMATCHES, SELF, allTokens or a function call; most
        // comparisons have none, and skip both without building an optional Condition.
        if op == .tokenMatches || comparison.left.isEvaluatedObject || comparison.left.isFunctionCall || comparison.right.isFunctionCall
            || comparison.left.isAllTokens || comparison.right.isAllTokens {
            if let condition = try lowerTokenSearch(comparison) { return condition }
            if !comparison.options.isEmpty { try checkOptions(comparison) }
            if let condition = try lowerDistance(comparison) { return condition }
        } else if !comparison.options.isEmpty {
            try checkOptions(comparison)
        }
        if !comparison.left.isPlainOperand { try checkPlainOperand(comparison.left, in: comparison) }
        if !comparison.right.isPlainOperand { try checkPlainOperand(comparison.right, in: comparison) }

        // Normalize to: field on the left, value on the right. The value side is passed in place,
        // not copied out: copying expressions was a large part of validation's time.
        if let field = try fieldReference(comparison.left) {
            if try fieldReference(comparison.right) != nil {
                throw InvalidPredicateError("Expected constant value in comparison expression: \(comparison.canonicalText)", at: comparison.right.span)
            }
            let test = try lowerTest(
                comparison, field: field, op: op, value: comparison.right, fieldModifier: comparison.modifier, valueModifier: .direct)
            return .field(field, test)
        }
        if let field = try fieldReference(comparison.right) {
            guard let mirrored = op.mirroredOperator else {
                throw InvalidPredicateError("Unexpected expression: \(comparison.canonicalText)", at: comparison.right.span)
            }
            let test = try lowerTest(
                comparison, field: field, op: mirrored, value: comparison.left, fieldModifier: .direct, valueModifier: comparison.modifier)
            return .field(field, test)
        }
        throw InvalidPredicateError("Expected key-path in comparison expression: \(comparison.canonicalText)", at: comparison.span)
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
    private func checkPlainOperand(_ side: ExpressionSyntax, in comparison: Comparison) throws(InvalidPredicateError) {
        if side.isAllTokens {
            throw InvalidPredicateError(
                "Required comparison operators TOKENMATCHES or IN when searching special key-path allTokens: \(comparison.canonicalText)", at: side.span)
        }
        if case .evaluatedObject(let span) = side {
            throw InvalidPredicateError("Unexpected expression: SELF (SELF is used as SELF CONTAINS 'text')", at: span)
        }
    }

    /// Options on a comparison that is not a token search: CloudKit takes none; the extended
    /// profile takes them on string comparisons.
    private func checkOptions(_ comparison: Comparison) throws(InvalidPredicateError) {
        let options = comparison.options
        if isCloudKit {
            throw InvalidPredicateError(
                "Predicate comparison options are not supported for expression: \(comparison.canonicalText)", at: comparison.operatorSpan)
        }
        guard comparison.op.isRelational || comparison.op.isStringOperator || comparison.op == .in else {
            throw InvalidPredicateError("Unsupported comparison options: \(options.spelled) on \(comparison.op.info.canonical)", at: comparison.operatorSpan)
        }
    }

    /// A key path as a field; nil for anything else. Names follow CloudKit's `CKValidateKeyName`
    /// (and so do dotted key paths, which it reads as one invalid name); the system fields may be
    /// named by their predicate name or their `___` key.
    private func fieldReference(_ expression: ExpressionSyntax) throws(InvalidPredicateError) -> FieldReference? {
        guard case .keyPath(let path, let span) = expression else { return nil }
        if let cached = KeyPathCache.reference(for: path) { return cached }
        guard let hash = FieldKey.validNameHash(path) else {
            throw InvalidPredicateError(FieldKey.nameProblem(path) ?? "recordKey (\(path)) contains invalid characters", at: span)
        }
        let length = path.utf8.count
        if length == 9, path == "allTokens" { return nil }
        let reference = PredicateValidator.systemNameLengths & (1 << (length & 63)) == 0 || length > 63
            ? .user(FieldKey(path, hash: hash)) : FieldReference(name: path)
        KeyPathCache.remember(path, reference)
        return reference
    }

    /// The lengths of the system field names (both spellings), as bits: a name of another length is
    /// a user field, found without comparing it with each system name.
    private static let systemNameLengths: UInt64 = FieldReference.systemFields.reduce(0) {
        $0 | 1 << $1.name.utf8.count | 1 << $1.webServicesName.utf8.count
    }

    private func lowerTest(
        _ comparison: Comparison, field: FieldReference, op: ComparisonOperator, value: ExpressionSyntax,
        fieldModifier: ComparisonModifier, valueModifier: ComparisonModifier
    ) throws(InvalidPredicateError) -> FieldTest {
        let options = comparison.options.intersection([.caseInsensitive, .diacriticInsensitive])

        // A quantifier on the value side: ANY {a, b} == K, ANY {a, b} IN K, ALL {a, b} IN K, NONE ...
        if valueModifier != .direct {
            let values = try operandList(value, for: op, in: comparison)
            switch (valueModifier, op) {
            case (.any, .equal): return .oneOf(values, options)
            case (.any, .contains): return .members(.any, .oneOf(values, options))
            case (.all, .contains): return .containsAll(values)
            case (.none, .contains) where !isCloudKit: return .members(.none, .oneOf(values, options))
            default: throw unexpected(comparison)
            }
        }

        // A quantifier on the field side: the field is a list and the test applies to its members.
        if fieldModifier != .direct {
            if isCloudKit, fieldModifier == .all || fieldModifier == .none, op.isRelational {
                throw InvalidPredicateError(
                    "Aggregate operator \(fieldModifier.rawValue) not allowed for comparison expression: \(comparison.canonicalText)",
                    at: comparison.span)
            }
            let member = try scalarTest(comparison, field: field, op: op, value: value, options: options, asMember: true)
            if isCloudKit {
                switch (fieldModifier, member) {
                case (.any, .compare(.equal, _, _)), (.any, .string(.beginsWith, _, _)), (.any, .oneOf): break
                case (.any, .compare):
                    throw InvalidPredicateError(
                        "Aggregate operator ANY not allowed for comparison expression: \(comparison.canonicalText)", at: comparison.span)
                default: throw unexpected(comparison)
                }
            }
            return .members(Quantifier(fieldModifier), member)
        }

        switch op {
        case .contains:
            if case .aggregate = value, !value.isBoundArgument {
                throw unexpected(comparison)
            }
            let operand = try self.operand(value, for: op, in: comparison)
            return isCloudKit ? .members(.any, .compare(.equal, operand, [])) : .contains(operand, options)
        default:
            return try scalarTest(comparison, field: field, op: op, value: value, options: options, asMember: false)
        }
    }

    /// The test of one scalar value (a field, or a list member under ANY/ALL/NONE).
    private func scalarTest(
        _ comparison: Comparison, field: FieldReference, op: ComparisonOperator, value: ExpressionSyntax, options: ComparisonOptions,
        asMember: Bool
    ) throws(InvalidPredicateError) -> FieldTest {
        switch op {
        case .equal, .notEqual, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            let relation = Relation(op) ?? .equal
            if case .constant(.null, let span) = value {
                // CloudKit compares only its parent and share keys with nil.
                if isCloudKit, !field.acceptsNil {
                    throw InvalidPredicateError("Expected constant value in comparison expression: \(comparison.canonicalText)", at: span)
                }
                guard !asMember else { throw InvalidPredicateError("Invalid argument value: list members are never nil", at: span) }
                switch relation {
                case .equal: return .isNil
                case .notEqual: return .isNotNil
                default: throw InvalidPredicateError("Invalid argument value: nil can only be compared with == or !=", at: span)
                }
            }
            if case .aggregate = value {
                throw InvalidPredicateError(
                    isCloudKit ? "Unexpected expression: \(comparison.canonicalText)"
                        : "Invalid argument value: a list can't be compared with \(op.info.canonical); use IN", at: value.span)
            }
            return .compare(relation, try operand(value, for: op, in: comparison), options)
        case .between:
            return try between(comparison, value: value)
        case .in:
            return .oneOf(try operandList(value, for: op, in: comparison), options)
        case .beginsWith, .endsWith, .like, .matches, .contains:
            guard case .constant(.value(.string(let text)), _) = value else {
                throw InvalidPredicateError(
                    isCloudKit ? "Expected NSString or NSData on right hand side: \(comparison.canonicalText)"
                        : "Invalid argument value: \(op.info.canonical) needs a string", at: value.span)
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
            throw unexpected(comparison)
        }
    }

    /// `K BETWEEN {lo, hi}`. CloudKit takes only a literal pair of numbers (`BETWEEN %@` and dates
    /// are refused by its translator); the extended profile takes any two bounds.
    private func between(_ comparison: Comparison, value: ExpressionSyntax) throws(InvalidPredicateError) -> FieldTest {
        guard case .aggregate(let bounds, _) = value else {
            throw InvalidPredicateError(
                isCloudKit ? "Unexpected expression: \(comparison.canonicalText)"
                    : "Invalid argument value: BETWEEN needs two bounds, as in BETWEEN {1, 10}", at: value.span)
        }
        if isCloudKit {
            if value.isBoundArgument { throw InvalidPredicateError("Unexpected expression: \(comparison.canonicalText)", at: value.span) }
            guard bounds.count == 2 else {
                throw InvalidPredicateError(
                    "Expected array with two number arguments on right hand side, but got \(bounds.count): \(comparison.canonicalText)", at: value.span)
            }
            for bound in bounds {
                switch bound {
                case .constant(.value(.int64), _), .constant(.value(.double), _): continue
                default:
                    throw InvalidPredicateError("Expected array with two number arguments on right hand side: \(comparison.canonicalText)", at: bound.span)
                }
            }
        }
        guard bounds.count == 2 else {
            throw InvalidPredicateError("Invalid argument value: BETWEEN needs two bounds, as in BETWEEN {1, 10}", at: value.span)
        }
        return .between(try operand(bounds[0], for: .between, in: comparison), try operand(bounds[1], for: .between, in: comparison))
    }

    private func unexpected(_ comparison: Comparison) -> InvalidPredicateError {
        InvalidPredicateError("Unexpected expression: \(comparison.canonicalText)", at: comparison.operatorSpan)
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

    private func operand(_ expression: ExpressionSyntax, for op: ComparisonOperator, in comparison: Comparison) throws(InvalidPredicateError) -> Operand {
        switch expression {
        case .constant(let constant, let span):
            guard let value = constant.fieldValue else {
                throw InvalidPredicateError(
                    isCloudKit ? "Expected constant value in comparison expression: \(comparison.canonicalText)"
                        : "Invalid argument value: nil can't be used with \(op.info.canonical)", at: span)
            }
            if case .list = value {
                throw InvalidPredicateError("Nested collection classes are not allowed: \(comparison.canonicalText)", at: span)
            }
            return .value(value)
        case .function(Functions.now, let arguments, let span):
            guard arguments.isEmpty else { throw InvalidPredicateError("now() takes no arguments", at: span) }
            return .now
        case .function(let name, _, let span):
            throw InvalidPredicateError("Unexpected expression: \(name)(...) (the functions are now(), tokenize and distanceToLocation:fromLocation:)", at: span)
        case .argument(let argument, let span):
            throw InvalidPredicateError("no value bound for \(argument.spelling)", at: span)
        case .variable(let name, let span):
            throw InvalidPredicateError("no value bound for $\(name)", at: span)
        case .aggregate(_, let span):
            throw InvalidPredicateError("Nested collection classes are not allowed: \(comparison.canonicalText)", at: span)
        case .keyPath(_, let span), .evaluatedObject(let span):
            throw InvalidPredicateError("Expected constant value in comparison expression: \(comparison.canonicalText)", at: span)
        }
    }

    private func operandList(_ expression: ExpressionSyntax, for op: ComparisonOperator, in comparison: Comparison) throws(InvalidPredicateError) -> [Operand] {
        guard case .aggregate(let elements, _) = expression else {
            if case .argument(let argument, let span) = expression {
                throw InvalidPredicateError("no value bound for \(argument.spelling)", at: span)
            }
            throw InvalidPredicateError(
                isCloudKit ? "Expected collection on right hand side: \(comparison.canonicalText)"
                    : "Invalid argument value: \(op.info.canonical) needs a list, as in {'a', 'b'}", at: expression.span)
        }
        var operands: [Operand] = []
        operands.reserveCapacity(elements.count)
        var firstType: FieldType?
        var mixed = false
        for element in elements {
            let operand = try operand(element, for: op, in: comparison)
            let type: FieldType = if case .value(let value) = operand { value.type } else { .timestamp }
            if let firstType, firstType != type, !(firstType.isNumeric && type.isNumeric) { mixed = true }
            firstType = firstType ?? type
            operands.append(operand)
        }
        if isCloudKit, mixed {
            var types = Set<FieldType>()
            for operand in operands { if case .value(let value) = operand { types.insert(value.type) } else { types.insert(.timestamp) } }
            throw InvalidPredicateError(
                "Invalid argument value: the list mixes \(types.map(\.rawValue).sorted().joined(separator: " and ")) (a list field value has one type)",
                at: expression.span)
        }
        return operands
    }

    // MARK: Token search and distance

    /// The token searches CloudKit's translator knows, each CONTAINS_ANY_TOKENS unless it says ALL:
    /// `SELF CONTAINS 's'`, `ALL SELF CONTAINS 's'`; `allTokens TOKENMATCHES[cdl] 's'` (with or
    /// without ANY), `'s' TOKENMATCHES[cdl] allTokens`, `ALL 's' TOKENMATCHES[cdl] allTokens`;
    /// `ALL/ANY tokenize('s', 'cdl') IN allTokens`, `ANY allTokens IN tokenize('s', 'cdl')`.
    private func lowerTokenSearch(_ comparison: Comparison) throws(InvalidPredicateError) -> Condition? {
        let (left, right) = (comparison.left, comparison.right)
        let text = comparison.canonicalText
        if case .evaluatedObject = left, comparison.op == .contains {
            if !comparison.options.isEmpty { try checkOptions(comparison) }
            switch comparison.modifier {
            case .direct, .any: return .tokens(.any, text: try tokenText(right, in: comparison))
            case .all: return .tokens(.all, text: try tokenText(right, in: comparison))
            case .none: throw unexpected(comparison)
            }
        }
        if comparison.op == .tokenMatches {
            let match: TokenMatch
            let value: ExpressionSyntax
            if left.isAllTokens {
                if comparison.modifier == .all {
                    throw InvalidPredicateError("Enumerating special key-path allTokens is not allowed: \(text)", at: comparison.span)
                }
                (match, value) = (.any, right)
            } else if right.isAllTokens {
                (match, value) = (comparison.modifier == .all ? .all : .any, left)
            } else {
                throw InvalidPredicateError("Unexpected expression: \(text) (TOKENMATCHES compares allTokens with a string)", at: comparison.operatorSpan)
            }
            if comparison.modifier == .none { throw unexpected(comparison) }
            if isCloudKit, comparison.options != Self.tokenOptions {
                throw InvalidPredicateError(
                    "Required NSCaseInsensitivePredicateOption, NSDiacriticInsensitivePredicateOption, and NSLocaleSensitivePredicateOption comparison predicate options: \(text)",
                    at: comparison.operatorSpan)
            }
            return .tokens(match, text: try tokenText(value, in: comparison))
        }
        guard left.isTokenOperand || right.isTokenOperand else { return nil }
        if !left.isAllTokens, !right.isAllTokens {
            throw InvalidPredicateError("Unexpected expression: \(text) (tokenize(...) is searched IN allTokens)", at: comparison.span)
        }
        if comparison.op != .in {
            throw InvalidPredicateError(
                "Required comparison operators TOKENMATCHES or IN when searching special key-path allTokens: \(text)", at: comparison.operatorSpan)
        }
        if comparison.modifier == .direct || comparison.modifier == .none {
            throw InvalidPredicateError("Required predicate modifier ANY or ALL when searching special key-path allTokens: \(text)", at: comparison.span)
        }
        let tokenizeSide = left.isAllTokens ? right : left
        if left.isAllTokens, comparison.modifier == .all {
            throw InvalidPredicateError("Enumerating special key-path allTokens is not allowed: \(text)", at: comparison.span)
        }
        guard case .function(Functions.tokenize, let arguments, _) = tokenizeSide else {
            if case .constant(.value(.string), _) = tokenizeSide {
                throw InvalidPredicateError("Required tokenize() operand when searching special key-path allTokens: \(text)", at: tokenizeSide.span)
            }
            throw InvalidPredicateError("Required string or tokenize() arguments when searching special key-path allTokens: \(text)", at: tokenizeSide.span)
        }
        guard arguments.count == 2, case .constant(.value(.string(let words)), _) = arguments[0] else {
            throw InvalidPredicateError("Required string argument when using tokenize(), but got \(arguments.first?.canonicalText ?? "nothing"): \(text)", at: tokenizeSide.span)
        }
        guard case .constant(.value(.string(let letters)), let optionsSpan) = arguments[1], let options = Self.tokenizeOptions(letters) else {
            throw InvalidPredicateError("tokenize needs its options as a string of c, d and l, as in 'cdl': \(text)", at: arguments[1].span)
        }
        if isCloudKit, options != Self.tokenOptions {
            throw InvalidPredicateError(
                "Required NSCaseInsensitivePredicateOption, NSDiacriticInsensitivePredicateOption, and NSLocaleSensitivePredicateOption tokenization options on tokenize() function: \(text)",
                at: optionsSpan)
        }
        return .tokens(comparison.modifier == .all ? .all : .any, text: words)
    }

    /// CloudKit's token options: exactly c, d and l (in any order and case, without n).
    private static let tokenOptions: ComparisonOptions = [.caseInsensitive, .diacriticInsensitive, .localeSensitive]

    /// The options a tokenize() options string spells, or nil for a letter that is not an option.
    private static func tokenizeOptions(_ letters: String) -> ComparisonOptions? {
        var options: ComparisonOptions = []
        for letter in letters.lowercased() {
            guard let option = ComparisonOptions.letters.first(where: { $0.0 == letter })?.1 else { return nil }
            options.insert(option)
        }
        return options
    }

    private func tokenText(_ expression: ExpressionSyntax, in comparison: Comparison) throws(InvalidPredicateError) -> String {
        guard case .constant(.value(.string(let text)), _) = expression else {
            throw InvalidPredicateError(
                "Required string or tokenize() arguments when comparing to special key-path allTokens: \(comparison.canonicalText)", at: expression.span)
        }
        return text
    }

    /// `distanceToLocation:fromLocation:(K, L) < r` (or `<=`), with K and L in either order, and
    /// mirrored `r > ...` (or `>=`). r is in kilometres, as CloudKit reads the NEAR radius.
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
        let text = comparison.canonicalText
        guard case .function(_, let arguments, let span) = call, arguments.count == 2 else {
            throw InvalidPredicateError("Expected expected 2 arguments for function distanceToLocation:fromLocation: \(text)", at: call.span)
        }
        guard comparison.modifier == .direct, var relation = Relation(comparison.op) else {
            throw unexpected(comparison)
        }
        if !distanceOnLeft { relation = Relation(relation.op.info.mirrored ?? relation.op) ?? relation }
        if isCloudKit, relation != .lessThan, relation != .lessThanOrEqual {
            throw InvalidPredicateError(
                "Searching for locations outside of a specified circular area is not supported: \(text)", at: comparison.operatorSpan)
        }
        var field: FieldReference?
        var center: Location?
        for argument in arguments {
            if case .constant(.value(.location(let location)), _) = argument {
                center = location
            } else if case .keyPath = argument, let reference = try fieldReference(argument) {
                field = reference
            }
        }
        guard let field else {
            throw InvalidPredicateError("Expected NSKeyPathExpressionType argument for distanceToLocation:fromLocation:", at: span)
        }
        guard let center else {
            let other = arguments.first { if case .keyPath = $0 { false } else { true } }
            throw InvalidPredicateError(
                "Expected CLLocation argument for distanceToLocation:fromLocation: but got \(other.map(Self.className) ?? "a nil location")", at: span)
        }
        let radiusExpression = distanceOnLeft ? comparison.right : comparison.left
        let radius: Double
        switch radiusExpression {
        case .constant(.value(.int64(let i)), _): radius = Double(i)
        case .constant(.value(.double(let d)), _): radius = d
        default:
            throw InvalidPredicateError(
                "Expected search radius on \(distanceOnLeft ? "right" : "left") hand side of operator: \(text)", at: radiusExpression.span)
        }
        return .distance(field, center: center, relation, radius: radius)
    }

    /// How CloudKit's messages name what an argument is (NSPredicate's classes).
    private static func className(_ expression: ExpressionSyntax) -> String {
        switch expression {
        case .constant(.null, _): "a nil location"
        case .constant(.value(let value), _): value.typeName
        case .constant(.bool, _): "NSNumber"
        default: expression.canonicalText
        }
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

    /// A list bound to a `%@` argument, not written as `{...}`: binding gives every element the
    /// argument's own span (see `PredicateSyntax.binding`), which a literal's elements never have.
    var isBoundArgument: Bool {
        guard case .aggregate(let elements, let span) = self, let first = elements.first else { return false }
        return first.span.start == span.start && first.span.end == span.end
    }
}
