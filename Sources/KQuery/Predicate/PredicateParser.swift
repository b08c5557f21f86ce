/// Recursive-descent parser for the format-string syntax; `Grammar/Predicate.ebnf` is its grammar.
///
/// Nesting is bounded by `Limits.maximumDepth`, so hostile input (100,000 parentheses, 50,000 NOTs)
/// ends in an error instead of overflowing the stack.
public struct PredicateParser {
    public struct Limits: Sendable {
        /// Longest predicate text, in UTF-8 bytes (never more than `Int32.max`, whatever is set).
        public var maximumLength = 256 * 1024
        /// Deepest nesting of parentheses, NOTs and aggregates.
        public var maximumDepth = 100
        /// Most elements in one aggregate `{...}`.
        public var maximumAggregateCount = 10_000

        public init() {}
        public static let `default` = Limits()
    }

    /// Tokens are lexed as the parser reads them, one ahead of `current`.
    private var lexer: Lexer
    private var current: Token
    /// The token after `current`: it tells `name(` from a key path and `- 1` from arithmetic.
    private var following: Token
    private var depth = 0
    private let limits: Limits

    /// Parses `text` into an AST. Format arguments and variables stay unbound (see `PredicateSyntax.binding`).
    public static func parse(_ text: String, limits: Limits = .default) throws(InvalidPredicateError) -> PredicateSyntax {
        let maximumLength = min(limits.maximumLength, Int(Int32.max) - 1)
        guard text.utf8.count <= maximumLength else {
            throw InvalidPredicateError(
                "predicate is \(text.utf8.count) bytes long; the limit is \(maximumLength)",
                at: SourceSpan(start: maximumLength, end: maximumLength + 1))
        }
        // The text is lexed and parsed in place, without copying its bytes out.
        let parsed = text.utf8.withContiguousStorageIfAvailable { parse($0, limits: limits) }
            ?? Array(text.utf8).withUnsafeBufferPointer { parse($0, limits: limits) }
        return try parsed.get()
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>, limits: Limits) -> Result<PredicateSyntax, InvalidPredicateError> {
        do throws(InvalidPredicateError) {
            var parser = try PredicateParser(Lexer(bytes), limits: limits)
            do throws(InvalidPredicateError) {
                return .success(try parser.parsePredicate())
            } catch {
                try parser.lexer.drain()
                return .failure(error)
            }
        } catch {
            return .failure(error)
        }
    }

    private init(_ lexer: Lexer, limits: Limits) throws(InvalidPredicateError) {
        self.lexer = lexer
        self.limits = limits
        current = try self.lexer.next()
        following = try self.lexer.next()
    }

    private mutating func parsePredicate() throws(InvalidPredicateError) -> PredicateSyntax {
        if current.isEnd { throw InvalidPredicateError("empty predicate", at: current.span) }
        let predicate = try parseOr()
        guard current.isEnd else {
            throw InvalidPredicateError("unexpected \(lexer.shown(current)) after the predicate", at: current.span)
        }
        return predicate
    }

    @discardableResult
    private mutating func advance() throws(InvalidPredicateError) -> Token {
        let token = current
        if !current.isEnd {
            current = following
            following = try lexer.next()
        }
        return token
    }

    @discardableResult
    private mutating func expect(_ symbol: Symbol, _ context: String) throws(InvalidPredicateError) -> Token {
        guard current.isSymbol(symbol) else {
            throw InvalidPredicateError("expected '\(symbol.rawValue)' \(context), found \(lexer.shown(current))", at: current.span)
        }
        return try advance()
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
        guard isOr(current) else { return first }
        // Spans are read as operands arrive: reading them back out of the array copied operands.
        let span = first.span
        var end = span
        var operands = PredicateParser.operands(consume first)
        while isOr(current) {
            try advance()
            let operand = try parseAnd()
            end = operand.span
            operands.append(consume operand)
        }
        return .or(operands, span.through(end))
    }

    private func isOr(_ token: Token) -> Bool { token.keyword == .or || token.isSymbol(.orOr) }
    private func isAnd(_ token: Token) -> Bool { token.keyword == .and || token.isSymbol(.andAnd) }

    /// The operand list of an AND or OR, with room for a few more: growing it one by one
    /// reallocated it for the second and third operand of every typical predicate.
    private static func operands(_ first: consuming PredicateSyntax) -> [PredicateSyntax] {
        var operands: [PredicateSyntax] = []
        operands.reserveCapacity(4)
        operands.append(first)
        return operands
    }

    // and-predicate := unary { ("AND" | "&&") unary }
    private mutating func parseAnd() throws(InvalidPredicateError) -> PredicateSyntax {
        let first = try parseUnary()
        guard isAnd(current) else { return first }
        let span = first.span
        var end = span
        var operands = PredicateParser.operands(consume first)
        while isAnd(current) {
            try advance()
            let operand = try parseUnary()
            end = operand.span
            operands.append(consume operand)
        }
        return .and(operands, span.through(end))
    }

    // unary := ("NOT" | "!") unary | "(" predicate ")" | TRUEPREDICATE | FALSEPREDICATE | comparison
    private mutating func parseUnary() throws(InvalidPredicateError) -> PredicateSyntax {
        let token = current
        if token.keyword == .not || token.isSymbol(.bang) {
            try enter(token.span)
            defer { depth -= 1 }
            try advance()
            // `NOT (x)` is one level, not two, so the printer's `NOT (...)` form never needs more
            // depth than the text it was parsed from.
            let operand = current.isSymbol(.openParen) ? try parseParenthesized() : try parseUnary()
            return .not(operand, token.span.through(operand.span))
        }
        if token.isSymbol(.openParen) {
            try enter(token.span)
            defer { depth -= 1 }
            return try parseParenthesized()
        }
        switch token.keyword {
        case .truePredicate?:
            try advance()
            return .constant(true, token.span)
        case .falsePredicate?:
            try advance()
            return .constant(false, token.span)
        default:
            return .comparison(try parseComparison())
        }
    }

    private mutating func parseParenthesized() throws(InvalidPredicateError) -> PredicateSyntax {
        let open = try advance()
        let inner = try parseOr()
        try expect(.closeParen, "to close the '(' at column \(open.span.start + 1)")
        return inner
    }

    // comparison := [modifier] expression operator [options] expression
    private mutating func parseComparison() throws(InvalidPredicateError) -> Comparison {
        let start = current.span
        var modifier = ComparisonModifier.direct
        switch current.keyword {
        case .any?, .some?: modifier = .any
        case .all?: modifier = .all
        case Keyword.none?: modifier = .none
        default: break
        }
        if modifier != .direct { try advance() }
        // The two sides are parsed into place and then checked for arithmetic: returning them
        // through `parseExpression` copied each 41-byte expression once more.
        let left = try parsePrimaryExpression()
        try rejectArithmetic()
        let operatorToken = current
        let op: ComparisonOperator
        if case .symbol(let symbol) = operatorToken.kind, let symbolOperator = symbol.comparisonOperator {
            op = symbolOperator
        } else if let keywordOperator = operatorToken.keyword?.comparisonOperator {
            op = keywordOperator
        } else if operatorToken.isEnd {
            throw InvalidPredicateError("expected a comparison operator after the expression, found end of input", at: operatorToken.span)
        } else if case .symbol(let symbol) = operatorToken.kind, symbol.isArithmetic {
            throw InvalidPredicateError("arithmetic is not supported", at: operatorToken.span)
        } else {
            throw InvalidPredicateError("expected a comparison operator, found \(lexer.shown(operatorToken))", at: operatorToken.span)
        }
        try advance()
        var options: ComparisonOptions = []
        var operatorSpan = operatorToken.span
        if current.isSymbol(.openBracket) {
            let open = try advance()
            guard case .word(escaped: false) = current.kind else {
                throw InvalidPredicateError("expected comparison options such as [cd]", at: current.span)
            }
            for letter in lexer.text(of: current) {
                guard let option = ComparisonOptions.letters.first(where: { $0.0 == letter })?.1 else {
                    throw InvalidPredicateError("unknown comparison option '\(letter)' (expected c, d, l or n)", at: current.span)
                }
                options.insert(option)
            }
            try advance()
            let close = try expect(.closeBracket, "after comparison options")
            operatorSpan = operatorToken.span.through(close.span)
            _ = open
        }
        guard !current.isEnd else {
            throw InvalidPredicateError("expected an expression after '\(op.info.canonical)', found end of input", at: current.span)
        }
        let right = try parsePrimaryExpression()
        try rejectArithmetic()
        return Comparison(
            modifier: modifier, left, op, options: options, right, span: start.through(right.span), operatorSpan: operatorSpan)
    }

    // expression := constant | key-path | aggregate | function-call | format-argument | variable | SELF
    private mutating func parseExpression() throws(InvalidPredicateError) -> ExpressionSyntax {
        let expression = try parsePrimaryExpression()
        try rejectArithmetic()
        return expression
    }

    /// Arithmetic after an expression is an error: NSPredicate's arithmetic is not supported.
    /// Inlined: as a call from a mutating method it was passed a copy of the whole parser.
    @inline(__always)
    private func rejectArithmetic() throws(InvalidPredicateError) {
        if case .symbol(let symbol) = current.kind, symbol.isArithmetic, symbol != .minus || !isNegativeNumberAhead {
            throw InvalidPredicateError("arithmetic is not supported", at: current.span)
        }
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
        case .string:
            try advance()
            return .constant(.value(.string(try lexer.string(token))), token.span)
        case .integer, .double:
            return .constant(try parseNumber().constant, token.span)
        case .symbol(.minus):
            guard isNegativeNumberAhead else { throw InvalidPredicateError("arithmetic is not supported", at: token.span) }
            let (constant, number) = try parseNumber()
            return .constant(constant, token.span.through(number))
        case .symbol(.openBrace):
            return try parseAggregate()
        case .format(let index):
            try advance()
            return .argument(lexer.format(index), token.span)
        case .variable:
            try advance()
            return .variable(lexer.text(of: token), token.span)
        case .word(let escaped):
            if !escaped, let keyword = token.keyword {
                switch keyword {
                case .nil_, .null:
                    try advance()
                    return .constant(.null, token.span)
                case .true_, .yes:
                    try advance()
                    return .constant(.bool(true), token.span)
                case .false_, .no:
                    try advance()
                    return .constant(.bool(false), token.span)
                case .self_:
                    try advance()
                    return .evaluatedObject(token.span)
                case .subquery, .function:
                    throw InvalidPredicateError("Unsupported expression: \(keyword.rawValue)", at: token.span)
                default:
                    throw InvalidPredicateError("expected an expression, found keyword \(lexer.shown(token)) (escape a field name with '#')", at: token.span)
                }
            }
            let word = lexer.text(of: token)
            if !escaped, following.isSymbol(.openParen) { return try parseFunction(name: word, nameToken: token) }
            try advance()
            var path = word
            var span = token.span
            while current.isSymbol(.dot) {
                try advance()
                guard case .word = current.kind else {
                    throw InvalidPredicateError("expected a key after '.'", at: current.span)
                }
                path += "." + lexer.text(of: current)
                span = span.through(try advance().span)
            }
            if current.isSymbol(.openBracket) {
                throw InvalidPredicateError("indexed key paths are not supported", at: current.span)
            }
            return .keyPath(path, span)
        case .end:
            throw InvalidPredicateError("expected an expression, found end of input", at: token.span)
        default:
            throw InvalidPredicateError("expected an expression, found \(lexer.shown(token))", at: token.span)
        }
    }

    /// A number with its sign, and the number token's span.
    private mutating func parseNumber() throws(InvalidPredicateError) -> (constant: Constant, span: SourceSpan) {
        var negative = false
        let start = current.span
        if current.isSymbol(.minus) {
            negative = true
            try advance()
        }
        let token = try advance()
        switch token.kind {
        case .integer(let magnitude):
            if negative {
                guard magnitude <= UInt64(Int64.max) + 1 else {
                    throw InvalidPredicateError("integer is outside the INT64 range", at: start.through(token.span))
                }
                return (.value(.int64(magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))), token.span)
            }
            guard magnitude <= UInt64(Int64.max) else {
                throw InvalidPredicateError("integer is outside the INT64 range", at: token.span)
            }
            return (.value(.int64(Int64(magnitude))), token.span)
        case .double(let value):
            return (.value(.double(negative ? -value : value)), token.span)
        default:
            throw InvalidPredicateError("expected a number", at: token.span)
        }
    }

    // aggregate := "{" [ expression { "," expression } ] "}"
    private mutating func parseAggregate() throws(InvalidPredicateError) -> ExpressionSyntax {
        let open = try advance()
        try enter(open.span)
        defer { depth -= 1 }
        var elements: [ExpressionSyntax] = []
        if !current.isSymbol(.closeBrace) {
            while true {
                elements.append(try parseExpression())
                if elements.count > limits.maximumAggregateCount {
                    throw InvalidPredicateError("aggregate has more than \(limits.maximumAggregateCount) elements", at: open.span)
                }
                if current.isSymbol(.comma) {
                    try advance()
                    continue
                }
                break
            }
        }
        let close = try expect(.closeBrace, "to close the aggregate")
        return .aggregate(elements, open.span.through(close.span))
    }

    // function-call := name "(" [ expression { "," expression } ] ")"
    private mutating func parseFunction(name: String, nameToken: Token) throws(InvalidPredicateError) -> ExpressionSyntax {
        try advance()
        let open = try advance()
        try enter(open.span)
        defer { depth -= 1 }
        var arguments: [ExpressionSyntax] = []
        if !current.isSymbol(.closeParen) {
            while true {
                arguments.append(try parseExpression())
                if arguments.count > 16 { throw InvalidPredicateError("too many function arguments", at: current.span) }
                if current.isSymbol(.comma) {
                    try advance()
                    continue
                }
                break
            }
        }
        let close = try expect(.closeParen, "to close the arguments of \(name)")
        let span = nameToken.span.through(close.span)
        if let literal = try Literals.fold(name: name, arguments: arguments, span: span) {
            return .constant(literal, span)
        }
        return .function(Functions.canonicalName(name), arguments, span)
    }
}
