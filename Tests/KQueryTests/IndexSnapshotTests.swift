import Foundation
import GRDB
@testable import KQuery
@testable import KQueryStore
import Testing

/// A large table's declared indexes are kept in its file as they were built at an open
/// (`IndexSnapshot`) and loaded by the next open instead of built. A snapshot must answer exactly as
/// the indexes it stands for, and one that no longer matches its file (a write since, records
/// changed behind the database's back, other declarations, damaged bytes) must be noticed and the
/// indexes built again.
@Suite("Database: index snapshots")
struct IndexSnapshotTests {
    /// Records of every kind an index keys: integers, doubles (NaN too), strings, lists, locations,
    /// references, timestamps, bytes, asset IDs; some fields missing; two record types.
    static func records(_ count: Int) -> [KQuery.Record] {
        (0..<count).map { index in
            var record = KQuery.Record(recordType: index % 7 == 0 ? "Artist" : "Artwork", recordName: "s\(index)", fields: [
                "price": .int64(Int64(index % 211)),
                "title": .string("sunset \(index % 17) Élégant harbour \(String(repeating: "x", count: index % 5))"),
                "place": .location(Location(latitude: 48 + Double(index % 90) / 10, longitude: Double(index % 360) - 180)),
                "when": .timestamp(Int64(index % 50) * 86_400_000),
            ])
            if index % 3 == 0 { record["rating"] = .double(index % 9 == 0 ? .nan : Double(index % 40) / 4) }
            if index % 5 == 0 { record["tags"] = .list(.string, [.string("wine"), .string("bar \(index % 11)"), .string("wine")]) }
            if index % 4 == 1 { record["artist"] = .reference(Reference(recordID: RecordID(recordName: "a\(index % 13)"))) }
            if index % 6 == 2 { record["blob"] = .bytes([UInt8(index % 3), 7]) }
            if index % 8 == 3 { record["asset"] = .assetID("asset-\(index % 5)") }
            if index % 10 == 4 { record["price"] = .double(Double(index % 211) + 0.5) }
            return record
        }
    }

    static let declarations: [(String, FieldSchema.Indexes)] = [
        ("price", [.queryable, .sortable]), ("title", .searchable), ("place", .queryable), ("when", .sortable),
        ("rating", [.queryable, .sortable]), ("tags", [.queryable, .sortable]), ("artist", .queryable),
        ("blob", .queryable), ("asset", [.queryable, .sortable]),
    ]

    static let predicates = [
        "price == 17", "price > 200", "price BETWEEN {10, 12}", "rating < 3", "rating == 5", "tags CONTAINS 'wine'",
        "tags CONTAINS 'bar 3'", "ANY tags BEGINSWITH 'bar'", "ALL tokenize('sunset 7 harbour', 'Cdl') IN allTokens",
        "ANY tokenize('elegant', 'Cdl') IN allTokens", "distanceToLocation:fromLocation:(place, location(50, -100)) < 300",
        "artist == %@", "when > %@", "asset == 'asset-3'",
    ]

    static func arguments(_ text: String) -> [Constant] {
        if text.contains("artist") { return [.value(.reference(Reference(recordID: RecordID(recordName: "a5"))))] }
        if text.contains("when") { return [.value(.timestamp(40 * 86_400_000))] }
        return []
    }

    /// A file of `count` records with every declaration on both types.
    static func makeFile(_ path: String, count: Int) throws {
        let database = try KQueryStore.Database(path: path)
        try database.importRecords(records(count))
        for type in ["Artwork", "Artist"] {
            for (field, index) in declarations {
                try database.declareIndex(IndexDeclaration(recordType: type, field: .user(FieldKey(field)), index: index))
            }
        }
    }

    static func open(_ path: String) throws -> KQueryStore.Database {
        try KQueryStore.Database(path: path, indexPolicy: .declared, minimumRowsForIndexSnapshot: 1)
    }

    /// Every predicate answers through the database's indexes as a scan of its records does, and
    /// at least one does through an index (the plan says so).
    static func expectAnswersAsAScan(_ database: KQueryStore.Database, indexes: Bool = true, sourceLocation: SourceLocation = #_sourceLocation) throws {
        var indexed = 0
        for text in predicates {
            for type in ["Artwork", "Artist"] {
                let query = KQuery.Query(recordType: type, predicate: try ValidatedPredicate(text, arguments: arguments(text)))
                let answer = try StorePlannerTests.allPages(database, query, now: 0).map(\.recordID)
                #expect(answer == database.performByScan(query, now: 0).map(\.recordID), "\(type): \(text)", sourceLocation: sourceLocation)
                if try database.plan(query, now: 0).description.contains("index") { indexed += 1 }
            }
        }
        if indexes { #expect(indexed >= predicates.count, sourceLocation: sourceLocation) }
    }

    static func snapshotBytes(_ database: KQueryStore.Database, _ type: String) throws -> [UInt8] {
        try #require(database.indexSnapshot(of: type))
    }

    @Test func theNextOpenLoadsTheIndexesTheOpenBeforeBuilt() throws {
        let holder = TemporaryDatabasePath()
        try Self.makeFile(holder.path, count: 3_000)
        let built = try Self.open(holder.path)
        #expect(built.indexSnapshotTypes.isEmpty)
        let loaded = try Self.open(holder.path)
        #expect(loaded.indexSnapshotTypes == ["Artwork", "Artist"])
        for type in ["Artwork", "Artist"] {
            let fields = try #require(loaded.tables[type]?.indexedFields)
            #expect(fields.hash.count == 7 && fields.ordered.count == 5 && fields.spatial.count == 7 && fields.tokens, "\(type)")
            // The same indexes, to the byte (a snapshot's encoding is deterministic).
            #expect(try Self.snapshotBytes(loaded, type) == Self.snapshotBytes(built, type), "\(type)")
        }
        try Self.expectAnswersAsAScan(loaded)
        // Indexes loaded from a snapshot are kept up to date by saves like built ones.
        try loaded.save([RecordOperation(kind: .forceReplace, record: KQuery.Record(recordType: "Artwork", recordName: "s1", fields: ["price": .int64(17), "title": .string("brand new words")]))])
        _ = try loaded.save(RecordOperation(kind: .forceDelete, record: KQuery.Record(recordType: "Artwork", recordName: "s2")))
        try Self.expectAnswersAsAScan(loaded)
    }

    @Test func aWriteMakesTheSnapshotStale() throws {
        let holder = TemporaryDatabasePath()
        try Self.makeFile(holder.path, count: 1_000)
        _ = try Self.open(holder.path)                       // builds and keeps a snapshot
        let writes: [(String, (KQueryStore.Database) throws -> Void)] = [
            ("a save", { try $0.save([RecordOperation(kind: .forceReplace, record: KQuery.Record(recordType: "Artwork", recordName: "s1", fields: ["price": .int64(5)]))]) }),
            ("a new zone", { try $0.createZone(ZoneID(zoneName: "Z", ownerName: "_o")) }),
            ("a zone deleted", { try $0.deleteZone(ZoneID(zoneName: "Z", ownerName: "_o")) }),
            ("a declaration", { try $0.declareIndex(IndexDeclaration(recordType: "Artist", field: .user(FieldKey("extra")), index: .queryable)) }),
        ]
        for (what, write) in writes {
            let before = try Self.open(holder.path)
            #expect(before.indexSnapshotTypes == ["Artwork", "Artist"], "before \(what)")
            try write(before)
            let after = try Self.open(holder.path)
            #expect(after.indexSnapshotTypes.isEmpty, "after \(what)")
            try Self.expectAnswersAsAScan(after)
        }
    }

    /// Records changed behind the database's back (no generation moved), other declarations, a
    /// damaged blob: each is detected, the indexes are built again, and a new snapshot replaces it.
    /// (Record s14 is an Artist: only that type's snapshot stops matching.)
    @Test(arguments: [
        ("DELETE FROM records WHERE recordName = 's14'", ["Artist"]),
        ("UPDATE records SET recordName = 's14x' WHERE recordName = 's14'", ["Artist"]),
        ("UPDATE index_snapshots SET body = substr(body, 1, 100) || x'ff' || substr(body, 102)", ["Artwork", "Artist"]),
        ("UPDATE index_snapshots SET body = substr(body, 1, length(body) - 9)", ["Artwork", "Artist"]),
        ("UPDATE index_snapshots SET body = x'' WHERE recordType = 'Artwork'", ["Artwork"]),
        ("UPDATE index_snapshots SET body = 'text'", ["Artwork", "Artist"]),
        ("UPDATE index_snapshots SET generation = generation + 1", ["Artwork", "Artist"]),
        // Artwork's declarations only, the first of them: Artist has none, Artwork other ones.
        ("UPDATE kquery_meta SET value = substr(value, 1, instr(value, char(10)) - 1) WHERE key = 'indexes'", ["Artwork"]),
    ])
    func aSnapshotThatDoesNotMatchItsFileIsRebuilt(_ change: String, stale: [String]) throws {
        let holder = TemporaryDatabasePath()
        try Self.makeFile(holder.path, count: 1_000)
        _ = try Self.open(holder.path)
        let queue = try DatabaseQueue(path: holder.path)
        try queue.write { db in try db.execute(sql: change) }
        try queue.close()
        let rebuilt = try Self.open(holder.path)
        let declared = Set(rebuilt.tables.keys.filter { !rebuilt.indexDeclarations(for: $0).isEmpty })
        #expect(rebuilt.indexSnapshotTypes == declared.subtracting(Set(stale)))
        try Self.expectAnswersAsAScan(rebuilt, indexes: false)
        let again = try Self.open(holder.path)
        #expect(again.indexSnapshotTypes == declared)
        try Self.expectAnswersAsAScan(again, indexes: false)
    }

    @Test func smallTablesKeepNoSnapshot() throws {
        let holder = TemporaryDatabasePath()
        try Self.makeFile(holder.path, count: 500)
        _ = try KQueryStore.Database(path: holder.path, indexPolicy: .declared, minimumRowsForIndexSnapshot: 400)   // Artwork only
        let reopened = try KQueryStore.Database(path: holder.path, indexPolicy: .declared, minimumRowsForIndexSnapshot: 400)
        #expect(reopened.indexSnapshotTypes == ["Artwork"])
        let queue = try DatabaseQueue(path: holder.path)
        #expect(try queue.read { try String.fetchAll($0, sql: "SELECT recordType FROM index_snapshots") } == ["Artwork"])
    }

    /// Whatever the bytes (cut anywhere, or changed anywhere with the checksum made to fit), decoding
    /// either gives indexes whose rows are all in the table or says why not; it never traps.
    @Test func damagedSnapshotsNeverTrap() throws {
        let database = KQueryStore.Database(indexPolicy: .declared)
        try database.importRecords(Self.records(300))
        for (field, index) in Self.declarations {
            try database.declareIndex(IndexDeclaration(recordType: "Artwork", field: .user(FieldKey(field)), index: index))
        }
        let table = try #require(database.tables["Artwork"])
        let good = try #require(database.indexSnapshot(of: "Artwork"))
        func decode(_ bytes: [UInt8]) -> Result<RecordTable.Indexes, IndexSnapshot.Mismatch> {
            database.indexes(fromSnapshot: bytes, of: "Artwork")
        }
        func restamped(_ body: ArraySlice<UInt8>) -> [UInt8] {
            var bytes = Array(body)
            let sum = bytes.withUnsafeBytes { IndexSnapshot.checksum($0) }
            withUnsafeBytes(of: sum.littleEndian) { bytes.append(contentsOf: $0) }
            return bytes
        }
        // `loadedNamesHash` is only kept for loaded tables: this one was imported, so its hash is
        // the initial one on both sides, and the good bytes decode.
        guard case .success = decode(good) else { Issue.record("the good snapshot does not decode"); return }
        var flipped = good
        flipped[flipped.count / 2] ^= 0x10
        if case .success = decode(flipped) { Issue.record("a flipped bit passed the checksum") }
        let body = good.dropLast(8)
        for length in stride(from: 0, to: body.count, by: max(1, body.count / 2_000)) {
            if case .success = decode(restamped(body.prefix(length))) { Issue.record("a snapshot cut at \(length) decoded") }
        }
        var generator = SplitMix(seed: 7)
        for _ in 0..<2_000 {
            var changed = Array(body)
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                changed[Int.random(in: 0..<changed.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            if case .success(let indexes) = decode(restamped(changed[...])) {
                for index in indexes.hash.values {
                    for postings in index.scalars.values.map(\.rows) + index.members.values.map(\.rows) {
                        #expect(postings.allSatisfy { Int($0) < table.count })
                    }
                }
            }
        }
    }
}
