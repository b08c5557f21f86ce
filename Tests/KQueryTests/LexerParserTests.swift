import Testing
@testable import KQuery

@Suite("Lexer and parser")
struct LexerParserTests {
    /// Every operator spelling parses to its operator.
    @Test(arguments: [
        ("a == 1", ComparisonOperator.equal), ("a = 1", .equal), ("a != 1", .notEqual), ("a <> 1", .notEqual),
        ("a < 1", .lessThan), ("a <= 1", .lessThanOrEqual), ("a =< 1", .lessThanOrEqual), ("a > 1", .greaterThan),
        ("a >= 1", .greaterThanOrEqual), ("a => 1", .greaterThanOrEqual), ("a BETWEEN {1, 2}", .between),
        ("a IN {1}", .in), ("a CONTAINS 1", .contains), ("a BEGINSWITH 'x'", .beginsWith), ("a ENDSWITH 'x'", .endsWith),
        ("a LIKE 'x'", .like), ("a MATCHES 'x'", .matches), ("a TOKENMATCHES 'x'", .tokenMatches),
        ("a between {1, 2}", .between), ("a in {1}", .in), ("a contains 1", .contains), ("a BeginsWith 'x'", .beginsWith),
    ])
    func operatorSpellings(text: String, op: ComparisonOperator) throws {
        guard case .comparison(let comparison) = try PredicateParser.parse(text) else {
            Issue.record("not a comparison: \(text)")
            return
        }
        #expect(comparison.op == op)
    }

    @Test(arguments: [
        ("a == 1 AND b == 2", "AND"), ("a == 1 && b == 2", "AND"), ("a == 1 and b == 2", "AND"),
        ("a == 1 OR b == 2", "OR"), ("a == 1 || b == 2", "OR"), ("a == 1 or b == 2", "OR"),
        ("NOT a == 1", "NOT"), ("!a == 1", "NOT"), ("not (a == 1)", "NOT"),
    ])
    func compoundSpellings(text: String, kind: String) throws {
        switch try PredicateParser.parse(text) {
        case .and(let operands, _): #expect(kind == "AND" && operands.count == 2)
        case .or(let operands, _): #expect(kind == "OR" && operands.count == 2)
        case .not: #expect(kind == "NOT")
        default: Issue.record("unexpected shape for \(text)")
        }
    }

    /// AND binds tighter than OR; NOT tighter than AND.
    @Test func precedence() throws {
        let parsed = try PredicateParser.parse("a == 1 OR b == 2 AND NOT c == 3")
        guard case .or(let operands, _) = parsed, case .and(let right, _) = operands[1], case .not = right[1] else {
            Issue.record("wrong precedence: \(parsed)")
            return
        }
    }

    /// Constants: every literal form and the value it denotes.
    @Test(arguments: [
        ("'text'", Constant.value(.string("text"))), ("\"text\"", .value(.string("text"))),
        ("'it\\'s'", .value(.string("it's"))), ("\"a\\\"b\"", .value(.string("a\"b"))), ("'a\\\\b'", .value(.string("a\\b"))),
        ("'a\\nb\\tc'", .value(.string("a\nb\tc"))), ("'\\u00e9'", .value(.string("é"))),
        ("'\\uD83D\\uDE00'", .value(.string("😀"))), ("'mixed \"quotes\"'", .value(.string("mixed \"quotes\""))),
        ("42", .value(.int64(42))), ("-42", .value(.int64(-42))), ("0x1F", .value(.int64(31))), ("0o17", .value(.int64(15))),
        ("0b101", .value(.int64(5))), ("9223372036854775807", .value(.int64(.max))), ("-9223372036854775808", .value(.int64(.min))),
        ("9007199254740993", .value(.int64(9_007_199_254_740_993))),
        // Twenty digits and more leave the fast digit loop: still exact when they fit.
        ("00000000000000000001", .value(.int64(1))), ("00009223372036854775807", .value(.int64(.max))),
        ("-00009223372036854775808", .value(.int64(.min))), ("1234567890123456789", .value(.int64(1_234_567_890_123_456_789))),
        ("4.5", .value(.double(4.5))), ("-0.25", .value(.double(-0.25))), ("1e3", .value(.double(1000))), ("2.5E-2", .value(.double(0.025))),
        (".5", .value(.double(0.5))), ("25.0", .value(.double(25))),
        ("nil", .null), ("NULL", .null), ("TRUE", .bool(true)), ("yes", .bool(true)), ("FALSE", .bool(false)), ("NO", .bool(false)),
        ("date(\"2024-05-01T12:00:00Z\")", .value(.timestamp(1_714_564_800_000))),
        ("date('2024-05-01')", .value(.timestamp(1_714_521_600_000))),
        ("date(\"2024-05-01T14:00:00.5+02:00\")", .value(.timestamp(1_714_564_800_500))),
        ("CAST(726000000, \"NSDate\")", .value(.timestamp(1_704_307_200_000))),
        ("cast('0', \"NSDate\")", .value(.timestamp(978_307_200_000))),
        ("location(37.7833, -122.4042)", .value(.location(Location(latitude: 37.7833, longitude: -122.4042)))),
        ("reference(\"r1\")", .value(.reference(Reference(recordID: RecordID(recordName: "r1"))))),
        ("recordID(\"r1\", \"Z\", \"_u\")", .value(.reference(Reference(recordID: RecordID(recordName: "r1", zoneID: ZoneID(zoneName: "Z", ownerName: "_u")))))),
    ])
    func constants(text: String, expected: Constant) throws {
        guard case .comparison(let comparison) = try PredicateParser.parse("f == " + text),
              case .constant(let constant, _) = comparison.right
        else {
            Issue.record("no constant in \(text)")
            return
        }
        #expect(constant == expected)
    }

    @Test(arguments: [
        ("%@", FormatArgument.Kind.object, 0), ("%K", .keyPath, 0), ("%d", .integer, 0), ("%i", .integer, 0), ("%ld", .integer, 0),
        ("%f", .double, 0), ("%lf", .double, 0), ("%s", .string, 0), ("%2$@", .object, 1),
    ])
    func formatArguments(text: String, kind: FormatArgument.Kind, index: Int) throws {
        guard case .comparison(let comparison) = try PredicateParser.parse("f == " + text),
              case .argument(let argument, _) = comparison.right
        else {
            Issue.record("no argument in \(text)")
            return
        }
        #expect(argument.kind == kind)
        #expect(argument.index == index)
        #expect(argument.spelling == text)
    }

    @Test func keyPathsAndEscapes() throws {
        guard case .comparison(let c1) = try PredicateParser.parse("#in == 1"), case .keyPath("in", _) = c1.left else {
            Issue.record("escaped keyword")
            return
        }
        guard case .comparison(let c2) = try PredicateParser.parse("chef.name == 1"), case .keyPath("chef.name", _) = c2.left else {
            Issue.record("dotted key path")
            return
        }
        guard case .comparison(let c3) = try PredicateParser.parse("distanceToLocation:fromLocation:(loc, location(1, 2)) < 5"),
              case .function("distanceToLocation:fromLocation:", let arguments, _) = c3.left
        else {
            Issue.record("selector function")
            return
        }
        #expect(arguments.count == 2)
    }

    /// Parse errors: message fragment and the 1-based column the caret must point at.
    @Test(arguments: [
        ("seats >", "expected an expression", 8),
        ("name == \"open", "unterminated string", 9),
        ("(seats > 1", "expected ')'", 11),
        ("seats > 1)", "unexpected ')'", 10),
        ("seats + 1 > 2", "arithmetic", 7),
        ("seats ~ 3", "unexpected character '~'", 7),
        ("seats > 99999999999999999999", "INT64 range", 9),
        ("seats > 18446744073709551616", "INT64 range", 9), ("seats > 9223372036854775808", "INT64 range", 9),
        ("seats > -9223372036854775809", "INT64 range", 9),
        ("name == 'x\\q'", "invalid escape", 11),
        ("seats ==[z] 3", "unknown comparison option", 10),
        ("", "empty predicate", 1),
        ("tags[0] == 1", "indexed key paths", 5),
        ("SUBQUERY(x, $y, $y == 1).@count > 0", "Unsupported expression: SUBQUERY", 1),
        ("in == 1", "keyword", 1),
        ("opened < date(\"2023-02-30\")", "not an ISO-8601 date", 15),
        ("l == location(91, 0)", "latitude", 15),
    ])
    func parseErrors(text: String, fragment: String, column: Int) {
        do {
            _ = try PredicateParser.parse(text)
            Issue.record("parsed: \(text)")
        } catch {
            #expect(error.message.contains(fragment), "\(error.message)")
            let rendered = error.rendered(in: text)
            #expect(rendered.contains("1:\(column):"), "\(rendered)")
            #expect(rendered.contains("^"))
        }
    }

    /// Nesting far past the limit ends in an error, not a stack overflow.
    @Test func hostileNesting() {
        let parentheses = String(repeating: "(", count: 100_000) + "a == 1" + String(repeating: ")", count: 100_000)
        #expect(throws: InvalidPredicateError.self) { try PredicateParser.parse(parentheses) }
        let nots = String(repeating: "NOT ", count: 50_000) + "a == 1"
        #expect(throws: InvalidPredicateError.self) { try PredicateParser.parse(nots) }
        let braces = "a IN " + String(repeating: "{", count: 100_000)
        #expect(throws: InvalidPredicateError.self) { try PredicateParser.parse(braces) }
        let huge = "a == '" + String(repeating: "x", count: 300_000) + "'"
        #expect(throws: InvalidPredicateError.self) { try PredicateParser.parse(huge) }
    }

    /// Printing never needs more depth than parsing did: a chain of NOTs at the limit re-parses.
    @Test func notChainAtTheLimitRoundTrips() throws {
        let depth = PredicateParser.Limits.default.maximumDepth
        for text in [String(repeating: "!", count: depth) + "a == 1", String(repeating: "NOT (", count: depth) + "a == 1" + String(repeating: ")", count: depth)] {
            let parsed = try PredicateParser.parse(text)
            #expect(try PredicateParser.parse(parsed.canonicalText) == parsed)
        }
    }

    /// Nesting up to the limit parses.
    @Test func nestingWithinLimit() throws {
        let depth = PredicateParser.Limits.default.maximumDepth
        let text = String(repeating: "(", count: depth) + "a == 1" + String(repeating: ")", count: depth)
        #expect(try PredicateParser.parse(text) == PredicateParser.parse("a == 1"))
    }

    @Test func aggregateLimit() {
        let elements = (0...10_000).map(String.init).joined(separator: ",")
        #expect(throws: InvalidPredicateError.self) { try PredicateParser.parse("a IN {\(elements)}") }
    }

    /// Every operator in the table has an entry with at least one spelling, and every keyword
    /// spelling in the table is a reserved word the lexer knows.
    @Test func operatorTableIsComplete() {
        for op in ComparisonOperator.allCases {
            #expect(ComparisonOperator.table[op] != nil, "\(op)")
            #expect(!(ComparisonOperator.table[op]?.spellings.isEmpty ?? true), "\(op)")
            #expect(op.info.canonical == ComparisonOperator.table[op]?.canonical)
            for spelling in op.info.spellings where spelling.first?.isLetter ?? false {
                #expect(Keyword(rawValue: spelling)?.comparisonOperator == op, "\(spelling)")
            }
            for spelling in op.info.spellings where !(spelling.first?.isLetter ?? false) {
                #expect(Symbol(rawValue: spelling)?.comparisonOperator == op, "\(spelling)")
            }
        }
        // And the other way: a symbol or keyword names an operator only when the table spells it so.
        for symbol in Symbol.allCases {
            let spelledBy = ComparisonOperator.allCases.first { $0.info.spellings.contains(symbol.rawValue) }
            #expect(symbol.comparisonOperator == spelledBy, "\(symbol.rawValue)")
        }
        for keyword in Keyword.allCases {
            let spelledBy = ComparisonOperator.allCases.first { $0.info.spellings.contains(keyword.rawValue) }
            #expect(keyword.comparisonOperator == spelledBy, "\(keyword.rawValue)")
        }
    }

    /// Every reserved word is recognised in any case, and only as a whole word: a digit, `_`, `@`
    /// or selector colon makes it a key path. (Reserved words are matched as packed integers.)
    @Test(arguments: Keyword.allCases)
    func reservedWordsInAnyCase(keyword: Keyword) throws {
        let word = keyword.rawValue
        let mixed = String(word.enumerated().map { $0.offset.isMultiple(of: 2) ? Character($0.element.lowercased()) : $0.element })
        for spelling in [word, word.lowercased(), mixed] {
            #expect(try lexedKeyword(spelling) == keyword, "\(spelling)")
        }
        for spelling in [word + "1", word + "_", word.lowercased() + "x", "x" + word, "_" + word, "@" + word, String(word.dropLast())] {
            #expect(try lexedKeyword(spelling) != keyword, "\(spelling)")
        }
        // At the very end of the text, where the lexer cannot read 16 bytes ahead, and far from it.
        #expect(try lexedKeyword(word, padding: 0) == keyword)
        #expect(try lexedKeyword(word, padding: 40) == keyword)
    }

    /// The lexer's literal tables say what their definitions say, entry by entry.
    @Test func lexerTablesMatchTheirDefinitions() {
        #expect(Lexer.byteClasses.count == 256)
        for byte in 0...255 {
            let character = UInt8(byte)
            let isWord = character.isASCIILetter || character.isASCIIDigit || character == UInt8(ascii: "_")
            let isSpace = [0x20, 0x09, 0x0A, 0x0D].contains(character)
            let isTail = character == UInt8(ascii: "$")
            #expect(Lexer.byteClasses[byte] == (isWord ? Lexer.word : 0) | (isSpace ? Lexer.space : 0) | (isTail ? Lexer.wordTail : 0), "byte \(byte)")
            #expect(Lexer.isWordByte(character) == isWord)
            #expect(Lexer.isWordTailByte(character) == (isWord || isTail))
        }
        var shapes = [UInt16](repeating: 0, count: 26)
        for keyword in Keyword.allCases {
            let word = Array(keyword.rawValue.utf8)
            shapes[Int(word[0] - UInt8(ascii: "A"))] |= 1 << word.count
        }
        #expect(Lexer.keywordShapes == shapes)
    }

    private func lexedKeyword(_ text: String, padding: Int = 1) throws -> Keyword? {
        let source = text + String(repeating: " ", count: padding)
        return try Array(source.utf8).withUnsafeBufferPointer { bytes throws(InvalidPredicateError) in
            var lexer = Lexer(bytes)
            let token = try lexer.next()
            return token.span.end == text.utf8.count ? token.keyword : nil
        }
    }

    /// A comparison is a value: setting a field of a copy leaves the original as it was.
    @Test func comparisonsAreValues() throws {
        guard case .comparison(let original) = try PredicateParser.parse("price > 5") else {
            Issue.record("not a comparison")
            return
        }
        var copy = original
        copy.op = .lessThan
        copy.right = .constant(.value(.int64(7)), .synthesized)
        copy.modifier = .any
        #expect(original.op == .greaterThan && original.modifier == .direct)
        #expect(original.right == .constant(.value(.int64(5)), .synthesized))
        #expect(copy.op == .lessThan && copy.right == .constant(.value(.int64(7)), .synthesized) && copy.left == original.left)
        #expect(copy != original)
        copy.op = .greaterThan
        copy.right = original.right
        copy.modifier = .direct
        #expect(copy == original && copy.hashValue == original.hashValue)
    }
}
