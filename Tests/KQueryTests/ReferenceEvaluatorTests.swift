import Foundation
import PropertyBased
import Testing
@testable import KQuery

/// A deliberately plain evaluator of `Condition`, written for the tests: it walks the condition for
/// every record and shares no comparison, folding or tokenizing code with `CompiledPredicate`.
/// Three-valued: nil means unknown.
enum ReferenceEvaluator {
    static func evaluate(_ condition: Condition, _ record: Record, now: Int64) -> Bool? {
        switch condition {
        case .constant(let b): return b
        case .and(let parts):
            var sawUnknown = false
            for part in parts {
                switch evaluate(part, record, now: now) {
                case false?: return false
                case nil: sawUnknown = true
                default: break
                }
            }
            return sawUnknown ? nil : true
        case .or(let parts):
            var sawUnknown = false
            for part in parts {
                switch evaluate(part, record, now: now) {
                case true?: return true
                case nil: sawUnknown = true
                default: break
                }
            }
            return sawUnknown ? nil : false
        case .not(let inner):
            return evaluate(inner, record, now: now).map { !$0 }
        case .field(let field, let test):
            let value = record.value(of: field)
            switch test {
            case .isNil: return value == nil
            case .isNotNil: return value != nil
            default:
                guard let value else { return nil }
                return check(test, value, now: now)
            }
        case .tokens(let match, let text):
            let wanted = tokens(text)
            if wanted.isEmpty { return false }
            var have = Set<String>()
            for (_, value) in record.fields {
                if case .string(let s) = value { have.formUnion(tokens(s)) }
                if case .list(.string, let members) = value {
                    for case .string(let s) in members { have.formUnion(tokens(s)) }
                }
            }
            return match == .all ? wanted.allSatisfy(have.contains) : wanted.contains(where: have.contains)
        case .distance(let field, let center, let relation, let radius):
            guard case .location(let l)? = record.value(of: field) else { return nil }
            // The radius is in kilometres (SPEC §2.4); the geodesic distance in metres.
            let metres = radius * 1000
            let d = Geodesic.distance(latitude1: l.latitude, longitude1: l.longitude, latitude2: center.latitude, longitude2: center.longitude)
            return holds(relation, d < metres ? -1 : (d == metres ? 0 : 1))
        }
    }

    static func check(_ test: FieldTest, _ value: FieldValue, now: Int64) -> Bool? {
        switch test {
        case .isNil: return false
        case .isNotNil: return true
        case .compare(let relation, let operand, let options):
            if case .list = value { return nil }
            return order(value, resolve(operand, now), options).map { holds(relation, $0) }
                ?? ((relation == .equal || relation == .notEqual) ? same(value, resolve(operand, now)).map { relation == .equal ? $0 : !$0 } : nil)
        case .between(let lo, let hi):
            guard let a = order(value, resolve(lo, now), []), let b = order(value, resolve(hi, now), []) else { return nil }
            return a >= 0 && b <= 0
        case .oneOf(let operands, let options):
            if case .list = value { return nil }
            var sawUnknown = false
            for operand in operands {
                switch check(.compare(.equal, operand, options), value, now: now) {
                case true?: return true
                case nil: sawUnknown = true
                default: break
                }
            }
            return sawUnknown ? nil : false
        case .string(let operation, let pattern, let options):
            guard case .string(let s) = value else { return nil }
            let subject = Array(fold(s, options).utf8)
            let needle = Array(fold(pattern, options).utf8)
            switch operation {
            case .beginsWith: return subject.starts(with: needle)
            case .endsWith: return subject.reversed().starts(with: needle.reversed())
            case .contains:
                if needle.isEmpty { return true }
                guard needle.count <= subject.count else { return false }
                return (0...(subject.count - needle.count)).contains { Array(subject[$0..<($0 + needle.count)]) == needle }
            case .like: return like(Array(fold(s, options).unicodeScalars), Array(fold(pattern, options).unicodeScalars))
            case .matches: return (try? Regex(pattern)).map { fold(s, options).wholeMatch(of: $0) != nil }
            }
        case .members(let quantifier, let inner):
            guard case .list(_, let members) = value else { return nil }
            let results = members.map { check(inner, $0, now: now) }
            let any: Bool? = results.contains(true) ? true : (results.contains(where: { $0 == nil }) ? nil : false)
            switch quantifier {
            case .any: return any
            case .none: return any.map { !$0 }
            case .all: return results.contains(false) ? false : (results.contains(where: { $0 == nil }) ? nil : true)
            }
        case .containsAll(let operands):
            guard case .list(_, let members) = value else { return nil }
            return operands.allSatisfy { operand in members.contains { check(.compare(.equal, operand, []), $0, now: now) == true } }
        case .contains(let operand, let options):
            switch value {
            case .list: return check(.members(.any, .compare(.equal, operand, options)), value, now: now)
            case .string:
                guard case .value(.string(let text)) = operand else { return nil }
                return check(.string(.contains, text, options), value, now: now)
            default: return nil
            }
        }
    }

    static func resolve(_ operand: Operand, _ now: Int64) -> FieldValue {
        switch operand {
        case .value(let v): v
        case .now: .timestamp(now)
        }
    }

    static func holds(_ relation: Relation, _ order: Int) -> Bool {
        switch relation {
        case .equal: order == 0
        case .notEqual: order != 0
        case .lessThan: order < 0
        case .lessThanOrEqual: order <= 0
        case .greaterThan: order > 0
        case .greaterThanOrEqual: order >= 0
        }
    }

    /// Numbers exactly, strings by bytes, timestamps; nil for anything else.
    static func order(_ a: FieldValue, _ b: FieldValue, _ options: ComparisonOptions) -> Int? {
        func sign<T: Comparable>(_ x: T, _ y: T) -> Int { x < y ? -1 : (x > y ? 1 : 0) }
        switch (a, b) {
        case (.int64(let x), .int64(let y)): return sign(x, y)
        case (.double(let x), .double(let y)): return sign(x, y)
        case (.int64(let x), .double(let y)): return intVersusDouble(x, y)
        case (.double(let x), .int64(let y)): return intVersusDouble(y, x).map { -$0 }
        case (.timestamp(let x), .timestamp(let y)): return sign(x, y)
        case (.string(let x), .string(let y)):
            let (p, q) = (Array(fold(x, options).utf8), Array(fold(y, options).utf8))
            return p == q ? 0 : (p.lexicographicallyPrecedes(q) ? -1 : 1)
        default: return nil
        }
    }

    /// Exact: doubles at or beyond 2^63 in magnitude are outside every Int64; otherwise compare the
    /// integer with the double's floor, and break a tie by whether the double has a fraction.
    static func intVersusDouble(_ x: Int64, _ y: Double) -> Int? {
        guard !y.isNaN else { return nil }
        if y >= 0x1p63 { return -1 }
        if y < -0x1p63 { return 1 }
        let floor = Int64(y.rounded(.down))
        if x != floor { return x < floor ? -1 : 1 }
        return y == y.rounded(.down) ? 0 : -1
    }

    static func same(_ a: FieldValue, _ b: FieldValue) -> Bool? {
        switch (a, b) {
        case (.reference(let x), .reference(let y)):
            return x.recordID.recordName == y.recordID.recordName && x.recordID.zoneID == y.recordID.zoneID
        default: return nil
        }
    }

    static func fold(_ s: String, _ options: ComparisonOptions) -> String {
        var out = s
        if options.contains(.diacriticInsensitive) {
            out = String(String.UnicodeScalarView(out.decomposedStringWithCanonicalMapping.unicodeScalars.filter {
                !$0.properties.generalCategory.isMark
            }))
        }
        if options.contains(.caseInsensitive) { out = out.lowercased() }
        return out
    }

    static func like(_ s: [Unicode.Scalar], _ p: [Unicode.Scalar]) -> Bool {
        // Dynamic programming over (subject prefix, pattern prefix); no escapes in generated patterns.
        var table = Array(repeating: Array(repeating: false, count: p.count + 1), count: s.count + 1)
        table[0][0] = true
        for j in stride(from: 1, through: p.count, by: 1) where p[j - 1] == "*" { table[0][j] = table[0][j - 1] }
        for i in stride(from: 1, through: s.count, by: 1) {
            for j in stride(from: 1, through: p.count, by: 1) {
                switch p[j - 1] {
                case "*": table[i][j] = table[i][j - 1] || table[i - 1][j]
                case "?": table[i][j] = table[i - 1][j - 1]
                default: table[i][j] = table[i - 1][j - 1] && s[i - 1] == p[j - 1]
                }
            }
        }
        return table[s.count][p.count]
    }

    static let stopWords: Set<String> = Set("""
        a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with
        """.split(separator: " ").map(String.init))

    static func tokens(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        for scalar in text.unicodeScalars {
            let category = scalar.properties.generalCategory
            if category.isLetter || category.isNumber || category.isMark {
                current.unicodeScalars.append(scalar)
            } else if !current.isEmpty {
                words.append(current)
                current = ""
            }
        }
        if !current.isEmpty { words.append(current) }
        return words.map { fold($0, [.caseInsensitive, .diacriticInsensitive]) }.filter { !$0.isEmpty && !stopWords.contains($0) }
    }
}

extension Unicode.GeneralCategory {
    var isMark: Bool { self == .nonspacingMark || self == .spacingMark || self == .enclosingMark }
    var isLetter: Bool { [.uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter].contains(self) }
    var isNumber: Bool { [.decimalNumber, .letterNumber, .otherNumber].contains(self) }
}

/// Random records and random predicate text over a small vocabulary, so predicates often match.
enum RandomData {
    static let words = ["wine", "terrace", "Élégant", "session", "sessions", "the", "bar", "café", "1848", "18", "Rosé", "rose"]
    static let strings = ["apple", "Apple", "é", "e\u{301}", "", "wine bar", "zeta", "Le Petit"]

    static func record(_ rng: inout SplitMix, index: Int) -> Record {
        var fields: [String: FieldValue] = [:]
        func maybe(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
        if maybe(0.85) {
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: fields["n"] = .string("40")
            case 1: fields["n"] = .double([0.5, 25.0, 40.0, -3.25, 9_007_199_254_740_992.0].randomElement(using: &rng) ?? 0)
            default: fields["n"] = .int64([0, 25, 40, -3, 9_007_199_254_740_993, .max, .min].randomElement(using: &rng) ?? 0)
            }
        }
        if maybe(0.85) { fields["s"] = .string(strings.randomElement(using: &rng) ?? "") }
        if maybe(0.8) {
            fields["tags"] = .list(.string, (0..<Int.random(in: 0...3, using: &rng)).map { _ in .string(words.randomElement(using: &rng) ?? "") })
        }
        if maybe(0.8) { fields["t"] = .timestamp(Int64.random(in: 0...4_000, using: &rng)) }
        if maybe(0.8) {
            fields["loc"] = .location(Location(
                latitude: 48.85 + Double.random(in: -0.05...0.05, using: &rng), longitude: 2.35 + Double.random(in: -0.05...0.05, using: &rng)))
        }
        if maybe(0.7) { fields["ref"] = .reference(Reference(recordID: RecordID(recordName: ["a", "b"].randomElement(using: &rng) ?? "a"))) }
        if maybe(0.7) { fields["text"] = .string((0..<Int.random(in: 0...4, using: &rng)).map { _ in words.randomElement(using: &rng) ?? "" }.joined(separator: " ")) }
        var record = Record(recordType: "T", recordName: "r\(index)", fields: fields)
        if maybe(0.5) { record.parent = Reference(recordID: RecordID(recordName: ["a", "b"].randomElement(using: &rng) ?? "a")) }
        return record
    }

    static func number(_ rng: inout SplitMix) -> String {
        ["0", "25", "40", "-3", "25.0", "0.5", "9007199254740992", "9007199254740993", "9007199254740992.0"].randomElement(using: &rng) ?? "0"
    }

    static func quoted(_ rng: inout SplitMix, _ pool: [String]) -> String {
        Literals.quoted(pool.randomElement(using: &rng) ?? "")
    }

    /// A comparison valid in the cloudkit profile, and whether NOT may wrap it there.
    static func cloudKitTerm(_ rng: inout SplitMix) -> (String, negatable: Bool) {
        let op = ["==", "!=", "<", "<=", ">", ">="].randomElement(using: &rng) ?? "=="
        switch Int.random(in: 0..<20, using: &rng) {
        case 0: return ("n \(op) \(number(&rng))", true)
        case 1: return ("\(number(&rng)) \(op) n", true)
        case 2: return ("n BETWEEN {\(number(&rng)), \(number(&rng))}", false)
        case 3: return ("s \(op) \(quoted(&rng, strings))", true)
        case 4: return ("s BEGINSWITH \(quoted(&rng, ["a", "A", "e", "", "wine"]))", true)
        case 5: return ("s IN {\(quoted(&rng, strings)), \(quoted(&rng, strings))}", true)
        case 6: return ("\(["tags CONTAINS", "ANY tags =="].randomElement(using: &rng) ?? "tags CONTAINS") \(quoted(&rng, words))", true)
        case 7: return ("ANY {\(quoted(&rng, words)), \(quoted(&rng, words))} IN tags", true)
        case 8: return ("ALL {\(quoted(&rng, words)), \(quoted(&rng, words))} IN tags", true)
        case 9: return ("ANY tags BEGINSWITH \(quoted(&rng, ["w", "s", "É", "te"]))", true)
        case 10: return (["___parent == nil", "___parent != nil", "nil == ___share", "___parent == reference('a')"].randomElement(using: &rng) ?? "___parent == nil", true)
        case 11: return ("t \(op) \(["now()", "date('1970-01-01T00:00:02Z')"].randomElement(using: &rng) ?? "now()")", true)
        case 12: return ("ref \(["==", "!="].randomElement(using: &rng) ?? "==") reference(\(quoted(&rng, ["a", "b"])))", true)
        case 13:
            // Kilometres: the records lie within about 5.6 km of the centre.
            let radius = ["0.1", "1", "3", "5", "2.5"].randomElement(using: &rng) ?? "1"
            let call = "distanceToLocation:fromLocation:(loc, location(48.85, 2.35))"
            return Bool.random(using: &rng) ? ("\(call) \(["<", "<="].randomElement(using: &rng) ?? "<") \(radius)", false)
                : ("\(radius) \([">", ">="].randomElement(using: &rng) ?? ">") \(call)", false)
        case 14:
            let query = (0..<Int.random(in: 1...2, using: &rng)).map { _ in words.randomElement(using: &rng) ?? "" }.joined(separator: " ")
            return ("\(["ALL", "ANY"].randomElement(using: &rng) ?? "ALL") tokenize(\(Literals.quoted(query)), 'Cdl') IN allTokens", false)
        case 15:
            let query = Literals.quoted((0..<Int.random(in: 1...2, using: &rng)).map { _ in words.randomElement(using: &rng) ?? "" }.joined(separator: " "))
            return ([
                "allTokens TOKENMATCHES[cdl] \(query)", "ANY allTokens TOKENMATCHES[cdl] \(query)", "\(query) TOKENMATCHES[cdl] allTokens",
                "ALL \(query) TOKENMATCHES[cdl] allTokens", "ALL SELF CONTAINS \(query)",
            ].randomElement(using: &rng) ?? "SELF CONTAINS 'x'", false)
        case 16: return ("{\(quoted(&rng, strings)), \(quoted(&rng, strings))} CONTAINS s", true)
        case 17: return ("ANY tags IN {\(quoted(&rng, words)), \(quoted(&rng, words))}", true)
        case 18: return ("NONE tags == \(quoted(&rng, words))", false)
        default: return ("SELF CONTAINS \(quoted(&rng, words))", false)
        }
    }

    static func cloudKitPredicate(_ rng: inout SplitMix) -> String {
        (0..<Int.random(in: 1...3, using: &rng)).map { _ in
            let (term, negatable) = cloudKitTerm(&rng)
            return negatable && Int.random(in: 0..<4, using: &rng) == 0 ? "NOT (\(term))" : term
        }.joined(separator: " AND ")
    }

    static func extendedTerm(_ rng: inout SplitMix) -> String {
        switch Int.random(in: 0..<7, using: &rng) {
        case 0: return "s CONTAINS\(["", "[c]", "[cd]"].randomElement(using: &rng) ?? "") \(quoted(&rng, ["pp", "E", "é", "ine"]))"
        case 1: return "s ENDSWITH\(["", "[c]", "[d]"].randomElement(using: &rng) ?? "") \(quoted(&rng, ["le", "E", "bar"]))"
        case 2: return "s LIKE\(["", "[c]"].randomElement(using: &rng) ?? "") \(quoted(&rng, ["a*", "?pple", "*e*", "*"]))"
        case 3: return "\(["ALL", "NONE", "ANY"].randomElement(using: &rng) ?? "ANY") tags \(["==", "!=", "BEGINSWITH"].randomElement(using: &rng) ?? "==") \(quoted(&rng, words))"
        case 4: return "s MATCHES \(quoted(&rng, ["[aA]pple", "a.*", ".*"]))"
        case 5: return ["n == nil", "s != nil", "tags == nil", "loc != nil", "FALSEPREDICATE", "t BETWEEN {date('1970-01-01T00:00:01Z'), now()}"]
            .randomElement(using: &rng) ?? "n == nil"
        default: return cloudKitTerm(&rng).0
        }
    }

    static func extendedPredicate(_ rng: inout SplitMix, depth: Int = 2) -> String {
        guard depth > 0, Bool.random(using: &rng) else { return extendedTerm(&rng) }
        let parts = (0..<Int.random(in: 2...3, using: &rng)).map { _ in "(\(extendedPredicate(&rng, depth: depth - 1)))" }
        switch Int.random(in: 0..<3, using: &rng) {
        case 0: return parts.joined(separator: " AND ")
        case 1: return parts.joined(separator: " OR ")
        default: return "NOT \(parts[0])"
        }
    }
}

@Suite("Evaluator properties")
struct ReferenceEvaluatorTests {
    static let records: [Record] = {
        var rng = SplitMix(seed: 42)
        return (0..<120).map { RandomData.record(&rng, index: $0) }
    }()

    @Test func cloudKitPredicatesAgreeWithTheReference() async {
        await propertyCheck(count: 600, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let text = RandomData.cloudKitPredicate(&rng)
            do {
                let validated = try ValidatedPredicate(text)
                let compiled = CompiledPredicate(validated)
                for record in Self.records {
                    let fast = compiled.matches(record, now: 2_000)
                    let reference = ReferenceEvaluator.evaluate(validated.condition, record, now: 2_000) == true
                    #expect(fast == reference, "\(text) on \(record.recordID.recordName): \(record.fields.map { "\($0.key)=\($0.value)" })")
                    if fast != reference { return }
                }
            } catch {
                Issue.record("generated an invalid predicate: \(text)\n\((error as? InvalidPredicateError)?.rendered(in: text) ?? "\(error)")")
            }
        }
    }

    @Test func extendedPredicatesAgreeWithTheReference() async {
        await propertyCheck(count: 600, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let text = RandomData.extendedPredicate(&rng)
            do {
                let validated = try ValidatedPredicate(text, profile: .extended)
                let compiled = CompiledPredicate(validated)
                for record in Self.records {
                    let fast = compiled.matches(record, now: 2_000)
                    let reference = ReferenceEvaluator.evaluate(validated.condition, record, now: 2_000) == true
                    #expect(fast == reference, "\(text) on \(record.recordID.recordName)")
                    if fast != reference { return }
                }
            } catch {
                Issue.record("generated an invalid predicate: \(text)\n\((error as? InvalidPredicateError)?.rendered(in: text) ?? "\(error)")")
            }
        }
    }

    /// A predicate valid in both profiles gives the same results in both (the generated records
    /// keep `tags` a list, so CONTAINS never meets a string here: the one documented difference).
    @Test func profilesAgree() async {
        await propertyCheck(count: 400, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let text = RandomData.cloudKitPredicate(&rng)
            do {
                let cloudKit = CompiledPredicate(try ValidatedPredicate(text))
                let extended = CompiledPredicate(try ValidatedPredicate(text, profile: .extended))
                for record in Self.records {
                    #expect(cloudKit.matches(record, now: 2_000) == extended.matches(record, now: 2_000), "\(text)")
                }
            } catch {
                Issue.record("\(text): \(error)")
            }
        }
    }
}
