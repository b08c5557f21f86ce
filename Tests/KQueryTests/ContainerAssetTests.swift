import Foundation
import KQuery
import Testing
@testable import KQueryContainer

/// Assets in the container (SPEC §12) on both storages: receipts, content-addressed blobs with
/// references, and the collection of what nothing refers to.
@Suite struct ContainerAssetTests {
    /// A clock the test moves.
    final class Clock: Sendable {
        let now = Locked<Int64>(1_700_000_000_000)
        func advance(_ milliseconds: Int64) { now.withLock { $0 += milliseconds } }
    }

    static func container(_ storage: ContainerFixture.Storage, clock: Clock) throws -> Container {
        try Container(containerIdentifier: ContainerFixture.identifier, storage: storage.make(), clock: { clock.now.withLock { $0 } })
    }

    static func save(_ database: ContainerDatabase, _ name: String, _ field: String, _ value: FieldValue?, zone: ZoneID = .default) throws -> RecordResult {
        var fields: [String: FieldValue] = ["title": .string(name)]
        fields[field] = value
        return try database.modify([RecordOperation(kind: .forceReplace, record: ContainerFixture.record(name, type: "Doc", zone: zone, fields))]).results[0]
    }

    static func value(_ uploaded: UploadedAsset) -> FieldValue { .assetID(uploaded.webServicesJSON.serialized) }

    static func bytes(of container: Container, _ asset: StoredAsset) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try container.readAsset(asset.contentHash) { bytes += $0 }
        return bytes
    }

    @Test(arguments: ContainerFixture.Storage.allCases)
    func uploadSaveAndReadBack(_ storage: ContainerFixture.Storage) throws {
        let clock = Clock()
        let container = try Self.container(storage, clock: clock)
        let database = try container.database(.private, user: "_u1")
        // Three chunks and a bit: the bytes cross chunk boundaries.
        let content = (0..<(3 * AssetPolicy.chunkSize + 17)).map { UInt8(truncatingIfNeeded: $0 * 31 + $0 / 7) }
        let uploaded = try database.uploadAsset(content, recordName: "d1", fieldName: "file")
        #expect(uploaded.size == Int64(content.count) && uploaded.wrappingKey != nil)
        guard case .saved(let record) = try Self.save(database, "d1", "file", Self.value(uploaded)) else { Issue.record("not saved"); return }
        let asset = try #require(try database.asset(record.recordID, field: "file"))
        #expect(asset.fileChecksum == uploaded.fileChecksum && asset.size == uploaded.size)
        #expect(try Self.bytes(of: container, asset) == content)
        var middle: [UInt8] = []
        let range: Range<Int64> = Int64(AssetPolicy.chunkSize - 5)..<Int64(2 * AssetPolicy.chunkSize + 9)
        try container.readAsset(asset.contentHash, range: range) { middle += $0 }
        #expect(middle == Array(content[Int(range.lowerBound)..<Int(range.upperBound)]))
        #expect(try container.assetBlob(asset.contentHash)?.contentType == "application/octet-stream")
    }

    @Test(arguments: ContainerFixture.Storage.allCases)
    func receiptsAreCheckedInTheModify(_ storage: ContainerFixture.Storage) throws {
        let clock = Clock()
        let container = try Self.container(storage, clock: clock)
        let database = try ContainerFixture.privateDatabase(container)
        let other = try container.database(.private, user: "_u2")
        let uploaded = try database.uploadAsset([1, 2, 3], recordName: "d1", fieldName: "file")
        func refusal(_ result: RecordResult) -> String? {
            guard let error = result.error, error.code == .badRequest else { return nil }
            return error.reason
        }
        #expect(refusal(try Self.save(database, "d1", "file", .assetID(#"{"receipt": "nope"}"#)))?.contains("unknown") == true)
        #expect(refusal(try Self.save(database, "d2", "file", Self.value(uploaded)))?.contains("issued for") == true)
        #expect(refusal(try Self.save(database, "d1", "other", Self.value(uploaded)))?.contains("issued for") == true)
        #expect(refusal(try Self.save(database, "d1", "file", Self.value(uploaded), zone: ContainerFixture.zone))?.contains("issued for") == true)
        #expect(refusal(try Self.save(other, "d1", "file", Self.value(uploaded)))?.contains("another database") == true)
        #expect(refusal(try Self.save(database, "d1", "file", .assetID("plain text"))) != nil)
        // In an atomic zone the asset's failure fails its siblings.
        let zoned = try database.uploadAsset([4], recordName: "z1", fieldName: "file", in: ContainerFixture.zone)
        let results = try database.modify([
            RecordOperation(kind: .create, record: ContainerFixture.record("z1", zone: ContainerFixture.zone, ["file": .assetID(#"{"receipt": "bad"}"#)])),
            RecordOperation(kind: .create, record: ContainerFixture.record("z2", zone: ContainerFixture.zone, ["n": .int64(1)])),
        ]).results
        #expect(results[0].error?.code == .badRequest && results[1].error?.code == .atomicError)
        #expect(try Self.save(database, "z1", "file", Self.value(zoned), zone: ContainerFixture.zone).error == nil)
        // Good once; then spent.
        #expect(try Self.save(database, "d1", "file", Self.value(uploaded)).error == nil)
        #expect(refusal(try Self.save(database, "d1", "file", Self.value(uploaded)))?.contains("already used") == true)
        // Expired.
        let late = try database.uploadAsset([9], recordName: "d3", fieldName: "file")
        clock.advance(container.assetPolicy.receiptLifetime)
        #expect(refusal(try Self.save(database, "d3", "file", Self.value(late)))?.contains("expired") == true)
    }

    @Test(arguments: ContainerFixture.Storage.allCases)
    func blobsGoOnlyWhenNothingRefersToThemForTheGracePeriod(_ storage: ContainerFixture.Storage) throws {
        let clock = Clock()
        let container = try Self.container(storage, clock: clock)
        let database = try ContainerFixture.privateDatabase(container)
        let content: [UInt8] = Array("shared bytes".utf8)
        // Two records hold the same bytes (stored once), one through a rereference.
        let first = try database.uploadAsset(content, recordName: "a", fieldName: "file", in: ContainerFixture.zone)
        #expect(try Self.save(database, "a", "file", Self.value(first), zone: ContainerFixture.zone).error == nil)
        let again = try #require(try database.rereferenceAssets([("a", "file", nil)], in: ContainerFixture.zone).first?.get())
        #expect(try Self.save(database, "b", "file", Self.value(again)).error == nil)
        let hash = try #require(try database.asset(RecordID(recordName: "b", zoneID: .default), field: "file")).contentHash
        let grace = container.assetPolicy.gracePeriod

        clock.advance(grace * 2)
        #expect(try container.collectAssets().blobs == 0, "referenced blobs stay, however old")
        // Record b drops it; a's zone is deleted: nothing refers to it from now on.
        #expect(try Self.save(database, "b", "file", nil).error == nil)
        try database.deleteZone(ContainerFixture.zone)
        clock.advance(grace - 1)
        #expect(try container.collectAssets().blobs == 0, "within the grace period")
        #expect(try container.assetBlob(hash) != nil)
        clock.advance(1)
        let collected = try container.collectAssets()
        #expect(collected.blobs == 1 && collected.bytes == Int64(content.count))
        #expect(try container.assetBlob(hash) == nil && (try container.assetChunk(hash, index: 0)) == nil)
    }

    @Test(arguments: ContainerFixture.Storage.allCases)
    func expiredUploadsAndUnsavedBlobsAreCollected(_ storage: ContainerFixture.Storage) throws {
        let clock = Clock()
        let container = try Self.container(storage, clock: clock)
        let database = try container.database(.public, user: "_u1")
        let ticket = try #require(try database.requestAssetUploads([AssetFieldRequest(fieldName: "f")]).first)
        let writer = try container.beginAssetUpload(token: ticket.token, contentType: "text/plain")
        #expect(throws: ContainerError.self) { try container.beginAssetUpload(token: ticket.token, contentType: nil) }
        try writer.append(Array(repeating: 7, count: AssetPolicy.chunkSize + 1))
        writer.abandon()
        // An uploaded blob never saved goes once its receipt has expired and the grace is over.
        let unsaved = try database.uploadAsset([1, 2], recordName: "x", fieldName: "f")
        clock.advance(container.assetPolicy.receiptLifetime + container.assetPolicy.gracePeriod)
        let collected = try container.collectAssets()
        #expect(collected.uploads == 2 && collected.blobs == 1 && collected.receipts == 1)
        #expect(throws: ContainerError.self) { try container.beginAssetUpload(token: ticket.token, contentType: nil) }
        _ = unsaved
    }

    /// A finished upload's chunks become the blob's where they lie (SQLite names their owner rather
    /// than rewriting them): collecting the expired upload ticket must leave them, and collecting
    /// the blob must take them.
    @Test(arguments: ContainerFixture.Storage.allCases)
    func aSavedBlobOutlivesItsUploadTicket(_ storage: ContainerFixture.Storage) throws {
        let clock = Clock()
        let container = try Self.container(storage, clock: clock)
        let database = try container.database(.public, user: "_u1")
        let content = (0..<(2 * AssetPolicy.chunkSize + 5)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 9) }
        let uploaded = try database.uploadAsset(content, recordName: "k", fieldName: "f")
        #expect(try Self.save(database, "k", "f", Self.value(uploaded)).error == nil)
        let asset = try #require(try database.asset(RecordID(recordName: "k", zoneID: .default), field: "f"))
        clock.advance(container.assetPolicy.uploadLifetime + container.assetPolicy.receiptLifetime)
        let collected = try container.collectAssets()
        #expect(collected.uploads == 1 && collected.blobs == 0)
        #expect(try Self.bytes(of: container, asset) == content)
        // The same bytes uploaded again are kept once; the second upload's chunks go.
        let again = try database.uploadAsset(content, recordName: "k2", fieldName: "f")
        #expect(again.fileChecksum == uploaded.fileChecksum)
        clock.advance(container.assetPolicy.uploadLifetime + container.assetPolicy.receiptLifetime)
        _ = try container.collectAssets()
        #expect(try Self.bytes(of: container, asset) == content)
        // Unreferenced past the grace period: the blob and every chunk go.
        #expect(try Self.save(database, "k", "f", nil).error == nil)
        clock.advance(container.assetPolicy.gracePeriod)
        #expect(try container.collectAssets().blobs == 1)
        #expect(try container.assetChunk(asset.contentHash, index: 0) == nil && (try container.assetChunk(asset.contentHash, index: 2)) == nil)
    }

    /// One request at a time takes an upload URL's bytes, on every server sharing the storage
    /// (here a second container object on the same storage); an abandoned upload frees the URL;
    /// the collector leaves an upload still receiving its bytes for an hour past the URL's expiry,
    /// and one it collected fails at `finish` with no receipt.
    @Test(arguments: ContainerFixture.Storage.allCases)
    func anUploadURLTakesOneRequestAtATime(_ storage: ContainerFixture.Storage) throws {
        let clock = Clock()
        let shared = try storage.make()
        let now: @Sendable () -> Int64 = { clock.now.withLock { $0 } }
        let nodeA = try Container(containerIdentifier: ContainerFixture.identifier, storage: shared, clock: now)
        let nodeB = try Container(containerIdentifier: ContainerFixture.identifier, storage: shared, clock: now)
        let database = try nodeA.database(.private, user: "_u1")
        func ticket(_ name: String) throws -> String {
            try #require(try database.requestAssetUploads([AssetFieldRequest(recordName: name, fieldName: "file")]).first).token
        }
        let first = try ticket("d1")
        let writer = try nodeA.beginAssetUpload(token: first, contentType: nil)
        try writer.append([1, 2, 3])
        #expect(throws: ContainerError.self) { try nodeB.beginAssetUpload(token: first, contentType: nil) }
        writer.abandon()
        let retried = try nodeB.beginAssetUpload(token: first, contentType: nil)
        try retried.append([4, 5, 6])
        clock.advance(nodeA.assetPolicy.uploadLifetime + 1)
        #expect(try nodeA.collectAssets().uploads == 0, "still receiving: kept")
        let uploaded = try retried.finish()
        #expect(uploaded.size == 3)
        #expect(throws: ContainerError.self) { try nodeA.beginAssetUpload(token: first, contentType: nil) }

        let second = try ticket("d2")
        let late = try nodeA.beginAssetUpload(token: second, contentType: nil)
        try late.append([7, 8, 9])
        clock.advance(nodeA.assetPolicy.uploadLifetime + AssetChunks.receivingGrace)
        #expect(try nodeB.collectAssets().uploads == 2, "the first URL, used, and the second, cut off")
        do {
            _ = try late.finish()
            Issue.record("an upload the collector took must not be acknowledged")
        } catch {
            #expect(error.code == .notFound, "\(error)")
        }
    }

    @Test func assetsSurviveReopeningTheFile() throws {
        let path = ContainerFixture.temporaryPath()
        defer { ContainerFixture.remove(path) }
        let content = Array("kept".utf8)
        do {
            let container = try Container(containerIdentifier: ContainerFixture.identifier, path: path)
            let database = try container.database(.public, user: "_u1")
            let uploaded = try database.uploadAsset(content, recordName: "k", fieldName: "f")
            #expect(try Self.save(database, "k", "f", Self.value(uploaded)).error == nil)
        }
        let container = try Container(containerIdentifier: ContainerFixture.identifier, path: path)
        #expect(container.holdsAssets)
        let asset = try #require(try container.database(.public, user: "_u1").asset(RecordID(recordName: "k", zoneID: .default), field: "f"))
        #expect(try Self.bytes(of: container, asset) == content)
    }
}
