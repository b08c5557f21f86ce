import KQuery
import PropertyBased
import Testing
@testable import KQueryContainer

/// Random modifies mixing operation kinds, stale tags, owning and validating references and the
/// atomic flag, checked against the rules that must hold whatever happens: an atomic custom zone
/// with a failure is left exactly as it was, no VALIDATE reference ever dangles, and the records
/// queries see are the records stored.
@Suite struct ContainerModifyPropertyTests {
    static let zones = [ZoneID(zoneName: "A", ownerName: "_u1"), ZoneID(zoneName: "B", ownerName: "_u1"), .default]
    /// Half the checks use six names, so that references and cascades meet often; half use
    /// fourteen and up to sixteen operations, most in one zone, so that one zone's group reads or
    /// changes more records than staging finds by comparing names (it indexes them then).
    static let names = (0..<14).map { "r\($0)" }

    static func records(_ database: ContainerDatabase, _ zone: ZoneID) throws -> [String: Record] {
        let ids = names.map { RecordID(recordName: $0, zoneID: zone) }
        return Dictionary(uniqueKeysWithValues: try database.lookup(ids).compactMap { $0.record.map { ($0.recordID.recordName, $0) } })
    }

    static func randomOperations(_ rng: inout SplitMix, _ current: [ZoneID: [String: Record]], wide: Bool) -> [RecordOperation] {
        let names = wide ? names : Array(names.prefix(6))
        var operations: [RecordOperation] = []
        var used: Set<RecordID> = []
        // Wide: most operations in one zone.
        let main = zones.randomElement(using: &rng)!
        for _ in 0..<Int.random(in: wide ? 6...16 : 1...8, using: &rng) {
            let zone = wide && Int.random(in: 0..<5, using: &rng) > 0 ? main : zones.randomElement(using: &rng)!
            let id = RecordID(recordName: names.randomElement(using: &rng)!, zoneID: zone)
            guard used.insert(id).inserted else { continue }
            var fields: [(String, FieldValue)] = [("v", .int64(Int64.random(in: 0...9, using: &rng)))]
            for (field, action) in [("owner", Reference.Action.deleteSelf), ("check", .validate)] where Int.random(in: 0..<4, using: &rng) == 0 {
                fields.append((field, .reference(Reference(recordID: RecordID(recordName: names.randomElement(using: &rng)!, zoneID: zone), action: action))))
            }
            var record = Record(recordType: "Item", recordID: id, fields: Fields(fields))
            let existingTag = current[zone]?[id.recordName]?.recordChangeTag
            record.recordChangeTag = Bool.random(using: &rng) ? existingTag : "stale"
            let kind = RecordOperation.Kind.allCases.randomElement(using: &rng)!
            operations.append(RecordOperation(kind: kind, record: record))
        }
        return operations
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func modifiesKeepTheRules(storage: ContainerFixture.Storage) async {
        await propertyCheck(count: 16, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let wide = seed % 2 == 1
            do {
                let database = try ContainerFixture.container(storage).database(.private, user: "_u1")
                for zone in Self.zones where !zone.isDefaultZone { try database.createZone(zone) }
                for step in 0..<20 {
                    var before: [ZoneID: [String: Record]] = [:]
                    for zone in Self.zones { before[zone] = try Self.records(database, zone) }
                    let operations = Self.randomOperations(&rng, before, wide: wide)
                    let atomic = Bool.random(using: &rng)
                    let result = try database.modify(operations, atomic: atomic)
                    #expect(result.results.count == operations.count)
                    for zone in Self.zones {
                        let after = try Self.records(database, zone)
                        let outcomes = zip(operations, result.results).filter { $0.0.record.recordID.zoneID == zone }.map(\.1)
                        if atomic, !zone.isDefaultZone, outcomes.contains(where: { $0.error != nil }) {
                            #expect(after == before[zone], "seed \(seed) step \(step): atomic zone \(zone.zoneName) changed")
                            #expect(outcomes.allSatisfy { $0.error != nil }, "seed \(seed) step \(step)")
                        }
                        for case .saved(let record) in outcomes {
                            // As saved, unless a delete later in the same modify cascaded to it.
                            let now = after[record.recordID.recordName]
                            #expect(now == nil || now == record, "seed \(seed) step \(step): \(record.recordID)")
                        }
                        for record in after.values {
                            for reference in record.trackedReferences where reference.action == .validate {
                                #expect(after[reference.recordID.recordName] != nil, "seed \(seed) step \(step): \(record.recordID) dangles")
                            }
                        }
                        let query = Query(recordType: "Item", predicate: try ValidatedPredicate("TRUEPREDICATE"), zoneID: zone)
                        let queried = Dictionary(uniqueKeysWithValues: try database.query(query).records.map { ($0.recordID.recordName, $0) })
                        #expect(queried == after, "seed \(seed) step \(step): the query store disagrees in \(zone.zoneName)")
                        if queried != after { return }
                    }
                }
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }
}
