import Dispatch
import KQuery
import Synchronization

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
/// running it again: each zone's records continue after the newest change the destination holds
/// there (`copiedThrough`; a destination that cannot tell writes them again, every write an
/// upsert), the other writes are upserts, and the outbox, copied in one write, is copied only
/// into an empty one. The counts are what this run copied.
/// Asset bytes go a chunk at a time, each chunk one write, and a blob's facts after its last chunk,
/// so a resumed copy skips the blobs it finished. The copy takes the source's token secret and
/// each database's horizon, so the sync tokens and continuation markers clients hold read the
/// same on the copy. Upload tickets and receipts are copied after the blobs, so a client that
/// was given an upload URL or a receipt before the copy uses it on the copy; an upload cut off
/// while its bytes were arriving is copied as not begun (its client sends them again).
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
        /// Upload tickets (uploads not finished: their clients upload to the copy).
        package var uploads = 0
        /// Receipts of finished uploads (saved into a record or not yet).
        package var receipts = 0

        package init() {}
    }

    /// Opens a container file's storage to copy from or into (the CLI sees storages through this
    /// package API only). Not mirrored: the copy reads and writes the file a page at a time, where
    /// opening it loaded every record into memory first (886 MB resident copying 1,000,000
    /// records into PostgreSQL; 52 MB not mirrored).
    package static func fileStorage(path: String) throws(ContainerError) -> any ContainerStorage {
        try SQLiteContainerStorage(path: path, mirrored: false)
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
        try destination.loadStarted()
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        try copyAssetBlobs(from: source, to: destination, counts: &counts, progress: progress)
        try copyAssetTickets(from: source, to: destination, counts: &counts)
        let databases = try source.read { tx throws(ContainerError) in try tx.allDatabases() }
        for (key, stored) in databases {
            let (zones, zoneLog) = try source.read { tx throws(ContainerError) in
                (try tx.zones(in: stored), try tx.zoneChanges(of: stored, after: 0, limit: Int(Int32.max)))
            }
            let live = Dictionary(zones.map { ($0.zoneID, $0) }, uniquingKeysWith: { first, _ in first })
            let target = try destination.write { tx throws(ContainerError) -> StoredDatabase in
                let database = try tx.existingOrNewDatabase(key)
                for entry in zoneLog {
                    if entry.deleted {
                        try tx.deleteZone(entry.zoneID, sequence: entry.sequence, in: database)
                    } else if let zone = live[entry.zoneID] {
                        try tx.saveZone(zone, in: database)
                    }
                }
                return database
            }
            counts.databases += 1
            counts.zones += zones.count
            // The highest sequence copied: a source written during the copy is past the one read at
            // the start, and the destination must not hand out a sequence it already holds.
            var highest = zoneLog.map(\.sequence).max() ?? 0
            for zoneID in [ZoneID.default] + zones.map(\.zoneID) {
                var after = try destination.read { tx throws(ContainerError) -> Int64 in
                    guard let database = try tx.database(key) else { return 0 }
                    return try tx.copiedThrough(zoneID, of: database)
                }
                highest = max(highest, after)
                let reader = PageReader(after: after) { after throws(ContainerError) in
                    let page = try source.read { tx throws(ContainerError) in
                        try tx.recordChanges(in: zoneID, of: stored, after: after, includingDeletions: true, limit: max(pageSize, 1))
                    }
                    return (page, try destination.prepareRecordChanges(page, in: target))
                }
                defer { reader.stop() }
                while true {
                    let (page, prepared) = try reader.next()
                    guard let last = page.last else { break }
                    try destination.write { tx throws(ContainerError) in
                        guard let database = try tx.database(key) else { throw ContainerError(.internalError, "the copy of \(key) went missing") }
                        try tx.appendRecordChanges(page, prepared: prepared, in: database)
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
        try destination.loadFinished()
        try destination.refreshStatistics()
        progress(counts)
        return counts
    }

    /// A zone's pages of record changes, read (and prepared for the destination:
    /// `prepareRecordChanges`) on a thread of its own up to two pages ahead of the one being
    /// written: the source's reads and decoding overlap the destination's writes.
    private final class PageReader: Sendable {
        typealias Page = (changes: [(sequence: Int64, change: RecordZoneChange)], prepared: (any Sendable)?)
        private let pages = Mutex<[Result<Page, ContainerError>]>([])
        private let ready = DispatchSemaphore(value: 0)
        /// Made at 0 and signalled twice: libdispatch traps when a semaphore goes with a value
        /// below the one it was made with.
        private let room = DispatchSemaphore(value: 0)
        private let stopping = Atomic<Bool>(false)
        private let finished = DispatchSemaphore(value: 0)

        /// Reads pages with `read` (the page after a sequence) from after `start` until one is
        /// empty or fails.
        init(after start: Int64, read: @escaping @Sendable (Int64) throws(ContainerError) -> Page) {
            room.signal()
            room.signal()
            DispatchQueue.global().async { [self] in
                var after = start
                while true {
                    room.wait()
                    if stopping.load(ordering: .relaxed) { break }
                    let page = Result { () throws(ContainerError) -> Page in try read(after) }
                    pages.withLock { $0.append(page) }
                    ready.signal()
                    guard case .success(let read) = page, let last = read.changes.last else { break }
                    after = last.sequence
                }
                finished.signal()
            }
        }

        /// The next page (empty after the last).
        func next() throws(ContainerError) -> Page {
            ready.wait()
            let page = pages.withLock { $0.removeFirst() }
            room.signal()
            return try page.get()
        }

        /// Stops reading, and waits until the thread no longer reads.
        func stop() {
            stopping.store(true, ordering: .relaxed)
            room.signal()
            finished.wait()
        }
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

    /// Copies the upload tickets and the receipts, a page of each per write (upserts: a resumed
    /// copy writes them again). A ticket whose bytes were arriving (`receiving`) is copied as
    /// `waiting`, its partial chunks left behind: the transfer did not survive the move, and its
    /// client's retry sends the bytes whole.
    private static func copyAssetTickets(from source: any ContainerStorage, to destination: any ContainerStorage, counts: inout Counts) throws(ContainerError) {
        var after = ""
        while true {
            let tickets = try source.read { tx throws(ContainerError) in try tx.assetUploads(after: after, limit: 500) }
            guard let last = tickets.last else { break }
            try destination.write { tx throws(ContainerError) in
                for var ticket in tickets {
                    if ticket.state == .receiving { ticket.state = .waiting }
                    try tx.saveAssetUpload(ticket)
                }
            }
            counts.uploads += tickets.count
            after = last.token
        }
        after = ""
        while true {
            let receipts = try source.read { tx throws(ContainerError) in try tx.assetReceipts(after: after, limit: 500) }
            guard let last = receipts.last else { break }
            try destination.write { tx throws(ContainerError) in
                for receipt in receipts { try tx.saveAssetReceipt(receipt) }
            }
            counts.receipts += receipts.count
            after = last.receipt
        }
    }
}
