import Testing
@testable import KQuery

/// The scalars of a string as hex, so tests see scalar differences that `String ==` (canonical
/// equivalence) would hide.
private func scalars(_ s: String) -> [String] {
    s.unicodeScalars.map { "U+" + String($0.value, radix: 16, uppercase: true) }
}

// MARK: - TextFolding

struct FoldCase: Sendable, CustomTestStringConvertible {
    var input: String
    var c: Bool
    var d: Bool
    var expected: String
    init(_ input: String, c: Bool, d: Bool, _ expected: String) {
        self.input = input
        self.c = c
        self.d = d
        self.expected = expected
    }
    var testDescription: String { "fold(\(input.debugDescription), c: \(c), d: \(d))" }
}

@Suite struct TextFoldingTests {
    static let cases: [FoldCase] = [
        // ASCII
        FoldCase("", c: true, d: true, ""),
        FoldCase("Hello World", c: false, d: false, "Hello World"),
        FoldCase("Hello World", c: true, d: false, "hello world"),
        FoldCase("Hello World", c: false, d: true, "Hello World"),
        FoldCase("Hello World", c: true, d: true, "hello world"),
        FoldCase("already folded 123 !?*", c: true, d: true, "already folded 123 !?*"),
        FoldCase("A-Z[]^_`@", c: true, d: false, "a-z[]^_`@"),
        // Latin with diacritics
        FoldCase("ÉLÉGANT", c: true, d: false, "élégant"),
        FoldCase("ÉLÉGANT", c: false, d: true, "ELEGANT"),
        FoldCase("ÉLÉGANT", c: true, d: true, "elegant"),
        FoldCase("naïve café", c: false, d: true, "naive cafe"),
        FoldCase("Crème Brûlée", c: true, d: true, "creme brulee"),
        FoldCase("Ångström Ærø Øre", c: true, d: true, "angstrom ærø øre"),  // æ, ø have no decomposition
        FoldCase("Ñandú", c: false, d: true, "Nandu"),
        FoldCase("Việt Nam", c: true, d: true, "viet nam"),
        FoldCase("e\u{301}cole", c: false, d: true, "ecole"),  // decomposed input
        FoldCase("e\u{301}cole", c: true, d: false, "e\u{301}cole"),  // no normalization without [d]
        FoldCase("\u{301}", c: false, d: true, ""),  // a lone mark
        FoldCase("\u{212B}", c: false, d: true, "A"),  // ANGSTROM SIGN
        FoldCase("\u{2126}", c: false, d: true, "\u{3A9}"),  // OHM SIGN -> GREEK CAPITAL OMEGA
        FoldCase("ﬁ", c: false, d: true, "ﬁ"),  // compatibility decompositions are not applied
        // Full case folding
        FoldCase("Straße", c: true, d: false, "strasse"),
        FoldCase("STRASSE", c: true, d: false, "strasse"),
        FoldCase("\u{1E9E}", c: true, d: false, "ss"),  // CAPITAL SHARP S
        FoldCase("ﬁ", c: true, d: false, "fi"),
        FoldCase("ΟΔΟΣ", c: true, d: false, "οδοσ"),
        FoldCase("οδος", c: true, d: false, "οδοσ"),  // final sigma
        FoldCase("ſ", c: true, d: false, "s"),  // long s
        FoldCase("\u{212A}", c: true, d: false, "k"),  // KELVIN SIGN
        FoldCase("İstanbul", c: true, d: false, "i\u{307}stanbul"),
        FoldCase("İstanbul", c: true, d: true, "istanbul"),
        FoldCase("ı", c: true, d: false, "ı"),  // dotless i folds to itself
        FoldCase("ǰ", c: true, d: false, "j\u{30C}"),
        FoldCase("ǰ", c: true, d: true, "j"),
        FoldCase("ΐ", c: true, d: true, "ι"),
        FoldCase("ᾳ", c: true, d: true, "α"),  // marks go before folding (as Foundation)
        FoldCase("Ꭰ", c: true, d: false, "Ꭰ"),  // Cherokee folds to upper case
        FoldCase("ꭰ", c: true, d: false, "Ꭰ"),
        FoldCase("МОСКВА Ёлка", c: true, d: false, "москва ёлка"),
        FoldCase("МОСКВА Ёлка", c: true, d: true, "москва елка"),
        FoldCase("𐐀", c: true, d: false, "𐐨"),  // Deseret, outside the BMP
        // Scripts without case or diacritics
        FoldCase("東京タワー", c: true, d: true, "東京タワー"),
        FoldCase("한국어 사전", c: true, d: true, "한국어 사전"),  // NFD splits Hangul; recomposed
        FoldCase("\u{1112}\u{1161}\u{11AB}", c: false, d: true, "한"),  // conjoining jamo compose
        FoldCase("I ❤️ wine 🍷", c: true, d: false, "i ❤️ wine 🍷"),
    ]

    @Test(arguments: cases)
    func fold(_ t: FoldCase) {
        let folded = TextFolding.fold(t.input, caseInsensitive: t.c, diacriticInsensitive: t.d)
        #expect(scalars(folded) == scalars(t.expected))
    }

    static let caseVariants: [String] = [
        "Élégant Wine Bar", "Straße", "ΟΔΥΣΣΕΥΣ", "Ölçek İğne", "Ǆemal", "ǅemal", "ǆemal", "ꭰꭱ", "Ꭰ Ꭱ",
        "ΐΰ", "Ŀŀ", "Ǳ", "ＡＢＣ", "𐐀𐐨",
    ]

    @Test(arguments: caseVariants)
    func caseVariantsFoldAlike(_ s: String) {
        let folded = TextFolding.fold(s, caseInsensitive: true, diacriticInsensitive: false)
        #expect(TextFolding.fold(s.uppercased(), caseInsensitive: true, diacriticInsensitive: false) == folded)
        #expect(TextFolding.fold(s.lowercased(), caseInsensitive: true, diacriticInsensitive: false) == folded)
        let cd = TextFolding.fold(s, caseInsensitive: true, diacriticInsensitive: true)
        #expect(TextFolding.fold(s.uppercased(), caseInsensitive: true, diacriticInsensitive: true) == cd)
    }

    @Test func foldingIsIdempotent() {
        for t in Self.cases {
            let once = TextFolding.fold(t.input, caseInsensitive: t.c, diacriticInsensitive: t.d)
            let twice = TextFolding.fold(once, caseInsensitive: t.c, diacriticInsensitive: t.d)
            #expect(scalars(twice) == scalars(once), "\(t.testDescription)")
        }
    }

    @Test func tableAndScalarPathsAgree() {
        // Scalars below U+2000 are folded through a table; it must agree with folding one at a time.
        for v in UInt32(0x80)..<0x2000 {
            guard let u = Unicode.Scalar(v) else { continue }
            for (c, d) in [(true, false), (false, true), (true, true)] {
                var out = FoldedText(capacity: 8, composeHangul: false)
                TextFolding.foldScalar(u, caseInsensitive: c, diacriticInsensitive: d, into: &out)
                let direct = String(decoding: out.finishBytes(), as: UTF8.self)
                let viaTable = TextFolding.fold(String(u), caseInsensitive: c, diacriticInsensitive: d)
                #expect(scalars(viaTable) == scalars(direct), "U+\(String(v, radix: 16)) c: \(c) d: \(d)")
            }
        }
    }
}

// MARK: - Tokenizer

struct TokenCase: Sendable, CustomTestStringConvertible {
    var text: String
    var expected: [String]
    init(_ text: String, _ expected: [String]) {
        self.text = text
        self.expected = expected
    }
    var testDescription: String { text.debugDescription }
}

@Suite struct TokenizerTests {
    static let cases: [TokenCase] = [
        TokenCase("Élégant wine-bar, 18 seats", ["elegant", "wine", "bar", "18", "seats"]),
        TokenCase("The art of the session", ["art", "session"]),
        TokenCase("naïve café", ["naive", "cafe"]),
        TokenCase("1848", ["1848"]),
        TokenCase("sessions", ["sessions"]),
        TokenCase("don't", ["don", "t"]),
        TokenCase("", []),
        TokenCase("  ,;.!? -- ", []),
        // Stop words at both ends, in any case, and after folding.
        TokenCase("the wine of the", ["wine"]),
        TokenCase("THE Wine, the WINE", ["wine"]),
        TokenCase("A Tale Of Two Cities", ["tale", "two", "cities"]),
        TokenCase("Thé", []),  // folds to "the"
        TokenCase("their theirs there's", ["theirs", "s"]),
        TokenCase("a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with", []),
        // Separators
        TokenCase("foo_bar foo.bar foo/bar", ["foo", "bar"]),
        TokenCase("3.14 and 2,718", ["3", "14", "2", "718"]),
        TokenCase("e-mail: jane.doe@example.com", ["e", "mail", "jane", "doe", "example", "com"]),
        TokenCase("I ❤️ wine 🍷!", ["i", "wine"]),  // emoji (and their variation selectors) separate
        TokenCase("wine🍷bar", ["wine", "bar"]),
        TokenCase("tab\tnew\nline\u{A0}nbsp", ["tab", "new", "line", "nbsp"]),
        // Unicode letters, digits and marks
        TokenCase("Straße STRASSE", ["strasse"]),
        TokenCase("e\u{301}cole École", ["ecole"]),
        TokenCase("ÀÉÎÕÜ", ["aeiou"]),
        TokenCase("café-crème brûlée", ["cafe", "creme", "brulee"]),
        TokenCase("Москва — столица", ["москва", "столица"]),
        TokenCase("東京タワー 東京", ["東京タワー", "東京"]),  // CJK runs are single tokens
        TokenCase("한국어 사전", ["한국어", "사전"]),
        TokenCase("١٢٣ ٣", ["١٢٣", "٣"]),  // Arabic-Indic digits
        TokenCase("x² Ⅻ", ["x²", "ⅻ"]),  // N* (No, Nl) are word characters
        TokenCase("\u{301} lone mark", ["lone", "mark"]),  // a run that folds to nothing
        TokenCase("wine wine WINE Wine wïne", ["wine"]),
    ]

    @Test(arguments: cases)
    func tokens(_ t: TokenCase) {
        let tokens = Tokenizer.tokens(of: t.text)
        #expect(tokens.map(scalars) == t.expected.map { scalars(TextFolding.fold($0, caseInsensitive: true, diacriticInsensitive: true)) })
        #expect(tokens == t.expected)
    }

    @Test func stopWordsAreExactlyTheList() {
        let list = "a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with"
        #expect(Tokenizer.stopWords == Set(list.split(separator: " ").map(String.init)))
        for word in Tokenizer.stopWords {
            #expect(Tokenizer.tokens(of: word).isEmpty)
            #expect(Tokenizer.tokens(of: word.uppercased()).isEmpty)
            #expect(Tokenizer.tokens(of: "x\(word)").count == 1)  // not a stop word any more
        }
    }

    @Test func manyTokensKeepFirstOccurrenceOrder() {
        // Enough tokens to switch duplicate detection from linear scanning to a set.
        let words = (0..<100).map { "w\($0)" }
        let text = (words + words.reversed() + words).joined(separator: " ")
        #expect(Tokenizer.tokens(of: text) == words)
    }

    @Test func addTokensUnionsFields() {
        var set: Set<String> = []
        Tokenizer.addTokens(of: "Élégant wine-bar", to: &set)
        Tokenizer.addTokens(of: "The WINE list of the bar", to: &set)
        Tokenizer.addTokens(of: "", to: &set)
        #expect(set == ["elegant", "wine", "bar", "list"])
        let copy = set
        Tokenizer.addTokens(of: "naïve", to: &set)
        #expect(copy == ["elegant", "wine", "bar", "list"])  // value semantics
        #expect(set == ["elegant", "wine", "bar", "list", "naive"])
    }

    @Test func tokensAgreeWithAddTokens() {
        for t in Self.cases {
            var set: Set<String> = []
            Tokenizer.addTokens(of: t.text, to: &set)
            #expect(set == Set(Tokenizer.tokens(of: t.text)))
        }
    }
}

// MARK: - RegularExpression

struct RegexCase: Sendable, CustomTestStringConvertible {
    var subject: String
    var pattern: String
    var caseInsensitive: Bool
    var expected: Bool
    init(_ subject: String, _ pattern: String, caseInsensitive: Bool = false, _ expected: Bool) {
        self.subject = subject
        self.pattern = pattern
        self.caseInsensitive = caseInsensitive
        self.expected = expected
    }
    var testDescription: String {
        "\(subject.debugDescription) MATCHES\(caseInsensitive ? "[c]" : "") \(pattern.debugDescription)"
    }
}

@Suite struct RegularExpressionTests {
    static let cases: [RegexCase] = [
        // Whole-string anchoring
        RegexCase("abc", "b", false),
        RegexCase("abc", "a.c", true),
        RegexCase("abc", "abc", true),
        RegexCase("abcd", "abc", false),
        RegexCase("xabc", "abc", false),
        RegexCase("abc\n", "abc", false),  // strictly the end, not before a final newline
        RegexCase("ab", "a|b", false),  // anchoring applies to every alternative
        RegexCase("b", "a|b", true),
        RegexCase("abc", ".*b.*", true),
        RegexCase("abc", "^abc$", true),
        RegexCase("", "", true),
        RegexCase("a", "", false),
        RegexCase("", "a*", true),
        RegexCase("abc", "(?x) a b c  # extended mode comment", true),
        // Case
        RegexCase("ABC", "abc", false),
        RegexCase("ABC", "abc", caseInsensitive: true, true),
        RegexCase("ÉLAN", "élan", caseInsensitive: true, true),
        RegexCase("ÉLAN", "élan", false),
        RegexCase("ΣΊΣΥΦΟΣ", "σίσυφος", caseInsensitive: true, true),
        RegexCase("ABC", "(?i)abc", true),
        // Unicode classes (UTF + UCP)
        RegexCase("é", "\\w", true),
        RegexCase("café", "\\w+", true),
        RegexCase("naïve café", "\\w+ \\w+", true),
        RegexCase("٣", "\\d", true),
        RegexCase("é", ".", true),  // one scalar, not one byte
        RegexCase("😀", ".", true),
        RegexCase("日本語", ".{3}", true),
        RegexCase("Ελλάδα", "\\p{Greek}+", true),
        RegexCase("Straße", "[[:alpha:]]+", true),
        RegexCase("wine bar", "\\bwine\\b.*", true),
        RegexCase("18 seats", "[0-9]+ seats?", true),
        RegexCase("john@example.com", "[^@]+@[^@]+\\.[a-z]{2,}", true),
    ]

    @Test(arguments: cases)
    func matches(_ t: RegexCase) throws {
        let re = try RegularExpression(pattern: t.pattern, caseInsensitive: t.caseInsensitive)
        #expect(re.matches(t.subject) == t.expected)
    }

    struct InvalidCase: Sendable, CustomTestStringConvertible {
        var pattern: String
        var offset: Int
        var testDescription: String { pattern.debugDescription }
    }

    static let invalid: [InvalidCase] = [
        InvalidCase(pattern: "a(b", offset: 3),
        InvalidCase(pattern: "ab)", offset: 2),
        InvalidCase(pattern: "[z-a]", offset: 3),
        InvalidCase(pattern: "a{2,1}", offset: 5),
        InvalidCase(pattern: "x**", offset: 2),
        InvalidCase(pattern: "\\", offset: 1),
        InvalidCase(pattern: "é(", offset: 3),  // offsets are in UTF-8 bytes
        InvalidCase(pattern: "[[:foo:]]", offset: 3),
        InvalidCase(pattern: "\\C", offset: 2),  // single code units are refused
    ]

    @Test(arguments: invalid)
    func invalidPatternReportsOffset(_ t: InvalidCase) {
        do {
            _ = try RegularExpression(pattern: t.pattern)
            Issue.record("\(t.pattern) compiled")
        } catch {
            #expect(error.offset == t.offset)
            #expect(!error.message.isEmpty)
        }
    }

    @Test func overlongPatternIsRefused() throws {
        _ = try RegularExpression(pattern: String(repeating: "a", count: RegularExpression.maximumPatternLength))
        #expect(throws: RegularExpressionError.self) {
            try RegularExpression(pattern: String(repeating: "a", count: RegularExpression.maximumPatternLength + 1))
        }
    }

    @Test(arguments: [
        ("(a+)+$", String(repeating: "a", count: 60) + "b"),
        ("(a|aa)+$", String(repeating: "a", count: 60) + "b"),
        ("(.*a){20}", String(repeating: "a", count: 60) + "b"),
        ("(*NO_JIT)(a+)+$", String(repeating: "a", count: 60) + "b"),  // the interpreter is bounded too
        ("(a+)+$", String(repeating: "a", count: 5000) + "b"),
    ])
    func catastrophicBacktrackingIsBounded(_ pattern: String, _ subject: String) throws {
        let re = try RegularExpression(pattern: pattern)
        #expect(re.matches(subject) == false)
    }

    @Test func deepBacktrackingOnLongSubject() throws {
        // Needs more than the JIT's default 32 KiB stack.
        let re = try RegularExpression(pattern: "(a|b)*")
        #expect(re.matches(String(repeating: "ab", count: 50_000)))
        #expect(!re.matches(String(repeating: "ab", count: 50_000) + "c"))
    }

    @Test func concurrentUse() async throws {
        let re = try RegularExpression(pattern: "(\\w+) (wine|beer) bar", caseInsensitive: true)
        let subjects = ["Élégant wine bar", "cheap BEER bar", "wine bar", "a café", "", "élégant wine bars"]
        let expected = subjects.map { re.matches($0) }
        #expect(expected == [true, true, false, false, false, false])
        let failures = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var failures = 0
                    for i in 0..<2_000 {
                        let k = (i + task) % subjects.count
                        if re.matches(subjects[k]) != expected[k] { failures += 1 }
                    }
                    return failures
                }
            }
            return await group.reduce(0, +)
        }
        #expect(failures == 0)
    }
}

// MARK: - LikePattern

struct LikeCase: Sendable, CustomTestStringConvertible {
    var subject: String
    var pattern: String
    var c: Bool
    var d: Bool
    var expected: Bool
    init(_ subject: String, _ pattern: String, c: Bool = false, d: Bool = false, _ expected: Bool) {
        self.subject = subject
        self.pattern = pattern
        self.c = c
        self.d = d
        self.expected = expected
    }
    var testDescription: String {
        let options = c || d ? "[\(c ? "c" : "")\(d ? "d" : "")]" : ""
        return "\(subject.debugDescription) LIKE\(options) \(pattern.debugDescription)"
    }
}

@Suite struct LikePatternTests {
    static let cases: [LikeCase] = [
        // ?
        LikeCase("abc", "a?c", true),
        LikeCase("abbc", "a?c", false),
        LikeCase("ac", "a?c", false),
        LikeCase("abc", "???", true),
        LikeCase("ab", "???", false),
        LikeCase("é", "?", true),  // one scalar
        LikeCase("e\u{301}", "?", false),  // two scalars
        LikeCase("e\u{301}", "?", d: true, true),
        LikeCase("日本語", "日?語", true),
        LikeCase("😀x", "?x", true),
        // *
        LikeCase("abc", "a*", true),
        LikeCase("a", "a*", true),
        LikeCase("ba", "a*", false),
        LikeCase("abc", "*c", true),
        LikeCase("abc", "*b*", true),
        LikeCase("abc", "*d*", false),
        LikeCase("", "*", true),
        LikeCase("anything at all", "*", true),
        LikeCase("abc", "**", true),
        LikeCase("abc", "a**c", true),
        LikeCase("abcabc", "*abc", true),
        LikeCase("abcab", "*abc", false),
        LikeCase("abab", "ab*ab", true),
        LikeCase("ab", "ab*ab", false),  // prefix and suffix may not overlap
        LikeCase("aba", "ab*ba", false),
        LikeCase("xaybz", "*a?b*", true),
        LikeCase("xaybz", "*a?c*", false),
        LikeCase("mississippi", "m*iss*ppi", true),
        LikeCase("mississippi", "m*is?is*i", true),
        LikeCase("日本語", "*?語", true),
        LikeCase("語", "*?語", false),
        LikeCase("An elegant wine bar", "*wine*", true),
        LikeCase("An elegant beer bar", "*wine*", false),
        // Empty pattern
        LikeCase("", "", true),
        LikeCase("a", "", false),
        // Escapes
        LikeCase("a*c", "a\\*c", true),
        LikeCase("abc", "a\\*c", false),
        LikeCase("a?c", "a\\?c", true),
        LikeCase("abc", "a\\?c", false),
        LikeCase("a\\c", "a\\\\c", true),
        LikeCase("a\\bc", "a\\\\*", true),
        LikeCase("a\\c", "a\\c", true),  // a backslash before anything else is literal
        LikeCase("a\\", "a\\", true),  // as is a trailing one
        LikeCase("50%*", "*\\*", true),
        LikeCase("50%", "*\\*", false),
        // Regular-expression metacharacters are literal
        LikeCase("a.c", "a.c", true),
        LikeCase("abc", "a.c", false),
        LikeCase("[x]", "[x]", true),
        LikeCase("x", "[x]", false),
        LikeCase("(a+)$", "(a+)$", true),
        LikeCase("aa", "a+", false),
        LikeCase("^a|b", "^a|b", true),
        LikeCase("a{2}", "*{2}", true),
        // [c], [d], [cd]
        LikeCase("WINE BAR", "*wine*", false),
        LikeCase("WINE BAR", "*wine*", c: true, true),
        LikeCase("An Elegant WINE Bar", "an*WINE*", c: true, true),
        LikeCase("ÉLÉGANT", "élé*", c: true, true),
        LikeCase("ÉLÉGANT", "ele*", c: true, false),
        LikeCase("café", "cafe", d: true, true),
        LikeCase("cafe", "café", d: true, true),
        LikeCase("café", "cafe", false),
        LikeCase("CAFÉ", "cafe", d: true, false),
        LikeCase("CAFÉ", "cafe", c: true, d: true, true),
        LikeCase("Crème Brûlée", "cr?me*br?l?e", c: true, d: true, true),
        LikeCase("Straße", "strasse", c: true, true),
        LikeCase("Straße", "stra?e", c: true, false),  // "ß" folds to two scalars
        LikeCase("ΟΔΟΣ", "οδος", c: true, true),
    ]

    @Test(arguments: cases)
    func matches(_ t: LikeCase) {
        let pattern = LikePattern(t.pattern, caseInsensitive: t.c, diacriticInsensitive: t.d)
        #expect(pattern.matches(t.subject) == t.expected)
    }

    @Test func manyStarsOnLongSubjectsComplete() {
        let long = String(repeating: "a", count: 100_000)
        let alternating = String(repeating: "ab", count: 50_000)
        // (subject, pattern, expected); results are compared as Bools to keep failure messages short.
        let cases: [(String, String, Bool)] = [
            (long, "*a*a*a*a*b", false),
            (long + "b", "*a*a*a*a*b", true),
            (long, "*a*a*a*a*b*", false),
            (long, "*aab*aab*", false),
            (long, "*a?a?a?b*", false),
            (long, "*a*a*a*a*a*", true),
            (long, "a*a*a*a*a", true),
            (alternating, "*abba*", false),
            (alternating, "*ab?ab*", false),  // the "?" would have to be a "b" followed by "ab"... at an odd offset
            (alternating, "*ab??ab*", true),
            (alternating, "*b*a*b*a*b*a*b*a*b*a*b*", true),
        ]
        for (subject, pattern, expected) in cases {
            let result = LikePattern(pattern).matches(subject)
            #expect(result == expected, "\(pattern)")
            let folded = LikePattern(pattern, caseInsensitive: true, diacriticInsensitive: true).matches(subject.uppercased())
            #expect(folded == expected, "[cd] \(pattern)")
        }
    }

    @Test func agreesWithRegularExpression() throws {
        // LIKE is a regular expression with `?` as `.` and `*` as `.*` (DOTALL), everything else quoted.
        let subjects = ["", "a", "ab", "abc", "aab", "abab", "bab", "aaab", "xaybz", "abba", "a\nb", "é", "éa"]
        let patterns = ["", "a", "?", "*", "a*", "*a", "*a*", "a?b", "*ab*", "a*b*", "?*?", "*a?*b", "*b*b*", "a**b", "?a*"]
        for p in patterns {
            var regex = "(?s)"
            for ch in p.unicodeScalars {
                switch ch {
                case "?": regex += "."
                case "*": regex += ".*"
                default: regex += "\\Q\(ch)\\E"
                }
            }
            let re = try RegularExpression(pattern: regex)
            let like = LikePattern(p)
            for s in subjects {
                #expect(like.matches(s) == re.matches(s), "\(s.debugDescription) LIKE \(p.debugDescription)")
            }
        }
    }
}
