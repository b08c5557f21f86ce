import Testing
@testable import KQuery
@testable import KQueryContainer

/// `changeHistoryRetention`: a container keeps that many deletions per database, and tokens from
/// before the ones it compacted away expire, with no call to `compactChangeHistory`.
@Suite struct ContainerRetentionTests {
    typealias F = ContainerFixture

    @Test(arguments: ContainerFixture.Storage.allCases) func writesThatDeleteCompactPastTheRetention(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage, changeHistoryRetention: 2)
        #expect(container.changeHistoryRetention == 2)
        let database = try F.privateDatabase(container)
        _ = try database.modify((0..<6).map { F.operation(.create, F.record("n\($0)", zone: F.zone)) })
        let beforeDeletes = try database.zoneChanges(F.zone, since: nil).syncToken
        // Two deletions: within the retention, so the token still works and sees both.
        _ = try database.modify((0..<2).map { F.operation(.forceDelete, F.record("n\($0)", zone: F.zone)) })
        #expect(try database.zoneChanges(F.zone, since: beforeDeletes).deletedRecordIDs.map(\.recordName).sorted() == ["n0", "n1"])
        let afterTwo = try database.zoneChanges(F.zone, since: beforeDeletes).syncToken
        // Two more: the oldest two go, and a token from before them expires.
        _ = try database.modify((2..<4).map { F.operation(.forceDelete, F.record("n\($0)", zone: F.zone)) })
        let expired = ContainerError(.changeTokenExpired, "client knowledge differs from server knowledge")
        #expect(containerError { _ = try database.zoneChanges(F.zone, since: beforeDeletes) } == expired)
        #expect(try database.zoneChanges(F.zone, since: afterTwo).deletedRecordIDs.map(\.recordName).sorted() == ["n2", "n3"])
        #expect(try database.zoneChanges(F.zone, since: nil).changedRecords.map(\.recordID.recordName) == ["n4", "n5"])
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func withoutRetentionEveryDeletionIsKept(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try F.privateDatabase(container)
        _ = try database.modify((0..<4).map { F.operation(.create, F.record("n\($0)", zone: F.zone)) })
        let early = try database.zoneChanges(F.zone, since: nil).syncToken
        _ = try database.modify((0..<4).map { F.operation(.forceDelete, F.record("n\($0)", zone: F.zone)) })
        #expect(try database.zoneChanges(F.zone, since: early).deletedRecordIDs.count == 4)
    }
}
