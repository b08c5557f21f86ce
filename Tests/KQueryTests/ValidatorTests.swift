import Testing
@testable import KQuery

@Suite("Validator")
struct ValidatorTests {
    /// CloudKit rejections: Apple's wording and where the caret goes.
    @Test(arguments: [
        ("cuisine == 'french' OR seats > 70", "Invalid compound predicate type: OR", 21),
        ("name CONTAINS[c] 'zinc'", "Unsupported comparison options: [c]", 6),
        ("name ==[cd] 'zinc'", "Unsupported comparison options: [cd]", 6),
        ("NOT (seats > 1 AND seats < 9)", "Invalid compound predicate type: NOT around a compound", 1),
        ("NOT (score BETWEEN {1, 2})", "NOT around BETWEEN", 1),
        ("NOT (SELF CONTAINS 'x')", "NOT around a token search", 1),
        ("ALL tokenize('wine', 'Cd') IN allTokens", "Unsupported comparison options: 'Cd'", 22),
        ("allTokens TOKENMATCHES[cd] 'x'", "TOKENMATCHES needs [cdl]", 11),
        ("chef.name == 'Alain'", "Invalid key path 'chef.name'", 1),
        ("name ENDSWITH 'x'", "Unsupported operator: ENDSWITH", 6),
        ("name LIKE 'x'", "Unsupported operator: LIKE", 6),
        ("name MATCHES 'x'", "Unsupported operator: MATCHES", 6),
        ("ALL tags BEGINSWITH 't'", "Unsupported operator: ALL BEGINSWITH", 10),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) > 5", "distance compared with >", 53),
        ("NOT TRUEPREDICATE", "<TRUEPREDICATE> is not a comparison predicate", 5),
        ("1 == 1", "is not a comparison predicate", 1),
        ("seats == rating", "comparing two fields", 10),
        ("cuisine IN {'a', 1}", "the list mixes INT64 and STRING", 12),
        ("seats < nil", "nil can only be compared with == or !=", 9),
        ("name BEGINSWITH 3", "BEGINSWITH needs a string", 17),
        ("allTokens == 'x'", "allTokens can only be used", 1),
        ("SELF == 'x'", "SELF can only be used", 1),
        ("x == foo(1)", "Unsupported function: foo", 6),
        ("seats > %@", "missing argument 1 for %@", 9),
        ("%K == 1", "missing argument 1 for %K", 1),
        ("seats IN {1, $v}", "no value for variable $v", 14),
    ])
    func cloudKitErrors(text: String, fragment: String, column: Int) {
        guard let error = predicateError(text) else {
            Issue.record("accepted: \(text)")
            return
        }
        #expect(error.message.contains(fragment), "\(error.message)")
        #expect(error.rendered(in: text).contains("1:\(column):"), "\(error.rendered(in: text))")
    }

    /// The normalized meaning of CloudKit shapes, spelled every way CloudKit allows.
    @Test(arguments: [
        ("seats > 5", Condition.field(.user(FieldKey("seats")), .compare(.greaterThan, .value(.int64(5)), []))),
        ("5 < seats", .field(.user(FieldKey("seats")), .compare(.greaterThan, .value(.int64(5)), []))),
        ("tags CONTAINS 'a'", .field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), [])))),
        ("'a' IN tags", .field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), [])))),
        ("ANY tags == 'a'", .field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), [])))),
        ("ANY {'a', 'b'} == c", .field(.user(FieldKey("c")), .oneOf([.value(.string("a")), .value(.string("b"))], []))),
        ("c IN {'a', 'b'}", .field(.user(FieldKey("c")), .oneOf([.value(.string("a")), .value(.string("b"))], []))),
        ("ALL {'a'} IN tags", .field(.user(FieldKey("tags")), .containsAll([.value(.string("a"))]))),
        ("ANY {'a'} IN tags", .field(.user(FieldKey("tags")), .members(.any, .oneOf([.value(.string("a"))], [])))),
        ("score == nil", .field(.user(FieldKey("score")), .isNil)),
        ("nil != score", .field(.user(FieldKey("score")), .isNotNil)),
        ("flag == YES", .field(.user(FieldKey("flag")), .compare(.equal, .value(.int64(1)), []))),
        ("creationDate > now()", .field(.creationDate, .compare(.greaterThan, .now, []))),
        ("ALL tokenize('a b', 'Cdl') IN allTokens", .tokens(.all, text: "a b")),
        ("ANY allTokens IN tokenize('a b', 'cdl')", .tokens(.any, text: "a b")),
        ("allTokens TOKENMATCHES[cdl] 'x'", .tokens(.all, text: "x")),
        ("'x' TOKENMATCHES[cdl] allTokens", .tokens(.all, text: "x")),
        ("SELF CONTAINS 'x'", .tokens(.any, text: "x")),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) < 5", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .lessThan, radius: 5)),
        ("5 > distanceToLocation:fromLocation:(location(1, 2), l)", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .lessThan, radius: 5)),
    ])
    func cloudKitShapes(text: String, expected: Condition) throws {
        #expect(try ValidatedPredicate(text).condition == expected)
    }

    /// In the extended profile, CONTAINS is polymorphic (list member or substring).
    /// Key paths are resolved through a cache of recent names; it must never accept a name the
    /// validator would reject, even one canonically equivalent to a cached name (KELVIN SIGN K).
    @Test func keyPathCacheKeepsValidationExact() throws {
        for _ in 0..<2 {
            // Eight KELVIN SIGNs are 24 UTF-8 bytes, 16 more than KKKKKKKK: the same cache bucket.
            _ = try ValidatedPredicate("Key == 1 AND K == 2 AND KKKKKKKK == 3")
            for impostor in ["\u{212A}ey", "\u{212A}", "Ke\u{0301}y", String(repeating: "\u{212A}", count: 8)] {
                #expect(throws: InvalidPredicateError.self, "\(impostor)") {
                    try ValidatedPredicate("%K == 1", arguments: [.value(.string(impostor))])
                }
            }
        }
        // Names beyond the cache's ways for one length (here 12 of five letters) each keep their own field.
        let names = (0..<12).map { "fld" + String(UnicodeScalar(UInt8(97 + $0))) + "x" }
        for round in 0..<3 {
            for name in names.shuffled() {
                let condition = try ValidatedPredicate("\(name) == \(round)").condition
                #expect(condition == .field(.user(FieldKey(name)), .compare(.equal, .value(.int64(Int64(round))), [])))
            }
        }
        // A system field's name stays a system field when it is found in the cache.
        for _ in 0..<2 {
            guard case .field(let field, _) = try ValidatedPredicate("creationDate < 5").condition else {
                Issue.record("not a field test")
                return
            }
            #expect(field == .creationDate)
        }
    }

    /// Each thread has its own key path cache: validating on many threads at once resolves every
    /// name to the same field as validating on one.
    @Test func keyPathCacheOnManyThreads() async throws {
        let names = (0..<40).map { "shared\($0 % 20)x\(String(repeating: "y", count: $0 % 7))" }
        let expected = names.map { FieldReference.user(FieldKey($0)) }
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var mismatches = 0
                    for round in 0..<50 {
                        let index = (task * 7 + round) % names.count
                        guard case .field(let field, _)? = try? ValidatedPredicate("\(names[index]) == 1").condition,
                              field == expected[index] else {
                            mismatches += 1
                            continue
                        }
                    }
                    return mismatches
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
    }

    @Test func extendedContains() throws {
        let condition = try ValidatedPredicate("name CONTAINS[c] 'zi'", profile: .extended).condition
        #expect(condition == .field(.user(FieldKey("name")), .contains(.value(.string("zi")), [.caseInsensitive])))
    }

    @Test func invalidRegularExpressionPointsIntoThePattern() {
        let text = "name MATCHES 'ab(c'"
        guard let error = predicateError(text, profile: .extended) else {
            Issue.record("accepted")
            return
        }
        #expect(error.message.hasPrefix("Invalid regular expression"))
        #expect(error.span.start > 13)
    }

    @Test func bindingArguments() throws {
        let bound = try ValidatedPredicate(
            "%K BEGINSWITH %@ AND seats > %d AND tags IN %@", arguments: [
                .value(.string("name")), .value(.string("Su")), .value(.int64(3)), .value(.list(.string, [.string("a")])),
            ], profile: .extended)
        #expect(bound.predicate.canonicalText == "name BEGINSWITH \"Su\" AND seats > 3 AND tags IN {\"a\"}")
        #expect(throws: InvalidPredicateError.self) { try ValidatedPredicate("a == %@", arguments: [.value(.int64(1)), .value(.int64(2))]) }
        #expect(throws: InvalidPredicateError.self) { try ValidatedPredicate("%K == 1", arguments: [.value(.int64(1))]) }
        #expect(throws: InvalidPredicateError.self) { try ValidatedPredicate("a == %d", arguments: [.value(.string("x"))]) }
        #expect(throws: InvalidPredicateError.self) { try ValidatedPredicate("a == $missing") }
        let positional = try ValidatedPredicate("a == %2$@ AND b == %1$@", arguments: [.value(.int64(1)), .value(.int64(2))])
        #expect(positional.predicate.canonicalText == "a == 2 AND b == 1")
        let variable = try ValidatedPredicate("a > $min", variables: ["min": .value(.double(1.5))])
        #expect(variable.predicate.canonicalText == "a > 1.5")
    }
}

@Suite("Web Services filterBy")
struct WebServicesTests {
    @Test(arguments: [
        ("TRUEPREDICATE", "[]"),
        ("FALSEPREDICATE", #"[{"comparator":"IN","fieldName":"___recordID","fieldValue":{"value":[],"type":"REFERENCE_LIST"}}]"#),
        ("cuisine == 'french'", #"[{"comparator":"EQUALS","fieldName":"cuisine","fieldValue":{"value":"french","type":"STRING"}}]"#),
        ("seats != 4", #"[{"comparator":"NOT_EQUALS","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("NOT (seats == 4)", #"[{"comparator":"NOT_EQUALS","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("NOT (seats < 4)", #"[{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("4 < seats", #"[{"comparator":"GREATER_THAN","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("seats BETWEEN {1, 2}", #"[{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":1,"type":"INT64"}},{"comparator":"LESS_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":2,"type":"INT64"}}]"#),
        ("c IN {'a', 'b'}", #"[{"comparator":"IN","fieldName":"c","fieldValue":{"value":["a","b"],"type":"STRING_LIST"}}]"#),
        ("NOT (c IN {'a'})", #"[{"comparator":"NOT_IN","fieldName":"c","fieldValue":{"value":["a"],"type":"STRING_LIST"}}]"#),
        ("name BEGINSWITH 'Ch'", #"[{"comparator":"BEGINS_WITH","fieldName":"name","fieldValue":{"value":"Ch","type":"STRING"}}]"#),
        ("NOT (name BEGINSWITH 'Ch')", #"[{"comparator":"NOT_BEGINS_WITH","fieldName":"name","fieldValue":{"value":"Ch","type":"STRING"}}]"#),
        ("tags CONTAINS 'w'", #"[{"comparator":"LIST_CONTAINS","fieldName":"tags","fieldValue":{"value":"w","type":"STRING"}}]"#),
        ("NOT (tags CONTAINS 'w')", #"[{"comparator":"NOT_LIST_CONTAINS","fieldName":"tags","fieldValue":{"value":"w","type":"STRING"}}]"#),
        ("ANY {'a', 'b'} IN tags", #"[{"comparator":"LIST_CONTAINS_ANY","fieldName":"tags","fieldValue":{"value":["a","b"],"type":"STRING_LIST"}}]"#),
        ("NOT (ANY {'a'} IN tags)", #"[{"comparator":"NOT_LIST_CONTAINS_ANY","fieldName":"tags","fieldValue":{"value":["a"],"type":"STRING_LIST"}}]"#),
        ("ALL {'a', 'b'} IN tags", #"[{"comparator":"LIST_CONTAINS_ALL","fieldName":"tags","fieldValue":{"value":["a","b"],"type":"STRING_LIST"}}]"#),
        ("ANY tags BEGINSWITH 't'", #"[{"comparator":"LIST_MEMBER_BEGINS_WITH","fieldName":"tags","fieldValue":{"value":"t","type":"STRING"}}]"#),
        ("ALL tokenize('after session', 'Cdl') IN allTokens", #"[{"comparator":"CONTAINS_ALL_TOKENS","fieldValue":{"value":"after session","type":"STRING"}}]"#),
        ("SELF CONTAINS 'rose'", #"[{"comparator":"CONTAINS_ANY_TOKENS","fieldValue":{"value":"rose","type":"STRING"}}]"#),
        ("distanceToLocation:fromLocation:(loc, location(1.5, 2)) < 100", #"[{"comparator":"NEAR","fieldName":"loc","fieldValue":{"value":{"latitude":1.5,"longitude":2.0},"type":"LOCATION"},"distance":100.0}]"#),
        ("chef == reference('alain')", #"[{"comparator":"EQUALS","fieldName":"chef","fieldValue":{"value":{"recordName":"alain","action":"NONE"},"type":"REFERENCE"}}]"#),
        ("creationDate > date('2020-01-01')", #"[{"comparator":"GREATER_THAN","fieldName":"___createTime","fieldValue":{"value":1577836800000,"type":"TIMESTAMP"}}]"#),
        ("modificationDate < now()", #"[{"comparator":"LESS_THAN","fieldName":"___modTime","fieldValue":{"value":1234,"type":"TIMESTAMP"}}]"#),
        ("a == 1 AND b == 'x'", #"[{"comparator":"EQUALS","fieldName":"a","fieldValue":{"value":1,"type":"INT64"}},{"comparator":"EQUALS","fieldName":"b","fieldValue":{"value":"x","type":"STRING"}}]"#),
    ])
    func filters(text: String, json: String) throws {
        let filters = try ValidatedPredicate(text).condition.webServicesFilters(now: 1234)
        #expect(JSON.array(filters).serialized == json)
    }

    @Test func extendedShapesHaveNoWebServicesForm() throws {
        for text in ["a == 1 OR b == 2", "name ENDSWITH 'x'", "NOT (a == 1 AND b == 2)"] {
            let condition = try ValidatedPredicate(text, profile: .extended).condition
            #expect(throws: WebServicesMappingError.self) { try condition.webServicesFilters(now: 0) }
        }
    }
}
