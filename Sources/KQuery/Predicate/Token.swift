/// A lexical token of the format-string syntax.
struct Token: Hashable {
    enum Kind: Hashable {
        /// A word: a key path component, keyword or function name. `escaped` for `#word`.
        case word(String, escaped: Bool)
        case string(String)
        /// An integer literal's magnitude (the sign is a separate `-` token).
        case integer(UInt64)
        case double(Double)
        case format(FormatArgument)
        case variable(String)
        case symbol(String)
        case end
    }

    var kind: Kind
    var span: SourceSpan
    /// The word upper-cased when it is an unescaped reserved word (keywords are case-insensitive).
    /// Computed once by the lexer; at most 14 ASCII letters, so it is an inline small string.
    var keyword: String?

    init(kind: Kind, span: SourceSpan, keyword: String? = nil) {
        self.kind = kind
        self.span = span
        self.keyword = keyword
    }

    func isSymbol(_ symbol: String) -> Bool { kind == .symbol(symbol) }

    /// How the token reads in an error message.
    var shown: String {
        switch kind {
        case .word(let word, let escaped): "'\(escaped ? "#" : "")\(word)'"
        case .string: "string"
        case .integer, .double: "number"
        case .format(let argument): "'\(argument.spelling)'"
        case .variable(let name): "'$\(name)'"
        case .symbol(let symbol): "'\(symbol)'"
        case .end: "end of input"
        }
    }
}
