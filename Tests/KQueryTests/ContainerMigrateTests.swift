import Foundation
import KQueryPostgres
import KQueryTestSupport
import Testing
@testable import KQuery
@testable import KQueryContainer

/// `kquery migrate` (SPEC §16): a container file copied into PostgreSQL and back holds the same
/// records, tombstones, change history, zones, subscriptions and queued pushes; running the copy
/// again (as after a crash) changes nothing and queues no push twice.
@Suite struct ContainerMigrateTests {
    typealias F = ContainerFixture

    /// Everything a storage's container shows, in a comparable form.
    static func snapshot(_ storage: any ContainerStorage) throws -> [String] {
        try storage.read { tx throws(ContainerError) in
            var lines: [String] = []
            for (key, stored) in try tx.allDatabases().sorted(by: { $0.key.description < $1.key.description }) {
                lines.append("\(key) sequence \(stored.sequence) horizon \(stored.horizon)")
                for zone in try tx.zones(in: stored) { lines.append("zone \(zone)") }
                for change in try tx.zoneChanges(of: stored, after: 0, limit: 1000) { lines.append("zone change \(change)") }
                for zoneID in [ZoneID.default] + (try tx.zones(in: stored).map(\.zoneID)) {
                    for (sequence, change) in try tx.recordChanges(in: zoneID, of: stored, after: 0, includingDeletions: true, limit: 1000) {
                        lines.append("\(sequence) \(change)")
                    }
                }
                for subscription in try tx.subscriptions(in: stored) { lines.append("subscription \(subscription)") }
            }
            for notification in try tx.pendingNotifications(for: .all, limit: 1000) {
                lines.append("push \(notification.subscriptionID) \(notification.owner) \(notification.payload.serialized)")
            }
            // Each blob with its bytes.
            for blob in try tx.assetBlobs(after: "", limit: 1000) {
                var bytes: [UInt8] = []
                var index = 0
                while let chunk = try tx.assetChunk(blob.contentHash, index: index) {
                    bytes += chunk
                    index += 1
                }
                lines.append("blob \(blob.contentHash) \(blob.size) \(blob.fileChecksum) \(blob.contentType) \(bytes.count) \(bytes.hashValue)")
            }
            return lines
        }
    }

    @Test func aContainerGoesToPostgreSQLAndBackWhole() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        var expiredToken: SyncToken?
        do {
            let container = try F.container(path: path)
            let database = try F.privateDatabase(container)
            _ = try database.saveSubscription(Subscription(subscriptionID: "db", kind: .database(recordType: nil), options: [.firesOnRecordCreation]))
            var operations: [RecordOperation] = []
            for i in 0..<25 { operations.append(F.operation(.create, F.record("n\(i)", zone: F.zone, ["i": .int64(Int64(i))]))) }
            _ = try database.modify(operations)
            expiredToken = try database.zoneChanges(F.zone, since: nil).syncToken
            _ = try database.modify([F.operation(.forceDelete, F.record("n3", zone: F.zone))])
            // Deletions forgotten past a horizon: tokens from before it are expired, on the copies too.
            try database.compactChangeHistory(keepingLast: 0)
            _ = try database.deleteZone(F.otherZone)
            _ = try container.database(.public).modify([F.operation(.create, F.record("p", ["name": .string("public")]))])
            // An asset of three chunks and a bit, saved into a record.
            let file = F.temporaryPath()
            defer { F.remove(file) }
            let bytes = (0..<(3 * AssetPolicy.chunkSize + 1234)).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 7) }
            #expect(FileManager.default.createFile(atPath: file, contents: Data(bytes)))
            let withAsset = try database.uploadingFiles([F.operation(.create, F.record("a", zone: F.zone, ["file": .assetID(#"{"$file": "\#(file)"}"#)]))])
            _ = try database.modify(withAsset)
        }
        // A token a client holds, taken before the copy: the copies read it.
        let heldToken = try Container(containerIdentifier: "iCloud.migrated", path: path).database(.private, user: "_u1").zoneChanges(F.zone, since: nil).syncToken
        let original = try Self.snapshot(ContainerCopy.fileStorage(path: path))
        #expect(original.count > 30)

        let location = try #require(PostgresLocation(url: try PostgresCluster.start().createDatabase()))
        let identifier = "iCloud.migrated"
        let database = try PostgresContainerStorage(location: location, containerIdentifier: identifier)
        var counts = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: path), to: database, pageSize: 7)
        #expect(counts.records == 26 && counts.tombstones == 0 && counts.subscriptions == 1)
        #expect(original.contains { $0.contains("horizon") && !$0.hasSuffix("horizon 0") })
        #expect(counts.assets == 1 && counts.assetBytes == Int64(3 * AssetPolicy.chunkSize + 1234))
        #expect(original.contains { $0.hasPrefix("blob ") })
        #expect(counts.notifications > 0 && counts.notifications == original.filter { $0.hasPrefix("push ") }.count)
        #expect(try Self.snapshot(database) == original)
        // Again, as after a crash: the same, and the pushes not queued twice.
        counts = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: path), to: database, pageSize: 7)
        #expect(counts.notifications == 0)
        #expect(try Self.snapshot(database) == original)

        let back = F.temporaryPath()
        defer { F.remove(back) }
        _ = try ContainerCopy.copy(from: PostgresContainerStorage(location: location, containerIdentifier: identifier), to: ContainerCopy.fileStorage(path: back))
        #expect(try Self.snapshot(ContainerCopy.fileStorage(path: back)) == original)
        // The copy is a container that works: a token-less change fetch lists the records left.
        var noGrace = AssetPolicy()
        noGrace.gracePeriod = 0
        let reopened = try Container(containerIdentifier: identifier, path: back, assetPolicy: noGrace)
        let changes = try reopened.database(.private, user: "_u1").zoneChanges(F.zone, since: nil)
        #expect(changes.changes.count == 25)
        // The source's secret came along: the token taken before the copy reads on the copy.
        let since = try reopened.database(.private, user: "_u1").zoneChanges(F.zone, since: heldToken)
        #expect(since.changes.isEmpty)
        #expect(throws: ContainerError.self) { try reopened.database(.private, user: "_u1").zoneChanges(F.zone, since: expiredToken) }
        // The copy's record refers to its blob: the collector keeps it.
        let asset = try #require(try reopened.database(.private, user: "_u1").asset(RecordID(recordName: "a", zoneID: F.zone), field: "file"))
        #expect(try reopened.collectAssets().blobs == 0)
        #expect(try reopened.assetBlob(asset.contentHash)?.size == Int64(3 * AssetPolicy.chunkSize + 1234))
    }

    @Test func theCommandCopiesBothWaysAndPrintsTheCounts() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        _ = try F.container(path: path).database(.public).modify([F.operation(.create, F.record("p"))])
        let url = try PostgresCluster.start().createDatabase()
        let into = try KQueryBinary.run(["migrate", "--from", path, "--to-postgres", url, "--container", "iCloud.cli"])
        #expect(into.status == 0, "\(into.standardError)")
        #expect(into.standardOutput.contains("copied 1 databases, 0 zones, 1 records"))
        let back = F.temporaryPath()
        defer { F.remove(back) }
        let out = try KQueryBinary.run(["migrate", "--from-postgres", url, "--to", back, "--container", "iCloud.cli"])
        #expect(out.status == 0, "\(out.standardError)")
        #expect(try Container(containerIdentifier: "iCloud.cli", path: back).database(.public).record(RecordID(recordName: "p")) != nil)
        let refused = try KQueryBinary.run(["migrate", "--from", path, "--to-postgres", "postgresql://nobody", "--container", "x"])
        #expect(refused.status != 0)
        // A mistyped source is an error, and nothing is made for it.
        let missing = path + "-typo"
        let noFile = try KQueryBinary.run(["migrate", "--from", missing, "--to-postgres", url, "--container", "iCloud.other"])
        #expect(noFile.status == 2 && noFile.standardError.contains("no container file at"), "\(noFile.standardError)")
        #expect(!FileManager.default.fileExists(atPath: missing))
        let noContainer = try KQueryBinary.run(["migrate", "--from-postgres", url, "--to", F.temporaryPath(), "--container", "iCloud.typo"])
        #expect(noContainer.status == 2 && noContainer.standardError.contains("holds no container iCloud.typo"), "\(noContainer.standardError)")
        let stillOne = try KQueryBinary.run(["migrate", "--from-postgres", url, "--to", F.temporaryPath(), "--container", "iCloud.typo"])
        #expect(stillOne.status == 2, "the refused copy made no container row")
    }
}
