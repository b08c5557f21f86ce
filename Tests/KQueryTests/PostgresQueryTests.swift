import Foundation
import KQuery
import KQueryContainer
import KQueryPostgres
import KQueryStore
import KQueryTestSupport
import PropertyBased
import Testing

/// Queries on PostgreSQL run as SQL (`PostgresQueryCompiler`) and must answer exactly as the
/// in-memory store does: same records, same order, same cursors, on the edge values of
/// research/scale-out.md §4 (int64 extremes, doubles near them, NaN, -0.0, empty and non-NFC
/// strings, empty lists, missing fields, locations at the poles and the antimeridian).
@Suite struct PostgresQueryTests {
    /// The public database (or `scope`'s, for `user`) of a new container on `storage`, its clock fixed.
    static func database(on storage: PostgresContainerStorage, _ scope: DatabaseScope = .public, user: String? = nil) throws -> ContainerDatabase {
        try Container(containerIdentifier: ContainerFixture.identifier, storage: storage, clock: { 1_700_000_000_000 }).database(scope, user: user)
    }

    // MARK: Keys

    static let edgeValues: [FieldValue] = [
        .int64(.min), .int64(.min + 1), .int64(-1), .int64(0), .int64(1), .int64(9_007_199_254_740_993), .int64(.max - 1), .int64(.max),
        .double(-.infinity), .double(-9_223_372_036_854_775_808.0), .double(-1.5), .double(-0.0), .double(0.0), .double(0.5), .double(1),
        .double(9_007_199_254_740_992), .double(9_223_372_036_854_775_808.0), .double(.infinity), .double(.nan),
        .double(.greatestFiniteMagnitude), .double(.leastNonzeroMagnitude),
        .timestamp(.min), .timestamp(-1), .timestamp(0), .timestamp(1_700_000_000_000), .timestamp(.max),
        .string(""), .string("a"), .string("a\u{0}"), .string("ab"), .string("B"), .string("\u{E9}"), .string("e\u{301}"), .string("\u{10FFFF}"),
        .reference(Reference(recordID: RecordID(recordName: "a"))), .reference(Reference(recordID: RecordID(recordName: "a\u{0}b"))),
        .reference(Reference(recordID: RecordID(recordName: "a", zoneID: ZoneID(zoneName: "z", ownerName: "o")))),
        .reference(Reference(recordID: RecordID(recordName: "ab"))),
        .bytes([]), .bytes([0]), .bytes([0, 1]), .bytes([255]),
        .assetID(""), .assetID("x"),
        .location(Location(latitude: -90, longitude: 0)), .location(Location(latitude: 0, longitude: -180)),
        .location(Location(latitude: -0.0, longitude: 180)), .location(Location(latitude: 90, longitude: 0)),
        .list(.int64, []), .list(.int64, [.int64(1)]),
    ]

    /// The keys order as `SortOrder` does, and are equal exactly when it calls values equal.
    @Test func keysOrderAsTheSortOrder() {
        for a in Self.edgeValues {
            for b in Self.edgeValues {
                let (keyA, keyB) = (PostgresValueKey.bytes(a), PostgresValueKey.bytes(b))
                let sortA = KQuery.SortDescriptor("f").sortValue { _ in a }
                #expect((keyA == nil) == (sortA == nil), "\(a)")
                guard let keyA, let keyB else { continue }
                let keys = keyA.lexicographicallyPrecedes(keyB) ? -1 : (keyA == keyB ? 0 : 1)
                #expect(keys == SortOrder.compare(a, b), "\(a) against \(b)")
                let hexOrder = PostgresValueKey.hex(keyA).utf8.lexicographicallyPrecedes(PostgresValueKey.hex(keyB).utf8)
                #expect(hexOrder == (keys < 0), "hex of \(a) against \(b)")
            }
        }
    }

    @Test func randomNumbersOrderExactly() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let a = Self.randomNumber(&rng)
            let b = Self.randomNumber(&rng)
            guard let keyA = PostgresValueKey.bytes(a), let keyB = PostgresValueKey.bytes(b) else { return }
            let keys = keyA.lexicographicallyPrecedes(keyB) ? -1 : (keyA == keyB ? 0 : 1)
            #expect(keys == SortOrder.compare(a, b), "\(a) against \(b)")
        }
    }

    static func randomNumber(_ rng: inout SplitMix) -> FieldValue {
        let bases: [Int64] = [.min, -9_007_199_254_740_993, -1, 0, 1, 9_007_199_254_740_993, .max]
        let base = bases.randomElement(using: &rng) ?? 0
        let near = base.addingReportingOverflow(Int64.random(in: -3000...3000, using: &rng)).partialValue
        switch Int.random(in: 0...3, using: &rng) {
        case 0: return .int64(near)
        case 1: return .double(Double(near))
        case 2: return .double(Double(near).nextUp)
        default: return .double(Double(near) + Double.random(in: -2...2, using: &rng))
        }
    }

    // MARK: Differential

    static let zones = [ZoneID.default, ZoneID(zoneName: "z1", ownerName: "_u1"), ZoneID(zoneName: "z2", ownerName: "_u1")]
    /// Strings longer than a stored key's head (`PostgresValueKey.indexedBytes`, the type's byte
    /// first): sharing the head and differing in the tail; exactly a head long (its prefix); one
    /// byte shorter (a constant tested exactly).
    static let long = String(repeating: "q", count: PostgresValueKey.indexedBytes + 100)
    static let strings = [
        "", "a", "ab", "abc", "B", "b", "\u{E9}t\u{E9}", "e\u{301}te\u{301}", "hello world", "Hello there", "world",
        long, long + "a", long + "b", String(long.prefix(PostgresValueKey.indexedBytes - 1)), String(long.prefix(PostgresValueKey.indexedBytes - 2)),
    ]
    static let numbers: [FieldValue] = [
        .int64(.min), .int64(-1), .int64(0), .int64(1), .int64(2), .int64(9_007_199_254_740_993), .int64(.max),
        .double(.nan), .double(-0.0), .double(0.5), .double(1), .double(9_007_199_254_740_992), .double(9_223_372_036_854_775_808.0), .double(-.infinity),
    ]
    static let locations = [
        Location(latitude: 89.9999, longitude: 10), Location(latitude: -90, longitude: 0), Location(latitude: 0, longitude: 179.9999),
        Location(latitude: 0, longitude: -179.9999), Location(latitude: 37.33, longitude: -122.03), Location(latitude: 37.34, longitude: -122.02),
        // A longitude beyond ±180 (the same place as one above), points the evaluator measures no
        // distance to (PostGIS would move them into range).
        Location(latitude: 37.33, longitude: 237.97), Location(latitude: 95, longitude: 10), Location(latitude: .nan, longitude: 0),
        Location(latitude: 10, longitude: .infinity),
    ]

    /// A point anywhere (many distinct distances, so a distance sort reads its points in batches).
    static func randomLocation(_ rng: inout SplitMix) -> Location {
        if Bool.random(using: &rng) { return locations.randomElement(using: &rng) ?? Location(latitude: 0, longitude: 0) }
        return Location(latitude: Double.random(in: -90...90, using: &rng), longitude: Double.random(in: -540...540, using: &rng))
    }

    static func randomRecord(_ rng: inout SplitMix, index: Int) -> Record {
        let zone = zones.randomElement(using: &rng) ?? .default
        // Few names, so records in different zones share them (ties broken by zone).
        let name = ["r", "s", "r\(index % 5)", "t\(index)"].randomElement(using: &rng) ?? "r"
        var record = Record(recordType: Int.random(in: 0..<6, using: &rng) == 0 ? "Other" : "Item", recordID: RecordID(recordName: name, zoneID: zone))
        func maybe(_ body: (inout SplitMix) -> FieldValue) -> FieldValue? { Int.random(in: 0..<4, using: &rng) == 0 ? nil : body(&rng) }
        record.fields["n"] = maybe { numbers.randomElement(using: &$0) ?? .int64(0) }
        record.fields["s"] = maybe { .string(strings.randomElement(using: &$0) ?? "") }
        record.fields["t"] = maybe { .timestamp(Int64.random(in: 0...5, using: &$0) * 1000) }
        record.fields["l"] = maybe { rng in
            .list(.string, (0..<Int.random(in: 0...3, using: &rng)).map { _ in .string(strings.randomElement(using: &rng) ?? "") })
        }
        record.fields["k"] = maybe { rng in .list(.int64, (0..<Int.random(in: 0...3, using: &rng)).map { _ in .int64(Int64.random(in: 0...4, using: &rng)) }) }
        record.fields["p"] = maybe { .location(randomLocation(&$0)) }
        record.fields["r"] = maybe { .reference(Reference(recordID: RecordID(recordName: ["r", "s", "a"].randomElement(using: &$0) ?? "r"))) }
        // Either kind in one field across records: the store compares them as the evaluator does.
        record.fields["x"] = maybe { rng in Bool.random(using: &rng) ? .string(strings.randomElement(using: &rng) ?? "") : numbers.randomElement(using: &rng) ?? .int64(0) }
        return record
    }

    static func randomOperand(_ field: String, _ rng: inout SplitMix) -> FieldValue {
        switch field {
        case "n": numbers.randomElement(using: &rng) ?? .int64(0)
        case "s", "l": .string(strings.randomElement(using: &rng) ?? "")
        case "t": .timestamp(Int64.random(in: 0...5, using: &rng) * 1000)
        case "k": .int64(Int64.random(in: 0...4, using: &rng))
        case "r": .reference(Reference(recordID: RecordID(recordName: ["r", "s", "a"].randomElement(using: &rng) ?? "r")))
        default: Bool.random(using: &rng) ? .string(strings.randomElement(using: &rng) ?? "") : numbers.randomElement(using: &rng) ?? .int64(0)
        }
    }

    static func randomCondition(_ rng: inout SplitMix, depth: Int = 0) -> Condition {
        let fields = ["n", "s", "t", "l", "k", "r", "x", "p", "missing"]
        let field = fields.randomElement(using: &rng) ?? "n"
        let reference = FieldReference.user(FieldKey(field))
        let relations: [Relation] = [.equal, .notEqual, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual]
        let relation = relations.randomElement(using: &rng) ?? .equal
        let options: ComparisonOptions = Int.random(in: 0..<4, using: &rng) == 0 ? [.caseInsensitive] : []
        // More tests than SQL takes (`PostgresContainerStorage.maximumFieldTests`): the rest are the evaluator's.
        if depth == 0 && Int.random(in: 0..<10, using: &rng) == 0 {
            return .and((0..<PostgresContainerStorage.maximumFieldTests + 8).map { _ in randomCondition(&rng, depth: 2) })
        }
        switch Int.random(in: 0..<(depth < 2 ? 16 : 12), using: &rng) {
        case 0: return .field(reference, .compare(relation, .value(randomOperand(field, &rng)), options))
        case 1: return .field(reference, Bool.random(using: &rng) ? .isNil : .isNotNil)
        case 2: return .field(reference, .between(.value(randomOperand(field, &rng)), .value(randomOperand(field, &rng))))
        case 3: return .field(reference, .oneOf((0..<Int.random(in: 0...3, using: &rng)).map { _ in .value(randomOperand(field, &rng)) }, options))
        case 4: return .field(reference, .string([.beginsWith, .contains, .endsWith].randomElement(using: &rng) ?? .beginsWith, strings.randomElement(using: &rng) ?? "", options))
        case 5: return .field(reference, .contains(.value(randomOperand(field, &rng)), []))
        case 6: return .field(reference, .containsAll((0..<Int.random(in: 0...2, using: &rng)).map { _ in .value(randomOperand(field, &rng)) }))
        case 7:
            let quantifier: Quantifier = [.any, .all, .none].randomElement(using: &rng) ?? .any
            return .field(reference, .members(quantifier, .compare(relation, .value(randomOperand(field, &rng)), [])))
        case 8: return .tokens(Bool.random(using: &rng) ? .all : .any, text: ["hello", "world", "hello world", "abc", "été"].randomElement(using: &rng) ?? "")
        case 9:
            let center = randomLocation(&rng)
            let relation = [Relation.lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual].randomElement(using: &rng) ?? .lessThan
            let radius = [0, -1, 0.001, 1, 2, 5000, 20_000, .infinity, .nan].randomElement(using: &rng) ?? 1
            return .distance(.user(FieldKey("p")), center: center, relation, radius: radius)
        case 10: return .field(.recordID, .compare(.equal, .value(.reference(Reference(recordID: RecordID(recordName: "r")))), []))
        case 11: return .field(.modificationDate, .compare(relation, .now, []))
        case 12: return .not(randomCondition(&rng, depth: depth + 1))
        case 13, 14: return .and((0..<Int.random(in: 1...3, using: &rng)).map { _ in randomCondition(&rng, depth: depth + 1) })
        default: return .or((0..<Int.random(in: 1...3, using: &rng)).map { _ in randomCondition(&rng, depth: depth + 1) })
        }
    }

    static func randomSort(_ rng: inout SplitMix) -> [KQuery.SortDescriptor] {
        // Sometimes more fields than SQL sorts by (`PostgresContainerStorage.maximumSortFields`).
        let count = Int.random(in: 0..<8, using: &rng) == 0 ? PostgresContainerStorage.maximumSortFields + 1 : Int.random(in: 0...2, using: &rng)
        return (0..<count).map { _ in
            let ascending = Bool.random(using: &rng)
            if Int.random(in: 0..<3, using: &rng) == 0 {
                return KQuery.SortDescriptor(distanceOf: "p", from: randomLocation(&rng), ascending: ascending)
            }
            let field = ["n", "s", "t", "l", "r", "x", "p", "missing", "recordID", "creationDate"].randomElement(using: &rng) ?? "n"
            return KQuery.SortDescriptor(field, ascending: ascending)
        }
    }

    /// Random records, random predicates and sorts, paged at random sizes: SQL on PostgreSQL and
    /// the in-memory store give the same pages, in the same order, with the same cursors (and each
    /// accepts the other's).
    @Test func sqlAnswersAsTheInMemoryStore() async throws {
        await propertyCheck(count: 24, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            do {
                // A radius holding this many points or more is measured record by record, in the
                // query's order (1 and 5: often; 2,000: never here).
                let densePoints = [1, 5, PostgresContainerStorage.densePoints].randomElement(using: &rng) ?? 1
                let storage = try PostgresContainerStorage(
                    location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)", densePoints: densePoints)
                let database = try Self.database(on: storage, .private, user: "_u1")
                for zone in Self.zones where !zone.isDefaultZone { try database.createZone(zone) }
                let records = (0..<40).map { Self.randomRecord(&rng, index: $0) }
                var byID: [RecordID: Record] = [:]
                for record in records { byID[record.recordID] = record }
                for zone in Self.zones {
                    let operations = byID.values.filter { $0.recordID.zoneID == zone }.map { RecordOperation(kind: .forceReplace, record: $0) }
                    if !operations.isEmpty { _ = try database.modify(operations, atomic: false) }
                }
                let stored = try database.lookup(Array(byID.keys)).compactMap(\.record)
                #expect(stored.count == byID.count)
                var answered = 0
                var withoutBlocking = 0
                let memory = KQueryStore.Database()
                try memory.importRecords(stored)
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                for _ in 0..<25 {
                    var condition = Self.randomCondition(&rng)
                    let zone: ZoneID? = Int.random(in: 0..<3, using: &rng) == 0 ? Self.zones.randomElement(using: &rng) : nil
                    let sort = Self.randomSort(&rng)
                    // Nearest first within a radius of the same centre (read by distance until beyond
                    // it); or a radius ANDed to a query read in its own order (dense or not).
                    if Bool.random(using: &rng) {
                        let radius = [0.001, 2, 5000, 20_000, .infinity, -1].randomElement(using: &rng) ?? 1
                        let relation: Relation = Bool.random(using: &rng) ? .lessThan : .lessThanOrEqual
                        let within: Condition
                        if case .distance(let field, let center)? = sort.first?.key {
                            within = .distance(field, center: center, relation, radius: radius)
                        } else {
                            within = .distance(.user(FieldKey("p")), center: Self.randomLocation(&rng), relation, radius: radius)
                        }
                        condition = Bool.random(using: &rng) ? within : .and([within, condition])
                    }
                    let query = Query(recordType: "Item", condition: condition, sortDescriptors: sort,
                                      resultsLimit: Int.random(in: 1...9, using: &rng), zoneID: zone)
                    var cursor: QueryCursor?
                    var pages = 0
                    repeat {
                        let sql = try database.query(query, cursor: cursor, now: now)
                        let expected = try memory.perform(query, cursor: cursor, now: now)
                        #expect(sql.records.map(\.recordID) == expected.records.map(\.recordID), "\(condition) sorted \(query.sortDescriptors), page \(pages)")
                        #expect(sql.cursor?.token == expected.cursor?.token, "\(condition) sorted \(query.sortDescriptors), page \(pages)")
                        // The same page, got by a task that holds no thread while PostgreSQL works.
                        if let quick = try await database.queryWithoutBlocking(query, cursor: cursor, now: now) {
                            #expect(quick.records.map(\.recordID) == expected.records.map(\.recordID), "without blocking: \(condition), page \(pages)")
                            #expect(quick.cursor?.token == expected.cursor?.token, "without blocking: \(condition), page \(pages)")
                            withoutBlocking += 1
                        }
                        if sql.records.map(\.recordID) != expected.records.map(\.recordID) { break }
                        answered += sql.records.count
                        cursor = pages % 2 == 0 ? sql.cursor : expected.cursor
                        pages += 1
                    } while cursor != nil && pages < 50
                }
                #expect(answered > 0)
                #expect(withoutBlocking > 0)
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    /// A database from before `record_values` (version 4: records, no query values), with its
    /// first form (version 5: rows named by text, records unnumbered) or without points (version
    /// 6) or without the shared user directory and learned schemas (version 7) or the record ID
    /// index of queries without a sort (version 8) is migrated and its records are numbered and
    /// indexed by the migration: queries find them, distance queries too.
    @Test(arguments: [4, 5, 6, 7, 8]) func theMigrationIndexesRecordsAlreadyStored(version: Int) throws {
        let cluster = try PostgresCluster.start()
        let url = try cluster.createDatabase()
        let name = try #require(url.split(separator: "/").last.map(String.init))
        let location = try #require(PostgresLocation(url: url))
        do {
            let containers = try PostgresContainers(location: location, connections: 1)
            defer { containers.close() }
            let database = try containers.openContainer("iCloud.migrate").database(.public)
            _ = try database.modify((0..<30).map {
                RecordOperation(kind: .create, record: Record(recordType: "Note", recordName: "n\($0)", fields: [
                    "v": .int64(Int64($0 % 3)), "p": .location(Location(latitude: 48 + Double($0) / 100, longitude: 2 - 360)),
                ]))
            })
        }
        // Back to that version's tables (`records.id` and today's `record_values` came with
        // version 6, `record_values.location` with 7).
        var downgrade = "DROP TABLE record_values; DROP INDEX records_by_id; ALTER TABLE records DROP COLUMN id; DROP SEQUENCE record_ids;"
        if version == 6 { downgrade = "DROP INDEX record_values_locations; ALTER TABLE record_values DROP COLUMN location;" }
        if version >= 7 { downgrade = "" }
        // (`directory_users` and `learned_schemas` came with version 8, `records_by_type` with 9,
        // `databases.subscriptions_version` with 10.)
        if version < 8 { downgrade = "DROP TABLE learned_schemas; DROP TABLE directory_users; " + downgrade }
        downgrade = "DROP INDEX records_by_type; ALTER TABLE databases DROP COLUMN subscriptions_version; " + downgrade
        if version == 5 {
            downgrade += """
                CREATE TABLE record_values (
                    database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL, record_name text NOT NULL,
                    record_type text NOT NULL, field text NOT NULL, sort_key text COLLATE "C", members text[],
                    PRIMARY KEY (database_id, zone_name, owner_name, record_name, field));
                INSERT INTO record_values SELECT database_id, zone_name, owner_name, record_name, record_type, 'v', NULL, NULL FROM records;
                """
        }
        _ = try cluster.psql(name, downgrade + "UPDATE kquery_schema SET version = \(version)")
        let containers = try PostgresContainers(location: location, connections: 1)
        defer { containers.close() }
        let database = try containers.openContainer("iCloud.migrate").database(.public)
        let query = Query(recordType: "Note", predicate: try ValidatedPredicate("v == 1"), sortDescriptors: [KQuery.SortDescriptor("v")], resultsLimit: 200)
        let found = try database.query(query).records.map(\.recordID.recordName)
        #expect(found == (0..<30).filter { $0 % 3 == 1 }.map { "n\($0)" }.sorted { ValueOrder.compareBytes($0, $1) < 0 })
        #expect(try database.recordCounts() == ["Note": 30])
        #expect(!database.queriesAreInMemory)
        #expect(try cluster.psql(name, "SELECT count(*) FROM pg_indexes WHERE indexname = 'records_by_type'").trimmingCharacters(in: .whitespacesAndNewlines) == "1")
        // Without a sort, pages in record ID order, each after the last.
        let unsorted = Query(recordType: "Note", predicate: try ValidatedPredicate("v != 1"), resultsLimit: 7)
        var pages: [String] = [], cursor: QueryCursor? = nil
        repeat {
            let page = try database.query(unsorted, cursor: cursor)
            pages += page.records.map(\.recordID.recordName)
            cursor = page.cursor
        } while cursor != nil && pages.count < 40
        #expect(pages == (0..<30).filter { $0 % 3 != 1 }.map { "n\($0)" }.sorted { ValueOrder.compareBytes($0, $1) < 0 })
        // Within 12 km of the 20th (1.1 km apart on a meridian), nearest first.
        let center = Location(latitude: 48.2, longitude: 2)
        let near = Query(recordType: "Note", condition: .distance(.user(FieldKey("p")), center: center, .lessThan, radius: 12),
                         sortDescriptors: [KQuery.SortDescriptor(distanceOf: "p", from: center)], resultsLimit: 200)
        let nearest = try database.query(near).records.map(\.recordID.recordName)
        let all = try database.lookup((0..<30).map { RecordID(recordName: "n\($0)") }).compactMap(\.record)
        #expect(nearest == (try near.perform(on: all, now: 0)).records.map(\.recordID.recordName))
        #expect(nearest.count == 20 && nearest.first == "n20")
    }

    /// Keys longer than an index entry holds were stored whole before version 11 when they
    /// compressed well (others failed the save: a 100 KB note was a 500): the migration splits
    /// them into head and tail and cuts long members, and queries order and find them exactly.
    @Test func longKeysStoredWholeBeforeVersion11AreSplitByTheMigration() throws {
        let cluster = try PostgresCluster.start()
        let url = try cluster.createDatabase()
        let name = try #require(url.split(separator: "/").last.map(String.init))
        let location = try #require(PostgresLocation(url: url))
        let long = String(repeating: "q", count: 3_000)
        let values = [long + "b", long + "a", long, "short", String(repeating: "q", count: PostgresValueKey.indexedBytes - 1)]
        do {
            let containers = try PostgresContainers(location: location, connections: 1)
            defer { containers.close() }
            let database = try containers.openContainer("iCloud.long").database(.public)
            _ = try database.modify(values.enumerated().map { index, value in
                RecordOperation(kind: .create, record: Record(recordType: "Note", recordName: "n\(index)", fields: [
                    "v": .string(value), "l": .list(.string, [.string(value)]),
                ]))
            })
        }
        // Back to version 10: each key whole, each member whole.
        var downgrade = "UPDATE record_values SET sort_key = sort_key || sort_tail WHERE sort_tail IS NOT NULL;"
        for value in values {
            let whole = try #require(PostgresValueKey.key(.string(value)))
            let head = PostgresValueKey.indexedHead(ofHex: whole).head
            if head != whole { downgrade += "UPDATE record_values SET members = ARRAY['\(whole)'] WHERE members = ARRAY['\(head)'];" }
        }
        _ = try cluster.psql(name, downgrade + "ALTER TABLE record_values DROP COLUMN sort_tail; UPDATE kquery_schema SET version = 10")
        #expect(try cluster.psql(name, "SELECT max(length(sort_key)) FROM record_values").trimmingCharacters(in: .whitespacesAndNewlines) == "6004")

        let containers = try PostgresContainers(location: location, connections: 1)
        defer { containers.close() }
        let database = try containers.openContainer("iCloud.long").database(.public)
        let limit = 2 * PostgresValueKey.indexedBytes
        #expect(try cluster.psql(name, "SELECT count(*) FROM record_values WHERE sort_tail IS NOT NULL").trimmingCharacters(in: .whitespacesAndNewlines) == "3")
        #expect(try cluster.psql(name, """
            SELECT count(*) FROM record_values WHERE length(sort_key) > \(limit) OR EXISTS (SELECT 1 FROM unnest(members) m WHERE length(m) > \(limit))
            """).trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        let expected = values.indices.sorted { ValueOrder.compareBytes(values[$0], values[$1]) < 0 }.map { "n\($0)" }
        for pageSize in [1, 2, 10] {
            var names: [String] = [], cursor: QueryCursor?
            let sorted = Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"), sortDescriptors: [KQuery.SortDescriptor("v")], resultsLimit: pageSize)
            repeat {
                let page = try database.query(sorted, cursor: cursor)
                names += page.records.map(\.recordID.recordName)
                cursor = page.cursor
            } while cursor != nil && names.count < 10
            #expect(names == expected, "pages of \(pageSize)")
        }
        let equal = Query(recordType: "Note", predicate: try ValidatedPredicate("v == %@", arguments: [.value(.string(long + "a"))]))
        #expect(try database.query(equal).records.map(\.recordID.recordName) == ["n1"])
        let member = Query(recordType: "Note", predicate: try ValidatedPredicate("l CONTAINS %@", arguments: [.value(.string(long + "b"))]))
        #expect(try database.query(member).records.map(\.recordID.recordName) == ["n0"])
    }

    /// `explanation` on PostgreSQL: every statement a query may run, in turn, with what it is for,
    /// its values and PostgreSQL's plan for it as a cursor; no record is read.
    @Test func theExplanationListsEachStatementWithItsValuesAndPlan() throws {
        let container = try ContainerFixture.container(.postgres)
        let database = try container.database(.public)
        _ = try database.modify((0..<20).map { index in
            RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: "r\(index)", fields: [
                "n": .int64(Int64(index)), "place": .location(Location(latitude: 48 + Double(index) / 100, longitude: 2)),
            ]))
        })
        let sorted = Query(recordType: "R", predicate: try ValidatedPredicate("n > 5"), sortDescriptors: [KQuery.SortDescriptor("n", ascending: false)])
        let text = try database.explanation(sorted)
        #expect(text.contains("Statement 1 of 2: the candidates with a value for the first sort field, in the sort's order"), "\(text)")
        #expect(text.contains("Statement 2 of 2: then the candidates without a value for the first sort field"), "\(text)")
        #expect(text.contains("= 'R'") && text.contains("ORDER BY"), "\(text)")
        #expect(text.components(separatedBy: "Plan:").count == 3 && text.contains("Scan"), "\(text)")

        let paris = Location(latitude: 48.85, longitude: 2.35)
        let near = Query(recordType: "R", predicate: try ValidatedPredicate("n > 5"), sortDescriptors: [KQuery.SortDescriptor(distanceOf: "place", from: paris)])
        let nearText = try database.explanation(near)
        #expect(nearText.contains("Statement 1 of 2: the points nearest first (on the sphere)"), "\(nearText)")
        #expect(nearText.contains("<->") && nearText.contains("::geography"), "\(nearText)")
        #expect(nearText.contains("Statement 2 of 2: then the records without a point"), "\(nearText)")

        let unsorted = try database.explanation(Query(recordType: "R", predicate: try ValidatedPredicate("n IN {}")))
        #expect(unsorted.contains("No statement runs"), "\(unsorted)")
        // Explaining reads nothing and leaves no cursor open: the query still answers.
        #expect(try database.query(sorted).records.first?.recordID.recordName == "r19")
    }

    /// Queries waiting for a connection as tasks (`queryWithoutBlocking`) and writes waiting on
    /// threads share a pool of two connections: every query gets its page, the same as the
    /// blocking way's, and every write commits.
    @Test func queriesWithoutBlockingShareThePoolWithWrites() async throws {
        let storage = try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)", connections: 2)
        let database = try Self.database(on: storage)
        _ = try database.modify((0..<50).map { index in
            RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: "r\(index)", fields: ["n": .int64(Int64(index % 10))]))
        })
        let query = Query(recordType: "R", predicate: try ValidatedPredicate("n == 3"), resultsLimit: 100)
        let expected = try database.query(query).records.map(\.recordID.recordName)
        #expect(expected == ["r13", "r23", "r3", "r33", "r43"])
        let writes = 40
        async let written: Int = withCheckedContinuation { done in
            DispatchQueue.global().async {
                var count = 0
                for index in 0..<writes {
                    let record = Record(recordType: "W", recordName: "w\(index)", fields: ["n": .int64(3)])
                    if (try? database.modify([RecordOperation(kind: .forceReplace, record: record)])) != nil { count += 1 }
                }
                done.resume(returning: count)
            }
        }
        let answers = try await withThrowingTaskGroup(of: [String]?.self) { group in
            for _ in 0..<200 { group.addTask { try await database.queryWithoutBlocking(query)?.records.map(\.recordID.recordName) } }
            var answers: [[String]?] = []
            for try await answer in group { answers.append(answer) }
            return answers
        }
        #expect(await written == writes)
        #expect(answers.count == 200)
        #expect(answers.allSatisfy { $0 == expected }, "\(Set(answers.map { "\($0 ?? [])" }))")
        // A query in a custom zone reads the zone first: the blocking way's.
        let inZone = Query(recordType: "R", predicate: try ValidatedPredicate("n == 3"), zoneID: ZoneID(zoneName: "elsewhere", ownerName: "_defaultOwner"))
        #expect(try await database.queryWithoutBlocking(inZone) == nil)
    }

    /// Synchronous queries made on Swift's cooperative threads (as a server's async code makes
    /// some storage calls) and queries as tasks share a pool of two: every one answers. A task
    /// holds its connection until a cooperative thread runs it again; with both connections lent
    /// to tasks and every cooperative thread waiting in the pool for one, nothing moved again
    /// (the whole test process hung: a time limit needs a cooperative thread too).
    @Test(.timeLimit(.minutes(1))) func callsOnCooperativeThreadsAndTasksShareThePool() async throws {
        let storage = try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)", connections: 2)
        let database = try Self.database(on: storage)
        _ = try database.modify([RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: "r", fields: ["n": .int64(1)]))])
        let query = Query(recordType: "R", predicate: try ValidatedPredicate("n == 1"))
        for _ in 0..<5 {
            let answered = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<100 {
                    if index % 2 == 0 {
                        group.addTask { try await database.queryWithoutBlocking(query)?.records.count ?? database.query(query).records.count }
                    } else {
                        group.addTask { try database.query(query).records.count }   // waits on a cooperative thread
                    }
                }
                var answered = 0
                for try await count in group { answered += count }
                return answered
            }
            #expect(answered == 100)
        }
    }

    /// Threads and tasks waiting for connections both get them: queries as tasks finish while
    /// threads keep asking for the connection tasks may take without a pause (neither kind starves).
    /// (Alone it takes 5-9 s; the deadline is generous because the whole suite, run in parallel,
    /// shares the two cooperative threads the tasks need: 20 s was missed there twice.)
    @Test(.timeLimit(.minutes(2))) func tasksAndThreadsWaitingTakeTurns() async throws {
        let storage = try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)", connections: 2)
        let database = try Self.database(on: storage)
        _ = try database.modify([RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: "r", fields: ["n": .int64(1)]))])
        let query = Query(recordType: "R", predicate: try ValidatedPredicate("n == 1"))
        #expect(try database.query(query).records.count == 1)
        // Threads reading until the tasks are done, or 60 s have passed (then the tasks starved).
        let tasksDone = Locked(false)
        let deadline = Date().addingTimeInterval(60)
        let threadReads = Locked(0)
        let threads = (0..<4).map { _ in
            Task.detached {
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().async {
                        while !tasksDone.withLock({ $0 }) && Date() < deadline {
                            if (try? database.query(query).records.count) == 1 { threadReads.withLock { $0 += 1 } }
                        }
                        done.resume()
                    }
                }
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        let answered = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<50 { group.addTask { try await database.queryWithoutBlocking(query)?.records.count ?? 0 } }
            var answered = 0
            for try await count in group { answered += count }
            return answered
        }
        let finishedInTime = Date() < deadline
        tasksDone.withLock { $0 = true }
        for thread in threads { await thread.value }
        #expect(answered == 50)
        #expect(finishedInTime)
        #expect(threadReads.withLock { $0 } > 0)
    }

    /// Connections PostgreSQL ended (a restart, an administrator's `pg_terminate_backend`) are
    /// dropped, not lent again: queries (as tasks and on threads) and writes answer after it,
    /// on new connections, and at most one statement a connection fails meanwhile.
    @Test(.timeLimit(.minutes(1))) func connectionsPostgreSQLEndedAreReplaced() async throws {
        let cluster = try PostgresCluster.start()
        let (name, url) = try cluster.createNamedDatabase()
        let storage = try PostgresContainerStorage(location: try #require(PostgresLocation(url: url)), containerIdentifier: "test", connections: 2)
        let database = try Self.database(on: storage)
        _ = try database.modify((0..<10).map { index in
            RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: "r\(index)", fields: ["n": .int64(Int64(index % 2))]))
        })
        let query = Query(recordType: "R", predicate: try ValidatedPredicate("n == 1"))
        let expected = ["r1", "r3", "r5", "r7", "r9"]
        #expect(try database.query(query).records.map(\.recordID.recordName) == expected)
        // One or both connections open and idle.
        async let first = database.queryWithoutBlocking(query)
        async let second = database.queryWithoutBlocking(query)
        #expect(try await [first, second].map { $0?.records.map(\.recordID.recordName) } == [expected, expected])
        // (One or two: the two queries may have run one after the other, on one connection.)
        let endedCount = try cluster.endConnections(to: name)
        #expect((1...2).contains(endedCount))

        var failures: [String] = []
        for round in 0..<6 {
            do {
                let quick = try await database.queryWithoutBlocking(query)
                #expect(quick?.records.map(\.recordID.recordName) == expected, "round \(round)")
                #expect(try database.query(query).records.map(\.recordID.recordName) == expected, "round \(round)")
                _ = try database.modify([RecordOperation(kind: .forceReplace, record: Record(recordType: "W", recordName: "w\(round)"))])
            } catch {
                failures.append("round \(round): \(error)")
            }
        }
        #expect(failures.count <= endedCount, "\(failures)")
        #expect(try database.lookup([RecordID(recordName: "w5")]).first?.record != nil)
    }

    /// A radius estimated to hold many points is measured record by record in the query's order
    /// (PostgreSQL otherwise sorted every record within it first); a narrower one is found through
    /// the points' index, a capped number of them, and read in order when it holds more. Each
    /// answers as the evaluator.
    @Test func aRadiusHoldingManyPointsIsMeasuredRecordByRecord() throws {
        let storage = try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)", densePoints: 5)
        let database = try Self.database(on: storage)
        // Records r<index> at the points `point` gives, and a query within `km` of a point.
        func place(_ indices: Range<Int>, _ point: (Int) -> Location) throws {
            _ = try database.modify(indices.map { index in
                RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: "r\(index)", fields: [
                    "n": .int64(Int64(index)), "place": .location(point(index)),
                ]))
            })
        }
        func within(_ km: Int, of here: Location, _ more: String = "", limit: Int? = nil) throws -> Query {
            Query(recordType: "R", predicate: try ValidatedPredicate("distanceToLocation:fromLocation:(place, $here) < \(km)\(more)", variables: [
                "here": .value(.location(here)),
            ]), resultsLimit: limit)
        }
        try place(0..<20) { Location(latitude: 48 + Double($0) / 100, longitude: 2) }
        let wide = try within(100, of: Location(latitude: 48.1, longitude: 2), " AND n >= 2", limit: 4)
        let wideText = try database.explanation(wide)
        // (Explaining reads no rows: it shows the walk, then the radius through its index.)
        #expect(wideText.contains("Statement 1 of 4: whether the radius holds 5 points or more")
                && wideText.contains("records in the query's order, each one's point measured"), "\(wideText)")
        #expect(wideText.contains("COALESCE((SELECT ST_DWithin("), "\(wideText)")
        // Every page's record names, in order.
        func names(_ query: Query) throws -> [String] {
            var names: [String] = []
            var cursor: QueryCursor?
            repeat {
                let page = try database.query(query, cursor: cursor)
                names += page.records.map(\.recordID.recordName)
                cursor = page.cursor
            } while cursor != nil
            return names
        }
        #expect(try names(wide) == (2..<20).map { "r\($0)" }.sorted())

        // 2 km around r0's point holds r0 and r1 (1.1 km apart): fewer than 5, found through the index.
        let narrow = try within(2, of: Location(latitude: 48, longitude: 2))
        let narrowText = try database.explanation(narrow)
        #expect(narrowText.contains("whether the radius holds 5 points or more") && !narrowText.contains("COALESCE"), "\(narrowText)")
        #expect(narrowText.contains("AND ST_DWithin(v.location"), "\(narrowText)")
        #expect(try database.query(narrow).records.map(\.recordID.recordName) == ["r0", "r1"])

        // 6 km around r0's point holds r0 to r5: more than 5, its 5th nearest (4.4 km) out so far
        // that the radius is estimated to hold 9 (fewer than 20): through the index, at most 40 points.
        let between = try within(6, of: Location(latitude: 48, longitude: 2), " AND n >= 1", limit: 4)
        let betweenText = try database.explanation(between)
        #expect(betweenText.contains("whether the radius holds 5 points or more")
                && betweenText.contains("at most 40 points within the radius") && betweenText.contains("LIMIT"), "\(betweenText)")
        #expect(!betweenText.contains("COALESCE"), "\(betweenText)")
        #expect(try names(between) == (1...5).map { "r\($0)" }.sorted())
        // Only 2 km wide, estimated to hold 9, but 45 points 1.5 km out within it: more than the
        // 40 read through the index, so read in order.
        try place(20..<65) { Location(latitude: 47.5 + Double($0) / 100_000, longitude: 3) }
        let crowded = try within(2, of: Location(latitude: 47.5137, longitude: 3), limit: 4)
        let crowdedText = try database.explanation(crowded)
        #expect(crowdedText.contains("at most 40 points within the radius") && crowdedText.contains("holds more than the 40 points")
                && crowdedText.contains("COALESCE((SELECT ST_DWithin("), "\(crowdedText)")
        #expect(try database.query(crowded).records.map(\.recordID.recordName) == ["r20", "r21", "r22", "r23"])
        #expect(try names(crowded) == (20..<65).map { "r\($0)" }.sorted())
        // Another test beside the radius narrows the matches, not the points (still more than the
        // cap): every page answers as the evaluator.
        let fewer = try within(2, of: Location(latitude: 47.5137, longitude: 3), " AND n < 38", limit: 4)
        #expect(try names(fewer) == (20..<38).map { "r\($0)" }.sorted())
    }

    /// A dense radius read in order reads at most 1.5 records a statement for each point it is
    /// estimated to hold: when the sort puts its records far down the order (here behind 600 far
    /// away records, two of its own among them), the page is read through the points' index instead,
    /// page after page, each as the evaluator answers.
    @Test func aWalkThatFindsNoFullPageReadsTheRadiusThroughItsIndex() async throws {
        let storage = try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)", densePoints: 5)
        let database = try Self.database(on: storage)
        // 30 points 30 m apart going north from (10, 10): the 5th nearest 120 m out, so 1 km is
        // estimated to hold about 350 (a walk of 530); two of them early in the order (n 100 and 200).
        let near = (0..<30).map { (index: Int) -> Record in
            let n: Int64 = index < 2 ? Int64(100 * (index + 1)) : Int64(1000 + index)
            let place = Location(latitude: 10 + Double(index) * 0.00027, longitude: 10)
            return Record(recordType: "R", recordName: "c\(index)", fields: ["n": .int64(n), "place": .location(place)])
        }
        let far = (0..<600).map { (index: Int) -> Record in
            let place = Location(latitude: -40, longitude: Double(index) / 100)
            return Record(recordType: "R", recordName: "f\(index)", fields: ["n": .int64(Int64(index)), "place": .location(place)])
        }
        for chunk in [near, Array(far[..<200]), Array(far[200..<400]), Array(far[400...])] {
            _ = try database.modify(chunk.map { RecordOperation(kind: .forceReplace, record: $0) })
        }
        let query = Query(recordType: "R", predicate: try ValidatedPredicate("distanceToLocation:fromLocation:(place, $here) < 1", variables: [
            "here": .value(.location(Location(latitude: 10, longitude: 10))),
        ]), sortDescriptors: [KQuery.SortDescriptor("n")], resultsLimit: 4)
        let text = try database.explanation(query)
        #expect(text.contains("records in the query's order, each one's point measured, until the page is full (if not, the radius is read through its index)")
                && text.contains("points within the radius (found through its index), in the query's order"), "\(text)")
        #expect(text.contains("LIMIT $") && text.contains(") r\n  WHERE COALESCE((SELECT ST_DWithin("), "\(text)")
        var names: [String] = []
        var cursor: QueryCursor?
        var pages = 0
        repeat {
            let page = try database.query(query, cursor: cursor)
            names += page.records.map(\.recordID.recordName)
            cursor = page.cursor
            pages += 1
        } while cursor != nil && pages < 20
        #expect(names == (0..<30).map { "c\($0)" })
        // As the server asks first: a task that holds no thread while PostgreSQL works answers it
        // within its statements (the radius's look, the walk, the points), first page and next.
        let quick = try await database.queryWithoutBlocking(query)
        #expect(quick?.records.map(\.recordID.recordName) == ["c0", "c1", "c2", "c3"])
        let next = try await database.queryWithoutBlocking(query, cursor: quick?.cursor)
        #expect(next?.records.map(\.recordID.recordName) == ["c4", "c5", "c6", "c7"])
        // Beside another test, and not sorted (record names: the far ones first).
        let unsorted = Query(recordType: "R", predicate: try ValidatedPredicate("distanceToLocation:fromLocation:(place, $here) < 1 AND n > 150", variables: [
            "here": .value(.location(Location(latitude: 10, longitude: 10))),
        ]), resultsLimit: 50)
        #expect(try database.query(unsorted).records.map(\.recordID.recordName) == (1..<30).map { "c\($0)" }.sorted())
    }

    /// Table-driven rules: each predicate's SQL answer on a fixed set of records.
    @Test(arguments: [
        ("n == 1", ["int1", "double1"]),
        ("n < 0", ["min"]),
        ("n == 0", ["zero", "negzero"]),
        ("n != 1", ["min", "max", "zero", "negzero", "half", "big"]),
        ("n > 9007199254740992", ["big", "max"]),
        ("n == 9223372036854775807", ["max"]),
        ("s == 'é'", ["nfc"]),
        ("s == 'e\u{301}'", ["nfd"]),
        ("s BEGINSWITH 'a'", ["a", "ab"]),
        ("s BEGINSWITH ''", ["a", "ab", "empty", "nfc", "nfd"]),
        ("s == ''", ["empty"]),
        ("s != 'a'", ["ab", "empty", "nfc", "nfd"]),
        ("NOT s == 'a'", ["ab", "empty", "nfc", "nfd"]),
        ("l CONTAINS 'x'", ["list"]),
        ("ANY l == 'y'", ["list"]),
        ("self CONTAINS 'hello'", ["hello"]),
    ] as [(String, [String])])
    func rules(predicate: String, expected: [String]) throws {
        let container = try ContainerFixture.container(.postgres)
        let database = try container.database(.public)
        let records: [(String, [String: FieldValue])] = [
            ("int1", ["n": .int64(1)]), ("double1", ["n": .double(1)]), ("min", ["n": .int64(.min)]), ("max", ["n": .int64(.max)]),
            ("zero", ["n": .int64(0)]), ("negzero", ["n": .double(-0.0)]), ("half", ["n": .double(0.5)]),
            ("big", ["n": .double(9_223_372_036_854_775_808.0)]), ("nan", ["n": .double(.nan)]),
            ("a", ["s": .string("a")]), ("ab", ["s": .string("ab")]), ("empty", ["s": .string("")]),
            ("nfc", ["s": .string("\u{E9}")]), ("nfd", ["s": .string("e\u{301}")]),
            ("list", ["l": .list(.string, [.string("x"), .string("y")])]), ("emptylist", ["l": .list(.string, [])]),
            ("hello", ["h": .string("Hello, world")]),
        ]
        _ = try database.modify(records.map { RecordOperation(kind: .forceReplace, record: Record(recordType: "R", recordName: $0.0, fields: $0.1)) })
        let query = Query(recordType: "R", predicate: try ValidatedPredicate(predicate), resultsLimit: 200)
        let found = try database.query(query).records.map(\.recordID.recordName)
        let all = try database.lookup(records.map { RecordID(recordName: $0.0) }).compactMap(\.record)
        let memory = try query.perform(on: all, now: 0).records.map(\.recordID.recordName)
        #expect(Set(found) == Set(expected), "\(predicate)")
        #expect(found == memory, "\(predicate)")
    }
}
