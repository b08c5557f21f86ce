import PropertyBased
import Synchronization
import Testing
@testable import KQuery
@testable import KQueryStore

/// Indexed plans against the full scan: the same records, in the same order, page after page.
@Suite("Query planner properties")
struct StorePlannerTests {
    static let sortChoices: [[KQuery.SortDescriptor]] = [
        [],
        [KQuery.SortDescriptor("n")],
        [KQuery.SortDescriptor("n", ascending: false)],
        [KQuery.SortDescriptor("s"), KQuery.SortDescriptor("t", ascending: false)],
        [KQuery.SortDescriptor("t", ascending: false)],
        [KQuery.SortDescriptor(distanceOf: "loc", from: Location(latitude: 48.85, longitude: 2.35))],
        [KQuery.SortDescriptor("recordID", ascending: false)],
    ]

    /// Pages through `query` with cursors and returns every record, in order.
    static func allPages(_ database: Database, _ query: KQuery.Query, now: Int64) throws -> [Record] {
        var records: [Record] = []
        var cursor: QueryCursor?
        var pages = 0
        repeat {
            let page = try database.perform(query, cursor: cursor, now: now)
            #expect(page.records.count <= min(query.resultsLimit ?? 100, 200))
            records += page.records
            cursor = page.cursor
            pages += 1
        } while cursor != nil && pages < 1_000
        return records
    }

    static func randomDatabase(_ rng: inout SplitMix, policy: Database.IndexPolicy) -> Database {
        let database = Database(indexPolicy: policy)
        database.createsMissingZones = true
        database.automaticIndexThreshold = 0
        // Compact after a few deletions, so deleted rows both linger in postings and get compacted.
        database.minimumDeadRows = Int.random(in: 2...40, using: &rng)
        var records: [Record] = []
        for index in 0..<Int.random(in: 0...400, using: &rng) {
            var record = RandomData.record(&rng, index: index)
            if Int.random(in: 0..<5, using: &rng) == 0 { record.recordID.zoneID = ZoneID(zoneName: "Z") }
            records.append(record)
        }
        try? database.importRecords(records)
        return database
    }

    static func randomQuery(_ rng: inout SplitMix, extended: Bool) throws -> KQuery.Query {
        let text = extended ? RandomData.extendedPredicate(&rng) : RandomData.cloudKitPredicate(&rng)
        let predicate = try ValidatedPredicate(text, profile: extended ? .extended : .cloudkit)
        return KQuery.Query(
            recordType: "T", predicate: predicate, sortDescriptors: sortChoices.randomElement(using: &rng) ?? [],
            resultsLimit: [nil, 1, 7, 50, 500].randomElement(using: &rng) ?? nil,
            zoneID: Int.random(in: 0..<5, using: &rng) == 0 ? ZoneID(zoneName: "Z") : nil)
    }

    /// Counts the kinds of plan a property test met, to show every access path was exercised.
    final class Tally: @unchecked Sendable {
        private let lock = Mutex<[String: Int]>([:])
        func count(_ plan: QueryPlan) {
            let text = plan.description
            let kind = text.contains("  search") ? (text.contains("intersect") ? "intersect" : "search")
                : text.contains("  walk") ? "walk" : text.contains("  scan") ? "scan" : "empty"
            lock.withLock { $0[kind, default: 0] += 1 }
        }
        var counts: [String: Int] { lock.withLock { $0 } }
    }

    @Test func indexedPlansReturnWhatAScanReturns() async {
        let tally = Tally()
        defer {
            for kind in ["search", "intersect", "walk", "scan", "empty"] { #expect(tally.counts[kind, default: 0] > 0, "no \(kind) plan in \(tally.counts)") }
        }
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let database = Self.randomDatabase(&rng, policy: .automatic)
            for _ in 0..<8 {
                guard let query = try? Self.randomQuery(&rng, extended: Bool.random(using: &rng)) else { continue }
                let expected = database.performByScan(query, now: 2_000)
                let paged = try Self.allPages(database, query, now: 2_000)
                let plan = try database.plan(query, now: 2_000)
                tally.count(plan)
                #expect(paged.map(\.recordID) == expected.map(\.recordID), "\(query.predicate.condition) sorted by \(query.sortDescriptors)\n\(plan)")
            }
        }
    }

    @Test func plansStayRightWhileRecordsChange() async {
        await propertyCheck(count: 100, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let database = Self.randomDatabase(&rng, policy: .automatic)
            var queries: [KQuery.Query] = []
            for _ in 0..<6 { if let query = try? Self.randomQuery(&rng, extended: false) { queries.append(query) } }
            // Plan every query once, so their indexes exist before the changes.
            for query in queries { _ = try database.plan(query, now: 2_000) }
            for step in 0..<60 {
                let existing = database.allRecords
                var operation: RecordOperation
                switch Int.random(in: 0..<3, using: &rng) {
                case 0 where !existing.isEmpty:
                    let victim = existing[Int.random(in: 0..<existing.count, using: &rng)]
                    operation = RecordOperation(kind: .forceDelete, record: victim)
                case 1 where !existing.isEmpty:
                    var replacement = RandomData.record(&rng, index: 0)
                    replacement.recordID = existing[Int.random(in: 0..<existing.count, using: &rng)].recordID
                    operation = RecordOperation(kind: .forceReplace, record: replacement)
                default:
                    operation = RecordOperation(kind: .create, record: RandomData.record(&rng, index: 10_000 + step))
                }
                try database.save(operation)
            }
            for query in queries {
                #expect(try Self.allPages(database, query, now: 2_000).map(\.recordID) == database.performByScan(query, now: 2_000).map(\.recordID))
            }
        }
    }

    @Test func schemasAgreeWithTheScanAndRefuseWhatTheyMust() async {
        await propertyCheck(count: 150, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            func marks() -> FieldSchema.Indexes { FieldSchema.Indexes(rawValue: UInt8.random(in: 0...7, using: &rng)) }
            let schema = Schema([RecordTypeSchema(name: "T", fields: [
                FieldSchema("n", .number, marks()),
                FieldSchema("s", .scalar(.string), marks()),
                FieldSchema("tags", .list(.string), marks()),
                FieldSchema("t", .scalar(.timestamp), marks()),
                FieldSchema("loc", .scalar(.location), marks()),
                FieldSchema("ref", .scalar(.reference), marks()),
                FieldSchema("text", .scalar(.string), marks()),
                FieldSchema("___recordID", .scalar(.reference), marks()),
            ])])
            let database = Database(indexPolicy: .declared)
            try database.setSchema(schema)
            var records: [Record] = []
            for index in 0..<Int.random(in: 0...300, using: &rng) {
                var record = RandomData.record(&rng, index: index)
                if case .string? = record["n"] { record["n"] = nil }
                records.append(record)
            }
            try database.importRecords(records)
            for _ in 0..<8 {
                guard let query = try? Self.randomQuery(&rng, extended: Bool.random(using: &rng)) else { continue }
                var refused = false
                do {
                    try schema.check(query.predicate.condition, sortDescriptors: query.sortDescriptors, recordType: "T")
                } catch {
                    refused = true
                }
                if refused {
                    #expect(throws: DatabaseError.self) { try database.perform(query, now: 2_000) }
                    continue
                }
                #expect(try Self.allPages(database, query, now: 2_000).map(\.recordID) == database.performByScan(query, now: 2_000).map(\.recordID))
            }
        }
    }

    @Test func postingIntersectionsAndUnions() async {
        await propertyCheck(count: 200, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            func list() -> [RowID] {
                let size = [0, 1, 3, 40, 2_000].randomElement(using: &rng) ?? 0
                return Postings.sortedUnique((0..<size).map { _ in RowID.random(in: 0..<5_000, using: &rng) })
            }
            let (a, b) = (list(), list())
            #expect(Postings.intersection(a, b) == Set(a).intersection(b).sorted())
            #expect(Postings.union([a, b]) == Set(a).union(b).sorted())
        }
    }

    @Test func orderedIndexKeepsItsInvariants() async {
        await propertyCheck(count: 50, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            var entries = SortedEntries()
            var model: [(FieldValue, RowID)] = []
            for _ in 0..<3_000 {
                let value: FieldValue = Bool.random(using: &rng) ? .int64(Int64.random(in: 0..<200, using: &rng)) : .string(["a", "b", "c", "ab"].randomElement(using: &rng) ?? "a")
                let row = RowID.random(in: 0..<500, using: &rng)
                if Int.random(in: 0..<3, using: &rng) == 0, let victim = model.randomElement(using: &rng) {
                    entries.remove(SortedEntries.Entry(value: victim.0, row: victim.1))
                    model.removeAll { SortOrder.compare($0.0, victim.0) == 0 && $0.1 == victim.1 }
                } else if !model.contains(where: { SortOrder.compare($0.0, value) == 0 && $0.1 == row }) {
                    entries.insert(SortedEntries.Entry(value: value, row: row))
                    model.append((value, row))
                }
            }
            #expect(entries._checkInvariants())
            #expect(entries.count == model.count)
            var walked: [RowID] = []
            entries.forEach(from: entries.startPosition, to: entries.endPosition) { walked.append($0.row); return true }
            var reversed: [RowID] = []
            entries.forEachReversed(before: entries.endPosition) { reversed.append($0.row); return true }
            #expect(walked == reversed.reversed())
            let sorted = model.sorted { SortedEntries.Entry.order(SortedEntries.Entry(value: $0.0, row: $0.1), SortedEntries.Entry(value: $1.0, row: $1.1)) < 0 }
            #expect(walked == sorted.map(\.1))
        }
    }
}
