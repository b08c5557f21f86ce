import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Copies what a container holds from one storage to another (`kquery migrate`, SPEC §16): the
/// asset blobs with their bytes, then each database with its change sequence, zones and zone
/// tombstones, every zone's records and record tombstones at the sequences they changed at (so the
/// change history reads the same) with the assets they refer to, its subscriptions, then the
/// outbox.
///
/// Records go a page at a time, each page one write on the destination, read in sequence order
/// from the source, so what is held in memory is a page. A copy stopped by a crash is resumed by
/// running it again: every write is an upsert, so the pages already copied are written again the
/// same, and the outbox, copied in one write, is copied only into an empty one.
/// Asset bytes go a chunk at a time, each chunk one write, and a blob's facts after its last chunk,
/// so a resumed copy skips the blobs it finished. The copy takes the source's token secret and
/// each database's horizon, so the sync tokens and continuation markers clients hold read the
/// same on the copy. Not copied: uploads in progress and receipts not yet saved into a record
/// (their clients upload again).
package enum ContainerCopy {
    package struct Counts: Hashable, Sendable {
        package var databases = 0
        package var zones = 0
        package var records = 0
        package var tombstones = 0
        package var subscriptions = 0
        package var notifications = 0
        package var assets = 0
        package var assetBytes: Int64 = 0

        package init() {}
    }

    /// Opens a container file's storage (the CLI sees storages through this package API only).
    package static func fileStorage(path: String) throws(ContainerError) -> any ContainerStorage {
        try SQLiteContainerStorage(path: path)
    }

    /// Copies an open container into a new container file at `path` (the console's export).
    package static func export(_ container: Container, toFile path: String) throws(ContainerError) -> Counts {
        try copy(from: container.storage, to: fileStorage(path: path))
    }

    package static func copy(
        from source: any ContainerStorage, to destination: any ContainerStorage, pageSize: Int = 1000, progress: (Counts) -> Void = { _ in }
    ) throws(ContainerError) -> Counts {
        var counts = Counts()
        try destination.adoptSecret(source.secret)
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        try copyAssetBlobs(from: source, to: destination, counts: &counts, progress: progress)
        let databases = try source.read { tx throws(ContainerError) in try tx.allDatabases() }
        for (key, stored) in databases {
            let (zones, zoneLog) = try source.read { tx throws(ContainerError) in
                (try tx.zones(in: stored), try tx.zoneChanges(of: stored, after: 0, limit: Int(Int32.max)))
            }
            let live = Dictionary(zones.map { ($0.zoneID, $0) }, uniquingKeysWith: { first, _ in first })
            try destination.write { tx throws(ContainerError) in
                let database = try tx.existingOrNewDatabase(key)
                for entry in zoneLog {
                    if entry.deleted {
                        try tx.deleteZone(entry.zoneID, sequence: entry.sequence, in: database)
                    } else if let zone = live[entry.zoneID] {
                        try tx.saveZone(zone, in: database)
                    }
                }
            }
            counts.databases += 1
            counts.zones += zones.count
            // The highest sequence copied: a source written during the copy is past the one read at
            // the start, and the destination must not hand out a sequence it already holds.
            var highest = zoneLog.map(\.sequence).max() ?? 0
            for zoneID in [ZoneID.default] + zones.map(\.zoneID) {
                var after: Int64 = 0
                while true {
                    let page = try source.read { tx throws(ContainerError) in
                        try tx.recordChanges(in: zoneID, of: stored, after: after, includingDeletions: true, limit: max(pageSize, 1))
                    }
                    guard let last = page.last else { break }
                    try destination.write { tx throws(ContainerError) in
                        guard let database = try tx.database(key) else { throw ContainerError(.internalError, "the copy of \(key) went missing") }
                        var saved: [(record: Record, sequence: Int64)] = []
                        for (sequence, change) in page {
                            switch change {
                            case .changed(let record): saved.append((record, sequence))
                            case .deleted(let id, let recordType):
                                if !saved.isEmpty {
                                    try tx.saveRecords(saved, in: database)
                                    saved = []
                                }
                                try tx.deleteRecord(Record(recordType: recordType, recordID: id), sequence: sequence, in: database)
                            }
                        }
                        if !saved.isEmpty { try tx.saveRecords(saved, in: database) }
                        // The blobs the records refer to (copied above) are theirs in the copy too.
                        for (_, change) in page {
                            guard case .changed(let record) = change, record.holdsAssets else { continue }
                            try tx.setAssetReferences(record.recordID, to: record.assetContentHashes, in: database, now: now)
                        }
                    }
                    for (_, change) in page {
                        if case .changed = change { counts.records += 1 } else { counts.tombstones += 1 }
                    }
                    progress(counts)
                    after = last.sequence
                    highest = max(highest, after)
                }
            }
            let subscriptions = try source.read { tx throws(ContainerError) in try tx.subscriptions(in: stored) }
            try destination.write { tx throws(ContainerError) in
                guard let database = try tx.database(key) else { throw ContainerError(.internalError, "the copy of \(key) went missing") }
                for subscription in subscriptions { try tx.saveSubscription(subscription, in: database) }
                try tx.setSequence(max(stored.sequence, highest), of: database)
                try tx.setHorizon(stored.horizon, of: database)
            }
            counts.subscriptions += subscriptions.count
            progress(counts)
        }
        let pending = try source.read { tx throws(ContainerError) in try tx.pendingNotifications(for: .all, limit: Int(Int32.max)) }
        if !pending.isEmpty {
            counts.notifications = try destination.write { tx throws(ContainerError) -> Int in
                guard try tx.pendingNotifications(for: .all, limit: 1).isEmpty else { return 0 }
                return try tx.enqueue(pending).count
            }
        }
        try destination.refreshStatistics()
        progress(counts)
        return counts
    }

    /// Copies every blob, its bytes a chunk at a time (one write each) and then its facts, so a
    /// blob whose facts the destination holds was copied whole and is skipped when a copy resumes.
    /// A blob nothing refers to keeps its release time: it is collected on the usual schedule.
    private static func copyAssetBlobs(
        from source: any ContainerStorage, to destination: any ContainerStorage, counts: inout Counts, progress: (Counts) -> Void
    ) throws(ContainerError) {
        var after = ""
        while true {
            let blobs = try source.read { tx throws(ContainerError) in try tx.assetBlobs(after: after, limit: 100) }
            guard let last = blobs.last else { return }
            for blob in blobs {
                counts.assets += 1
                counts.assetBytes += blob.size
                if try destination.read({ tx throws(ContainerError) in try tx.assetBlob(blob.contentHash) }) != nil { continue }
                let chunkSize = Int64(AssetPolicy.chunkSize)
                let chunkCount = Int((blob.size + chunkSize - 1) / chunkSize)
                for index in 0..<chunkCount {
                    guard let bytes = try source.read({ tx throws(ContainerError) in try tx.assetChunk(blob.contentHash, index: index) }) else {
                        throw ContainerError(.internalError, "asset \(blob.contentHash) is missing its chunk \(index) in the source")
                    }
                    try destination.write { tx throws(ContainerError) in try tx.saveAssetChunk(blob.contentHash, index: index, bytes: bytes) }
                }
                try destination.write { tx throws(ContainerError) in try tx.saveAssetBlob(blob) }
            }
            progress(counts)
            after = last.contentHash
        }
    }
}
