import Testing
@testable import KQuery

@Suite("Validator")
struct ValidatorTests {
    /// CloudKit rejections: the wording of CloudKit's own translator (cloudd), the predicate after
    /// it as there, and where the caret goes.
    @Test(arguments: [
        ("cuisine == 'french' OR seats > 70", "Unexpected expression: cuisine == \"french\" OR seats > 70", 21),
        ("FALSEPREDICATE", "Unexpected predicate type: FALSEPREDICATE", 1),
        ("seats > 1 AND FALSEPREDICATE", "Unexpected predicate type: FALSEPREDICATE", 15),
        ("score == nil", "Expected constant value in comparison expression: score == nil", 10),
        ("score != nil", "Expected constant value in comparison expression: score != nil", 10),
        ("nil == score", "Expected constant value in comparison expression: nil == score", 1),
        ("recordID == nil", "Expected constant value in comparison expression", 13),
        ("name CONTAINS[c] 'zinc'", "Predicate comparison options are not supported for expression: name CONTAINS[c] \"zinc\"", 6),
        ("name ==[cd] 'zinc'", "Predicate comparison options are not supported for expression", 6),
        ("NOT (seats > 1 AND seats < 9)", "Expected comparison subpredicate: NOT (seats > 1 AND seats < 9)", 1),
        ("NOT NOT (seats > 1)", "Expected comparison subpredicate", 1),
        ("NOT TRUEPREDICATE", "Expected comparison subpredicate: NOT (TRUEPREDICATE)", 1),
        ("NOT (score BETWEEN {1, 2})", "Invalid NOT predicate: NOT (score BETWEEN {1, 2})", 1),
        ("NOT (SELF CONTAINS 'x')", "Invalid NOT predicate", 1),
        ("NOT (allTokens TOKENMATCHES[cdl] 'x')", "Invalid NOT predicate", 1),
        ("NOT (distanceToLocation:fromLocation:(l, location(1, 2)) < 5)", "Invalid NOT predicate", 1),
        ("ALL tokenize('wine', 'Cd') IN allTokens", "Required NSCaseInsensitivePredicateOption, NSDiacriticInsensitivePredicateOption, and NSLocaleSensitivePredicateOption tokenization options on tokenize() function", 22),
        ("ALL tokenize('wine', 'cdln') IN allTokens", "tokenization options on tokenize() function", 22),
        ("allTokens TOKENMATCHES[cd] 'x'", "Required NSCaseInsensitivePredicateOption, NSDiacriticInsensitivePredicateOption, and NSLocaleSensitivePredicateOption comparison predicate options", 11),
        ("allTokens TOKENMATCHES[cdln] 'x'", "comparison predicate options", 11),
        ("allTokens TOKENMATCHES 'x'", "comparison predicate options", 11),
        ("ALL allTokens TOKENMATCHES[cdl] 'x'", "Enumerating special key-path allTokens is not allowed: ALL allTokens TOKENMATCHES[cdl] \"x\"", 1),
        ("ALL allTokens IN tokenize('x', 'cdl')", "Enumerating special key-path allTokens is not allowed", 1),
        ("tokenize('x', 'cdl') IN allTokens", "Required predicate modifier ANY or ALL when searching special key-path allTokens", 1),
        ("ANY 'x' IN allTokens", "Required tokenize() operand when searching special key-path allTokens", 5),
        ("allTokens == 'x'", "Required comparison operators TOKENMATCHES or IN when searching special key-path allTokens: allTokens == \"x\"", 11),
        ("allTokens TOKENMATCHES[cdl] 3", "Required string or tokenize() arguments when comparing to special key-path allTokens", 29),
        ("chef.name == 'Alain'", "recordKey (chef.name) contains invalid characters", 1),
        ("name ENDSWITH 'x'", "Unexpected expression: name ENDSWITH \"x\"", 6),
        ("name LIKE 'x'", "Unexpected expression: name LIKE \"x\"", 6),
        ("name MATCHES 'x'", "Unexpected expression: name MATCHES \"x\"", 6),
        ("ALL tags BEGINSWITH 't'", "Unexpected expression: ALL tags BEGINSWITH \"t\"", 10),
        ("ALL tags IN {'a'}", "Unexpected expression: ALL tags IN {\"a\"}", 10),
        ("ALL tags == 'a'", "Aggregate operator ALL not allowed for comparison expression: ALL tags == \"a\"", 1),
        ("ANY seats < 3", "Aggregate operator ANY not allowed for comparison expression: ANY seats < 3", 1),
        ("{'a', 'b'} IN tags", "Unexpected expression", 12),
        ("tags CONTAINS {'a', 'b'}", "Unexpected expression", 6),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) > 5", "Searching for locations outside of a specified circular area is not supported: distanceToLocation:fromLocation:(l, location(1.0, 2.0)) > 5", 53),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) >= 5", "Searching for locations outside", 53),
        ("5 < distanceToLocation:fromLocation:(l, location(1, 2))", "Searching for locations outside", 3),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) < x", "Expected search radius on right hand side of operator", 55),
        ("distanceToLocation:fromLocation:(l) < 5", "Expected expected 2 arguments for function distanceToLocation:fromLocation:", 1),
        ("distanceToLocation:fromLocation:(l, 'paris') < 5", "Expected CLLocation argument for distanceToLocation:fromLocation: but got STRING", 1),
        ("score BETWEEN {date('2020-01-01'), date('2021-01-01')}", "Expected array with two number arguments on right hand side", 16),
        ("score BETWEEN {1, 2, 3}", "Expected array with two number arguments on right hand side, but got 3", 15),
        ("1 == 1", "Expected key-path in comparison expression: 1 == 1", 1),
        ("seats == rating", "Expected constant value in comparison expression: seats == rating", 10),
        ("seats < nil", "Expected constant value in comparison expression", 9),
        ("name BEGINSWITH 3", "Expected NSString or NSData on right hand side: name BEGINSWITH 3", 17),
        ("SELF == 'x'", "Unexpected expression: SELF", 1),
        ("x == foo(1)", "Unexpected expression: foo(...)", 6),
        ("cuisine IN {'a', 1}", "the list mixes INT64 and STRING", 12),
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

    /// CloudKit's record-key rules for field names, with its wording (`CKValidateKeyName`).
    @Test(arguments: [
        ("", "recordKey can not be empty"),
        ("a.b", "recordKey (a.b) contains invalid characters"),
        ("1abc", "recordKey (1abc) contains invalid characters"),
        ("$abc", "recordKey ($abc) contains invalid characters"),
        ("na-me", "recordKey (na-me) contains invalid characters"),
        ("caf\u{E9}", "recordKey (caf\u{E9}) contains invalid characters"),
        (String(repeating: "a", count: 256), "recordKey (\(String(repeating: "a", count: 256))) is too long"),
    ])
    func fieldNameErrors(name: String, message: String) {
        for profile in PredicateProfile.allCases {
            #expect(throws: InvalidPredicateError(message, at: .synthesized), "\(profile)") {
                try ValidatedPredicate("%K == 1", arguments: [.value(.string(name))], profile: profile)
            }
        }
    }

    /// Names CloudKit takes: `_` first, `$` inside, 255 characters, and the system fields by either name.
    @Test(arguments: [
        ("_private", FieldReference.user(FieldKey("_private"))),
        ("price$usd", .user(FieldKey("price$usd"))),
        (String(repeating: "a", count: 255), .user(FieldKey(String(repeating: "a", count: 255)))),
        ("recordChangeTag", .recordChangeTag), ("___etag", .recordChangeTag),
        ("shareID", .share), ("___share", .share), ("___parent", .parent),
        ("creationDate", .creationDate), ("___createTime", .creationDate),
        ("modificationDate", .modificationDate), ("___modTime", .modificationDate),
        ("creatorUserRecordID", .creatorUserRecordID), ("___createdBy", .creatorUserRecordID),
        ("lastModifiedUserRecordID", .lastModifiedUserRecordID), ("___modifiedBy", .lastModifiedUserRecordID),
        ("recordID", .recordID), ("___recordID", .recordID),
    ])
    func fieldNames(name: String, field: FieldReference) throws {
        let value = Constant.value(.string("x"))
        let written = name.count > 100 ? nil : try ValidatedPredicate("\(name) == 'x'").condition
        let bound = try ValidatedPredicate("%K == %@", arguments: [.value(.string(name)), value]).condition
        #expect(bound == .field(field, .compare(.equal, .value(.string("x")), [])))
        if let written { #expect(written == bound) }
    }

    /// What CloudKit refuses only as its house rules, the extended profile accepts (SPEC §2.2).
    @Test(arguments: [
        ("score == nil", Condition.field(.user(FieldKey("score")), .isNil)),
        ("nil != score", .field(.user(FieldKey("score")), .isNotNil)),
        ("FALSEPREDICATE", .constant(false)),
        ("opened BETWEEN {date('2020-01-01T00:00:00Z'), date('2020-01-02T00:00:00Z')}",
         .field(.user(FieldKey("opened")), .between(.value(.timestamp(1_577_836_800_000)), .value(.timestamp(1_577_923_200_000))))),
        ("NOT (score BETWEEN {1, 2})", .not(.field(.user(FieldKey("score")), .between(.value(.int64(1)), .value(.int64(2)))))),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) > 5", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .greaterThan, radius: 5)),
        ("allTokens TOKENMATCHES 'x'", .tokens(.any, text: "x")),
    ])
    func extendedAcceptsHouseRules(text: String, expected: Condition) throws {
        #expect(try ValidatedPredicate(text, profile: .extended).condition == expected)
        #expect(throws: InvalidPredicateError.self) { try ValidatedPredicate(text) }
    }

    @Test func betweenAnArgumentIsExtendedOnly() throws {
        let pair = Constant.value(.list(.int64, [.int64(1), .int64(2)]))
        #expect(throws: InvalidPredicateError.self) { try ValidatedPredicate("seats BETWEEN %@", arguments: [pair]) }
        let extended = try ValidatedPredicate("seats BETWEEN %@", arguments: [pair], profile: .extended).condition
        #expect(extended == .field(.user(FieldKey("seats")), .between(.value(.int64(1)), .value(.int64(2)))))
        #expect(try ValidatedPredicate("seats BETWEEN {1, 2}").condition == extended)
    }

    /// The normalized meaning of CloudKit shapes, spelled every way CloudKit allows.
    @Test(arguments: [
        ("seats > 5", Condition.field(.user(FieldKey("seats")), .compare(.greaterThan, .value(.int64(5)), []))),
        ("5 < seats", .field(.user(FieldKey("seats")), .compare(.greaterThan, .value(.int64(5)), []))),
        ("-27 <= seats", .field(.user(FieldKey("seats")), .compare(.greaterThanOrEqual, .value(.int64(-27)), []))),
        ("tags CONTAINS 'a'", .field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), [])))),
        ("'a' IN tags", .field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), [])))),
        ("ANY tags == 'a'", .field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), [])))),
        ("ANY {'a', 'b'} == c", .field(.user(FieldKey("c")), .oneOf([.value(.string("a")), .value(.string("b"))], []))),
        ("{'a', 'b'} CONTAINS c", .field(.user(FieldKey("c")), .oneOf([.value(.string("a")), .value(.string("b"))], []))),
        ("c IN {'a', 'b'}", .field(.user(FieldKey("c")), .oneOf([.value(.string("a")), .value(.string("b"))], []))),
        ("ALL {'a'} IN tags", .field(.user(FieldKey("tags")), .containsAll([.value(.string("a"))]))),
        ("ANY {'a'} IN tags", .field(.user(FieldKey("tags")), .members(.any, .oneOf([.value(.string("a"))], [])))),
        ("ANY tags IN {'a'}", .field(.user(FieldKey("tags")), .members(.any, .oneOf([.value(.string("a"))], [])))),
        ("___parent == nil", .field(.parent, .isNil)),
        ("nil != ___share", .field(.share, .isNotNil)),
        ("shareID == nil", .field(.share, .isNil)),
        ("NOT (___parent == nil)", .field(.parent, .isNotNil)),
        ("flag == YES", .field(.user(FieldKey("flag")), .compare(.equal, .value(.int64(1)), []))),
        ("creationDate > now()", .field(.creationDate, .compare(.greaterThan, .now, []))),
        ("NOT (seats < 5)", .field(.user(FieldKey("seats")), .compare(.greaterThanOrEqual, .value(.int64(5)), []))),
        ("NOT (seats <= 5)", .field(.user(FieldKey("seats")), .compare(.greaterThan, .value(.int64(5)), []))),
        ("NOT (seats > 5)", .field(.user(FieldKey("seats")), .compare(.lessThanOrEqual, .value(.int64(5)), []))),
        ("NOT (seats >= 5)", .field(.user(FieldKey("seats")), .compare(.lessThan, .value(.int64(5)), []))),
        ("NOT (seats == 5)", .field(.user(FieldKey("seats")), .compare(.notEqual, .value(.int64(5)), []))),
        ("NOT (seats != 5)", .field(.user(FieldKey("seats")), .compare(.equal, .value(.int64(5)), []))),
        ("NOT (5 > seats)", .field(.user(FieldKey("seats")), .compare(.greaterThanOrEqual, .value(.int64(5)), []))),
        ("NOT (c IN {'a'})", .not(.field(.user(FieldKey("c")), .oneOf([.value(.string("a"))], [])))),
        ("NONE tags == 'a'", .not(.field(.user(FieldKey("tags")), .members(.any, .compare(.equal, .value(.string("a")), []))))),
        ("ALL tokenize('a b', 'Cdl') IN allTokens", .tokens(.all, text: "a b")),
        ("ALL tokenize('a b', 'LDC') IN allTokens", .tokens(.all, text: "a b")),
        ("ANY allTokens IN tokenize('a b', 'cdl')", .tokens(.any, text: "a b")),
        ("allTokens TOKENMATCHES[cdl] 'x y'", .tokens(.any, text: "x y")),
        ("ANY allTokens TOKENMATCHES[cdl] 'x y'", .tokens(.any, text: "x y")),
        ("allTokens TOKENMATCHES[ldc] 'x y'", .tokens(.any, text: "x y")),
        ("'x y' TOKENMATCHES[cdl] allTokens", .tokens(.any, text: "x y")),
        ("ALL 'x y' TOKENMATCHES[cdl] allTokens", .tokens(.all, text: "x y")),
        ("SELF CONTAINS 'x y'", .tokens(.any, text: "x y")),
        ("ALL SELF CONTAINS 'x y'", .tokens(.all, text: "x y")),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) < 5", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .lessThan, radius: 5)),
        ("distanceToLocation:fromLocation:(l, location(1, 2)) <= 5", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .lessThanOrEqual, radius: 5)),
        ("5 > distanceToLocation:fromLocation:(location(1, 2), l)", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .lessThan, radius: 5)),
        ("0.5 >= distanceToLocation:fromLocation:(location(1, 2), l)", .distance(.user(FieldKey("l")), center: Location(latitude: 1, longitude: 2), .lessThanOrEqual, radius: 0.5)),
    ])
    func cloudKitShapes(text: String, expected: Condition) throws {
        #expect(try ValidatedPredicate(text).condition == expected)
        // A predicate valid in both profiles means the same in both; the extended profile spells
        // list CONTAINS (polymorphic there) and NONE (a quantifier there) its own way.
        if !["tags CONTAINS 'a'", "'a' IN tags", "NONE tags == 'a'"].contains(text) {
            #expect(try ValidatedPredicate(text, profile: .extended).condition == expected)
        }
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
        ("distanceToLocation:fromLocation:(loc, location(1.5, 2)) < 5", #"[{"comparator":"NEAR","fieldName":"loc","fieldValue":{"value":{"latitude":1.5,"longitude":2.0},"type":"LOCATION"},"distance":5.0}]"#),
        ("distanceToLocation:fromLocation:(loc, location(1.5, 2)) <= 0.25", #"[{"comparator":"NEAR","fieldName":"loc","fieldValue":{"value":{"latitude":1.5,"longitude":2.0},"type":"LOCATION"},"distance":0.25}]"#),
        ("10 >= distanceToLocation:fromLocation:(loc, location(1.5, 2))", #"[{"comparator":"NEAR","fieldName":"loc","fieldValue":{"value":{"latitude":1.5,"longitude":2.0},"type":"LOCATION"},"distance":10.0}]"#),
        ("NOT (seats <= 4)", #"[{"comparator":"GREATER_THAN","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("NOT (seats > 4)", #"[{"comparator":"LESS_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("NOT (seats >= 4)", #"[{"comparator":"LESS_THAN","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("NOT (seats != 4)", #"[{"comparator":"EQUALS","fieldName":"seats","fieldValue":{"value":4,"type":"INT64"}}]"#),
        ("NOT ({'a'} CONTAINS c)", #"[{"comparator":"NOT_IN","fieldName":"c","fieldValue":{"value":["a"],"type":"STRING_LIST"}}]"#),
        ("NOT ('w' IN tags)", #"[{"comparator":"NOT_LIST_CONTAINS","fieldName":"tags","fieldValue":{"value":"w","type":"STRING"}}]"#),
        ("NONE tags == 'w'", #"[{"comparator":"NOT_LIST_CONTAINS","fieldName":"tags","fieldValue":{"value":"w","type":"STRING"}}]"#),
        ("ANY tags IN {'a', 'b'}", #"[{"comparator":"LIST_CONTAINS_ANY","fieldName":"tags","fieldValue":{"value":["a","b"],"type":"STRING_LIST"}}]"#),
        ("NOT (ANY tags IN {'a'})", #"[{"comparator":"NOT_LIST_CONTAINS_ANY","fieldName":"tags","fieldValue":{"value":["a"],"type":"STRING_LIST"}}]"#),
        ("NOT (ALL {'a', 'b'} IN tags)", #"[{"comparator":"NOT_LIST_CONTAINS_ALL","fieldName":"tags","fieldValue":{"value":["a","b"],"type":"STRING_LIST"}}]"#),
        ("NOT (ANY tags BEGINSWITH 't')", #"[{"comparator":"NOT_LIST_MEMBER_BEGINS_WITH","fieldName":"tags","fieldValue":{"value":"t","type":"STRING"}}]"#),
        ("allTokens TOKENMATCHES[cdl] 'after session'", #"[{"comparator":"CONTAINS_ANY_TOKENS","fieldValue":{"value":"after session","type":"STRING"}}]"#),
        ("ALL SELF CONTAINS 'after session'", #"[{"comparator":"CONTAINS_ALL_TOKENS","fieldValue":{"value":"after session","type":"STRING"}}]"#),
        ("___parent == nil", #"[{"comparator":"EQUALS","fieldName":"___parent","fieldValue":{"value":null}}]"#),
        ("NOT (___share == nil)", #"[{"comparator":"NOT_EQUALS","fieldName":"___share","fieldValue":{"value":null}}]"#),
        ("recordChangeTag == '3'", #"[{"comparator":"EQUALS","fieldName":"___etag","fieldValue":{"value":"3","type":"STRING"}}]"#),
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
