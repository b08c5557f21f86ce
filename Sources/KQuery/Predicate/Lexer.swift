/// Splits predicate text into tokens.
///
/// Works on the text's UTF-8 bytes in place, for the duration of one parse; spans are byte offsets.
/// Every read goes through `peek` or a range already scanned, so it stays inside the buffer.
/// Errors name the offending character and its place.
struct Lexer {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var position: Int
    private var sequentialArguments = 0
    private var formats: [FormatArgument] = []
    /// Whether a lexical error was thrown (the position is then inside the bad token).
    private var failed = false

    /// The reserved words, upper-cased.
    static let reservedWords: Set<String> = Set(Keyword.allCases.map(\.rawValue))

    /// Whether a key-path component must be written `#component` to read back as a key:
    /// reserved words, and words that would lex as something else (`#2000` is not the number 2000).
    static func needsEscape(_ component: Substring) -> Bool {
        guard let first = component.utf8.first else { return false }
        return reservedWords.contains(component.uppercased()) || !(first.isASCIILetter || first == UInt8(ascii: "_") || first == UInt8(ascii: "@"))
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, at position: Int = 0) {
        self.bytes = bytes
        self.position = position
    }

    /// The source text of a token (a word's name, without a leading `#` or `$`).
    func text(of token: Token) -> String {
        var start = token.span.start
        if case .word(escaped: true) = token.kind { start += 1 }
        if case .variable = token.kind { start += 1 }
        return text(start..<token.span.end)
    }

    /// The text of `range`, which lies inside the bytes and splits no character (its ends are at
    /// ASCII delimiters). Measured faster than `String(decoding:as:)` for the short names of key paths.
    private func text(_ range: Range<Int>) -> String {
        String(unsafeUninitializedCapacity: range.count) { buffer in
            _ = buffer.initialize(from: bytes[range])
            return range.count
        }
    }

    /// The decoded text of a string token. Strings are decoded when the parser reads them, not
    /// when lexed: most have no escapes and are their bytes between the quotes.
    func string(_ token: Token) throws(InvalidPredicateError) -> String {
        guard case .string(escaped: true) = token.kind else {
            return text((token.span.start + 1)..<(token.span.end - 1))
        }
        var lexer = Lexer(bytes, at: token.span.start)
        return try lexer.readString(quote: bytes[token.span.start])
    }

    /// The format specifier of a `.format` token.
    func format(_ index: Int) -> FormatArgument { formats[index] }

    /// How a token reads in an error message.
    func shown(_ token: Token) -> String {
        switch token.kind {
        case .word, .variable: "'\(String(decoding: bytes[token.span.start..<token.span.end], as: UTF8.self))'"
        case .string: "string"
        case .integer, .double: "number"
        case .format(let index): "'\(formats[index].spelling)'"
        case .symbol(let symbol): "'\(symbol.rawValue)'"
        case .end: "end of input"
        }
    }

    /// Lexes the rest of the text after a syntax error, so that a lexical error anywhere in the
    /// text is the one reported, as if the whole text had been lexed before it was parsed.
    mutating func drain() throws(InvalidPredicateError) {
        guard !failed else { return }
        while try !next().isEnd {}
    }

    private func peek(_ offset: Int = 0) -> UInt8? {
        position + offset < bytes.count ? bytes[position + offset] : nil
    }

    private func span(from start: Int) -> SourceSpan { SourceSpan(start: start, end: position) }

    /// The next token; `.end` (again and again) at the end of the text.
    mutating func next() throws(InvalidPredicateError) -> Token {
        do {
            return try lex()
        } catch {
            failed = true
            throw error
        }
    }

    private mutating func lex() throws(InvalidPredicateError) -> Token {
        var index = position
        while index < bytes.count, Lexer.byteClasses.withUnsafeBufferPointer({ $0[Int(bytes[index])] & Lexer.space != 0 }) {
            index &+= 1
        }
        position = index
        let start = index
        guard let byte = peek() else { return Token(kind: .end, span: span(from: start)) }
        switch byte {
        case UInt8(ascii: "'"), UInt8(ascii: "\""):
            let escaped = try skipString(quote: byte)
            return Token(kind: .string(escaped: escaped), span: span(from: start))
        case UInt8(ascii: "0")...UInt8(ascii: "9"):
            return Token(kind: try readNumber(), span: span(from: start))
        case _ where Lexer.isWordByte(byte) || byte == UInt8(ascii: "@"):
            // A letter or `_` (digits were taken above).
            let keyword = scanSelectorOrWord()
            return Token(kind: .word(escaped: false), span: span(from: start), keyword: keyword)
        default:
            if let (symbol, length) = symbol() {
                position += length
                return Token(kind: .symbol(symbol), span: span(from: start))
            }
            return try lexRare(byte, start: start)
        }
    }

    /// The tokens few predicates have (`.`, `%`, `$`, `#`) and unexpected characters, kept out of
    /// `lex` so that its common path stays small.
    @inline(never)
    private mutating func lexRare(_ byte: UInt8, start: Int) throws(InvalidPredicateError) -> Token {
        switch byte {
        case UInt8(ascii: "."):
            if let next = peek(1), next.isASCIIDigit { return Token(kind: try readNumber(), span: span(from: start)) }
            position += 1
            return Token(kind: .symbol(.dot), span: span(from: start))
        case UInt8(ascii: "%"):
            formats.append(try readFormat())
            return Token(kind: .format(index: formats.count - 1), span: span(from: start))
        case UInt8(ascii: "$"):
            position += 1
            guard skipWord() else { throw InvalidPredicateError("expected a variable name after '$'", at: span(from: start)) }
            return Token(kind: .variable, span: span(from: start))
        case UInt8(ascii: "#"):
            position += 1
            guard skipWord() else { throw InvalidPredicateError("expected a key after '#'", at: span(from: start)) }
            return Token(kind: .word(escaped: true), span: span(from: start))
        default:
            let character = String(decoding: bytes[start..<min(bytes.count, start + Lexer.scalarLength(byte))], as: UTF8.self)
            throw InvalidPredicateError("unexpected character '\(character)'", at: SourceSpan(start: start, end: start + 1))
        }
    }

    /// The symbol at the current position and its length in bytes, longest match first (`<=` before `<`).
    private func symbol() -> (Symbol, Int)? {
        guard let byte = peek() else { return nil }
        let next = peek(1)
        switch (byte, next) {
        case (UInt8(ascii: "="), UInt8(ascii: "=")): return (.equalEqual, 2)
        case (UInt8(ascii: "="), UInt8(ascii: "<")): return (.equalLess, 2)
        case (UInt8(ascii: "="), UInt8(ascii: ">")): return (.equalGreater, 2)
        case (UInt8(ascii: "!"), UInt8(ascii: "=")): return (.notEqual, 2)
        case (UInt8(ascii: "<"), UInt8(ascii: ">")): return (.lessGreater, 2)
        case (UInt8(ascii: "<"), UInt8(ascii: "=")): return (.lessEqual, 2)
        case (UInt8(ascii: ">"), UInt8(ascii: "=")): return (.greaterEqual, 2)
        case (UInt8(ascii: "&"), UInt8(ascii: "&")): return (.andAnd, 2)
        case (UInt8(ascii: "|"), UInt8(ascii: "|")): return (.orOr, 2)
        default: break
        }
        let symbol: Symbol
        switch byte {
        case UInt8(ascii: "="): symbol = .equal
        case UInt8(ascii: "<"): symbol = .less
        case UInt8(ascii: ">"): symbol = .greater
        case UInt8(ascii: "!"): symbol = .bang
        case UInt8(ascii: "("): symbol = .openParen
        case UInt8(ascii: ")"): symbol = .closeParen
        case UInt8(ascii: "{"): symbol = .openBrace
        case UInt8(ascii: "}"): symbol = .closeBrace
        case UInt8(ascii: "["): symbol = .openBracket
        case UInt8(ascii: "]"): symbol = .closeBracket
        case UInt8(ascii: ","): symbol = .comma
        case UInt8(ascii: "-"): symbol = .minus
        case UInt8(ascii: "+"): symbol = .plus
        case UInt8(ascii: "*"): symbol = .star
        case UInt8(ascii: "/"): symbol = .slash
        case UInt8(ascii: ":"): symbol = .colon
        default: return nil
        }
        return (symbol, 1)
    }

    private static func scalarLength(_ lead: UInt8) -> Int {
        switch lead {
        case 0xF0...: 4
        case 0xE0...: 3
        case 0xC0...: 2
        default: 1
        }
    }

    /// The class of each byte: `word` for `[0-9A-Za-z_]`, `wordTail` for `$` (which a field name may
    /// hold, but not start with: a leading `$` is a variable), `space` for space, tab, LF and CR. A
    /// literal, so it is built into the binary (no lazy initialization); a test checks every entry.
    static let byteClasses: [UInt8] = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        2, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
        0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1,
        0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]
    /// For each first letter A...Z, a bit for each length some reserved word of that letter has.
    /// A literal like `byteClasses`; a test checks it against `Keyword.allCases`.
    static let keywordShapes: [UInt16] = [0x0008, 0x0480, 0x0100, 0x0000, 0x0100, 0x4120, 0x0000, 0x0000, 0x0004, 0x0000, 0x0000, 0x0010, 0x0080, 0x001C, 0x0004, 0x0000, 0x0000, 0x0000, 0x0110, 0x3010, 0x0000, 0x0000, 0x0000, 0x0000, 0x0008, 0x0000]

    static let word: UInt8 = 1
    static let space: UInt8 = 2
    static let wordTail: UInt8 = 4

    /// Whether `byte` continues a word: `[0-9A-Za-z_]`.
    @inline(__always) static func isWordByte(_ byte: UInt8) -> Bool {
        byteClasses.withUnsafeBufferPointer { $0[Int(byte)] & word != 0 }
    }

    /// Whether `byte` continues a word after its first: `[0-9A-Za-z_$]`.
    @inline(__always) static func isWordTailByte(_ byte: UInt8) -> Bool {
        byteClasses.withUnsafeBufferPointer { $0[Int(byte)] & (word | wordTail) != 0 }
    }

    /// Skips a word (a word byte, then word bytes or `$`); false when there was none.
    private mutating func skipWord() -> Bool {
        let start = position
        var index = start
        guard index < bytes.count, Lexer.isWordByte(bytes[index]) else { return false }
        while index < bytes.count, Lexer.isWordTailByte(bytes[index]) { index &+= 1 }
        position = index
        return index > start
    }

    /// Skips a word, extended to a selector name (`distanceToLocation:fromLocation:`) when colons
    /// follow, and returns the reserved word it spells, if any.
    private mutating func scanSelectorOrWord() -> Keyword? {
        let start = position
        if peek() == UInt8(ascii: "@") { position += 1 }
        _ = skipWord()
        let wordEnd = position
        // A selector continues while `word:` pieces follow directly.
        while peek() == UInt8(ascii: ":") {
            let save = position
            position += 1
            if peek() == UInt8(ascii: "(") { break }
            if !skipWord() || peek() != UInt8(ascii: ":") {
                position = save
                break
            }
        }
        let count = wordEnd - start
        guard position == wordEnd, (2...14).contains(count) else { return nil }
        // Most words are field names that no reserved word shares a first letter and length with.
        let letter = Int((bytes[start] | 0x20) &- UInt8(ascii: "a"))
        guard letter >= 0, letter < 26, Lexer.keywordShapes.withUnsafeBufferPointer({ $0[letter] }) & (1 << count) != 0 else { return nil }
        let (low, high) = packedUppercase(start, count)
        return Keyword(packed: low, high)
    }

    /// The `count` (at most 16) bytes at `start`, upper-cased by clearing bit 5 of each, little-endian
    /// in two words: how `Keyword(packed:)` matches a reserved word in any case. Digits and `_` pack
    /// to bytes no letter has, so a word holding one matches no reserved word.
    private func packedUppercase(_ start: Int, _ count: Int) -> (low: UInt64, high: UInt64) {
        let upper: UInt64 = 0xDFDF_DFDF_DFDF_DFDF
        if let base = bytes.baseAddress, start + 16 <= bytes.count {
            // Two loads and masks, where the text has 16 bytes to read.
            let raw = UnsafeRawPointer(base + start)
            let low = UInt64(littleEndian: raw.loadUnaligned(as: UInt64.self))
            let high = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            if count <= 8 {
                let keep: UInt64 = count == 8 ? ~0 : (1 &<< UInt64(count &* 8)) &- 1
                return (low & keep & upper, 0)
            }
            let keep: UInt64 = count == 16 ? ~0 : (1 &<< UInt64((count &- 8) &* 8)) &- 1
            return (low & upper, high & keep & upper)
        }
        var (low, high): (UInt64, UInt64) = (0, 0)
        for offset in 0..<min(count, 16) {
            let byte = UInt64(bytes[start + offset] & 0xDF)
            if offset < 8 { low |= byte &<< UInt64(offset &* 8) } else { high |= byte &<< UInt64((offset &- 8) &* 8) }
        }
        return (low, high)
    }

    /// Skips a string literal, checking its escapes; true when it has some (and needs decoding).
    private mutating func skipString(quote: UInt8) throws(InvalidPredicateError) -> Bool {
        var end = position + 1
        while end < bytes.count, bytes[end] != quote, bytes[end] != UInt8(ascii: "\\") { end += 1 }
        if end < bytes.count, bytes[end] == quote {
            position = end + 1
            return false
        }
        _ = try readString(quote: quote)
        return true
    }

    private mutating func readString(quote: UInt8) throws(InvalidPredicateError) -> String {
        let start = position
        position += 1
        var out: [UInt8] = []
        while let byte = peek() {
            position += 1
            if byte == quote {
                return String(decoding: out, as: UTF8.self)
            }
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                continue
            }
            guard let escape = peek() else { break }
            let escapeStart = position - 1
            position += 1
            switch escape {
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "0"): out.append(0x00)
            case UInt8(ascii: "\\"), UInt8(ascii: "'"), UInt8(ascii: "\""): out.append(escape)
            case UInt8(ascii: "u"):
                let scalar = try readUnicodeEscape(escapeStart: escapeStart)
                out.append(contentsOf: String(Character(scalar)).utf8)
            default:
                throw InvalidPredicateError(
                    "invalid escape '\\\(SourceText.printable(escape))' in string", at: SourceSpan(start: escapeStart, end: position))
            }
        }
        throw InvalidPredicateError("unterminated string", at: SourceSpan(start: start, end: bytes.count))
    }

    private mutating func readHex4(escapeStart: Int) throws(InvalidPredicateError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek(), let digit = SourceText.hexValue(byte) else {
                throw InvalidPredicateError("\\u needs four hex digits", at: SourceSpan(start: escapeStart, end: position))
            }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    private mutating func readUnicodeEscape(escapeStart: Int) throws(InvalidPredicateError) -> Unicode.Scalar {
        let first = try readHex4(escapeStart: escapeStart)
        if (0xD800...0xDBFF).contains(first), peek() == UInt8(ascii: "\\"), peek(1) == UInt8(ascii: "u") {
            position += 2
            let second = try readHex4(escapeStart: escapeStart)
            if (0xDC00...0xDFFF).contains(second), let scalar = Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)) {
                return scalar
            }
        }
        guard let scalar = Unicode.Scalar(first) else {
            throw InvalidPredicateError("\\u escape is an unpaired surrogate", at: SourceSpan(start: escapeStart, end: position))
        }
        return scalar
    }

    private mutating func readNumber() throws(InvalidPredicateError) -> Token.Kind {
        let start = position
        if peek() == UInt8(ascii: "0"), let radixByte = peek(1), let radix = Lexer.radix(radixByte) {
            position += 2
            let digitsStart = position
            while let byte = peek(), byte.isASCIILetter || byte.isASCIIDigit { position += 1 }
            let digits = String(decoding: bytes[digitsStart..<position], as: UTF8.self)
            guard let value = UInt64(digits, radix: radix) else {
                throw InvalidPredicateError("invalid base-\(radix) number", at: span(from: start))
            }
            return .integer(value)
        }
        var isInteger = true
        // Decimal integers are read as they are scanned. Nineteen digits always fit in a UInt64,
        // so the arithmetic needs no overflow checks; longer ones take the text path below.
        var magnitude: UInt64 = 0
        var index = position
        while index < bytes.count {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { break }
            magnitude = magnitude &* 10 &+ UInt64(digit)
            index &+= 1
        }
        let overflow = index - position > 19
        position = index
        if peek() == UInt8(ascii: "."), peek(1)?.isASCIIDigit ?? false {
            isInteger = false
            position += 1
            while let byte = peek(), byte.isASCIIDigit { position += 1 }
        }
        if let e = peek(), e | 0x20 == UInt8(ascii: "e") {
            var offset = 1
            if peek(1) == UInt8(ascii: "+") || peek(1) == UInt8(ascii: "-") { offset = 2 }
            if peek(offset)?.isASCIIDigit ?? false {
                isInteger = false
                position += offset
                while let byte = peek(), byte.isASCIIDigit { position += 1 }
            }
        }
        if let byte = peek(), byte.isASCIILetter || byte == UInt8(ascii: "_") {
            throw InvalidPredicateError("invalid number", at: SourceSpan(start: start, end: position + 1))
        }
        if isInteger, !overflow { return .integer(magnitude) }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        if isInteger {
            guard let value = UInt64(text) else {
                throw InvalidPredicateError("integer \(text) is outside the INT64 range", at: span(from: start))
            }
            return .integer(value)
        }
        guard let value = Double(text), value.isFinite else {
            throw InvalidPredicateError("number \(text) is out of range", at: span(from: start))
        }
        return .double(value)
    }

    /// The radix a `0x`, `0o` or `0b` prefix letter names, in either case.
    private static func radix(_ letter: UInt8) -> Int? {
        switch letter | 0x20 {
        case UInt8(ascii: "x"): 16
        case UInt8(ascii: "o"): 8
        case UInt8(ascii: "b"): 2
        default: nil
        }
    }

    private mutating func readFormat() throws(InvalidPredicateError) -> FormatArgument {
        let start = position
        position += 1
        var explicitPosition: Int?
        let digitsStart = position
        while let byte = peek(), byte.isASCIIDigit { position += 1 }
        if position > digitsStart {
            guard peek() == UInt8(ascii: "$"), let number = Int(String(decoding: bytes[digitsStart..<position], as: UTF8.self)),
                  number >= 1, number <= 10_000
            else { throw InvalidPredicateError("invalid positional format specifier", at: span(from: start)) }
            explicitPosition = number
            position += 1
        }
        var kind: FormatArgument.Kind
        switch peek() {
        case UInt8(ascii: "@"): kind = .object
        case UInt8(ascii: "K"): kind = .keyPath
        case UInt8(ascii: "d"), UInt8(ascii: "i"): kind = .integer
        case UInt8(ascii: "f"): kind = .double
        case UInt8(ascii: "s"): kind = .string
        case UInt8(ascii: "l"):
            guard peek(1) == UInt8(ascii: "d") || peek(1) == UInt8(ascii: "i") || peek(1) == UInt8(ascii: "f") else { fallthrough }
            position += 1
            kind = peek() == UInt8(ascii: "f") ? .double : .integer
        default:
            throw InvalidPredicateError("unknown format specifier (expected %@, %K, %d, %i, %ld, %f or %s)", at: SourceSpan(start: start, end: position + 1))
        }
        position += 1
        let index: Int
        if let explicitPosition {
            index = explicitPosition - 1
        } else {
            index = sequentialArguments
            sequentialArguments += 1
        }
        let spelling = String(decoding: bytes[start..<position], as: UTF8.self)
        return FormatArgument(kind: kind, index: index, position: explicitPosition, spelling: spelling)
    }
}
