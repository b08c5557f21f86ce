#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Testing
@testable import KQuery
@testable import KQueryStore

/// A fresh path for a database file, removed when the test ends.
struct TemporaryDatabasePath: ~Copyable {
    let path: String

    init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-\(UUID().uuidString).db").path
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

@Suite("Database: saving")
struct DatabaseSaveTests {
    static func artwork(_ name: String, _ fields: [String: FieldValue], zone: ZoneID = .default) -> Record {
        var record = Record(recordType: "Artwork", recordName: name, fields: fields)
        record.recordID.zoneID = zone
        return record
    }

    @Test func saveRules() throws {
        let database = Database()
        database.clock = { 1_000 }
        let created = try database.save(RecordOperation(kind: .create, record: Record(recordType: "T", recordName: "a", fields: ["x": .int64(1), "y": .int64(2)])))
        guard case .created(let first) = created else { Issue.record("not a create"); return }
        #expect(first.creationDate == 1_000 && first.modificationDate == 1_000 && first.recordChangeTag != nil)
        // update merges fields; replace replaces them; both need the current change tag unless forced.
        var update = Record(recordType: "T", recordName: "a", fields: ["x": .int64(5)])
        update.recordChangeTag = first.recordChangeTag
        database.clock = { 2_000 }
        guard case .updated(_, let merged) = try database.save(RecordOperation(kind: .update, record: update)) else { Issue.record("not an update"); return }
        #expect(merged["x"] == .int64(5) && merged["y"] == .int64(2))
        #expect(merged.recordChangeTag != first.recordChangeTag)
        #expect(merged.creationDate == 1_000 && merged.modificationDate == 2_000)
        let stale = #expect(throws: DatabaseError.self) { try database.save(RecordOperation(kind: .update, record: update)) }
        #expect(stale?.kind == .conflict)
        #expect(stale?.message.contains("recordChangeTag '\(first.recordChangeTag ?? "")'") == true)
        #expect(database.record(RecordID(recordName: "a")) == merged)
        guard case .updated(_, let replaced) = try database.save(RecordOperation(kind: .forceReplace, record: Record(recordType: "T", recordName: "a", fields: ["z": .int64(9)]))) else {
            Issue.record("not a replace")
            return
        }
        #expect(replaced.fields.count == 1)
        #expect((#expect(throws: DatabaseError.self) { try database.save(RecordOperation(kind: .create, record: Record(recordType: "T", recordName: "a"))) })?.kind == .alreadyExists)
        #expect((#expect(throws: DatabaseError.self) { try database.save(RecordOperation(kind: .forceReplace, record: Record(recordType: "U", recordName: "a"))) })?.kind == .invalidOperation)
        guard case .deleted(let gone) = try database.save(RecordOperation(kind: .forceDelete, record: Record(recordType: "T", recordName: "a"))) else {
            Issue.record("not a delete")
            return
        }
        #expect(gone == replaced)
        #expect(database.recordCount == 0)
        #expect((#expect(throws: DatabaseError.self) { try database.save(RecordOperation(kind: .delete, record: Record(recordType: "T", recordName: "a"))) })?.kind == .notFound)
    }

    @Test func aFailingBatchChangesNothing() throws {
        let holder = TemporaryDatabasePath()
        let database = try Database(path: holder.path)
        try database.save([RecordOperation(kind: .create, record: Self.artwork("a", ["price": .int64(1)]))])
        let before = database.allRecords
        let error = #expect(throws: DatabaseError.self) {
            try database.save([
                RecordOperation(kind: .create, record: Self.artwork("b", ["price": .int64(2)])),
                RecordOperation(kind: .forceUpdate, record: Self.artwork("a", ["price": .int64(3)])),
                RecordOperation(kind: .create, record: Self.artwork("a", [:])),
            ])
        }
        #expect(error?.operationIndex == 2 && error?.kind == .alreadyExists)
        #expect(database.allRecords == before)
        #expect(try Database(path: holder.path).allRecords == before)
    }

    @Test func operationsInOneBatchSeeEachOther() throws {
        let database = Database()
        let changes = try database.save([
            RecordOperation(kind: .create, record: Self.artwork("a", ["price": .int64(1)])),
            RecordOperation(kind: .forceUpdate, record: Self.artwork("a", ["title": .string("x")])),
            RecordOperation(kind: .forceDelete, record: Self.artwork("a", [:])),
        ])
        #expect(changes.count == 3)
        guard case .deleted(let last) = changes[2] else { Issue.record("not a delete"); return }
        #expect(last["title"] == .string("x") && last["price"] == .int64(1))
        #expect(database.recordCount == 0)
    }

    @Test func zones() throws {
        let database = Database()
        let zone = ZoneID(zoneName: "Archive", ownerName: "_u")
        let refused = #expect(throws: DatabaseError.self) { try database.save(RecordOperation(kind: .create, record: Self.artwork("a", [:], zone: zone))) }
        #expect(refused?.kind == .zoneNotFound)
        try database.createZone(zone)
        try database.save(RecordOperation(kind: .create, record: Self.artwork("a", [:], zone: zone)))
        try database.save(RecordOperation(kind: .create, record: Self.artwork("a", [:])))
        #expect(database.recordCount == 2)
        try database.deleteZone(zone)
        #expect(database.recordCount == 1 && !database.zones.contains(zone))
        #expect(throws: DatabaseError.self) { try database.deleteZone(.default) }
    }

    @Test func theFileKeepsEverything() throws {
        let holder = TemporaryDatabasePath()
        let schema = try Schema(text: "DEFINE SCHEMA RECORD TYPE Artwork (price INT64 QUERYABLE SORTABLE, title STRING SEARCHABLE);")
        let zone = ZoneID(zoneName: "Z", ownerName: "_o")
        var tags: [String?] = []
        do {
            let database = try Database(path: holder.path)
            try database.setSchema(schema)
            try database.createZone(zone)
            for (index, name) in ["a", "b", "c"].enumerated() {
                let change = try database.save(RecordOperation(kind: .create, record: Self.artwork(name, ["price": .int64(Int64(index)), "title": .string("Nuit \(name)")], zone: zone)))
                tags.append(change.record.recordChangeTag)
            }
            try database.save(RecordOperation(kind: .forceDelete, record: Self.artwork("b", [:], zone: zone)))
        }
        let reopened = try Database(path: holder.path)
        #expect(reopened.schema == schema)
        #expect(reopened.zones.contains(zone))
        #expect(reopened.allRecords.map(\.recordID.recordName).sorted() == ["a", "c"])
        #expect(reopened.record(RecordID(recordName: "c", zoneID: zone))?.recordChangeTag == tags[2])
        // Change tags keep increasing across opens: a new save never reuses an old tag.
        let next = try reopened.save(RecordOperation(kind: .create, record: Self.artwork("d", ["price": .int64(9)], zone: zone)))
        #expect(!tags.contains(next.record.recordChangeTag))
        let query = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price >= 2"), sortDescriptors: [KQuery.SortDescriptor("price")])
        #expect(try reopened.perform(query, now: 0).records.map(\.recordID.recordName) == ["c", "d"])
    }

    @Test func declaredIndexesPersist() throws {
        let holder = TemporaryDatabasePath()
        do {
            let database = try Database(path: holder.path)
            try database.importRecords((0..<50).map { Self.artwork("r\($0)", ["price": .int64(Int64($0))]) })
            try database.declareIndex(IndexDeclaration(recordType: "Artwork", field: .user(FieldKey("price")), index: .sortable))
        }
        let reopened = try Database(path: holder.path)
        #expect(reopened.declaredIndexes == [IndexDeclaration(recordType: "Artwork", field: .user(FieldKey("price")), index: .sortable)])
        let plan = try reopened.plan(KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price < 3")), now: 0)
        #expect(plan.description.contains("search the range index on price: price < 3 (3 rows)"))
    }

    @Test func aFileThatIsNotADatabaseIsRefused() throws {
        let holder = TemporaryDatabasePath()
        try Data("hello, this is not SQLite, not at all, no".utf8).write(to: URL(fileURLWithPath: holder.path))
        let error = #expect(throws: DatabaseError.self) { try Database(path: holder.path) }
        #expect(error?.kind == .storage)
        #expect(error?.message.hasPrefix(holder.path) == true)
    }
}

@Suite("Database: schema")
struct DatabaseSchemaTests {
    static let schemaText = """
        DEFINE SCHEMA
            CREATE ROLE curator;
            // Artworks.
            RECORD TYPE Artwork (
                "___recordID"   REFERENCE QUERYABLE,
                "___createTime" TIMESTAMP SORTABLE,
                title           STRING QUERYABLE SEARCHABLE SORTABLE,
                description     STRING,
                price           INT64 QUERYABLE SORTABLE,
                rating          NUMBER PREFERRED AS DOUBLE,
                tags            LIST<STRING> QUERYABLE,
                location        LOCATION QUERYABLE,
                image           ENCRYPTED BYTES,
                file            ASSET,
                GRANT READ, WRITE TO "_world",
                GRANT CREATE TO curator
            );
        """

    @Test func theSchemaLanguageReadsAndPrints() throws {
        let schema = try Schema(text: Self.schemaText)
        let artwork = try #require(schema["Artwork"])
        #expect(artwork.fields.count == 10)
        #expect(artwork.field(.creationDate)?.indexes == .sortable)
        #expect(artwork.field(.user(FieldKey("tags")))?.type == .list(.string))
        #expect(artwork.field(.user(FieldKey("rating")))?.type == .number)
        #expect(artwork.field(.user(FieldKey("file")))?.type == .scalar(.assetID))
        #expect(artwork.searchableFields == [FieldKey("title")])
        #expect(try Schema(text: schema.text) == schema)
    }

    @Test(arguments: [
        ("RECORD TYPE A (x INT64);", "1:1: expected DEFINE"),
        ("DEFINE SCHEMA RECORD TYPE A (x INTEGER);", "1:32: unknown field type 'INTEGER'"),
        ("DEFINE SCHEMA\nRECORD TYPE A (\n  x INT64\n  y INT64\n);", "4:3: expected ',' or ')' after a field of 'A'"),
        ("DEFINE SCHEMA RECORD TYPE A (x INT64, x STRING);", "1:39: field 'x' is defined twice"),
        ("DEFINE SCHEMA RECORD TYPE A (x LIST<LIST<INT64>>);", "1:32: a LIST holds a scalar type"),
        ("DEFINE SCHEMA RECORD TYPE A (GRANT FLY TO x);", "1:36: expected READ, CREATE or WRITE after GRANT"),
        ("DEFINE SCHEMA RECORD TYPE A (\"x);", "1:30: unterminated quoted name"),
        ("DEFINE SCHEMA RECORD TYPE A (x INT64); RECORD TYPE A (y INT64);", "1:52: record type 'A' is defined twice"),
        ("DEFINE SCHEMA RECORD TYPE \"a b\" (x INT64);", "1:27: invalid record type name 'a b'"),
    ])
    func badSchemasSayWhereAndWhat(text: String, expected: String) {
        #expect(throws: SchemaTextError.self) { try Schema(text: text) }
        do {
            _ = try Schema(text: text)
        } catch {
            #expect(error.description.hasPrefix(expected), "\(error)")
        }
    }

    /// A schema file: read and parsed, or an error naming the file, and the line and column.
    @Test func schemaFiles() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-schema-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let good = directory.appendingPathComponent("good.ckdb").path
        try "DEFINE SCHEMA RECORD TYPE A (x INT64 QUERYABLE);".write(toFile: good, atomically: true, encoding: .utf8)
        #expect(try Schema(contentsOfFile: good) == Schema(text: "DEFINE SCHEMA RECORD TYPE A (x INT64 QUERYABLE);"))

        let bad = directory.appendingPathComponent("bad.ckdb").path
        try "DEFINE SCHEMA\nRECORD TYPE A (x INTEGER);".write(toFile: bad, atomically: true, encoding: .utf8)
        let invalid = #expect(throws: SchemaFileError.self) { try Schema(contentsOfFile: bad) }
        #expect(invalid?.description.hasPrefix("\(bad):2:18: unknown field type 'INTEGER'") == true)

        let binary = directory.appendingPathComponent("binary.ckdb").path
        #expect(FileManager.default.createFile(atPath: binary, contents: Data([0xFF, 0xFE, 0x00])))
        for path in [binary, directory.appendingPathComponent("missing.ckdb").path] {
            let unreadable = #expect(throws: SchemaFileError.self) { try Schema(contentsOfFile: path) }
            #expect(unreadable?.description == "\(path): cannot read file")
        }
    }

    @Test func mangledSchemaTextIsAnErrorNotACrash() {
        var rng = SplitMix(seed: 3)
        let bytes = Array(Self.schemaText.utf8)
        let alphabet = Array("();,<>\"/-_ aZ9\n".utf8) + [0xC3, 0xA9, 0xFF]
        for _ in 0..<3_000 {
            var mangled = bytes
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let at = Int.random(in: 0..<mangled.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: mangled.remove(at: at)
                case 1: mangled.insert(alphabet.randomElement(using: &rng) ?? 0x20, at: at)
                default: mangled[at] = alphabet.randomElement(using: &rng) ?? 0x20
                }
            }
            let text = String(decoding: mangled, as: UTF8.self)
            if let schema = try? Schema(text: text) {
                // Whatever parses prints back to the same schema.
                #expect((try? Schema(text: schema.text)) == schema)
            }
        }
    }

    static func database() throws -> Database {
        let database = Database(indexPolicy: .declared)
        try database.setSchema(try Schema(text: schemaText))
        return database
    }

    @Test(arguments: [
        (Record(recordType: "Artwork", recordName: "a", fields: ["price": .string("cheap")]),
         "invalid attempt to set value type STRING for field 'price' for type 'Artwork', defined to be: INT64"),
        (Record(recordType: "Artwork", recordName: "a", fields: ["colour": .string("red")]),
         "Cannot create new field 'colour' in record type 'Artwork': the schema does not define it"),
        (Record(recordType: "Sculpture", recordName: "a"), "Cannot create new type 'Sculpture': the schema does not define it"),
        (Record(recordType: "Artwork", recordName: "a", fields: ["tags": .string("one")]),
         "invalid attempt to set value type STRING for field 'tags' for type 'Artwork', defined to be: LIST<STRING>"),
    ])
    func savesMustFitTheSchema(record: Record, message: String) throws {
        let database = try Self.database()
        let error = #expect(throws: DatabaseError.self) { try database.save(RecordOperation(kind: .create, record: record)) }
        #expect(error?.kind == .schemaViolation)
        #expect(error?.message == "record 'a': \(message)")
        #expect(database.recordCount == 0)
    }

    @Test func numbersAcceptBothKinds() throws {
        let database = try Self.database()
        try database.save(RecordOperation(kind: .create, record: Record(recordType: "Artwork", recordName: "a", fields: ["rating": .int64(4)])))
        try database.save(RecordOperation(kind: .create, record: Record(recordType: "Artwork", recordName: "b", fields: ["rating": .double(4.5)])))
        #expect(database.recordCount == 2)
    }

    @Test(arguments: [
        ("description == 'x'", "Field 'description' is not marked queryable", "description"),
        ("price BETWEEN {1, 2}", nil, nil),
        ("tags CONTAINS 'sea'", nil, nil),
        ("ANY tags > 'a'", "Field 'tags' is not marked sortable", "tags"),
        ("location != nil AND title > 'M'", nil, nil),
        ("creationDate > date('2024-01-01T00:00:00Z')", nil, nil),
        ("modificationDate > date('2024-01-01T00:00:00Z')", "Field 'modificationDate' is not marked sortable", "modificationDate"),
        ("colour == 'red'", "Field 'colour' is not defined in record type 'Artwork'", "colour"),
        ("price == 'cheap'", "Field 'price' is INT64 and cannot be compared with a STRING value", "price"),
        ("price > now()", "Field 'price' is INT64 and cannot be compared with now()", "price"),
        ("tags == 'sea'", "Field 'tags' is LIST<STRING>: compare its members with CONTAINS, IN or ANY", "tags"),
        ("ALL {'x', 'y'} IN title", "Field 'title' is STRING, not a list", "title"),
        ("distanceToLocation:fromLocation:(title, location(1, 2)) < 5", "Field 'title' is STRING: distanceToLocation:fromLocation: needs a LOCATION field", "title"),
        ("ALL tokenize('x', 'Cdl') IN allTokens", nil, nil),
        ("recordID == reference('a')", nil, nil),
    ] as [(String, String?, String?)])
    func queriesNeedTheirIndexes(predicate: String, message: String?, field: String?) throws {
        let schema = try Schema(text: Self.schemaText)
        let validated = try ValidatedPredicate(predicate, profile: .extended)
        if let message {
            let error = #expect(throws: InvalidPredicateError.self) { try schema.check(validated, recordType: "Artwork") }
            #expect(error?.message == message)
            // The caret goes under the field.
            if let error, let field, let range = predicate.range(of: field) {
                let column = predicate.distance(from: predicate.startIndex, to: range.lowerBound) + 1
                #expect(error.located(in: predicate) == "1:\(column): \(message)")
            }
            let database = try Self.database()
            let refused = #expect(throws: DatabaseError.self) { try database.perform(KQuery.Query(recordType: "Artwork", predicate: validated), now: 0) }
            #expect(refused?.message == message)
        } else {
            try schema.check(validated, recordType: "Artwork")
        }
    }

    @Test func sortsNeedSortableFields() throws {
        let schema = try Schema(text: Self.schemaText)
        #expect(throws: SchemaViolation.self) { try schema.check(sortDescriptors: [KQuery.SortDescriptor("description")], recordType: "Artwork") }
        try schema.check(sortDescriptors: [KQuery.SortDescriptor("price", ascending: false), KQuery.SortDescriptor("creationDate")], recordType: "Artwork")
    }

    @Test func tokensComeFromSearchableFieldsOnly() throws {
        let database = try Self.database()
        try database.save(RecordOperation(kind: .create, record: Record(recordType: "Artwork", recordName: "a", fields: [
            "title": .string("Harbour at dusk"), "description": .string("a lighthouse"),
        ])))
        func names(_ predicate: String) throws -> [String] {
            try database.perform(KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate(predicate)), now: 0).records.map(\.recordID.recordName)
        }
        #expect(try names("ALL tokenize('harbour', 'Cdl') IN allTokens") == ["a"])
        #expect(try names("ALL tokenize('lighthouse', 'Cdl') IN allTokens") == [])
        // Without the schema, every string field counts again.
        try database.setSchema(nil)
        #expect(try names("ALL tokenize('lighthouse', 'Cdl') IN allTokens") == ["a"])
    }

    @Test func aSchemaTheRecordsDoNotFitIsRefused() throws {
        let database = Database()
        try database.importRecords([Record(recordType: "Artwork", recordName: "a", fields: ["price": .string("cheap")])])
        let error = #expect(throws: DatabaseError.self) { try database.setSchema(try Schema(text: Self.schemaText)) }
        #expect(error?.kind == .schemaViolation)
        #expect(database.schema == nil)
    }
}

@Suite("Database: queries")
struct DatabaseQueryTests {
    static func catalogue(_ count: Int, policy: Database.IndexPolicy = .automatic) throws -> Database {
        let database = Database(indexPolicy: policy)
        var records: [Record] = []
        for index in 0..<count {
            let name = "art-" + String(repeating: "0", count: 5 - String(index).count) + String(index)
            let tags: FieldValue = .list(.string, [.string(index % 2 == 0 ? "even" : "odd"), .string("t\(index % 10)")])
            let location = Location(latitude: 48 + Double(index % 100) / 100, longitude: 2 + Double(index / 100 % 100) / 100)
            var fields: [String: FieldValue] = [:]
            fields["price"] = .int64(Int64(index % 1_000))
            fields["artist"] = .string("artist\(index % 50)")
            fields["title"] = .string(index % 7 == 0 ? "Harbour \(index)" : "Field \(index)")
            fields["tags"] = tags
            fields["location"] = .location(location)
            records.append(Record(recordType: "Artwork", recordName: name, fields: fields))
        }
        try database.importRecords(records)
        return database
    }

    @Test func pagesHoldAHundredByDefaultAndTwoHundredAtMost() throws {
        let database = try Self.catalogue(1_000)
        let everything = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("TRUEPREDICATE"))
        let first = try database.perform(everything, now: 0)
        #expect(first.records.count == 100 && first.cursor != nil)
        var large = everything
        large.resultsLimit = 5_000
        #expect(try database.perform(large, now: 0).records.count == 200)
    }

    @Test func cursorsStayRightWhileRecordsAreSaved() throws {
        let database = try Self.catalogue(1_000)
        let query = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price < 500"),
                                 sortDescriptors: [KQuery.SortDescriptor("price", ascending: false)], resultsLimit: 37)
        let steady = Set(database.performByScan(query, now: 0).map(\.recordID))
        var seen: [RecordID] = []
        var cursor: QueryCursor?
        var round = 0
        repeat {
            let page = try database.perform(query, cursor: cursor, now: 0)
            seen += page.records.map(\.recordID)
            cursor = page.cursor
            // Between pages: new matching records on both sides of the cursor, and a deletion of
            // a record not yet seen. None of them matches "throughout".
            round += 1
            try database.save(RecordOperation(kind: .create, record: Record(recordType: "Artwork", recordName: "new-high-\(round)", fields: ["price": .int64(499)])))
            try database.save(RecordOperation(kind: .create, record: Record(recordType: "Artwork", recordName: "new-low-\(round)", fields: ["price": .int64(0)])))
        } while cursor != nil
        #expect(seen.count == Set(seen).count, "a record came twice")
        #expect(steady.isSubset(of: Set(seen)), "a record that matched throughout was skipped")
    }

    @Test func aCursorFromAnotherQueryIsRefused() throws {
        let database = try Self.catalogue(300)
        let one = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price < 500"))
        let other = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price < 400"))
        let cursor = try #require(try database.perform(one, now: 0).cursor)
        #expect(throws: DatabaseError.self) { try database.perform(other, cursor: cursor, now: 0) }
    }

    @Test func desiredKeys() throws {
        let database = try Self.catalogue(10)
        var query = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price == 3"), desiredKeys: ["price"])
        #expect(try database.perform(query, now: 0).records.first?.fields.count == 1)
        query.desiredKeys = []
        let record = try #require(try database.perform(query, now: 0).records.first)
        #expect(record.fields.isEmpty && record.recordID.recordName == "art-00003")
    }

    @Test(arguments: [
        ("artist == 'artist7'", [], "search the equality index on artist: artist == \"artist7\" (40 rows)"),
        ("artist == 'artist7' AND price > 900", [], "intersect with the range index on price: price > 900 (198 rows)"),
        ("tags CONTAINS 't3'", [], "search the equality index on tags"),
        ("ALL {'even', 't4'} IN tags", [], "search the equality index on tags: ALL {\"even\", \"t4\"} IN tags (200 rows)"),
        ("price BETWEEN {10, 12}", [], "search the range index on price: price BETWEEN {10, 12} (6 rows)"),
        ("title BEGINSWITH 'Harbour 7'", [], "search the range index on title"),
        ("ALL tokenize('harbour', 'Cdl') IN allTokens", [], "search the token index"),
        ("distanceToLocation:fromLocation:(location, location(48.5, 2.5)) < 1", [], "search the spatial index on location"),
        ("recordID == reference('art-00042')", [], "search the record ID lookup"),
        ("price > 10", ["price"], "walk the range index on price in sort order"),
        ("title ENDSWITH '7'", [], "scan every record"),
        ("artist IN {}", [], "nothing can match"),
    ] as [(String, [String], String)])
    func explainSaysWhichIndex(predicate: String, sort: [String], expected: String) throws {
        let database = try Self.catalogue(2_000)
        // CloudKit's reading where it has one (its CONTAINS is list membership), else the extended one.
        let validated = try (try? ValidatedPredicate(predicate)) ?? ValidatedPredicate(predicate, profile: .extended)
        let query = KQuery.Query(recordType: "Artwork", predicate: validated, sortDescriptors: sort.map { KQuery.SortDescriptor($0) })
        let plan = try database.plan(query, now: 0)
        #expect(plan.description.contains(expected), "\(plan)")
        #expect(try database.perform(query, now: 0).records.map(\.recordID) == Array(database.performByScan(query, now: 0).prefix(100)).map(\.recordID))
    }

    @Test func replacingAStringWithACanonicallyEquivalentOneReindexesIt() throws {
        let database = Database(indexPolicy: .declared)
        // Enough other records that the index, not a scan, answers.
        try database.importRecords([Record(recordType: "T", recordName: "a", fields: ["s": .string("caf\u{E9}")])]
            + (0..<30).map { Record(recordType: "T", recordName: "x\($0)", fields: ["s": .string("other \($0)")]) })
        try database.declareIndex(IndexDeclaration(recordType: "T", field: .user(FieldKey("s")), index: [.queryable, .sortable]))
        try database.save(RecordOperation(kind: .forceReplace, record: Record(recordType: "T", recordName: "a", fields: ["s": .string("cafe\u{301}")])))
        func names(_ predicate: String) throws -> [String] {
            try database.perform(KQuery.Query(recordType: "T", predicate: try ValidatedPredicate(predicate)), now: 0).records.map(\.recordID.recordName)
        }
        // Strings compare by code point: the decomposed form is a different value now.
        let plan = try database.plan(KQuery.Query(recordType: "T", predicate: try ValidatedPredicate("s == 'other 1'")), now: 0)
        #expect(plan.description.contains("search the equality index on s"))
        #expect(try names("s == 'caf\\u00e9'") == [])
        #expect(try names("s == 'cafe\\u0301'") == ["a"])
        #expect(try names("s BEGINSWITH 'cafe'") == ["a"])
    }

    @Test func declaredPolicyBuildsNothingOnDemand() throws {
        let database = try Self.catalogue(500, policy: .declared)
        let plan = try database.plan(KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("artist == 'artist7'")), now: 0)
        #expect(plan.description.contains("scan every record"))
        #expect(!plan.description.contains("build"))
    }
}

@Suite("Database: record encoding")
struct RecordCodingTests {
    static func richRecord(_ rng: inout SplitMix, index: Int) -> Record {
        var record = RandomData.record(&rng, index: index)
        record.recordID.zoneID = ZoneID(zoneName: "Zone \(index % 3)", ownerName: "_owner\(index % 2)")
        record["blob"] = .bytes((0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
        record["asset"] = .assetID("asset-\(index)")
        record["place"] = .location(Location(latitude: -33.9, longitude: 151.2, altitude: 12, horizontalAccuracy: 5, verticalAccuracy: nil,
                                             course: 90, speed: nil, timestamp: Bool.random(using: &rng) ? 1_700_000_000_000 : nil))
        record["owner"] = .reference(Reference(recordID: RecordID(recordName: "u\(index)", zoneID: ZoneID(zoneName: "Z")), action: .deleteSelf))
        record["scores"] = .list(.double, [.double(1.5), .double(-0.0), .double(.infinity)])
        record["empty"] = .list(.int64, [])
        record["text"] = .string("naïve café 🎨 \u{0}")
        if Bool.random(using: &rng) {
            record.creationDate = 1_600_000_000_000
            record.creatorUserRecordName = "_creator"
        }
        if Bool.random(using: &rng) { record.modificationDate = 1_700_000_000_000 }
        if Bool.random(using: &rng) { record.lastModifiedUserRecordName = "_modifier" }
        if Bool.random(using: &rng) { record.recordChangeTag = "kq\(index)" }
        if Bool.random(using: &rng) { record.share = Reference(recordID: RecordID(recordName: "share-\(index)", zoneID: ZoneID(zoneName: "Shared"))) }
        return record
    }

    /// Decoding many records with one shared name cache (as an open does: records of a type repeat
    /// their field names, types and zones) gives each record back exactly, whatever came before it.
    @Test func recordsSurviveDecodingWithASharedCache() throws {
        var rng = SplitMix(seed: 11)
        var names = RecordCoding.FieldNames()
        for index in 0..<500 {
            var record = Self.richRecord(&rng, index: index)
            if index % 7 == 0 { record.recordType = "Other\(index % 3)" }
            if index % 5 == 0 { record["extra\(index % 4)"] = .int64(Int64(index)) }
            let bytes = RecordCoding.encode(record)
            #expect(try bytes.withUnsafeBytes { try RecordCoding.decode($0, names: &names) } == record)
        }
    }

    /// A share's own fields (`cloudkit.title`, ...) are read back as `Record(json:)` takes them,
    /// from a share only: on PostgreSQL every read of a share failed as a corrupt record.
    @Test func aSharesCloudKitFieldsSurviveAndOnlyAShares() throws {
        var share = Record(recordType: SharingKeys.shareRecordType, recordID: RecordID(recordName: "Share-1", zoneID: ZoneID(zoneName: "Z")))
        share.fields["cloudkit.title"] = .string("Groceries")
        share.fields["cloudkit.type"] = .string("com.example.list")
        var names = RecordCoding.FieldNames()
        #expect(try RecordCoding.encode(share).withUnsafeBytes { try RecordCoding.decode($0, names: &names) } == share)
        var other = share
        other.recordType = "Note"
        var fresh = RecordCoding.FieldNames()
        #expect(throws: RecordDecodingError.self) { try RecordCoding.encode(other).withUnsafeBytes { try RecordCoding.decode($0, names: &fresh) } }
    }

    /// A file keeps a record's fields in the order of the process that wrote it; read by another,
    /// they are put in this process's key order, and of a name written twice the last value stays.
    @Test func fieldsWrittenInAnotherOrderAreSortedAndTheLastRepeatWins() throws {
        let first = FieldKey("orderTestFirst")
        let second = FieldKey("orderTestSecond")
        #expect(first < second)
        var bytes: [UInt8] = [RecordCoding.version]
        for text in ["T", "r1", ZoneID.defaultZoneName, ZoneID.defaultOwnerName] { RecordCoding.writeString(text, to: &bytes) }
        bytes.append(0)   // no system fields
        RecordCoding.writeVarint(3, to: &bytes)
        for (name, value) in [("orderTestSecond", 1), ("orderTestFirst", 2), ("orderTestSecond", 3)] {
            RecordCoding.writeString(name, to: &bytes)
            RecordCoding.writeValue(.int64(Int64(value)), to: &bytes)
        }
        let decoded = try bytes.withUnsafeBytes { try RecordCoding.decode($0) }
        #expect(decoded.fields.map(\.key) == [first, second])
        #expect(decoded[first.name] == .int64(2) && decoded[second.name] == .int64(3))

        // Many fields (past the in-place sort), written in reverse, one of them twice.
        let keys = (0..<40).map { FieldKey("orderTestMany\($0)") }
        var many: [UInt8] = [RecordCoding.version]
        for text in ["T", "r2", ZoneID.defaultZoneName, ZoneID.defaultOwnerName] { RecordCoding.writeString(text, to: &many) }
        many.append(0)
        RecordCoding.writeVarint(41, to: &many)
        for (index, key) in keys.enumerated().reversed() {
            RecordCoding.writeString(key.name, to: &many)
            RecordCoding.writeValue(.int64(Int64(index)), to: &many)
        }
        RecordCoding.writeString(keys[7].name, to: &many)
        RecordCoding.writeValue(.int64(1_007), to: &many)
        let decodedMany = try many.withUnsafeBytes { try RecordCoding.decode($0) }
        #expect(decodedMany.fields.map(\.key) == keys)
        #expect(decodedMany[keys[7].name] == .int64(1_007) && decodedMany[keys[39].name] == .int64(39))
    }

    @Test func recordsSurviveEncoding() throws {
        var rng = SplitMix(seed: 7)
        for index in 0..<500 {
            let record = Self.richRecord(&rng, index: index)
            let bytes = RecordCoding.encode(record)
            let decoded = try bytes.withUnsafeBytes { try RecordCoding.decode($0) }
            #expect(decoded == record)
            // Reference equality ignores the action, so check it apart.
            if case .reference(let reference)? = decoded["owner"] { #expect(reference.action == .deleteSelf) } else { Issue.record("no reference") }
        }
    }

    /// A stored string is taken only when it is valid UTF-8, exactly as the standard library's
    /// validating initializer decides; a repair (U+FFFD in place of bad bytes) is never accepted,
    /// even where it keeps the length (a truncated four-byte sequence is one U+FFFD, three bytes).
    @Test(arguments: [
        [], Array("plain".utf8), Array("naïve café 🎨 \u{0}".utf8), Array("\u{FFFD}".utf8), Array("e\u{301}".utf8),
        [0x80], [0xC0, 0xAF], [0xE0, 0x80, 0x80], [0xF0, 0x9F, 0x98, 0x41], [0xF0, 0x9F, 0x98], [0xED, 0xA0, 0x80],
        [0xF5, 0x80, 0x80, 0x80], [0xFF], [0x41, 0xC3], [0xEF, 0xBF, 0xBD, 0xC3, 0x28],
    ] as [[UInt8]])
    func storedStringsMustBeValidUTF8(_ bytes: [UInt8]) {
        let decoded = bytes.withUnsafeBufferPointer { RecordCoding.validString($0) }
        #expect(decoded == String(validating: bytes, as: UTF8.self))
    }

    @Test func corruptBytesAreErrorsNotCrashes() {
        var rng = SplitMix(seed: 11)
        var failures = 0
        for index in 0..<2_000 {
            var bytes = RecordCoding.encode(Self.richRecord(&rng, index: index))
            switch index % 3 {
            case 0: bytes.removeLast(Int.random(in: 1...bytes.count, using: &rng))
            case 1: for _ in 0..<4 { bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng) }
            default: bytes.append(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
            }
            do {
                _ = try bytes.withUnsafeBytes { try RecordCoding.decode($0) }
            } catch {
                failures += 1
            }
        }
        // Truncation and trailing garbage always fail; random byte changes usually do.
        #expect(failures > 1_333)
    }
}
