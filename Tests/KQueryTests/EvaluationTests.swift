import Testing
@testable import KQuery

/// Records that exercise every evaluation rule of SPEC §2.4.
enum EvaluationFixture {
    static let records: [Record] = [
        Record(recordType: "T", recordName: "i40", fields: [
            "n": .int64(40), "s": .string("apple"), "tags": .list(.string, [.string("wine"), .string("terrace")]),
            "nums": .list(.int64, [.int64(1), .int64(5)]), "t": .timestamp(1_000),
            "ref": .reference(Reference(recordID: RecordID(recordName: "alain"))),
            "loc": .location(Location(latitude: 48.8566, longitude: 2.3522)),
            "text": .string("The Élégant wine-bar sessions of 1848"),
        ]),
        Record(recordType: "T", recordName: "d25", fields: [
            "n": .double(25.0), "s": .string("Apple"), "tags": .list(.string, [.string("wine")]), "nums": .list(.int64, []),
            "t": .timestamp(2_000), "ref": .reference(Reference(recordID: RecordID(recordName: "alain", zoneID: ZoneID(zoneName: "Z")))),
            "loc": .location(Location(latitude: 48.87, longitude: 2.35)), "text": .string("a session"),
        ]),
        Record(recordType: "T", recordName: "big", fields: [
            "n": .int64(9_007_199_254_740_993), "s": .string("é"), "tags": .list(.string, [.string("Wine")]),
            "text": .string("naïve café"),
        ]),
        Record(recordType: "T", recordName: "str", fields: ["n": .string("40"), "s": .string("e\u{301}"), "tags": .string("wine")]),
        Record(recordType: "T", recordName: "empty", fields: [:]),
    ]
}

@Suite("Evaluation")
struct EvaluationTests {
    /// (predicate, matching record names) in the cloudkit profile.
    @Test(arguments: [
        // Equality and order, INT64 vs DOUBLE exact; strings never equal numbers.
        ("n == 40", ["i40"]), ("n == 40.0", ["i40"]), ("n == 25", ["d25"]), ("n != 40", ["big", "d25"]),
        ("n > 30", ["big", "i40"]), ("n >= 25", ["big", "d25", "i40"]), ("n < 40", ["d25"]), ("n <= 40", ["d25", "i40"]),
        ("30 < n", ["big", "i40"]), ("n == '40'", ["str"]),
        ("n == 9007199254740993", ["big"]), ("n == 9007199254740992", []), ("n > 9007199254740992", ["big"]),
        ("n == 9007199254740992.0", []), ("n > 9007199254740992.0", ["big"]),
        // BETWEEN is inclusive.
        ("n BETWEEN {25, 40}", ["d25", "i40"]), ("n BETWEEN {25.5, 40}", ["i40"]), ("n BETWEEN {41, 50}", []),
        // Strings: byte order, case- and diacritic-sensitive, no normalization.
        ("s == 'apple'", ["i40"]), ("s == 'Apple'", ["d25"]), ("s < 'apple'", ["d25"]), ("s > 'b'", ["big", "str"]),
        ("s == 'é'", ["big"]), ("s == 'e\\u0301'", ["str"]), ("s BEGINSWITH 'App'", ["d25"]), ("s BEGINSWITH ''", ["big", "d25", "i40", "str"]),
        ("s BEGINSWITH 'e'", ["str"]),
        // IN.
        ("s IN {'apple', 'é'}", ["big", "i40"]), ("n IN {25, 40}", ["d25", "i40"]), ("s IN {}", []), ("NOT (s IN {'apple'})", ["big", "d25", "str"]),
        ("ANY {'apple', 'Apple'} == s", ["d25", "i40"]),
        // Lists.
        ("tags CONTAINS 'wine'", ["d25", "i40"]), ("'wine' IN tags", ["d25", "i40"]), ("ANY tags == 'wine'", ["d25", "i40"]),
        ("NOT (tags CONTAINS 'wine')", ["big"]), ("ANY tags BEGINSWITH 'ter'", ["i40"]),
        ("ANY {'terrace', 'Wine'} IN tags", ["big", "i40"]), ("ALL {'wine', 'terrace'} IN tags", ["i40"]),
        ("ALL {} IN tags", ["big", "d25", "i40"]), ("nums CONTAINS 5", ["i40"]), ("nums CONTAINS 5.0", ["i40"]),
        ("tags == 'wine'", ["str"]),
        // NOT of a comparison is the flipped comparison: false for a missing field or another kind.
        ("NOT (n < 40)", ["big", "i40"]), ("NOT (n >= 40)", ["d25"]), ("NOT (n == 40)", ["big", "d25"]), ("NOT (n != 40)", ["i40"]),
        ("NOT (s BEGINSWITH 'App')", ["big", "i40", "str"]), ("NOT (ANY tags BEGINSWITH 'ter')", ["big", "d25"]),
        ("NOT (ALL {'wine', 'terrace'} IN tags)", ["big", "d25"]), ("NOT (ANY {'terrace', 'Wine'} IN tags)", ["d25"]),
        ("NONE tags == 'wine'", ["big"]), ("{'apple', 'é'} CONTAINS s", ["big", "i40"]), ("ANY tags IN {'terrace', 'Wine'}", ["big", "i40"]),
        // Only the parent and share keys meet nil; a record here has neither.
        ("___parent == nil", ["big", "d25", "empty", "i40", "str"]), ("___share != nil", []),
        // Timestamps and now().
        ("t < date('1970-01-01T00:00:01.5Z')", ["i40"]), ("t > now()", ["d25"]), ("t == 1000", []),
        // References compare by record name and zone.
        ("ref == reference('alain')", ["i40"]), ("ref == reference('alain', 'Z')", ["d25"]), ("ref != reference('alain')", ["d25"]),
        ("recordID == reference('big')", ["big"]), ("recordID IN {reference('big'), reference('str')}", ["big", "str"]),
        // Distance in kilometres (d25 is 1.4989 km away), `<` strict and `<=` inclusive.
        ("distanceToLocation:fromLocation:(loc, location(48.8566, 2.3522)) < 1", ["i40"]),
        ("distanceToLocation:fromLocation:(loc, location(48.8566, 2.3522)) < 1.4", ["i40"]),
        ("distanceToLocation:fromLocation:(loc, location(48.8566, 2.3522)) < 1.6", ["d25", "i40"]),
        ("1.6 > distanceToLocation:fromLocation:(location(48.8566, 2.3522), loc)", ["d25", "i40"]),
        ("distanceToLocation:fromLocation:(loc, location(48.8566, 2.3522)) <= 0", ["i40"]),
        ("distanceToLocation:fromLocation:(loc, location(48.8566, 2.3522)) < 0", []),
        ("distanceToLocation:fromLocation:(n, location(48.8566, 2.3522)) < 1000000", []),
        // Tokens: whole tokens, folded, stop words ignored.
        ("ALL tokenize('elegant wine', 'Cdl') IN allTokens", ["i40"]), ("ALL tokenize('session', 'Cdl') IN allTokens", ["d25"]),
        ("ALL tokenize('sessions', 'Cdl') IN allTokens", ["i40"]), ("ALL tokenize('18', 'Cdl') IN allTokens", []),
        ("ALL tokenize('1848', 'Cdl') IN allTokens", ["i40"]), ("ANY tokenize('cafe session', 'Cdl') IN allTokens", ["big", "d25"]),
        ("ALL tokenize('the of', 'Cdl') IN allTokens", []), ("ALL tokenize('NAIVE', 'Cdl') IN allTokens", ["big"]),
        ("SELF CONTAINS 'wine'", ["big", "d25", "i40", "str"]), ("allTokens TOKENMATCHES[cdl] 'terrace wine'", ["big", "d25", "i40", "str"]),
        ("ALL 'terrace wine' TOKENMATCHES[cdl] allTokens", ["i40"]), ("ALL SELF CONTAINS 'wine terrace'", ["i40"]),
        // Missing fields are false under every operator, NOT included.
        ("q != 1", []), ("NOT (q == 1)", []), ("NOT (q IN {1})", []), ("NOT (q CONTAINS 1)", []), ("NOT (q BEGINSWITH 'x')", []),
        ("TRUEPREDICATE", ["big", "d25", "empty", "i40", "str"]),
        ("n > 1 AND s BEGINSWITH 'a'", ["i40"]),
    ])
    func cloudKitOperators(predicate: String, expected: [String]) throws {
        #expect(try matchingNames(predicate, in: EvaluationFixture.records, now: 1_500) == expected.sorted(), "\(predicate)")
    }

    /// Extended-profile operators.
    @Test(arguments: [
        ("n == 40 OR s == 'Apple'", ["d25", "i40"]), ("NOT (n > 30 AND n < 50)", ["big", "d25"]), ("q == 1 OR n == 25", ["d25"]),
        ("s CONTAINS 'ppl'", ["d25", "i40"]), ("s CONTAINS[c] 'APP'", ["d25", "i40"]), ("s ENDSWITH 'le'", ["d25", "i40"]),
        ("s ==[c] 'APPLE'", ["d25", "i40"]), ("s ==[d] 'e'", ["big", "str"]), ("s BEGINSWITH[cd] 'E'", ["big", "str"]),
        ("s LIKE 'a*e'", ["i40"]), ("s LIKE[c] '?PPLE'", ["d25", "i40"]), ("s MATCHES '[aA]p+le'", ["d25", "i40"]), ("s MATCHES 'pp'", []),
        ("tags CONTAINS 'wine'", ["d25", "i40", "str"]), ("ALL tags BEGINSWITH 'w'", ["d25"]), ("NONE tags == 'wine'", ["big"]),
        ("ANY nums > 3", ["i40"]), ("ALL nums > 3", ["d25"]),
        ("distanceToLocation:fromLocation:(loc, location(48.8566, 2.3522)) >= 1", ["d25"]),
        // What CloudKit refuses as its house rules: nil on any field, FALSEPREDICATE, BETWEEN dates.
        ("n == nil", ["empty"]), ("n != nil", ["big", "d25", "i40", "str"]), ("NOT (n == nil)", ["big", "d25", "i40", "str"]),
        ("FALSEPREDICATE", []), ("t BETWEEN {date('1970-01-01T00:00:00Z'), date('1970-01-01T00:00:01Z')}", ["i40"]),
        ("NOT (SELF CONTAINS 'wine')", ["empty"]),
    ])
    func extendedOperators(predicate: String, expected: [String]) throws {
        #expect(try matchingNames(predicate, in: EvaluationFixture.records, profile: .extended, now: 1_500) == expected.sorted(), "\(predicate)")
    }

    /// System fields read as CloudKit exposes them: dates as timestamps, users and IDs as references.
    @Test func systemFields() throws {
        var record = Record(recordType: "T", recordID: RecordID(recordName: "r1", zoneID: ZoneID(zoneName: "Z", ownerName: "_o")))
        record.creationDate = 1_000
        record.modificationDate = 5_000
        record.creatorUserRecordName = "_alice"
        record.lastModifiedUserRecordName = "_bob"
        record.recordChangeTag = "7"
        record.parent = Reference(recordID: RecordID(recordName: "folder", zoneID: record.recordID.zoneID))
        record.share = Reference(recordID: RecordID(recordName: "share-1", zoneID: record.recordID.zoneID))
        let bare = Record(recordType: "T", recordName: "bare")
        for (predicate, expected) in [
            ("creationDate < date('1970-01-01T00:00:02Z')", true), ("modificationDate > now()", true), ("modificationDate BETWEEN {4000, 6000}", false),
            ("creatorUserRecordID == reference('_alice')", true), ("lastModifiedUserRecordID == reference('_alice')", false),
            ("lastModifiedUserRecordID != reference('_alice')", true), ("recordID == recordID('r1', 'Z', '_o')", true),
            ("recordID == reference('r1')", false), ("recordChangeTag == '7'", true), ("___etag != '7'", false),
            ("___parent == reference('folder', 'Z', '_o')", true), ("___parent == reference('folder')", false), ("___parent == nil", false), ("shareID != nil", true),
            ("___share == recordID('share-1', 'Z', '_o')", true),
        ] {
            #expect(try matchingNames(predicate, in: [record], now: 2_000) == (expected ? ["r1"] : []), "\(predicate)")
        }
        #expect(try matchingNames("creationDate == nil", in: [record], profile: .extended) == [])
        // A record without system fields: every comparison on them is false, and == nil is true.
        #expect(try matchingNames("creationDate == nil AND creatorUserRecordID == nil", in: [bare], profile: .extended) == ["bare"])
        #expect(try matchingNames("___parent == nil AND ___share == nil", in: [bare]) == ["bare"])
        #expect(try matchingNames("creationDate != date('2000-01-01')", in: [bare]) == [])
    }

    @Test func exactNumericComparison() {
        #expect(ValueOrder.compare(Int64(9_007_199_254_740_993), 9_007_199_254_740_992.0) == 1)
        #expect(ValueOrder.compare(Int64.max, 9_223_372_036_854_775_807.0) == -1)
        #expect(ValueOrder.compare(Int64.min, -9_223_372_036_854_775_808.0) == 0)
        #expect(ValueOrder.compare(Int64(-1), -0.5) == -1)
        #expect(ValueOrder.compare(Int64(0), -0.0) == 0)
        #expect(ValueOrder.compare(Int64(3), Double.nan) == nil)
        #expect(ValueOrder.compareBytes("Z", "a") == -1)
        #expect(ValueOrder.compareBytes("é", "z") == 1)
        #expect(ValueOrder.containsBytes("wine-bar", "e-b"))
        #expect(!ValueOrder.containsBytes("wine", "wines"))
    }
}
