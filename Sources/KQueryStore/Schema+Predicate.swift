import KQuery

extension Schema {
    /// Checks a query's predicate against the schema, as `check(_:sortDescriptors:recordType:)`,
    /// with the error placed on the offending field in the predicate text (so it renders with a
    /// caret), or on the whole predicate when the fault is not one field's.
    public func check(_ predicate: ValidatedPredicate, recordType: String) throws(InvalidPredicateError) {
        do {
            try check(predicate.condition, recordType: recordType)
        } catch {
            let span = error.field.flatMap { predicate.predicate.span(ofKeyPath: $0.name) } ?? predicate.predicate.span
            throw InvalidPredicateError(error.message, at: span)
        }
    }
}

extension PredicateSyntax {
    /// Where the key path `name` first appears.
    func span(ofKeyPath name: String) -> SourceSpan? {
        switch self {
        case .constant: return nil
        case .comparison(let comparison): return comparison.left.span(ofKeyPath: name) ?? comparison.right.span(ofKeyPath: name)
        case .and(let operands, _), .or(let operands, _):
            for operand in operands { if let span = operand.span(ofKeyPath: name) { return span } }
            return nil
        case .not(let operand, _): return operand.span(ofKeyPath: name)
        }
    }
}

extension ExpressionSyntax {
    func span(ofKeyPath name: String) -> SourceSpan? {
        switch self {
        case .keyPath(let path, let span): return path == name ? span : nil
        case .aggregate(let elements, _), .function(_, let elements, _):
            for element in elements { if let span = element.span(ofKeyPath: name) { return span } }
            return nil
        default: return nil
        }
    }
}
