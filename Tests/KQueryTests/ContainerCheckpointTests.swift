import Foundation
import KQuery
import Testing
@testable import KQueryContainer

/// A container file's write-ahead log is checkpointed beside the writes (`Checkpointer`), the
/// writer's own automatic checkpoint being off: the log must still be copied into the database
/// and started over, so it stays bounded however many commits there are, and nothing is lost.
@Suite("Container file checkpoints")
struct ContainerCheckpointTests {
    /// Without batches (each modify commits) and with them (20 modifies a commit, as the server's
    /// committer makes them): passes are counted in log pages, so both stay bounded.
    @Test(arguments: [1, 20]) func theLogStaysBoundedAndEveryCommitIsKept(batchSize: Int) throws {
        let path = ContainerFixture.temporaryPath()
        defer { ContainerFixture.remove(path) }
        let rounds = 3_000
        let text = String(repeating: "x", count: 2_000)
        var largest: UInt64 = 0
        do {
            let container = try Container(containerIdentifier: ContainerFixture.identifier, path: path)
            let database = try container.database(.public)
            for batch in stride(from: 0, to: rounds, by: batchSize) {
                // Each commit writes at least three pages (the record's, its change index's, the
                // database's sequence): 3,000 commits are over 36 MB of log frames, which the log
                // would hold if it were never started over.
                try container.batchingWrites {
                    for round in batch..<batch + batchSize {
                        let record = ContainerFixture.record("r\(round % 500)", ["text": .string(text), "round": .int64(Int64(round))])
                        #expect(throws: Never.self) { try database.modify([RecordOperation(kind: .forceReplace, record: record)], durably: false) }
                    }
                }
                if (batch + batchSize) % 100 == 0 {
                    let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? UInt64) ?? 0
                    largest = max(largest, size)
                }
            }
            try container.waitUntilDurable()
        }
        #expect(largest > 0, "no log was seen")
        #expect(largest < 18_000_000, "the log reached \(largest) bytes: it was not started over")
        let reopened = try Container(containerIdentifier: ContainerFixture.identifier, path: path)
        let database = try reopened.database(.public)
        for name in 0..<500 {
            let record = try database.record(RecordID(recordName: "r\(name)"))
            #expect(record?["round"] == .int64(Int64(rounds - 500 + name)))
        }
    }

    /// An asset's bytes are copied into the database once its upload ends, not in passes while it
    /// streams: the database file stays small during an 8 MiB upload (2,048 pages of log, twice
    /// the interval), and takes the bytes after `finish`.
    @Test func anUploadIsCheckpointedWhenItEnds() async throws {
        let path = ContainerFixture.temporaryPath()
        defer { ContainerFixture.remove(path) }
        let container = try Container(containerIdentifier: ContainerFixture.identifier, path: path)
        let database = try container.database(.public, user: "_u1")
        let ticket = try #require(try database.requestAssetUploads([AssetFieldRequest(fieldName: "f")]).first)
        let writer = try container.beginAssetUpload(token: ticket.token, contentType: nil)
        func databaseSize() -> UInt64 { (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64) ?? 0 }
        for index in 0..<8 { try writer.append(chunk: Array(repeating: UInt8(index), count: AssetPolicy.chunkSize)) }
        try await Task.sleep(for: .milliseconds(300))
        #expect(databaseSize() < 2_000_000, "passes ran while the upload streamed")
        _ = try writer.finish()
        var size = databaseSize()
        for _ in 0..<200 where size < 8_000_000 {
            try await Task.sleep(for: .milliseconds(50))
            size = databaseSize()
        }
        #expect(size >= 8_000_000, "no pass copied the upload after it ended (database \(size) bytes)")
    }
}
