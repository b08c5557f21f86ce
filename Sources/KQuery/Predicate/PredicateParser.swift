/// Recursive-descent parser for the format-string syntax; `Grammar/Predicate.ebnf` is its grammar.
///
/// Nesting is bounded by `Limits.maximumDepth`, so hostile input (100,000 parentheses, 50,000 NOTs)
/// ends in an error instead of overflowing the stack.
public struct PredicateParser {
    public struct Limits: Sendable {
        /// Longest predicate text, in UTF-8 bytes.
        public var maximumLength = 256 * 1024
        /// Deepest nesting of parentheses, NOTs and aggregates.
        public var maximumDepth = 100
        /// Most elements in one aggregate `{...}`.
        public var maximumAggregateCount = 10_000

        public init() {}
        public static let `default` = Limits()
    }

    private let tokens: [Token]
    private var index = 0
    private var depth = 0
    private let limits: Limits

    /// Parses `text` into an AST. Format arguments and variables stay unbound (see `PredicateSyntax.binding`).
    public static func parse(_ text: String, limits: Limits = .default) throws(InvalidPredicateError) -> PredicateSyntax {
        guard text.utf8.count <= limits.maximumLength else {
            throw InvalidPredicateError(
                "predicate is \(text.utf8.count) bytes long; the limit is \(limits.maximumLength)",
                at: SourceSpan(start: limits.maximumLength, end: limits.maximumLength + 1))
        }
        var parser = PredicateParser(tokens: try Lexer.tokenize(text), limits: limits)
        if parser.current.kind == .end { throw InvalidPredicateError("empty predicate", at: parser.current.span) }
        let predicate = try parser.parseOr()
        guard parser.current.kind == .end else {
            throw InvalidPredicateError("unexpected \(parser.current.shown) after the predicate", at: parser.current.span)
        }
        return predicate
    }

    private init(tokens: [Token], limits: Limits) {
        self.tokens = tokens
        self.limits = limits
    }

    private var current: Token { tokens[index] }
    private var following: Token { tokens[min(index + 1, tokens.count - 1)] }

    private mutating func advance() -> Token {
        let token = tokens[index]
        if index < tokens.count - 1 { index += 1 }
        return token
    }

    private mutating func expect(_ symbol: String, _ context: String) throws(InvalidPredicateError) -> Token {
        guard current.isSymbol(symbol) else {
            throw InvalidPredicateError("expected '\(symbol)' \(context), found \(current.shown)", at: current.span)
        }
        return advance()
    }

    private mutating func enter(_ span: SourceSpan) throws(InvalidPredicateError) {
        depth += 1
        if depth > limits.maximumDepth {
            throw InvalidPredicateError("nesting is deeper than \(limits.maximumDepth) levels", at: span)
        }
    }

    // predicate := and-predicate { ("OR" | "||") and-predicate }
    private mutating func parseOr() throws(InvalidPredicateError) -> PredicateSyntax {
        let first = try parseAnd()
        var operands = [first]
        while current.keyword == "OR" || current.isSymbol("||") {
            _ = advance()
            operands.append(try parseAnd())
        }
        return operands.count == 1 ? first : .or(operands, first.span.through(operands[operands.count - 1].span))
    }

    // and-predicate := unary { ("AND" | "&&") unary }
    private mutating func parseAnd() throws(InvalidPredicateError) -> PredicateSyntax {
        let first = try parseUnary()
        var operands = [first]
        while current.keyword == "AND" || current.isSymbol("&&") {
            _ = advance()
            operands.append(try parseUnary())
        }
        return operands.count == 1 ? first : .and(operands, first.span.through(operands[operands.count - 1].span))
    }

    // unary := ("NOT" | "!") unary | "(" predicate ")" | TRUEPREDICATE | FALSEPREDICATE | comparison
    private mutating func parseUnary() throws(InvalidPredicateError) -> PredicateSyntax {
        let token = current
        if token.keyword == "NOT" || token.isSymbol("!") {
            try enter(token.span)
            defer { depth -= 1 }
            _ = advance()
            // `NOT (x)` is one level, not two, so the printer's `NOT (...)` form never needs more
            // depth than the text it was parsed from.
            let operand = current.isSymbol("(") ? try parseParenthesized() : try parseUnary()
            return .not(operand, token.span.through(operand.span))
        }
        if token.isSymbol("(") {
            try enter(token.span)
            defer { depth -= 1 }
            return try parseParenthesized()
        }
        switch token.keyword {
        case "TRUEPREDICATE":
            _ = advance()
            return .constant(true, token.span)
        case "FALSEPREDICATE":
            _ = advance()
            return .constant(false, token.span)
        default:
            return .comparison(try parseComparison())
        }
    }

    private mutating func parseParenthesized() throws(InvalidPredicateError) -> PredicateSyntax {
        let open = advance()
        let inner = try parseOr()
        _ = try expect(")", "to close the '(' at column \(open.span.start + 1)")
        return inner
    }

    // comparison := [modifier] expression operator [options] expression
    private mutating func parseComparison() throws(InvalidPredicateError) -> Comparison {
        let start = current.span
        var modifier = ComparisonModifier.direct
        switch current.keyword {
        case "ANY", "SOME": modifier = .any
        case "ALL": modifier = .all
        case "NONE": modifier = .none
        default: break
        }
        if modifier != .direct { _ = advance() }
        let left = try parseExpression()
        let operatorToken = current
        let op: ComparisonOperator
        if case .symbol(let symbol) = operatorToken.kind, let symbolOperator = ComparisonOperator.bySymbol[symbol] {
            op = symbolOperator
        } else if let keyword = operatorToken.keyword, let keywordOperator = ComparisonOperator.byKeyword[keyword] {
            op = keywordOperator
        } else if operatorToken.kind == .end {
            throw InvalidPredicateError("expected a comparison operator after the expression, found end of input", at: operatorToken.span)
        } else if ["+", "-", "*", "/"].contains(where: operatorToken.isSymbol) {
            throw InvalidPredicateError("arithmetic is not supported", at: operatorToken.span)
        } else {
            throw InvalidPredicateError("expected a comparison operator, found \(operatorToken.shown)", at: operatorToken.span)
        }
        _ = advance()
        var options: ComparisonOptions = []
        var operatorSpan = operatorToken.span
        if current.isSymbol("[") {
            let open = advance()
            guard case .word(let letters, false) = current.kind else {
                throw InvalidPredicateError("expected comparison options such as [cd]", at: current.span)
            }
            for letter in letters {
                guard let option = ComparisonOptions.letters.first(where: { $0.0 == letter })?.1 else {
                    throw InvalidPredicateError("unknown comparison option '\(letter)' (expected c, d, l or n)", at: current.span)
                }
                options.insert(option)
            }
            _ = advance()
            let close = try expect("]", "after comparison options")
            operatorSpan = operatorToken.span.through(close.span)
            _ = open
        }
        guard current.kind != .end else {
            throw InvalidPredicateError("expected an expression after '\(op.info.canonical)', found end of input", at: current.span)
        }
        let right = try parseExpression()
        return Comparison(
            modifier: modifier, left, op, options: options, right, span: start.through(right.span), operatorSpan: operatorSpan)
    }

    // expression := constant | key-path | aggregate | function-call | format-argument | variable | SELF
    private mutating func parseExpression() throws(InvalidPredicateError) -> ExpressionSyntax {
        let expression = try parsePrimaryExpression()
        if ["+", "*", "/"].contains(where: current.isSymbol) || (current.isSymbol("-") && !isNegativeNumberAhead) {
            throw InvalidPredicateError("arithmetic is not supported", at: current.span)
        }
        return expression
    }

    private var isNegativeNumberAhead: Bool {
        switch following.kind {
        case .integer, .double: true
        default: false
        }
    }

    private mutating func parsePrimaryExpression() throws(InvalidPredicateError) -> ExpressionSyntax {
        let token = current
        switch token.kind {
        case .string(let string):
            _ = advance()
            return .constant(.value(.string(string)), token.span)
        case .integer, .double:
            return .constant(try parseNumber(), token.span)
        case .symbol("-"):
            guard isNegativeNumberAhead else { throw InvalidPredicateError("arithmetic is not supported", at: token.span) }
            let constant = try parseNumber()
            return .constant(constant, token.span.through(tokens[index - 1].span))
        case .symbol("{"):
            return try parseAggregate()
        case .format(let argument):
            _ = advance()
            return .argument(argument, token.span)
        case .variable(let name):
            _ = advance()
            return .variable(name, token.span)
        case .word(let word, let escaped):
            if !escaped, let keyword = token.keyword {
                switch keyword {
                case "NIL", "NULL":
                    _ = advance()
                    return .constant(.null, token.span)
                case "TRUE", "YES":
                    _ = advance()
                    return .constant(.bool(true), token.span)
                case "FALSE", "NO":
                    _ = advance()
                    return .constant(.bool(false), token.span)
                case "SELF":
                    _ = advance()
                    return .evaluatedObject(token.span)
                case "SUBQUERY", "FUNCTION":
                    throw InvalidPredicateError("Unsupported expression: \(word.uppercased())", at: token.span)
                default:
                    throw InvalidPredicateError("expected an expression, found keyword \(token.shown) (escape a field name with '#')", at: token.span)
                }
            }
            if !escaped, following.isSymbol("(") { return try parseFunction(name: word, nameToken: token) }
            _ = advance()
            var path = word
            var span = token.span
            while current.isSymbol(".") {
                _ = advance()
                guard case .word(let component, _) = current.kind else {
                    throw InvalidPredicateError("expected a key after '.'", at: current.span)
                }
                path += "." + component
                span = span.through(advance().span)
            }
            if current.isSymbol("[") {
                throw InvalidPredicateError("indexed key paths are not supported", at: current.span)
            }
            return .keyPath(path, span)
        case .end:
            throw InvalidPredicateError("expected an expression, found end of input", at: token.span)
        default:
            throw InvalidPredicateError("expected an expression, found \(token.shown)", at: token.span)
        }
    }

    private mutating func parseNumber() throws(InvalidPredicateError) -> Constant {
        var negative = false
        let start = current.span
        if current.isSymbol("-") {
            negative = true
            _ = advance()
        }
        let token = advance()
        switch token.kind {
        case .integer(let magnitude):
            if negative {
                guard magnitude <= UInt64(Int64.max) + 1 else {
                    throw InvalidPredicateError("integer is outside the INT64 range", at: start.through(token.span))
                }
                return .value(.int64(magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)))
            }
            guard magnitude <= UInt64(Int64.max) else {
                throw InvalidPredicateError("integer is outside the INT64 range", at: token.span)
            }
            return .value(.int64(Int64(magnitude)))
        case .double(let value):
            return .value(.double(negative ? -value : value))
        default:
            throw InvalidPredicateError("expected a number", at: token.span)
        }
    }

    // aggregate := "{" [ expression { "," expression } ] "}"
    private mutating func parseAggregate() throws(InvalidPredicateError) -> ExpressionSyntax {
        let open = advance()
        try enter(open.span)
        defer { depth -= 1 }
        var elements: [ExpressionSyntax] = []
        if !current.isSymbol("}") {
            while true {
                elements.append(try parseExpression())
                if elements.count > limits.maximumAggregateCount {
                    throw InvalidPredicateError("aggregate has more than \(limits.maximumAggregateCount) elements", at: open.span)
                }
                if current.isSymbol(",") {
                    _ = advance()
                    continue
                }
                break
            }
        }
        let close = try expect("}", "to close the aggregate")
        return .aggregate(elements, open.span.through(close.span))
    }

    // function-call := name "(" [ expression { "," expression } ] ")"
    private mutating func parseFunction(name: String, nameToken: Token) throws(InvalidPredicateError) -> ExpressionSyntax {
        _ = advance()
        let open = advance()
        try enter(open.span)
        defer { depth -= 1 }
        var arguments: [ExpressionSyntax] = []
        if !current.isSymbol(")") {
            while true {
                arguments.append(try parseExpression())
                if arguments.count > 16 { throw InvalidPredicateError("too many function arguments", at: current.span) }
                if current.isSymbol(",") {
                    _ = advance()
                    continue
                }
                break
            }
        }
        let close = try expect(")", "to close the arguments of \(name)")
        let span = nameToken.span.through(close.span)
        if let literal = try Literals.fold(name: name, arguments: arguments, span: span) {
            return .constant(literal, span)
        }
        return .function(Functions.canonicalName(name), arguments, span)
    }
}
