import Foundation
import KQuery
import PropertyBased
import Testing
@testable import KQueryContainer

/// The storages' index of shares (`StorageTransaction.shares(in:)`), which the shared databases
/// and short-GUID lookups read instead of every record: after random saves, retypings, deletions,
/// zone deletions and rolled-back writes, it lists exactly the stored `cloudkit.share` records,
/// in memory, in a file's mirror, in the file itself and after reopening it.
@Suite struct StorageShareIndexTests {
    static let zones = [ZoneID(zoneName: "A", ownerName: "_u1"), ZoneID(zoneName: "B", ownerName: "_u1")]

    /// The reference: every record of the database whose type is a share's, by name.
    static func expected(_ tx: any StorageTransaction, _ database: StoredDatabase) throws(ContainerError) -> [String] {
        try tx.records(in: database).filter { $0.recordType == SharingKeys.shareRecordType }.map(\.recordID.description).sorted()
    }

    static func listed(_ tx: any StorageTransaction, _ database: StoredDatabase) throws(ContainerError) -> [String] {
        try tx.shares(in: database).map(\.recordID.description).sorted()
    }

    struct Rollback: Error {}

    @Test(arguments: ContainerFixture.Storage.allCases) func theShareIndexListsExactlyTheShares(storage: ContainerFixture.Storage) async {
        await propertyCheck(count: 12, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let path = ContainerFixture.temporaryPath()
            defer { ContainerFixture.remove(path) }
            do {
                let store: any ContainerStorage = storage == .sqlite ? try SQLiteContainerStorage(path: path) : MemoryContainerStorage()
                let key = DatabaseKey(environment: .development, scope: .private, userRecordName: "_u1")
                var database = try store.write { tx throws(ContainerError) in try tx.createDatabase(key) }
                var sequence: Int64 = 0
                for step in 0..<40 {
                    let rollsBack = Int.random(in: 0..<4, using: &rng) == 0
                    do {
                        try store.write { tx throws(ContainerError) in
                            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                                let zone = Self.zones.randomElement(using: &rng)!
                                sequence += 1
                                switch Int.random(in: 0..<10, using: &rng) {
                                case 0:
                                    try tx.deleteZone(zone, sequence: sequence, in: database)
                                    try tx.saveZone(StoredZone(zoneID: zone, createdSequence: sequence, changedSequence: sequence), in: database)
                                case 1...3:
                                    let id = RecordID(recordName: "r\(Int.random(in: 0..<6, using: &rng))", zoneID: zone)
                                    if let record = try tx.record(id, in: database) { try tx.deleteRecord(record, sequence: sequence, in: database) }
                                default:
                                    let type = Bool.random(using: &rng) ? SharingKeys.shareRecordType : "Item"
                                    let id = RecordID(recordName: "r\(Int.random(in: 0..<6, using: &rng))", zoneID: zone)
                                    try tx.saveRecord(Record(recordType: type, recordID: id), sequence: sequence, in: database)
                                }
                            }
                            database.sequence = sequence
                            try tx.setSequence(sequence, of: database)
                            let (listed, expected) = (try Self.listed(tx, database), try Self.expected(tx, database))
                            #expect(listed == expected, "seed \(seed) step \(step): inside the write")
                            if rollsBack { throw ContainerError(.internalError, "rolled back on purpose") }
                        }
                    } catch where rollsBack {
                        database = try #require(store.read { tx throws(ContainerError) in try tx.database(key) })
                        sequence = database.sequence
                    }
                    let current = database
                    let (listed, expected) = try store.read { tx throws(ContainerError) in (try Self.listed(tx, current), try Self.expected(tx, current)) }
                    #expect(listed == expected, "seed \(seed) step \(step): after the write")
                }
                if storage == .sqlite {
                    let current = database
                    let before = try store.read { tx throws(ContainerError) in try Self.listed(tx, current) }
                    let reopened = try SQLiteContainerStorage(path: path)
                    let (listed, expected) = try reopened.read { tx throws(ContainerError) in (try Self.listed(tx, current), try Self.expected(tx, current)) }
                    #expect(listed == before && expected == before, "seed \(seed): after reopening")
                }
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }
}
