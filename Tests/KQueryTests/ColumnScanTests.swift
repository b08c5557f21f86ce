import PropertyBased
import Testing
@testable import KQuery
@testable import KQueryStore

/// Column scans against the record evaluator and the independent reference evaluator: every field
/// kind, missing values, lists, mixed kinds in one field, very long strings, and rows that move as
/// records are deleted and replaced.
@Suite("Column scans")
struct ColumnScanTests {
    static let longText = String(repeating: "after the storm ", count: 20_000) + "harbour"

    /// One record per row of the table, each field a different kind or missing.
    static let records: [Record] = {
        let reference = FieldValue.reference(Reference(recordID: RecordID(recordName: "a")))
        let rows: [[String: FieldValue]] = [
            ["i": .int64(5), "d": .double(0.5), "t": .timestamp(1_000), "s": .string("after"), "loc": .location(Location(latitude: 48.85, longitude: 2.35)), "text": .string("sunset harbour")],
            ["i": .int64(9_007_199_254_740_993), "d": .double(9_007_199_254_740_992), "t": .timestamp(2_000), "s": .string("afterglow"), "text": .string("harbour")],
            ["i": .int64(.max), "d": .double(-.infinity), "s": .string("Après"), "loc": .location(Location(latitude: 48.86, longitude: 2.36)), "text": .string("Sunset HARBOUR café")],
            ["i": .int64(.min), "d": .double(1e300), "t": .timestamp(-5), "s": .string(longText), "text": .string(longText)],
            ["d": .double(-0.0), "s": .string(""), "loc": .location(Location(latitude: 91, longitude: 2.35))],
            ["i": .int64(0), "s": .string("e\u{301}"), "loc": .location(Location(latitude: 48.85, longitude: 362.35))],
            ["s": .string("é"), "mixed": .string("5"), "list": .list(.string, [.string("after"), .string("sunset")])],
            ["mixed": .int64(5), "list": .list(.int64, [.int64(5)]), "ref": reference, "bytes": .bytes([1, 2])],
            ["mixed": .double(5), "list": .list(.string, []), "asset": .assetID("x")],
            [:],
        ]
        return rows.enumerated().map { Record(recordType: "T", recordName: "r\($0.offset)", fields: $0.element) }
    }()

    /// Predicates over every kind of column and every relation, and over what falls back to the
    /// records (read with the extended profile, which takes every CloudKit predicate and more).
    static let predicates = [
        "i == 5", "i != 5", "i > 0", "i >= 0", "i < 9007199254740993", "i <= 9007199254740992.0", "i > 9007199254740992.0",
        "i == 5.0", "i < 0.5", "i BETWEEN {0, 5}", "i BETWEEN {0.5, 9007199254740993}",
        "d == 0.5", "d != 0.5", "d > 0", "d >= 0", "d < 1", "d == 0", "d == 9007199254740993", "d <= 9007199254740992", "d BETWEEN {-1, 1}",
        "t > 0", "t <= 2000", "t == 1000", "t BETWEEN {-10, 1000}", "t > now()", "t < now()",
        "s == 'after'", "s != 'after'", "s < 'b'", "s >= 'after'", "s > ''", "s == 'é'", "s == 'e\u{301}'",
        "s BEGINSWITH 'after'", "s BEGINSWITH ''", "s BEGINSWITH 'e'", "s BEGINSWITH 'Apr'", "s BETWEEN {'a', 'b'}",
        "s == nil", "s != nil", "i == nil", "i != nil", "nothing == nil", "nothing != nil", "nothing == 5", "nothing BEGINSWITH 'a'",
        "s == 5", "i == 'after'", "d == 'x'", "t == 5",
        "mixed == 5", "mixed == '5'", "mixed > 4", "mixed == nil",
        "ANY list == 'after'", "list CONTAINS 'sunset'", "list == nil", "'after' IN list",
        "ref == reference('a')", "ref != nil",
        "distanceToLocation:fromLocation:(loc, location(48.85, 2.35)) < 2",
        "distanceToLocation:fromLocation:(loc, location(48.85, 2.35)) < 0.001",
        "distanceToLocation:fromLocation:(nothing, location(48.85, 2.35)) < 2",
        "distanceToLocation:fromLocation:(s, location(48.85, 2.35)) < 2",
        "ALL tokenize('sunset harbour', 'Cdl') IN allTokens", "ANY tokenize('storm cafe', 'Cdl') IN allTokens",
        "ALL tokenize('sunset unknownword', 'Cdl') IN allTokens", "ANY tokenize('unknownword', 'Cdl') IN allTokens",
        "ALL tokenize('', 'Cdl') IN allTokens",
        "i > 0 AND s BEGINSWITH 'after'", "d BETWEEN {0, 1} AND s BEGINSWITH 'after' AND i == 5",
        "i >= 0 AND ANY list == 'after'", "s != nil AND recordID != recordID('r2')", "i > 0 AND mixed == 5",
        "TRUEPREDICATE", "FALSEPREDICATE",
        "s CONTAINS 'low'", "s ENDSWITH 'glow'", "s BEGINSWITH[c] 'APR'", "s ==[cd] 'apres'", "s LIKE 'aft*'",
        "i > 0 OR s == 'é'", "NOT (i > 0)", "i IN {5, 0}", "s CONTAINS ''",
    ]

    static func database(_ records: [Record]) throws -> Database {
        let database = Database(indexPolicy: .declared)
        try database.importRecords(records)
        return database
    }

    /// Every record the scan returns, checked against the record evaluator and the reference one.
    static func check(_ database: Database, _ text: String, profile: PredicateProfile = .cloudkit, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let query = KQuery.Query(recordType: "T", predicate: try ValidatedPredicate(text, profile: profile))
        let scanned = try StorePlannerTests.allPages(database, query, now: 1_500).map(\.recordID)
        let byRecord = database.performByScan(query, now: 1_500)
        #expect(scanned == byRecord.map(\.recordID), "\(text)", sourceLocation: sourceLocation)
        let reference = database.allRecords.filter { ReferenceEvaluator.evaluate(query.predicate.condition, $0, now: 1_500) == true }
        #expect(Set(scanned) == Set(reference.map(\.recordID)), "\(text) (reference)", sourceLocation: sourceLocation)
        #expect(try database.count(query, now: 1_500) == byRecord.count, "\(text) (count)", sourceLocation: sourceLocation)
    }

    @Test(arguments: predicates) func columnsAnswerAsTheRecordsDo(_ text: String) throws {
        try Self.check(try Self.database(Self.records), text, profile: .extended)
    }

    /// NaN compares with nothing in the record evaluator (the reference evaluator, written for
    /// values CloudKit stores, which JSON gives no NaN, disagrees), and so in the columns.
    @Test(arguments: ["d == 0.5", "d != 0.5", "d < 1", "d >= 0", "d BETWEEN {-1, 1}", "d BETWEEN {0.5, 1e308}"])
    func nanComparesWithNothing(_ text: String) throws {
        var records = Self.records
        records[3]["d"] = .double(.nan)
        let database = try Self.database(records)
        let query = KQuery.Query(recordType: "T", predicate: try ValidatedPredicate(text))
        let scanned = try StorePlannerTests.allPages(database, query, now: 1_500).map(\.recordID)
        #expect(scanned == database.performByScan(query, now: 1_500).map(\.recordID))
        #expect(!scanned.contains(records[3].recordID))
    }

    @Test func columnsTakeOneKindEachAndMixedOnesFallBack() throws {
        let database = try Self.database(Self.records)
        let columns = try #require(database.tables["T"]?.columns)
        let kinds = Dictionary(uniqueKeysWithValues: zip(columns.keys.map(\.name), columns.columns.map(\.kind)))
        #expect(kinds == [
            "i": .int64, "d": .double, "t": .timestamp, "s": .string, "loc": .location, "text": .string,
            "mixed": .mixed, "list": .mixed, "ref": .mixed, "bytes": .mixed, "asset": .mixed,
        ])
        func scan(_ text: String) throws -> ColumnScan? {
            ColumnScan(try ValidatedPredicate(text, profile: .extended).condition, columns: columns)
        }
        #expect(try scan("i > 0 AND s BEGINSWITH 'a'") != nil)
        #expect(try scan("mixed == nil") != nil)
        #expect(try scan("mixed == 5") == nil)
        #expect(try scan("ANY list == 'after'") == nil)
        #expect(try scan("i > 0 OR s == 'a'") == nil)
    }

    /// Deletes move the last record's values into the hole, replaces rewrite them (strings leave
    /// unused bytes behind until the arena is rewritten): the columns must hold what was saved.
    @Test func columnsFollowDeletesAndReplaces() async {
        await propertyCheck(count: 60, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let database = Database(indexPolicy: .declared)
            database.createsMissingZones = true
            let kind = Int.random(in: 0..<3, using: &rng)
            func record(_ index: Int) -> Record {
                var record = RandomData.record(&rng, index: index)
                // One table in three keeps `n` to a single kind, so its column is not mixed.
                if kind > 0, let n = record["n"] {
                    let number: Int64 = if case .int64(let x) = n { x } else { 25 }
                    record["n"] = kind == 1 ? .int64(number) : .double(Double(number))
                }
                if Int.random(in: 0..<10, using: &rng) == 0 { record["s"] = .string(String(repeating: "é", count: Int.random(in: 1_000...5_000, using: &rng))) }
                return record
            }
            let imported = (0..<Int.random(in: 0...120, using: &rng)).map(record)
            try? database.importRecords(imported)
            var expected = Dictionary(imported.map { ($0.recordID, $0) }, uniquingKeysWith: { $1 })
            if Bool.random(using: &rng) { database.tables["T"]?.trackTokens() }
            // As an open leaves them: the columns' spare room given back before the edits.
            if Bool.random(using: &rng) { database.tables["T"]?.trimExcessCapacity() }
            for step in 0..<150 {
                let existing = database.allRecords
                let change: RecordChange
                switch Int.random(in: 0..<3, using: &rng) {
                case 0 where !existing.isEmpty:
                    change = try database.save(RecordOperation(kind: .forceDelete, record: existing[Int.random(in: 0..<existing.count, using: &rng)]))
                case 1 where !existing.isEmpty:
                    var replacement = record(0)
                    replacement.recordID = existing[Int.random(in: 0..<existing.count, using: &rng)].recordID
                    change = try database.save(RecordOperation(kind: .forceReplace, record: replacement))
                default:
                    change = try database.save(RecordOperation(kind: .create, record: record(1_000 + step)))
                }
                switch change {
                case .created(let saved), .updated(_, let saved): expected[saved.recordID] = saved
                case .deleted(let old): expected[old.recordID] = nil
                }
            }
            #expect(ColumnStorageTests.holds(database, expected))
            if let table = database.tables["T"] { #expect(Self.columnsMatch(table)) }
            for _ in 0..<8 {
                let text = RandomData.cloudKitPredicate(&rng)
                guard (try? ValidatedPredicate(text)) != nil else { continue }
                try Self.check(database, text)
            }
        }
    }

    /// A string column keeps a dictionary while its distinct values are few (each scan filter
    /// then tests a distinct value once), and keeps its bytes by position once they are not: both
    /// answer as the records do, through the change, deletes that move values and replaces.
    @Test func aStringColumnLeavesItsDictionaryWhenMostValuesDiffer() throws {
        let database = Database(indexPolicy: .declared)
        database.minimumDeadRows = 16
        func record(_ index: Int, _ text: String) -> Record {
            Record(recordType: "T", recordName: "r\(index)", fields: ["s": .string(text), "few": .string(["after", "before", "é", "e\u{301}", ""][index % 5])])
        }
        try database.importRecords((0..<3_000).map { record($0, "value \($0 % 700)") })
        func column(_ name: String) throws -> Column {
            let table = try #require(database.tables["T"])
            return table.columns.columns[try #require(table.columns.index(of: FieldKey(name)))]
        }
        #expect(try column("s").dictionary?.count == 700)
        let predicates = ["s == 'value 7'", "s BEGINSWITH 'value 69'", "s > 'value 5'", "s != 'value 1'", "s ENDSWITH '99'", "s CONTAINS 'ue 12'",
                          "few == 'é'", "few == 'e\u{301}'", "few BEGINSWITH 'aft'", "few == ''", "few < 'b' AND s BEGINSWITH 'value 3'"]
        for text in predicates { try Self.check(database, text, profile: .extended) }
        // 5,000 more, each different: past 4,096 distinct values and a quarter of the records.
        for index in 3_000..<8_000 { try database.save(RecordOperation(kind: .create, record: record(index, "unique \(index)"))) }
        #expect(try column("s").dictionary == nil)
        #expect(try column("few").dictionary?.count == 5)
        for index in stride(from: 0, to: 8_000, by: 7) {
            try database.save(RecordOperation(kind: .forceDelete, record: record(index, "")))
        }
        for index in stride(from: 1, to: 8_000, by: 11) where index % 7 != 0 {
            try database.save(RecordOperation(kind: .forceReplace, record: record(index, "value \(index % 3)")))
        }
        if let table = database.tables["T"] { #expect(Self.columnsMatch(table)) }
        for text in predicates + ["s BEGINSWITH 'unique 7'", "s == 'unique 7001'"] { try Self.check(database, text, profile: .extended) }
    }

    /// Trimming an array's spare room keeps its elements and gives back all but an eighth.
    @Test func trimmingKeepsTheElements() {
        var bytes: [UInt8] = []
        for index in 0..<100_000 { bytes.append(UInt8(truncatingIfNeeded: index)) }
        let before = bytes
        bytes.reserveCapacity(300_000)
        bytes.trimExcessCapacity()
        #expect(bytes == before)
        #expect(bytes.capacity <= bytes.count + bytes.count / 8 + 64)
        bytes.append(7)
        #expect(bytes.last == 7 && bytes.count == 100_001)
        var empty: [Int] = []
        empty.reserveCapacity(1_000)
        empty.trimExcessCapacity()
        #expect(empty.isEmpty && empty.capacity < 1_000)
    }

    /// Whether every column's arrays hold, at every position, what the record there holds (the
    /// records themselves are checked against what was saved by `ColumnStorageTests.holds`).
    static func columnsMatch(_ table: RecordTable) -> Bool {
        let columns = table.columns
        guard columns.count == table.count, !columns.tracksTokens || columns.tokens.count == table.count else { return false }
        for (key, column) in zip(columns.keys, columns.columns) {
            guard column.count == table.count else { return false }
            for (position, record) in table.records.enumerated() {
                let value = record.fields[key]
                guard column.isPresent(position) == (value != nil) else { return false }
                switch (column.kind, value) {
                case (.int64, .int64(let x)?), (.timestamp, .timestamp(let x)?):
                    if column.integers[position] != x { return false }
                case (.double, .double(let x)?):
                    if column.numbers[position].bitPattern != x.bitPattern { return false }
                case (.location, .location(let x)?):
                    if column.numbers[position] != x.latitude || column.longitudes[position] != x.longitude { return false }
                case (.string, .string(let x)?):
                    if !column.withString(at: position, { $0.elementsEqual(x.utf8) }) { return false }
                case (.mixed, _), (_, nil): break
                default: return false
                }
            }
        }
        for (position, record) in table.records.enumerated() where columns.tracksTokens {
            let expected = Set(record.searchTokens(in: table.searchableFields).compactMap { columns.tokenNumbers[$0] })
            let stored = columns.tokens.withValues(at: position) { Array($0) }
            if stored != expected.sorted() { return false }
        }
        return true
    }
}
