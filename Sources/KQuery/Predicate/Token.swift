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

    /// The byte range, as 32-bit offsets (texts are at most `Int32.max` bytes): with them a token
    /// is three words, which the lexer returns in registers. Returned through memory, each token
    /// was stored in pieces and reloaded whole, a store-forwarding stall per token. The offsets
    /// come first so that every field starts on a word or within the last one.
    private var start: Int32
    private var end: Int32
    var kind: Kind
    /// Set for an unescaped reserved word (keywords are case-insensitive).
    var keyword: Keyword?

    var span: SourceSpan { SourceSpan(start: Int(start), end: Int(end)) }

    init(kind: Kind, span: SourceSpan, keyword: Keyword? = nil) {
        self.kind = kind
        self.start = Int32(truncatingIfNeeded: span.start)
        self.end = Int32(truncatingIfNeeded: span.end)
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

    /// The comparison operator this symbol spells. `ComparisonOperator.table` holds the spellings;
    /// this switch, asked for every comparison parsed, answers without searching it, and a test
    /// checks that the two agree for every symbol.
    var comparisonOperator: ComparisonOperator? {
        switch self {
        case .equalEqual, .equal: .equal
        case .notEqual, .lessGreater: .notEqual
        case .less: .lessThan
        case .lessEqual, .equalLess: .lessThanOrEqual
        case .greater: .greaterThan
        case .greaterEqual, .equalGreater: .greaterThanOrEqual
        default: nil
        }
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

    /// The comparison operator this keyword spells; like `Symbol.comparisonOperator`, a switch
    /// that a test checks against `ComparisonOperator.table`.
    var comparisonOperator: ComparisonOperator? {
        switch self {
        case .between: .between
        case .in_: .in
        case .contains: .contains
        case .beginsWith: .beginsWith
        case .endsWith: .endsWith
        case .like: .like
        case .matches: .matches
        case .tokenMatches: .tokenMatches
        default: nil
        }
    }

    /// The reserved word whose upper-cased letters `packed` holds (see `Lexer.scanWord`), as
    /// little-endian bytes in two words. A test checks this against every case's raw value.
    init?(packed low: UInt64, _ high: UInt64) {
        // One switch on integer constants: the compiler makes it a binary search.
        if high == 0 {
            switch low {
            case 0x444E41: self = .and  // AND
            case 0x524F: self = .or  // OR
            case 0x544F4E: self = .not  // NOT
            case 0x594E41: self = .any  // ANY
            case 0x454D4F53: self = .some  // SOME
            case 0x4C4C41: self = .all  // ALL
            case 0x454E4F4E: self = .none  // NONE
            case 0x4C494E: self = .nil_  // NIL
            case 0x4C4C554E: self = .null  // NULL
            case 0x45555254: self = .true_  // TRUE
            case 0x534559: self = .yes  // YES
            case 0x45534C4146: self = .false_  // FALSE
            case 0x4F4E: self = .no  // NO
            case 0x464C4553: self = .self_  // SELF
            case 0x5952455551425553: self = .subquery  // SUBQUERY
            case 0x4E4F4954434E5546: self = .function  // FUNCTION
            case 0x5453524946: self = .first  // FIRST
            case 0x5453414C: self = .last  // LAST
            case 0x455A4953: self = .size  // SIZE
            case 0x4E454557544542: self = .between  // BETWEEN
            case 0x4E49: self = .in_  // IN
            case 0x534E4941544E4F43: self = .contains  // CONTAINS
            case 0x4854495753444E45: self = .endsWith  // ENDSWITH
            case 0x454B494C: self = .like  // LIKE
            case 0x5345484354414D: self = .matches  // MATCHES
            default: return nil
            }
            return
        }
        switch (low, high) {
        case (0x4445525045555254, 0x4554414349): self = .truePredicate  // TRUEPREDICATE
        case (0x45525045534C4146, 0x455441434944): self = .falsePredicate  // FALSEPREDICATE
        case (0x4957534E49474542, 0x4854): self = .beginsWith  // BEGINSWITH
        case (0x54414D4E454B4F54, 0x53454843): self = .tokenMatches  // TOKENMATCHES
        default: return nil
        }
    }
}
