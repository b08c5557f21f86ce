import KQuery
import PropertyBased
import Testing
@testable import KQueryContainer

/// The local-cache workflow (SPEC §8): a device fetches database changes, then each changed zone's
/// changes, in batches, and applies them to its cache. Whatever the server does in between
/// (modifies with cascades, zone deletions and re-creations, history compaction), a device that
/// finishes a fetch holds exactly the server's zones.
@Suite struct ContainerSyncPropertyTests {
    static let zones = ["A", "B", "C"].map { ZoneID(zoneName: $0, ownerName: "_u1") }
    static let names = (0..<8).map { "r\($0)" }

    /// What a device keeps: its zones' records by name, and its tokens.
    struct Device {
        var zones: [ZoneID: [String: Record]] = [:]
        var databaseToken: SyncToken?
        var zoneTokens: [ZoneID: SyncToken] = [:]
    }

    static func randomModify(_ rng: inout SplitMix, _ database: ContainerDatabase) throws {
        var operations: [RecordOperation] = []
        var used: Set<RecordID> = []
        for _ in 0..<Int.random(in: 1...6, using: &rng) {
            let zone = zones.randomElement(using: &rng)!
            let id = RecordID(recordName: names.randomElement(using: &rng)!, zoneID: zone)
            guard used.insert(id).inserted else { continue }
            var fields: [(String, FieldValue)] = [("v", .int64(Int64.random(in: 0...99, using: &rng)))]
            if Int.random(in: 0..<3, using: &rng) == 0 {
                let owner = RecordID(recordName: names.randomElement(using: &rng)!, zoneID: zone)
                fields.append(("owner", .reference(Reference(recordID: owner, action: .deleteSelf))))
            }
            let record = Record(recordType: "Item", recordID: id, fields: Fields(fields))
            let kind: RecordOperation.Kind = switch Int.random(in: 0..<10, using: &rng) {
            case 0..<4: .forceReplace
            case 4..<6: .forceUpdate
            case 6..<9: .forceDelete
            default: .create
            }
            operations.append(RecordOperation(kind: kind, record: record))
        }
        _ = try database.modify(operations, atomic: Bool.random(using: &rng))
    }

    /// One step of the server's life: mostly modifies, sometimes zone changes or compaction.
    static func serverStep(_ rng: inout SplitMix, _ database: ContainerDatabase) throws {
        switch Int.random(in: 0..<20, using: &rng) {
        case 0..<14: try randomModify(&rng, database)
        case 14..<16: try database.createZone(zones.randomElement(using: &rng)!)
        case 16..<18:
            let zone = zones.randomElement(using: &rng)!
            if try database.zone(zone) != nil { try database.deleteZone(zone) }
        default: try database.compactChangeHistory(keepingLast: Int.random(in: 0...3, using: &rng))
        }
    }

    /// Lets the server act between two batches, sometimes, when `interfering`.
    static func interfere(_ rng: inout SplitMix, _ database: ContainerDatabase, _ interfering: Bool) throws {
        if interfering, Int.random(in: 0..<4, using: &rng) == 0 { try serverStep(&rng, database) }
    }

    /// A full fetch, in batches of random size; with `interfering`, the server may act between batches.
    static func fetch(_ device: inout Device, _ database: ContainerDatabase, _ rng: inout SplitMix, interfering: Bool) throws {
        var changed: [ZoneID] = []
        var refetchingAll = false
        var fetchingDatabase = true
        while fetchingDatabase {
            let limit = Int.random(in: 1...3, using: &rng)
            switch Result(catching: { () throws(ContainerError) in try database.databaseChanges(since: device.databaseToken, resultsLimit: limit) }) {
            case .failure(let error) where error.code == .changeTokenExpired:
                // Refetch every zone from no token; zones it does not list are gone.
                device.databaseToken = nil
                refetchingAll = true
                changed = []
            case .failure(let error):
                throw error
            case .success(let batch):
                for zone in batch.deletedZones {
                    device.zones[zone] = nil
                    device.zoneTokens[zone] = nil
                    changed.removeAll { $0 == zone }
                }
                for zone in batch.changedZones where !changed.contains(zone) { changed.append(zone) }
                device.databaseToken = batch.syncToken
                try interfere(&rng, database, interfering)
                fetchingDatabase = batch.moreComing
            }
        }
        if refetchingAll {
            for zone in device.zones.keys where !changed.contains(zone) {
                device.zones[zone] = nil
                device.zoneTokens[zone] = nil
            }
        }
        for zone in changed {
            var fetchingZone = true
            while fetchingZone {
                let limit = Int.random(in: 1...4, using: &rng)
                switch Result(catching: { () throws(ContainerError) in try database.zoneChanges(zone, since: device.zoneTokens[zone], resultsLimit: limit) }) {
                case .failure(let error) where error.code == .changeTokenExpired:
                    device.zones[zone] = nil
                    device.zoneTokens[zone] = nil
                case .failure(let error) where error.code == .zoneNotFound:
                    fetchingZone = false  // deleted meanwhile: the next database fetch says so
                case .failure(let error):
                    throw error
                case .success(let batch):
                    var records = device.zones[zone] ?? [:]
                    for change in batch.changes {
                        switch change {
                        case .changed(let record): records[record.recordID.recordName] = record
                        case .deleted(let id, _): records[id.recordName] = nil
                        }
                    }
                    device.zones[zone] = records
                    device.zoneTokens[zone] = batch.syncToken
                    try interfere(&rng, database, interfering)
                    fetchingZone = batch.moreComing
                }
            }
        }
    }

    /// The server's zones as its queries see them.
    static func serverZones(_ database: ContainerDatabase) throws -> [ZoneID: [String: Record]] {
        var zones: [ZoneID: [String: Record]] = [:]
        for zone in try database.zones() where !zone.isDefaultZone {
            let query = Query(recordType: "Item", predicate: try ValidatedPredicate("TRUEPREDICATE"), resultsLimit: 200, zoneID: zone)
            zones[zone] = Dictionary(uniqueKeysWithValues: try database.query(query).records.map { ($0.recordID.recordName, $0) })
        }
        return zones
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func aDeviceApplyingEveryBatchHoldsTheServersZones(storage: ContainerFixture.Storage) async {
        await propertyCheck(count: 20, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            do {
                let container = try ContainerFixture.container(storage)
                let database = try container.database(.private, user: "_u1")
                for zone in Self.zones.prefix(2) { try database.createZone(zone) }
                var device = Device()
                for step in 0..<30 {
                    if Int.random(in: 0..<4, using: &rng) == 0 {
                        try Self.fetch(&device, database, &rng, interfering: true)
                    } else {
                        try Self.serverStep(&rng, database)
                    }
                    if step % 10 == 9 {
                        try Self.fetch(&device, database, &rng, interfering: false)
                        let server = try Self.serverZones(database)
                        #expect(device.zones == server, "seed \(seed) step \(step)")
                        if device.zones != server { return }
                    }
                }
                // After losing its history, a device that starts over from no token recovers.
                try database.compactChangeHistory(keepingLast: 0)
                var fresh = Device()
                try Self.fetch(&fresh, database, &rng, interfering: false)
                try Self.fetch(&device, database, &rng, interfering: false)
                #expect(fresh.zones == (try Self.serverZones(database)), "seed \(seed)")
                #expect(device.zones == fresh.zones, "seed \(seed)")
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }
}
