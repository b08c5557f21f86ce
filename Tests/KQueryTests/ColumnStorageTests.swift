import Foundation
import PropertyBased
import Testing
@testable import KQuery
@testable import KQueryStore

/// A table keeps its records only in its columns: every record it gives back is made from them, so
/// what was saved must come back exactly, for every field kind, missing values, lists, very long
/// strings, system fields and zones, through saves, replaces that change a field's kind, deletes
/// that move the last record into the hole, compactions and a file's reopening.
@Suite("Column storage")
struct ColumnStorageTests {
    /// Every kind a field holds, with the values that are easy to lose: NaN, -0, the integer
    /// extremes, an empty and a 300,000-byte string, a decomposed accent (kept as its bytes, not
    /// normalized), a location with and without its optional parts, references with actions,
    /// lists of each kind and an empty list.
    static let everything: [Record] = {
        let zone = ZoneID(zoneName: "Z", ownerName: "_owner")
        let longText = String(repeating: "après l'orage ", count: 21_500)
        let detailed = Location(latitude: 48.85, longitude: 2.35, altitude: 35, horizontalAccuracy: 5, verticalAccuracy: 3,
                                course: 90, speed: 1.5, timestamp: 1_700_000_000_000)
        let reference = Reference(recordID: RecordID(recordName: "target", zoneID: zone), action: .deleteSelf)
        let rows: [[String: FieldValue]] = [
            ["i": .int64(.max), "d": .double(.nan), "t": .timestamp(-5), "s": .string(""), "loc": .location(detailed),
             "b": .bytes([0, 255, 7]), "ref": .reference(reference), "asset": .assetID("asset-1")],
            ["i": .int64(.min), "d": .double(-0.0), "t": .timestamp(.max), "s": .string(longText),
             "loc": .location(Location(latitude: -91, longitude: 540)), "b": .bytes([])],
            ["d": .double(.infinity), "s": .string("e\u{301}"), "strings": .list(.string, [.string("a"), .string("e\u{301}")]),
             "ints": .list(.int64, [.int64(1), .int64(.min)]), "empty": .list(.double, []),
             "places": .list(.location, [.location(detailed), .location(Location(latitude: 1, longitude: 2))]),
             "refs": .list(.reference, [.reference(reference)]), "blobs": .list(.bytes, [.bytes([1])]),
             "times": .list(.timestamp, [.timestamp(3)]), "assets": .list(.assetID, [.assetID("x")])],
            ["s": .string("é"), "i": .int64(0)],
            [:],
        ]
        return rows.enumerated().map { index, fields in
            var record = Record(recordType: "T", recordName: "r\(index)", fields: fields)
            if index == 1 || index == 2 { record.recordID.zoneID = zone }
            if index % 2 == 0 {
                record.creationDate = 1_700_000_000_000
                record.creatorUserRecordName = "_creator"
                record.modificationDate = -1
                record.lastModifiedUserRecordName = String(repeating: "m", count: 40)
                record.recordChangeTag = "kq7"
                record.parent = Reference(recordID: RecordID(recordName: "folder", zoneID: zone))
                record.share = Reference(recordID: RecordID(recordName: "share", zoneID: zone), action: .none)
            }
            if index == 3 { record.recordChangeTag = "only a tag" }
            return record
        }
    }()

    /// Whether `a` and `b` are the same record to the byte: `==` compares strings by canonical
    /// equivalence and NaN with nothing, but the columns must give back what was saved.
    static func identical(_ a: Record?, _ b: Record?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        guard a.recordType == b.recordType, a.recordID.recordName.utf8.elementsEqual(b.recordID.recordName.utf8),
              a.recordID.zoneID == b.recordID.zoneID, a.fields.count == b.fields.count,
              a.creationDate == b.creationDate, a.modificationDate == b.modificationDate,
              a.creatorUserRecordName == b.creatorUserRecordName, a.lastModifiedUserRecordName == b.lastModifiedUserRecordName,
              a.recordChangeTag == b.recordChangeTag, a.parent?.action == b.parent?.action, a.share?.action == b.share?.action,
              a.parent == b.parent, a.share == b.share
        else { return false }
        return zip(a.fields.keys, b.fields.keys).allSatisfy { key, other in
            key == other && identical(a.fields[key], b.fields[key])
        }
    }

    static func identical(_ a: FieldValue?, _ b: FieldValue?) -> Bool {
        switch (a, b) {
        case (.double(let x)?, .double(let y)?): return x.bitPattern == y.bitPattern
        case (.location(let x)?, .location(let y)?): return x == y && x.altitude == y.altitude && x.timestamp == y.timestamp
        case (.reference(let x)?, .reference(let y)?): return x == y && x.action == y.action
        case (.list(let xType, let xs)?, .list(let yType, let ys)?):
            return xType == yType && xs.count == ys.count && zip(xs, ys).allSatisfy { identical($0, $1) }
        default: return RecordTable.identical(a, b)
        }
    }

    /// Whether the database holds exactly `expected`, each record made back from the columns
    /// identical to it, found by its ID and at its row.
    /// Replaces or deletes a random record (one time in four a delete), keeping `expected` what
    /// the database should then hold. A record keeps its type: one with a known ID but another type
    /// is not tried (the database refuses it).
    static func saveOrDeleteRandomRecord(in database: Database, _ expected: inout [RecordID: Record], _ rng: inout SplitMix) {
        let record = RecordJSONWriterTests.record(&rng)
        guard expected[record.recordID].map({ $0.recordType == record.recordType }) ?? true else { return }
        let kind: RecordOperation.Kind = rng.next() % 4 == 0 ? .forceDelete : .forceReplace
        guard let change = try? database.save(RecordOperation(kind: kind, record: record)) else { return }
        switch change {
        case .created(let saved), .updated(_, let saved): expected[saved.recordID] = saved
        case .deleted(let old): expected[old.recordID] = nil
        }
    }

    static func holds(_ database: Database, _ expected: [RecordID: Record]) -> Bool {
        guard database.recordCount == expected.count else { return false }
        for (id, record) in expected {
            guard identical(database.record(id), record) else { return false }
        }
        for table in database.tables.values {
            for position in 0..<table.count {
                let id = table.columns.recordID(at: position)
                guard let row = table.row(of: id), table.position(of: row) == position,
                      identical(table.record(atPosition: position), expected[id])
                else { return false }
            }
            if !table.rowsByID._checkInvariants() { return false }
        }
        return true
    }

    @Test func everyKindComesBackAsSaved() throws {
        let database = Database(indexPolicy: .declared)
        database.createsMissingZones = true
        try database.importRecords(Self.everything)
        #expect(Self.holds(database, Dictionary(uniqueKeysWithValues: Self.everything.map { ($0.recordID, $0) })))
        let columns = try #require(database.tables["T"]?.columns)
        let kinds = Dictionary(uniqueKeysWithValues: zip(columns.keys.map(\.name), columns.columns.map(\.kind)))
        #expect(kinds["i"] == .int64 && kinds["d"] == .double && kinds["t"] == .timestamp && kinds["s"] == .string)
        #expect(kinds["loc"] == .location && kinds["b"] == .mixed && kinds["strings"] == .mixed)
    }

    /// A field that changes kind under values already held keeps them all (the column becomes
    /// mixed and keeps each value whole), and a location column keeps its optional parts through
    /// the move of a delete.
    @Test func aFieldThatChangesKindKeepsEveryValue() throws {
        let database = Database(indexPolicy: .declared)
        var expected: [RecordID: Record] = [:]
        func save(_ record: Record) throws {
            let saved = try database.save(RecordOperation(kind: .forceReplace, record: record)).record
            expected[saved.recordID] = saved
        }
        let detailed = Location(latitude: 1, longitude: 2, altitude: 3)
        for index in 0..<70 {
            try save(Record(recordType: "T", recordName: "r\(index)", fields: [
                "x": .int64(Int64(index)), "loc": index % 3 == 0 ? .location(detailed) : .location(Location(latitude: Double(index), longitude: 0)),
            ]))
        }
        #expect(Self.holds(database, expected))
        for (index, value) in [FieldValue.string("now text"), .list(.int64, [.int64(1)]), .double(.nan), .timestamp(4)].enumerated() {
            try save(Record(recordType: "T", recordName: "r\(index)", fields: ["x": value, "loc": .string("not a place")]))
            #expect(Self.holds(database, expected))
        }
        for index in stride(from: 0, to: 70, by: 4) {
            try database.save(RecordOperation(kind: .forceDelete, record: Record(recordType: "T", recordName: "r\(index)")))
            expected[RecordID(recordName: "r\(index)")] = nil
            #expect(Self.holds(database, expected))
        }
    }

    /// The records a query returns read their fields from the columns when first read: kept
    /// while the table changes (saves, replaces that change kinds, deletes that move records,
    /// compactions, a token scan that starts keeping tokens), each still holds what it held when
    /// the query returned it.
    @Test func queryResultsKeepTheirFieldsWhileTheTableChanges() async {
        await propertyCheck(count: 40, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let database = Database(indexPolicy: .declared)
            database.createsMissingZones = true
            database.minimumDeadRows = 2
            var expected: [RecordID: Record] = [:]
            var kept: [(records: [Record], expected: [Record])] = []
            let query = KQuery.Query(recordType: "Item", predicate: try ValidatedPredicate("TRUEPREDICATE"), resultsLimit: 200)
            for step in 0..<Int(rng.next() % 80) {
                if step % 5 == 4 {
                    let records = try database.perform(query, now: 0).records
                    let wanted = records.map { expected[$0.recordID] ?? $0 }
                    // Some read whole at once, some one field first (read alone from the columns),
                    // some never until the end.
                    switch rng.next() % 3 {
                    case 0: _ = records.map { $0.fields.count }
                    case 1:
                        for (record, want) in zip(records, wanted) {
                            guard let key = want.fields.keys.first else { continue }
                            #expect(Self.identical(record.fields[key], want.fields[key]), "\(record.recordID) \(key.name)")
                        }
                    default: break
                    }
                    kept.append((records, wanted))
                    if rng.next() % 4 == 0 { _ = try database.count(KQuery.Query(recordType: "Item", predicate: try ValidatedPredicate("ALL tokenize('x', 'Cdl') IN allTokens")), now: 0) }
                    continue
                }
                Self.saveOrDeleteRandomRecord(in: database, &expected, &rng)
            }
            for (records, wanted) in kept {
                #expect(records.count == wanted.count)
                for (record, want) in zip(records, wanted) { #expect(Self.identical(record, want), "\(record.recordID)") }
            }
            #expect(Self.holds(database, expected))
        }
    }

    /// A page of at most `Database.largestWholePage` records is made whole at once (a server's
    /// pages, read whole); a larger one's records read their fields when first asked. Both give
    /// the records as saved, system fields included.
    @Test func aSmallPageIsMadeWholeAndALargerOneLazily() throws {
        let database = Database(indexPolicy: .declared)
        var expected: [RecordID: Record] = [:]
        for index in 0..<100 {
            let saved = try database.save(RecordOperation(kind: .create, record: Record(
                recordType: "T", recordName: "r\(index)", fields: ["n": .int64(Int64(index)), "s": .string("text \(index)")]))).record
            expected[saved.recordID] = saved
        }
        for (limit, lazy) in [(Database.largestWholePage, false), (Database.largestWholePage + 1, true)] {
            let records = try database.perform(KQuery.Query(recordType: "T", predicate: try ValidatedPredicate("n >= 0"), resultsLimit: limit), now: 0).records
            #expect(records.count == limit)
            #expect(records.allSatisfy { ($0.fields._lazy != nil) == lazy && $0.recordChangeTag != nil })
            #expect(records.allSatisfy { Self.identical($0, expected[$0.recordID]) })
        }
    }

    /// A string column keeps its few distinct values in a dictionary, each once as bytes and once
    /// as the string records are made with; past the threshold it keeps the strings by position.
    /// Records read before, across and after the move, and a page held across it, come back as
    /// saved.
    @Test func aStringColumnLeavingItsDictionaryKeepsEveryValue() throws {
        let database = Database(indexPolicy: .declared)
        func record(_ index: Int) -> Record {
            Record(recordType: "T", recordName: "r\(index)", fields: ["s": .string("value \(index) " + String(repeating: "é", count: index % 9)), "n": .int64(Int64(index))])
        }
        try database.importRecords((0..<4_000).map(record))
        func column() throws -> Column {
            let table = try #require(database.tables["T"])
            return table.columns.columns[try #require(table.columns.index(of: FieldKey("s")))]
        }
        #expect(try column().dictionary != nil)
        let query = KQuery.Query(recordType: "T", predicate: try ValidatedPredicate("n < 100"), resultsLimit: 100)
        let held = try database.perform(query, now: 0).records
        let read = try database.perform(query, now: 0).records
        #expect(read.allSatisfy { Self.identical($0, record(Int($0.recordID.recordName.dropFirst()) ?? -1)) })
        var expected = Dictionary(uniqueKeysWithValues: (0..<4_000).map { (RecordID(recordName: "r\($0)"), record($0)) })
        for index in 4_000..<5_500 {
            let saved = try database.save(RecordOperation(kind: .create, record: record(index))).record
            expected[saved.recordID] = saved
        }
        #expect(try column().dictionary == nil)
        #expect(held.count == 100 && held.allSatisfy { Self.identical($0, record(Int($0.recordID.recordName.dropFirst()) ?? -1)) })
        #expect(Self.holds(database, expected))
    }

    /// A save after a query, its records still held, changes the columns in place: the query's
    /// snapshot made the fields of its records and let go of the columns first (holding them, it
    /// would have made the save copy every column it changed, a million values each).
    @Test func aSaveAfterAQueryChangesTheColumnsInPlace() throws {
        let database = Database(indexPolicy: .declared)
        try database.importRecords((0..<500).map { Record(recordType: "T", recordName: "r\($0)", fields: ["n": .int64(Int64($0))]) })
        func address() throws -> UnsafeRawPointer? {
            let table = try #require(database.tables["T"])
            return table.columns.columns[try #require(table.columns.index(of: FieldKey("n")))].integers.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }
        }
        let before = try address()
        let held = try database.perform(KQuery.Query(recordType: "T", predicate: try ValidatedPredicate("n < 100")), now: 0).records
        #expect(held.allSatisfy { $0.fields._lazy != nil })
        try database.save(RecordOperation(kind: .forceReplace, record: Record(recordType: "T", recordName: "r3", fields: ["n": .int64(-3)])))
        #expect(try address() == before)
        #expect(held.count == 100 && held.first { $0.recordID.recordName == "r3" }?["n"] == .int64(3))
        #expect(database.record(RecordID(recordName: "r3"))?["n"] == .int64(-3))
    }

    /// Random records of every kind, system field and zone, in two types, through random saves,
    /// replaces and deletes (compacting often), against a plain dictionary of what was saved; then
    /// through a file and its reopening.
    @Test func recordsComeBackThroughEveryChange() async {
        await propertyCheck(count: 40, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-columns-\(UUID().uuidString)")
            try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let path = directory.appendingPathComponent("db.kquery").path
            guard let database = try? Database(path: path) else {
                Issue.record("the database file did not open")
                return
            }
            database.createsMissingZones = true
            database.minimumDeadRows = 2
            var expected: [RecordID: Record] = [:]
            for _ in 0..<Int(rng.next() % 60) {
                Self.saveOrDeleteRandomRecord(in: database, &expected, &rng)
            }
            #expect(Self.holds(database, expected))
            guard let reopened = try? Database(path: path) else {
                Issue.record("the database file did not reopen")
                return
            }
            #expect(Self.holds(reopened, expected))
        }
    }
}
