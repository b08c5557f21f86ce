import PropertyBased
import Testing
@testable import KQuery
@testable import KQueryStore

/// Indexes built in bulk (at open, or when an index is declared) read the columns rather than the
/// records: the token index tokenizes a string column's bytes in place, the range index of an
/// INT64 or TIMESTAMP column sorts (integer, row) pairs. Each must hold exactly what building it
/// from the records, one record at a time, would.
@Suite("Index builds")
struct IndexBuildTests {
    static let longText = String(repeating: "Élégant terrace ", count: 3_000) + "wine"

    /// A table of random records after random deletes and replaces (so rows and positions part
    /// ways), with fields of one kind or mixed kinds, string lists, non-ASCII and very long text.
    static func table(_ rng: inout SplitMix) -> RecordTable {
        let searchable: [FieldKey]? = switch Int.random(in: 0..<3, using: &rng) {
        case 0: nil
        case 1: [FieldKey("text"), FieldKey("tags")]
        default: [FieldKey("s")]
        }
        var table = RecordTable(recordType: "T", searchableFields: searchable)
        table.minimumDeadRows = .max   // no compaction: rows stay out of position order
        let integerKind = Int.random(in: 0..<3, using: &rng)
        func record(_ index: Int) -> Record {
            var record = RandomData.record(&rng, index: index)
            // Two tables in three keep `n` to one integer kind, so its column is not mixed.
            if integerKind > 0, let n = record["n"] {
                let number: Int64 = if case .int64(let x) = n { x } else { 25 }
                record["n"] = integerKind == 1 ? .int64(number) : .timestamp(number)
            }
            if Int.random(in: 0..<12, using: &rng) == 0 { record["text"] = .string(longText) }
            if Int.random(in: 0..<12, using: &rng) == 0 { record["s"] = .string("Straße café the 18.5 wine-bar") }
            return record
        }
        var next = 0
        for _ in 0..<Int.random(in: 0...80, using: &rng) {
            table.insert(record(next))
            next += 1
        }
        for _ in 0..<Int.random(in: 0...60, using: &rng) where table.count > 0 {
            let victim = table.records[Int.random(in: 0..<table.count, using: &rng)].recordID
            if Bool.random(using: &rng) {
                table.remove(victim)
            } else {
                var replacement = record(0)
                replacement.recordID = victim
                table.replace(replacement)
            }
            if Bool.random(using: &rng) {
                table.insert(record(next))
                next += 1
            }
        }
        return table
    }

    @Test func tokenIndexHoldsEveryRecordsTokens() async {
        await propertyCheck(count: 60, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            var table = Self.table(&rng)
            table.buildTokenIndex()
            var expected: [String: [RowID]] = [:]
            for (position, record) in table.records.enumerated() {
                for token in record.searchTokens(in: table.searchableFields) { expected[token, default: []].append(table.rowIDs[position]) }
            }
            let built = (table.tokenIndex?.postings ?? [:]).mapValues(\.rows)
            #expect(built == expected.mapValues { $0.sorted() }, "seed \(seed)")
        }
    }

    @Test func rangeIndexOfAnIntegerColumnHoldsEveryValueInOrder() async {
        await propertyCheck(count: 60, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            var table = Self.table(&rng)
            for name in ["n", "t"] {
                let field = FieldReference.user(FieldKey(name))
                table.buildOrderedIndex(on: field)
                var expected: [SortedEntries.Entry] = []
                for (position, record) in table.records.enumerated() {
                    if let value = record.fields[FieldKey(name)], OrderedIndex.isIndexable(value), !value.isList {
                        expected.append(SortedEntries.Entry(value: value, row: table.rowIDs[position]))
                    }
                }
                expected.sort { SortedEntries.Entry.order($0, $1) < 0 }
                let built = table.orderedIndexes[field]?.scalars.chunks.flatMap { $0 } ?? []
                #expect(built.map(\.row) == expected.map(\.row), "seed \(seed), \(name)")
                #expect(built.map(\.value) == expected.map(\.value), "seed \(seed), \(name)")
            }
        }
    }
}
