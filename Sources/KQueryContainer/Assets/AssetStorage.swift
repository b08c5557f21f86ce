import KQuery

/// The asset reads a storage transaction offers (SPEC §12): upload tickets, receipts, blobs and
/// their chunks. Asset bytes are never mirrored in memory by a file storage: they are read from
/// the file a chunk at a time.
package protocol AssetReads {
    func assetUpload(_ token: String) throws(ContainerError) -> AssetUploadTicket?
    func assetReceipt(_ receipt: String) throws(ContainerError) -> AssetReceiptEntry?
    func assetBlob(_ contentHash: String) throws(ContainerError) -> AssetBlob?
    /// Chunk `index` of a blob (owner: its content hash) or of an upload in progress (owner:
    /// `AssetChunks.uploadOwner(token)`).
    func assetChunk(_ owner: String, index: Int) throws(ContainerError) -> [UInt8]?
    /// Whether any blob is stored.
    func holdsAssetBlobs() throws(ContainerError) -> Bool
    /// The blobs whose content hash sorts after `contentHash`, in that order, at most `limit`
    /// (a copy of the container reads them a page at a time).
    func assetBlobs(after contentHash: String, limit: Int) throws(ContainerError) -> [AssetBlob]
    /// The upload tickets whose token sorts after `token`, in that order, at most `limit`.
    func assetUploads(after token: String, limit: Int) throws(ContainerError) -> [AssetUploadTicket]
    /// The receipts sorting after `receipt`, in that order, at most `limit`.
    func assetReceipts(after receipt: String, limit: Int) throws(ContainerError) -> [AssetReceiptEntry]
}

/// The asset writes a storage write transaction offers.
package protocol AssetWrites: AssetReads {
    func saveAssetUpload(_ ticket: AssetUploadTicket) throws(ContainerError)
    func saveAssetChunk(_ owner: String, index: Int, bytes: [UInt8]) throws(ContainerError)
    func deleteAssetChunks(_ owner: String) throws(ContainerError)
    /// Gives an upload's chunks to the blob they turned out to be.
    func moveAssetChunks(from owner: String, to newOwner: String) throws(ContainerError)
    /// Creates or replaces a blob's facts.
    func saveAssetBlob(_ blob: AssetBlob) throws(ContainerError)
    /// Creates or replaces a receipt.
    func saveAssetReceipt(_ entry: AssetReceiptEntry) throws(ContainerError)
    /// Makes `hashes` the blobs the record refers to; blobs it no longer refers to are released
    /// at `now` (their grace period starts).
    func setAssetReferences(_ record: RecordID, to hashes: Set<String>, in database: StoredDatabase, now: Int64) throws(ContainerError)
    /// Drops the references of every record of a deleted zone, releasing their blobs at `now`.
    func deleteAssetReferences(in zoneID: ZoneID, of database: StoredDatabase, now: Int64) throws(ContainerError)
    /// Removes what has expired at `now`: upload tickets and their staged chunks, spent or expired
    /// receipts, and blobs no record refers to and no live receipt names, released more than
    /// `gracePeriod` ago.
    func collectAssets(now: Int64, gracePeriod: Int64) throws(ContainerError) -> AssetCollection
}

/// What a collection of asset leftovers removed.
public struct AssetCollection: Hashable, Sendable {
    public var blobs = 0
    public var bytes: Int64 = 0
    public var uploads = 0
    public var receipts = 0

    public init() {}
}

/// Names of chunk owners.
package enum AssetChunks {
    /// The owner of an upload's chunks until it is finished (blob owners are 64 hex digits, so
    /// the two never meet).
    package static func uploadOwner(_ token: String) -> String { "upload:" + token }
    /// How long past its expiry an upload still receiving its bytes is kept from the collector
    /// (an upload begun just before its URL expired finishes); one cut off by a crash goes then.
    package static let receivingGrace: Int64 = 60 * 60 * 1000
}

/// A record's place, as asset references key it.
struct AssetReferenceKey: Hashable {
    var database: Int64
    var zoneID: ZoneID
    var recordName: String
}

/// The assets of a container in memory (`MemoryContainerStorage`), changed under its lock.
final class MemoryAssets {
    @exclusivity(unchecked) var uploads: [String: AssetUploadTicket] = [:]
    @exclusivity(unchecked) var receipts: [String: AssetReceiptEntry] = [:]
    @exclusivity(unchecked) var blobs: [String: AssetBlob] = [:]
    @exclusivity(unchecked) var chunks: [String: [Int: [UInt8]]] = [:]
    /// Each record's blobs, and each blob's number of referring records.
    @exclusivity(unchecked) var references: [AssetReferenceKey: Set<String>] = [:]
    @exclusivity(unchecked) var referenceCounts: [String: Int] = [:]
}

extension MemoryTransaction {
    func assetUpload(_ token: String) throws(ContainerError) -> AssetUploadTicket? { state.assets.uploads[token] }
    func assetReceipt(_ receipt: String) throws(ContainerError) -> AssetReceiptEntry? { state.assets.receipts[receipt] }
    func assetBlob(_ contentHash: String) throws(ContainerError) -> AssetBlob? { state.assets.blobs[contentHash] }
    func assetChunk(_ owner: String, index: Int) throws(ContainerError) -> [UInt8]? { state.assets.chunks[owner]?[index] }
    func holdsAssetBlobs() throws(ContainerError) -> Bool { !state.assets.blobs.isEmpty }
    func assetBlobs(after contentHash: String, limit: Int) throws(ContainerError) -> [AssetBlob] {
        Array(state.assets.blobs.values.filter { $0.contentHash > contentHash }.sorted { $0.contentHash < $1.contentHash }.prefix(limit))
    }
    func assetUploads(after token: String, limit: Int) throws(ContainerError) -> [AssetUploadTicket] {
        Array(state.assets.uploads.values.filter { $0.token > token }.sorted { $0.token < $1.token }.prefix(limit))
    }
    func assetReceipts(after receipt: String, limit: Int) throws(ContainerError) -> [AssetReceiptEntry] {
        Array(state.assets.receipts.values.filter { $0.receipt > receipt }.sorted { $0.receipt < $1.receipt }.prefix(limit))
    }

    func saveAssetUpload(_ ticket: AssetUploadTicket) throws(ContainerError) {
        let assets = state.assets, old = assets.uploads[ticket.token]
        assets.uploads[ticket.token] = ticket
        undo.add { assets.uploads[ticket.token] = old }
    }

    func saveAssetChunk(_ owner: String, index: Int, bytes: [UInt8]) throws(ContainerError) {
        let assets = state.assets, old = assets.chunks[owner]?[index]
        assets.chunks[owner, default: [:]][index] = bytes
        undo.add { assets.chunks[owner, default: [:]][index] = old }
    }

    func deleteAssetChunks(_ owner: String) throws(ContainerError) {
        let assets = state.assets, old = assets.chunks[owner]
        assets.chunks[owner] = nil
        undo.add { assets.chunks[owner] = old }
    }

    func moveAssetChunks(from owner: String, to newOwner: String) throws(ContainerError) {
        let assets = state.assets, moved = assets.chunks[owner], replaced = assets.chunks[newOwner]
        assets.chunks[newOwner] = moved
        assets.chunks[owner] = nil
        undo.add {
            assets.chunks[owner] = moved
            assets.chunks[newOwner] = replaced
        }
    }

    func saveAssetBlob(_ blob: AssetBlob) throws(ContainerError) {
        let assets = state.assets, old = assets.blobs[blob.contentHash]
        assets.blobs[blob.contentHash] = blob
        undo.add { assets.blobs[blob.contentHash] = old }
    }

    func saveAssetReceipt(_ entry: AssetReceiptEntry) throws(ContainerError) {
        let assets = state.assets, old = assets.receipts[entry.receipt]
        assets.receipts[entry.receipt] = entry
        undo.add { assets.receipts[entry.receipt] = old }
    }

    func setAssetReferences(_ record: RecordID, to hashes: Set<String>, in database: StoredDatabase, now: Int64) throws(ContainerError) {
        replaceReferences(AssetReferenceKey(database: database.id, zoneID: record.zoneID, recordName: record.recordName), with: hashes, now: now)
    }

    func deleteAssetReferences(in zoneID: ZoneID, of database: StoredDatabase, now: Int64) throws(ContainerError) {
        for key in state.assets.references.keys where key.database == database.id && key.zoneID == zoneID {
            replaceReferences(key, with: [], now: now)
        }
    }

    /// Sets a record's blobs, keeping the counts and releasing the blobs it lost (undoably).
    private func replaceReferences(_ key: AssetReferenceKey, with hashes: Set<String>, now: Int64) {
        let assets = state.assets
        let old = assets.references[key] ?? []
        guard old != hashes else { return }
        for hash in hashes.subtracting(old) { assets.referenceCounts[hash, default: 0] += 1 }
        for hash in old.subtracting(hashes) {
            assets.referenceCounts[hash, default: 1] -= 1
            if assets.referenceCounts[hash] == 0 { assets.referenceCounts[hash] = nil }
            if var blob = assets.blobs[hash] {
                let released = blob.released
                blob.released = now
                assets.blobs[hash] = blob
                undo.add { assets.blobs[hash]?.released = released }
            }
        }
        assets.references[key] = hashes.isEmpty ? nil : hashes
        undo.add {
            for hash in hashes.subtracting(old) {
                assets.referenceCounts[hash, default: 1] -= 1
                if assets.referenceCounts[hash] == 0 { assets.referenceCounts[hash] = nil }
            }
            for hash in old.subtracting(hashes) { assets.referenceCounts[hash, default: 0] += 1 }
            assets.references[key] = old.isEmpty ? nil : old
        }
    }

    func collectAssets(now: Int64, gracePeriod: Int64) throws(ContainerError) -> AssetCollection {
        let assets = state.assets
        var collection = AssetCollection()
        for (token, ticket) in assets.uploads where ticket.expires <= now && (ticket.state != .receiving || ticket.expires <= now - AssetChunks.receivingGrace) {
            try deleteAssetChunks(AssetChunks.uploadOwner(token))
            assets.uploads[token] = nil
            undo.add { assets.uploads[token] = ticket }
            collection.uploads += 1
        }
        for (receipt, entry) in assets.receipts where entry.spent || entry.expires <= now {
            assets.receipts[receipt] = nil
            undo.add { assets.receipts[receipt] = entry }
            collection.receipts += 1
        }
        let named = Set(assets.receipts.values.map(\.asset.contentHash))
        for (hash, blob) in assets.blobs where assets.referenceCounts[hash] == nil && !named.contains(hash) && blob.released + gracePeriod <= now {
            try deleteAssetChunks(hash)
            assets.blobs[hash] = nil
            undo.add { assets.blobs[hash] = blob }
            collection.blobs += 1
            collection.bytes += blob.size
        }
        return collection
    }
}
