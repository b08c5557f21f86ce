/// A predicate parsed, bound and validated for a profile: the entry point most callers want.
///
/// ```swift
/// let p = try ValidatedPredicate("seats > %@ AND cuisine == 'french'", arguments: [.value(.int64(30))])
/// p.condition   // what the evaluator compiles
/// p.predicate   // the bound AST; p.predicate.canonicalText prints it
/// ```
public struct ValidatedPredicate: Hashable, Sendable {
    public let predicate: PredicateSyntax
    public let condition: Condition
    public let profile: PredicateProfile

    public init(
        _ text: String, arguments: [Constant] = [], variables: [String: Constant] = [:],
        profile: PredicateProfile = .cloudkit, limits: PredicateParser.Limits = .default
    ) throws(InvalidPredicateError) {
        // Built here rather than through `init(_: PredicateSyntax, ...)`: delegating built the value
        // aside and copied it into place (a retain and release of each of its arrays).
        let parsed = try PredicateParser.parse(text, limits: limits)
        let bound = arguments.isEmpty && variables.isEmpty ? parsed : try parsed.binding(arguments: arguments, variables: variables)
        condition = try PredicateValidator(profile: profile).validate(bound)
        predicate = bound
        self.profile = profile
    }

    public init(_ predicate: PredicateSyntax, arguments: [Constant] = [], variables: [String: Constant] = [:], profile: PredicateProfile = .cloudkit) throws(InvalidPredicateError) {
        let bound = try predicate.binding(arguments: arguments, variables: variables)
        condition = try PredicateValidator(profile: profile).validate(bound)
        self.predicate = bound
        self.profile = profile
    }
}
