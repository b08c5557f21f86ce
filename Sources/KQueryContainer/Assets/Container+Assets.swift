import Crypto
import Dispatch
import KQuery
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension AssetPolicy {
    /// Bytes per stored chunk: an upload is written and a download read a chunk at a time. Fixed:
    /// stored blobs are read by it.
    public static let chunkSize = 1 << 20
}

extension Container {
    /// Whether the container has ever stored an asset (until then no record holds one).
    public var holdsAssets: Bool { assetsHeld.load(ordering: .relaxed) }

    /// Starts taking the bytes of the upload `token` names (the upload URL's request body). The
    /// token must be known, unexpired and unused, and not being uploaded to by another request.
    /// Append the bytes, then `finish()` for the client's `singleFile` dictionary, or `abandon()`.
    public func beginAssetUpload(token: String, contentType: String?) throws(ContainerError) -> AssetUploadWriter {
        let now = clock()
        try claimUpload(token)
        let ticket: AssetUploadTicket
        do throws(ContainerError) {
            // The ticket is marked receiving in one transaction with the check, so one request
            // takes the URL's bytes at a time on every server sharing the storage; a request cut
            // off by a crash leaves it so until it expires (the client asks for another URL).
            ticket = try write(durably: false) { _, tx throws(ContainerError) -> AssetUploadTicket in
                var ticket = try waitingUpload(token, now: now, tx: tx)
                ticket.state = .receiving
                try tx.saveAssetUpload(ticket)
                // Chunks an abandoned upload could not delete go first.
                try tx.deleteAssetChunks(AssetChunks.uploadOwner(token))
                return ticket
            }
        } catch {
            uploadsInProgress.withLock { _ = $0.remove(token) }
            throw error
        }
        storage.bulkWritesStarted()
        return AssetUploadWriter(container: self, ticket: ticket, contentType: Self.storedContentType(contentType))
    }

    /// Stores the whole body of the upload `token` names when it is one chunk at most
    /// (`AssetPolicy.chunkSize`): what `beginAssetUpload`, `append` and `finish` do, in one
    /// transaction (most assets are small: one transaction and one sync each, not three).
    /// Durable when it returns.
    public func storeAsset(token: String, contentType: String?, bytes: [UInt8]) throws(ContainerError) -> UploadedAsset {
        guard bytes.count <= AssetPolicy.chunkSize else {
            throw ContainerError(.internalError, "an asset of \(bytes.count) bytes is stored a chunk at a time (beginAssetUpload)")
        }
        guard Int64(bytes.count) <= assetPolicy.maximumSize else {
            throw ContainerError(.quotaExceeded, "the asset is larger than \(assetPolicy.maximumSize) bytes")
        }
        try claimUpload(token)
        defer { uploadsInProgress.withLock { _ = $0.remove(token) } }
        let contentHash = AssetSecrets.hex(Array(SHA256.hash(data: bytes)))
        let asset = StoredAsset(fileChecksum: AssetSecrets.checksum(of: bytes), size: Int64(bytes.count), contentHash: contentHash)
        let type = Self.storedContentType(contentType), now = clock()
        let uploaded = try write { _, tx throws(ContainerError) -> UploadedAsset in
            let ticket = try waitingUpload(token, now: now, tx: tx)
            if try tx.assetBlob(contentHash) == nil {
                try tx.saveAssetBlob(AssetBlob(contentHash: contentHash, size: asset.size, fileChecksum: asset.fileChecksum, contentType: type, released: now))
                if !bytes.isEmpty { try tx.saveAssetChunk(contentHash, index: 0, bytes: bytes) }
            }
            return try received(ticket, asset: asset, now: now, tx: tx)
        }
        assetsHeld.store(true, ordering: .relaxed)
        return uploaded
    }

    /// Marks the upload `token` names as taken by this process's request (one at a time).
    private func claimUpload(_ token: String) throws(ContainerError) {
        guard uploadsInProgress.withLock({ $0.insert(token).inserted }) else {
            throw ContainerError(.badRequest, "another request is uploading to this URL")
        }
    }

    /// The upload `token` names, unexpired and not yet receiving its bytes.
    private func waitingUpload(_ token: String, now: Int64, tx: any StorageWriteTransaction) throws(ContainerError) -> AssetUploadTicket {
        guard let ticket = try tx.assetUpload(token), ticket.expires > now else {
            throw ContainerError(.notFound, "this upload URL is unknown or has expired (upload URLs last \(assetPolicy.uploadLifetime / 60_000) minutes): ask assets/upload for another")
        }
        switch ticket.state {
        case .received: throw ContainerError(.badRequest, "this upload URL was used already: ask assets/upload for another")
        case .receiving: throw ContainerError(.badRequest, "another request is uploading to this URL, or one was cut off: ask assets/upload for another")
        case .waiting: return ticket
        }
    }

    /// Marks an upload's URL used and issues the receipt for the asset its bytes made.
    func received(_ ticket: AssetUploadTicket, asset: StoredAsset, now: Int64, tx: any StorageWriteTransaction) throws(ContainerError) -> UploadedAsset {
        let binding = ticket.binding
        let database = try database(binding.database.scope, environment: binding.database.environment,
                                    user: binding.database.userRecordName.isEmpty ? nil : binding.database.userRecordName)
        var used = ticket
        used.state = .received
        try tx.saveAssetUpload(used)
        return try database.issueReceipt(for: asset, binding: binding, now: now, tx: tx)
    }

    /// The type a download is served with: the upload's `Content-Type`, when it names one.
    static func storedContentType(_ declared: String?) -> String {
        let type = declared.map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty || $0.utf8.count > 255 ? nil : $0 }
        return type ?? "application/octet-stream"
    }

    /// A stored blob's facts, if it is stored.
    public func assetBlob(_ contentHash: String) throws(ContainerError) -> AssetBlob? {
        guard StoredAsset.isContentHash(contentHash) else { return nil }
        return try storage.read { tx throws(ContainerError) in try tx.assetBlob(contentHash) }
    }

    /// Chunk `index` of a stored blob (`AssetPolicy.chunkSize` bytes, the last one fewer).
    public func assetChunk(_ contentHash: String, index: Int) throws(ContainerError) -> [UInt8]? {
        guard StoredAsset.isContentHash(contentHash) else { return nil }
        return try storage.read { tx throws(ContainerError) in try tx.assetChunk(contentHash, index: index) }
    }

    /// Calls `body` with the blob's bytes in `range` (all of them for nil), a chunk at a time.
    public func readAsset(_ contentHash: String, range: Range<Int64>? = nil, _ body: ([UInt8]) throws -> Void) throws {
        guard let blob = try assetBlob(contentHash) else { throw ContainerError(.notFound, "no asset \(contentHash)") }
        let range = range ?? 0..<blob.size
        guard range.lowerBound >= 0, range.upperBound <= blob.size else { throw ContainerError(.badRequest, "range \(range) is outside the asset's \(blob.size) bytes") }
        let chunkSize = Int64(AssetPolicy.chunkSize)
        var offset = range.lowerBound
        while offset < range.upperBound {
            let index = Int(offset / chunkSize)
            guard let chunk = try assetChunk(contentHash, index: index) else {
                throw ContainerError(.internalError, "asset \(contentHash) is missing its chunk \(index)")
            }
            let start = Int(offset - Int64(index) * chunkSize)
            let end = min(chunk.count, Int(range.upperBound - Int64(index) * chunkSize))
            guard start < end else { throw ContainerError(.internalError, "asset \(contentHash) has a short chunk \(index)") }
            try body(Array(chunk[start..<end]))
            offset += Int64(end - start)
        }
    }

    /// Removes expired upload tickets and their bytes, spent and expired receipts, and blobs no
    /// record has referred to for `assetPolicy.gracePeriod` (SPEC §12).
    @discardableResult
    public func collectAssets() throws(ContainerError) -> AssetCollection {
        let now = clock()
        let grace = assetPolicy.gracePeriod
        return try write { _, tx throws(ContainerError) in try tx.collectAssets(now: now, gracePeriod: grace) }
    }
}

/// The bytes of one upload, on their way into the container: appended in order, hashed as they
/// come, written a chunk at a time (so an asset never sits whole in memory), and turned into a
/// blob and a receipt by `finish()`. Used by one task at a time.
public final class AssetUploadWriter: @unchecked Sendable {
    let container: Container
    public let ticket: AssetUploadTicket
    let contentType: String
    private var sha256 = SHA256()
    private var sha1 = Insecure.SHA1()
    private var pending: [UInt8] = []
    private var chunks = 0
    /// Bytes received so far.
    public private(set) var size: Int64 = 0
    private var ended = false

    init(container: Container, ticket: AssetUploadTicket, contentType: String) {
        self.container = container
        self.ticket = ticket
        self.contentType = contentType
        pending.reserveCapacity(AssetPolicy.chunkSize)
    }

    deinit { if !ended { abandon() } }

    private var owner: String { AssetChunks.uploadOwner(ticket.token) }

    /// Takes the next bytes; throws QUOTA_EXCEEDED once the asset passes the size limit (the
    /// upload is then abandoned).
    public func append(_ bytes: some Collection<UInt8>) throws(ContainerError) {
        guard !ended else { throw ContainerError(.badRequest, "the upload has ended") }
        size += Int64(bytes.count)
        guard size <= container.assetPolicy.maximumSize else {
            abandon()
            throw ContainerError(.quotaExceeded, "the asset is larger than \(container.assetPolicy.maximumSize) bytes")
        }
        var rest = bytes[...]
        while !rest.isEmpty {
            let taken = rest.prefix(AssetPolicy.chunkSize - pending.count)
            pending.append(contentsOf: taken)
            rest = rest.dropFirst(taken.count)
            if pending.count == AssetPolicy.chunkSize { try flush() }
        }
    }

    /// Takes bytes the way the server collects them, a whole chunk (`AssetPolicy.chunkSize`) at a
    /// time but for the last: a whole chunk is written as it is, not copied into the pending one.
    public func append(chunk bytes: [UInt8]) throws(ContainerError) {
        guard pending.isEmpty, bytes.count == AssetPolicy.chunkSize else { return try append(bytes) }
        guard !ended else { throw ContainerError(.badRequest, "the upload has ended") }
        size += Int64(bytes.count)
        guard size <= container.assetPolicy.maximumSize else {
            abandon()
            throw ContainerError(.quotaExceeded, "the asset is larger than \(container.assetPolicy.maximumSize) bytes")
        }
        try write(bytes)
    }

    /// Writes the pending chunk (not yet durable: `finish` makes the whole upload durable at once).
    private func flush() throws(ContainerError) {
        guard !pending.isEmpty else { return }
        try write(pending)
        pending.removeAll(keepingCapacity: true)
    }

    /// Hashes and writes the next chunk: each hash and the write run at once, on three threads
    /// (the two hashes together took longer than the write, so they set the pace), and the disk
    /// starts taking the chunk without being waited for (`finish` then waits for the last chunks
    /// only).
    private func write(_ chunk: [UInt8]) throws(ContainerError) {
        guard !chunk.isEmpty else { return }
        let index = chunks, owner = owner, container = container
        let failure = Mutex<ContainerError?>(nil)
        DispatchQueue.concurrentPerform(iterations: 3) { part in
            if part == 0 {
                chunk.withUnsafeBytes { sha256.update(bufferPointer: $0) }
            } else if part == 1 {
                chunk.withUnsafeBytes { sha1.update(bufferPointer: $0) }
            } else {
                do throws(ContainerError) {
                    try container.write(durably: false) { _, tx throws(ContainerError) in try tx.saveAssetChunk(owner, index: index, bytes: chunk) }
                    container.storage.startWriteback()
                } catch {
                    failure.withLock { $0 = error }
                }
            }
        }
        if let failure = failure.withLock({ $0 }) { throw failure }
        chunks += 1
    }

    /// Stores the bytes as a blob (once per content: the same bytes uploaded again are kept once),
    /// issues the receipt the client saves in its record, and returns the `singleFile`
    /// dictionary. Durable when it returns.
    public func finish() throws(ContainerError) -> UploadedAsset {
        guard !ended else { throw ContainerError(.badRequest, "the upload has ended") }
        do throws(ContainerError) {
            try flush()
        } catch {
            abandon()
            throw error
        }
        let contentHash = AssetSecrets.hex(Array(sha256.finalize()))
        let asset = StoredAsset(fileChecksum: AssetSecrets.fileChecksum(sha1: Array(sha1.finalize())), size: size, contentHash: contentHash)
        let ticket = ticket, owner = owner, contentType = contentType, container = container
        let now = container.clock()
        do throws(ContainerError) {
            let uploaded = try container.write { _, tx throws(ContainerError) -> UploadedAsset in
                // Still this request's: not collected meanwhile (its chunks would be gone).
                guard let current = try tx.assetUpload(ticket.token), current.state == .receiving else {
                    throw ContainerError(.notFound, "this upload URL expired and was collected while its bytes arrived: ask assets/upload for another")
                }
                if try tx.assetBlob(contentHash) != nil {
                    try tx.deleteAssetChunks(owner)
                } else {
                    try tx.saveAssetBlob(AssetBlob(contentHash: contentHash, size: asset.size, fileChecksum: asset.fileChecksum, contentType: contentType, released: now))
                    try tx.moveAssetChunks(from: owner, to: contentHash)
                }
                return try container.received(current, asset: asset, now: now, tx: tx)
            }
            container.assetsHeld.store(true, ordering: .relaxed)
            end()
            return uploaded
        } catch {
            abandon()
            throw error
        }
    }

    /// Drops what was received: the URL can be used again until it expires.
    public func abandon() {
        guard !ended else { return }
        let owner = owner, token = ticket.token
        try? container.write(durably: false) { _, tx throws(ContainerError) in
            try tx.deleteAssetChunks(owner)
            if var current = try tx.assetUpload(token), current.state == .receiving {
                current.state = .waiting
                try tx.saveAssetUpload(current)
            }
        }
        end()
    }

    private func end() {
        ended = true
        container.storage.bulkWritesEnded()
        let token = ticket.token
        container.uploadsInProgress.withLock { _ = $0.remove(token) }
    }
}

/// Random tokens and the checksums clients see.
package enum AssetSecrets {
    /// 24 random bytes, base64url: an upload URL's or a receipt's secret.
    static func token() -> String { base64URL(randomBytes(24)) }

    static func wrappingKey() -> String { Data(randomBytes(32)).base64EncodedString() }

    /// `count` random bytes, eight from each draw of the system's generator (a draw a byte was a
    /// system call a byte).
    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 8)
        while bytes.count < count { withUnsafeBytes(of: generator.next()) { bytes.append(contentsOf: $0) } }
        return Array(bytes.prefix(count))
    }

    /// base64 of `0x01` and a 20-byte SHA-1 (the shape of CloudKit's `fileChecksum`).
    static func fileChecksum(sha1 digest: [UInt8]) -> String { Data([0x01] + digest).base64EncodedString() }

    static func checksum(of bytes: [UInt8]) -> String { fileChecksum(sha1: Array(Insecure.SHA1.hash(data: bytes))) }

    /// Lower-case hex (a blob's content hash; PostgreSQL's sort keys use it too).
    package static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
