extension PredicateSyntax {
    /// Substitutes format arguments (`%@`, `%K`, `%d`, `%f`, `%s`, `%N$@`) and `$variables`.
    ///
    /// `%@` bound to a list becomes an aggregate (for `IN %@`, `BETWEEN %@`); `%K` needs a string, the
    /// field name. Missing and surplus arguments are errors, as are unknown variables.
    public func binding(arguments: [Constant] = [], variables: [String: Constant] = [:]) throws(InvalidPredicateError) -> PredicateSyntax {
        // Nothing to substitute: any placeholder left is reported by the validator.
        if arguments.isEmpty && variables.isEmpty { return self }
        var used = Set<Int>()
        let bound = try bind(arguments, variables, &used)
        if let unused = arguments.indices.first(where: { !used.contains($0) }) {
            throw InvalidPredicateError(
                "argument \(unused + 1) is not used: the predicate has \(used.count) format specifier\(used.count == 1 ? "" : "s")",
                at: SourceSpan(start: span.end, end: span.end + 1))
        }
        return bound
    }

    private func bind(_ arguments: [Constant], _ variables: [String: Constant], _ used: inout Set<Int>) throws(InvalidPredicateError) -> PredicateSyntax {
        switch self {
        case .constant: return self
        case .comparison(var comparison):
            comparison.left = try comparison.left.bind(arguments, variables, &used)
            comparison.right = try comparison.right.bind(arguments, variables, &used)
            return .comparison(comparison)
        case .and(let operands, let span):
            var bound: [PredicateSyntax] = []
            for operand in operands { bound.append(try operand.bind(arguments, variables, &used)) }
            return .and(bound, span)
        case .or(let operands, let span):
            var bound: [PredicateSyntax] = []
            for operand in operands { bound.append(try operand.bind(arguments, variables, &used)) }
            return .or(bound, span)
        case .not(let operand, let span):
            return .not(try operand.bind(arguments, variables, &used), span)
        }
    }
}

extension ExpressionSyntax {
    fileprivate func bind(_ arguments: [Constant], _ variables: [String: Constant], _ used: inout Set<Int>) throws(InvalidPredicateError) -> ExpressionSyntax {
        switch self {
        case .keyPath, .evaluatedObject, .constant: return self
        case .aggregate(let elements, let span):
            var bound: [ExpressionSyntax] = []
            for element in elements { bound.append(try element.bind(arguments, variables, &used)) }
            return .aggregate(bound, span)
        case .function(let name, let elements, let span):
            var bound: [ExpressionSyntax] = []
            for element in elements { bound.append(try element.bind(arguments, variables, &used)) }
            return .function(name, bound, span)
        case .variable(let name, let span):
            guard let value = variables[name] else { throw InvalidPredicateError("no value for variable $\(name)", at: span) }
            return ExpressionSyntax(binding: value, span: span)
        case .argument(let argument, let span):
            guard argument.index < arguments.count else {
                throw InvalidPredicateError(
                    "missing argument \(argument.index + 1) for \(argument.spelling) (\(arguments.count) given)", at: span)
            }
            used.insert(argument.index)
            let value = arguments[argument.index]
            switch (argument.kind, value) {
            case (.keyPath, .value(.string(let name))):
                return .keyPath(name, span)
            case (.keyPath, _):
                throw InvalidPredicateError("%K needs a field name (a string), not \(value.kindName)", at: span)
            case (.integer, .value(.int64)), (.integer, .bool), (.double, .value(.double)), (.string, .value(.string)), (.object, _):
                return ExpressionSyntax(binding: value, span: span)
            case (.double, .value(.int64(let i))):
                return .constant(.value(.double(Double(i))), span)
            default:
                throw InvalidPredicateError("\(argument.spelling) needs \(argument.kind.expectation), not \(value.kindName)", at: span)
            }
        }
    }

    /// A bound value: lists become aggregates so `IN %@` reads like `IN {...}`.
    init(binding value: Constant, span: SourceSpan) {
        if case .value(.list(_, let values)) = value {
            self = .aggregate(values.map { .constant(.value($0), span) }, span)
        } else {
            self = .constant(value, span)
        }
    }
}

extension FormatArgument.Kind {
    var expectation: String {
        switch self {
        case .object: "a value"
        case .keyPath: "a field name"
        case .integer: "an integer"
        case .double: "a number"
        case .string: "a string"
        }
    }
}

extension Constant {
    /// The value as CloudKit compares it: booleans are INT64 1 and 0, nil has none.
    public var fieldValue: FieldValue? {
        switch self {
        case .null: nil
        case .bool(let b): .int64(b ? 1 : 0)
        case .value(let value): value
        }
    }

    var kindName: String {
        switch self {
        case .null: "nil"
        case .bool: "a boolean"
        case .value(let value): value.typeName
        }
    }

    /// Reads a command-line or API argument given as field JSON (SPEC §1 and §2.3):
    /// `30`, `"text"`, `{"value": 1700000000000, "type": "TIMESTAMP"}`, `[1, 2]`, `true`, `null`.
    public init(json: JSON) throws(RecordDecodingError) {
        switch json {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        default:
            guard let value = try FieldValue(fieldJSON: json) else {
                self = .null
                return
            }
            self = .value(value)
        }
    }
}
