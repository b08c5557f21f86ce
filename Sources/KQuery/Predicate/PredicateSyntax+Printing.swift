extension PredicateSyntax: CustomStringConvertible {
    /// The canonical text: parsing it gives back an equal predicate, and printing is a fixpoint.
    public var description: String { canonicalText }

    public var canonicalText: String {
        switch self {
        case .constant(let value, _): value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .comparison(let comparison): comparison.canonicalText
        case .and(let operands, _): operands.map { $0.operandText(inside: "AND") }.joined(separator: " AND ")
        case .or(let operands, _): operands.map { $0.operandText(inside: "OR") }.joined(separator: " OR ")
        case .not(let operand, _): "NOT " + operand.operandText(inside: "NOT")
        }
    }

    /// Compound operands are parenthesized so the structure survives a re-parse.
    private func operandText(inside parent: String) -> String {
        switch self {
        case .constant, .comparison: parent == "NOT" ? "(\(canonicalText))" : canonicalText
        case .not: parent == "NOT" ? "(\(canonicalText))" : canonicalText
        case .and, .or: "(\(canonicalText))"
        }
    }
}

extension Comparison: CustomStringConvertible {
    public var description: String { canonicalText }

    public var canonicalText: String {
        let prefix = modifier == .direct ? "" : modifier.rawValue + " "
        return "\(prefix)\(left.canonicalText) \(op.info.canonical)\(options.spelled) \(right.canonicalText)"
    }
}

extension ExpressionSyntax: CustomStringConvertible {
    public var description: String { canonicalText }

    public var canonicalText: String {
        switch self {
        case .keyPath(let path, _):
            return path.split(separator: ".", omittingEmptySubsequences: false).map { component in
                Lexer.needsEscape(component) ? "#" + component : String(component)
            }.joined(separator: ".")
        case .evaluatedObject: return "SELF"
        case .constant(let constant, _): return Literals.text(of: constant)
        case .aggregate(let elements, _): return "{" + elements.map(\.canonicalText).joined(separator: ", ") + "}"
        case .function(let name, let arguments, _): return name + "(" + arguments.map(\.canonicalText).joined(separator: ", ") + ")"
        case .argument(let argument, _): return argument.spelling
        case .variable(let name, _): return "$" + name
        }
    }
}
