import PropertyBased
import Testing
@testable import KQuery
@testable import KQueryStore

/// A table finds its records by ID through `RowMap`, a hash table of rows that keeps no keys and
/// shifts entries back on removal. Against a dictionary of what the table holds, through random
/// inserts, replaces, deletes (with and without compaction) in several zones: every held ID maps to
/// its record's row, no removed one is found, and every entry stays reachable from its home slot.
@Suite("Record tables: ID map")
struct RowMapTests {
    @Test func everyRecordIsFoundByItsIDAndNoOtherIs() async {
        await propertyCheck(count: 80, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            var table = RecordTable(recordType: "T")
            table.minimumDeadRows = Bool.random(using: &rng) ? .max : 4
            var held: Set<RecordID> = []
            var gone: Set<RecordID> = []
            let names = Int.random(in: 1...400, using: &rng)
            for _ in 0..<Int.random(in: 0...1_500, using: &rng) {
                let id = RecordID(recordName: "r\(Int.random(in: 0..<names, using: &rng))",
                                  zoneID: Bool.random(using: &rng) ? .default : ZoneID(zoneName: "Z", ownerName: "_o"))
                switch Int.random(in: 0..<3, using: &rng) {
                case 0, 1:
                    let record = Record(recordType: "T", recordID: id, fields: Fields([("n", .int64(Int64.random(in: 0..<9, using: &rng)))]))
                    if held.contains(id) { table.replace(record) } else { table.insert(record) }
                    held.insert(id)
                    gone.remove(id)
                default:
                    table.remove(id)
                    if held.remove(id) != nil { gone.insert(id) }
                }
            }
            let reachable = table.rowsByID._checkInvariants()
            let mapped = table.rowsByID.count
            #expect(reachable)
            #expect(mapped == held.count && table.count == held.count)
            for id in held {
                let row = table.row(of: id)
                #expect(row.flatMap { table.record(at: $0)?.recordID } == id, "\(id)")
            }
            for id in gone { #expect(table.row(of: id) == nil, "\(id)") }
        }
    }
}
