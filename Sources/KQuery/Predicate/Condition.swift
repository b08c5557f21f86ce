/// What a validated predicate means, independent of how it was spelled.
///
/// The validator lowers the AST to a `Condition` once; the evaluator compiles it, the query planner
/// and the subscription matcher index it, and the Web Services mapping writes it out. Field names
/// are resolved, constant sides are normalized to the right, and mirrored forms (`5 < seats`,
/// `'x' IN tags`, `ANY {a, b} == K`) are reduced to one shape each.
public enum Condition: Hashable, Sendable {
    case constant(Bool)
    case and([Condition])
    case or([Condition])
    indirect case not(Condition)
    case field(FieldReference, FieldTest)
    /// Full-text search over the record's tokens: every (`.all`) or some (`.any`) token of `text`.
    case tokens(TokenMatch, text: String)
    /// `distanceToLocation:fromLocation:(field, center) relation radius`, the radius in
    /// **kilometres** as written (CloudKit passes it unchanged as the NEAR radius, which it reads in
    /// kilometres; SPEC §2.4); `radiusInMetres` converts it for the geodesy. Boxed: inline,
    /// its Location made every Condition twice the size of the common `.field` case.
    indirect case distance(FieldReference, center: Location, Relation, radius: Double)
}

extension Condition {
    /// A distance radius as predicates and Web Services write it (kilometres), in metres.
    @inlinable
    public static func radiusInMetres(_ kilometres: Double) -> Double { kilometres * 1000 }
}

public enum TokenMatch: String, Hashable, Sendable {
    case all, any
}

/// The six relational operators.
public enum Relation: Hashable, Sendable, CaseIterable {
    case equal, notEqual, lessThan, lessThanOrEqual, greaterThan, greaterThanOrEqual

    init?(_ op: ComparisonOperator) {
        switch op {
        case .equal: self = .equal
        case .notEqual: self = .notEqual
        case .lessThan: self = .lessThan
        case .lessThanOrEqual: self = .lessThanOrEqual
        case .greaterThan: self = .greaterThan
        case .greaterThanOrEqual: self = .greaterThanOrEqual
        default: return nil
        }
    }

    public var op: ComparisonOperator {
        switch self {
        case .equal: .equal
        case .notEqual: .notEqual
        case .lessThan: .lessThan
        case .lessThanOrEqual: .lessThanOrEqual
        case .greaterThan: .greaterThan
        case .greaterThanOrEqual: .greaterThanOrEqual
        }
    }

    /// The relation that holds exactly when this one does not, for values that compare: CloudKit's
    /// NOT flip (NOT `<` is `>=`, NOT `==` is `!=`).
    public var negated: Relation {
        switch self {
        case .equal: .notEqual
        case .notEqual: .equal
        case .lessThan: .greaterThanOrEqual
        case .lessThanOrEqual: .greaterThan
        case .greaterThan: .lessThanOrEqual
        case .greaterThanOrEqual: .lessThan
        }
    }

    /// Whether `order` (the sign of lhs compared with rhs) satisfies the relation.
    @inlinable
    public func holds(_ order: Int) -> Bool {
        switch self {
        case .equal: order == 0
        case .notEqual: order != 0
        case .lessThan: order < 0
        case .lessThanOrEqual: order <= 0
        case .greaterThan: order > 0
        case .greaterThanOrEqual: order >= 0
        }
    }
}

/// A test of one field's value.
public enum FieldTest: Hashable, Sendable {
    /// `K == nil`: true exactly when the field is missing.
    case isNil
    /// `K != nil`.
    case isNotNil
    /// A scalar field compared with a value (options [c], [d] apply to strings, extended profile).
    case compare(Relation, Operand, ComparisonOptions)
    /// `lower <= K <= upper`.
    case between(Operand, Operand)
    /// `K IN {...}` for a scalar field.
    case oneOf([Operand], ComparisonOptions)
    /// A string operator on a scalar string field.
    case string(StringOperation, String, ComparisonOptions)
    /// A test of a list field's members: some (`.any`), every (`.all`) or no (`.none`) member passes.
    indirect case members(Quantifier, FieldTest)
    /// Every value is a member of the list field (`ALL {a, b} IN K`).
    case containsAll([Operand])
    /// Extended `K CONTAINS v`: a list member equal to v, or for a string field, a substring.
    case contains(Operand, ComparisonOptions)
}

public enum Quantifier: String, Hashable, Sendable {
    case any, all, none
}

public enum StringOperation: String, Hashable, Sendable {
    case beginsWith, endsWith, contains, like, matches
}

/// The constant side of a comparison.
public enum Operand: Hashable, Sendable {
    case value(FieldValue)
    /// `now()`: the evaluation time.
    case now
}

/// Which rules a predicate must follow (SPEC §2.1, §2.2).
public enum PredicateProfile: String, Hashable, Sendable, CaseIterable {
    /// Exactly what CloudKit accepts (the default).
    case cloudkit
    /// Everything NSPredicate's syntax allows that makes sense over records.
    case extended
}
