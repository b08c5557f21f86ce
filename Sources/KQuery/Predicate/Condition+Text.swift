extension Condition: CustomStringConvertible {
    /// The condition as predicate text (extended profile syntax), for plans and messages.
    public var description: String { text(nested: false) }

    private func text(nested: Bool) -> String {
        switch self {
        case .constant(let value):
            return value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .and(let operands):
            let text = operands.map { $0.text(nested: true) }.joined(separator: " AND ")
            return nested && operands.count > 1 ? "(\(text))" : text
        case .or(let operands):
            let text = operands.map { $0.text(nested: true) }.joined(separator: " OR ")
            return nested && operands.count > 1 ? "(\(text))" : text
        case .not(let operand):
            return "NOT " + operand.text(nested: true)
        case .field(let field, let test):
            return Self.text(of: test, on: Self.keyPath(field), modifier: "")
        case .tokens(let match, let text):
            return "\(match == .all ? "ALL" : "ANY") tokenize(\(Literals.text(of: .string(text))), 'Cdl') IN allTokens"
        case .distance(let field, let center, let relation, let radius):
            return "distanceToLocation:fromLocation:(\(Self.keyPath(field)), \(Literals.text(of: .location(center)))) \(relation.op.info.canonical) \(radius)"
        }
    }

    private static func keyPath(_ field: FieldReference) -> String {
        let name = field.name
        return Lexer.needsEscape(Substring(name)) ? "#" + name : name
    }

    private static func text(of operand: Operand) -> String {
        switch operand {
        case .value(let value): Literals.text(of: value)
        case .now: "now()"
        }
    }

    private static func text(of test: FieldTest, on key: String, modifier: String) -> String {
        let lhs = modifier + key
        switch test {
        case .isNil: return "\(lhs) == nil"
        case .isNotNil: return "\(lhs) != nil"
        case .compare(let relation, let operand, let options):
            return "\(lhs) \(relation.op.info.canonical)\(options.spelled) \(text(of: operand))"
        case .between(let lower, let upper):
            return "\(lhs) BETWEEN {\(text(of: lower)), \(text(of: upper))}"
        case .oneOf(let operands, let options):
            return "\(lhs) IN\(options.spelled) {\(operands.map(text(of:)).joined(separator: ", "))}"
        case .string(let operation, let pattern, let options):
            let op: ComparisonOperator = switch operation {
            case .beginsWith: .beginsWith
            case .endsWith: .endsWith
            case .contains: .contains
            case .like: .like
            case .matches: .matches
            }
            return "\(lhs) \(op.info.canonical)\(options.spelled) \(Literals.text(of: .string(pattern)))"
        case .members(let quantifier, let member):
            return text(of: member, on: key, modifier: quantifier.rawValue.uppercased() + " ")
        case .containsAll(let operands):
            return "ALL {\(operands.map(text(of:)).joined(separator: ", "))} IN \(lhs)"
        case .contains(let operand, let options):
            return "\(lhs) CONTAINS\(options.spelled) \(text(of: operand))"
        }
    }
}
