/// A lexical token of the format-string syntax.
///
/// Tokens are plain data (a kind, a byte range and small ids), so the parser copies them for free;
/// a word's or a string's text is read from the source only when the parser builds a node from it,
/// and format specifiers live in a side table of `Lexer.Output`.
struct Token: Hashable {
    enum Kind: Hashable {
        /// A word: a key path component, keyword or function name; `escaped` for `#word`.
        case word(escaped: Bool)
        /// A string literal (with its quotes); `escaped` when it has escapes to decode.
        case string(escaped: Bool)
        /// An integer literal's magnitude (the sign is a separate `-` token).
        case integer(UInt64)
        case double(Double)
        /// A format specifier; it is `formats[index]`.
        case format(index: Int)
        /// `$name`.
        case variable
        case symbol(Symbol)
        case end
    }

    var kind: Kind
    var span: SourceSpan
    /// Set for an unescaped reserved word (keywords are case-insensitive).
    var keyword: Keyword?

    init(kind: Kind, span: SourceSpan, keyword: Keyword? = nil) {
        self.kind = kind
        self.span = span
        self.keyword = keyword
    }

    func isSymbol(_ symbol: Symbol) -> Bool {
        if case .symbol(let own) = kind { return own == symbol }
        return false
    }

    var isEnd: Bool {
        if case .end = kind { return true }
        return false
    }
}

/// The punctuation of the syntax.
enum Symbol: String, Hashable, CaseIterable {
    case equalEqual = "==", notEqual = "!=", lessGreater = "<>", lessEqual = "<=", equalLess = "=<"
    case greaterEqual = ">=", equalGreater = "=>", andAnd = "&&", orOr = "||"
    case equal = "=", less = "<", greater = ">", bang = "!", openParen = "(", closeParen = ")"
    case openBrace = "{", closeBrace = "}", openBracket = "[", closeBracket = "]", comma = ","
    case minus = "-", plus = "+", star = "*", slash = "/", colon = ":", dot = "."

    /// The comparison operator this symbol spells, from `ComparisonOperator.table`.
    var comparisonOperator: ComparisonOperator? { Symbol.operators.first { $0.symbol == self }?.op }

    /// The symbols that spell operators: a handful, searched faster than a dictionary is hashed.
    private static let operators: [(symbol: Symbol, op: ComparisonOperator)] = allCases.compactMap { symbol in
        ComparisonOperator.bySymbol[symbol.rawValue].map { (symbol, $0) }
    }

    var isArithmetic: Bool { self == .plus || self == .minus || self == .star || self == .slash }
}

/// The reserved words. A key path spelled like one must be escaped with `#`.
enum Keyword: String, Hashable, CaseIterable {
    case and = "AND", or = "OR", not = "NOT", truePredicate = "TRUEPREDICATE", falsePredicate = "FALSEPREDICATE"
    case any = "ANY", some = "SOME", all = "ALL", none = "NONE"
    case nil_ = "NIL", null = "NULL", true_ = "TRUE", yes = "YES", false_ = "FALSE", no = "NO"
    case self_ = "SELF", subquery = "SUBQUERY", function = "FUNCTION", first = "FIRST", last = "LAST", size = "SIZE"
    case between = "BETWEEN", in_ = "IN", contains = "CONTAINS", beginsWith = "BEGINSWITH", endsWith = "ENDSWITH"
    case like = "LIKE", matches = "MATCHES", tokenMatches = "TOKENMATCHES"

    /// The comparison operator this keyword spells, from `ComparisonOperator.table`.
    var comparisonOperator: ComparisonOperator? { Keyword.operators.first { $0.keyword == self }?.op }

    private static let operators: [(keyword: Keyword, op: ComparisonOperator)] = allCases.compactMap { keyword in
        ComparisonOperator.byKeyword[keyword.rawValue].map { (keyword, $0) }
    }
}
