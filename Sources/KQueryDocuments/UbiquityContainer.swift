import Foundation
import KQuery
import KQueryContainer

/// A ubiquity container on Linux (SPEC §15): a local folder (`Documents/` and the rest;
/// `*.nosync` stays on the device) kept the same as the container's zone on the server, both
/// ways. A sync pass pulls the zone's changes since the device's token, finds local changes by
/// scanning, sends metadata and only the chunks the server lacks, and keeps the losing side of
/// each conflict as a version (`FileVersion`).
///
/// ```swift
/// let transport = WebServicesDocumentsTransport(server: url, containerIdentifier: "iCloud.com.example.notes",
///                                               apiToken: t, webAuthToken: w)
/// let container = try UbiquityContainer(directory: "/home/me/Notes", transport: transport, deviceName: "laptop")
/// let statistics = try await container.sync()
/// ```
public actor UbiquityContainer {
    /// The zone that holds a container's documents in the user's private database.
    public static let zoneName = "CloudDocs"

    /// When files from other devices are downloaded: on request (`download(_:)`), or at once as a
    /// Mac does.
    public enum DownloadPolicy: String, Sendable, CaseIterable {
        case onDemand = "on-demand"
        case all
    }

    /// What a sync moved.
    public struct Statistics: Hashable, Sendable {
        public var itemsUploaded = 0
        public var bytesUploaded = 0
        public var chunksUploaded = 0
        public var itemsDownloaded = 0
        public var bytesDownloaded = 0
        public var chunksDownloaded = 0
        public var conflicts = 0

        public init() {}

        public var json: JSON {
            .object([
                ("itemsUploaded", .int(Int64(itemsUploaded))), ("bytesUploaded", .int(Int64(bytesUploaded))), ("chunksUploaded", .int(Int64(chunksUploaded))),
                ("itemsDownloaded", .int(Int64(itemsDownloaded))), ("bytesDownloaded", .int(Int64(bytesDownloaded))),
                ("chunksDownloaded", .int(Int64(chunksDownloaded))), ("conflicts", .int(Int64(conflicts))),
            ])
        }
    }

    public nonisolated let directory: String
    public nonisolated let deviceName: String
    public var downloadPolicy: DownloadPolicy
    let transport: any DocumentsTransport
    let state: SyncState
    let folder: LocalFolder
    /// Metadata queries following the container: each gets every item after each sync.
    private var feeds: [UUID: AsyncStream<[ItemStatus]>.Continuation] = [:]
    /// Chunks fetched ahead for this sync pass (and their bytes).
    private var prefetched: [String: [UInt8]] = [:]
    private var prefetchedBytes = 0
    /// The pass's changes to the local items not yet committed, in order: one transaction for
    /// many (one per item was much of a first sync of many files). A kill loses them together,
    /// which is the same as a kill before the first: each one's file is found again and adopted.
    private var staged: [SyncState.Change] = []
    /// Files written for the staged changes and not yet synced to disk.
    private var unsyncedFiles: [String] = []

    /// The sync state's file for a folder: beside it, named after it.
    public static func statePath(for directory: String) -> String {
        let url = URL(fileURLWithPath: directory).standardizedFileURL
        return url.deletingLastPathComponent().path + "/." + url.lastPathComponent + ".kquerydocs"
    }

    public init(directory: String, transport: any DocumentsTransport, deviceName: String, downloadPolicy: DownloadPolicy = .onDemand) throws(DocumentsError) {
        let standardized = URL(fileURLWithPath: directory).standardizedFileURL.path
        do { try FileManager.default.createDirectory(atPath: standardized, withIntermediateDirectories: true) } catch {
            throw DocumentsError(.localStorage, "\(standardized): cannot create the folder (\(error.localizedDescription))")
        }
        self.directory = standardized
        self.deviceName = deviceName
        self.downloadPolicy = downloadPolicy
        self.transport = transport
        let base = Self.statePath(for: standardized)
        state = try SyncState(path: base + ".sqlite")
        folder = LocalFolder(root: standardized, staging: base + "-staging")
        // Downloads a killed process left half written.
        try? FileManager.default.removeItem(atPath: base + "-staging")
        try state.setMeta("deviceName", deviceName)
    }

    /// The device name the folder last synced with (nil before its first use): a device keeps
    /// its name, so its conflict versions keep saying who saved them.
    public static func lastDeviceName(for directory: String) -> String? {
        let path = statePath(for: URL(fileURLWithPath: directory).standardizedFileURL.path) + ".sqlite"
        guard FileManager.default.fileExists(atPath: path), let state = try? SyncState(path: path) else { return nil }
        return try? state.meta("deviceName")
    }

    public func setDownloadPolicy(_ policy: DownloadPolicy) { downloadPolicy = policy }

    // MARK: Sync

    /// One sync both ways; passes again (a few times at most) while the server moved on under it.
    @discardableResult
    public func sync() async throws(DocumentsError) -> Statistics {
        var statistics = Statistics()
        for _ in 0..<5 {
            guard try await syncPass(&statistics) else { break }
        }
        publish()
        return statistics
    }

    /// Syncs now and again whenever the server says the zone changed (a push) or a moment
    /// passed (local changes), until the task is cancelled. Each pass's statistics or error go
    /// to `report`; an error does not end the watch (the server may be away for a while).
    public func watch(report: @Sendable (Result<Statistics, DocumentsError>) -> Void = { _ in }) async {
        while !Task.isCancelled {
            do throws(DocumentsError) { report(.success(try await sync())) } catch { report(.failure(error)) }
            guard !Task.isCancelled else { break }
            await waitForChange()
        }
    }

    /// Returns when another device changed the container (a push through `kquery serve`'s web
    /// courier), after a moment without one (when local changes are looked for), or when the task
    /// is cancelled.
    public func waitForChange() async { await transport.waitForChange(device: deviceName) }

    /// Closes the push stream a `watch` listens on (it returns once its task is cancelled).
    public nonisolated func stopListening() { transport.stopListening() }

    /// The container's change feed: every item, after each sync (and download, evict, resolve).
    public func changeFeed() -> AsyncStream<[ItemStatus]> {
        let (stream, continuation) = AsyncStream.makeStream(of: [ItemStatus].self, bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        feeds[id] = continuation
        continuation.onTermination = { _ in Task { await self.endFeed(id) } }
        return stream
    }

    private func endFeed(_ id: UUID) { feeds[id] = nil }

    func publish() {
        guard !feeds.isEmpty, let snapshot = try? status() else { return }
        for feed in feeds.values { feed.yield(snapshot) }
    }

    /// Pulls the zone's changes since the saved token into the sync state, a page per transaction.
    func pull(_ statistics: inout Statistics) async throws(DocumentsError) {
        if try state.meta("prepared") == nil {
            try await transport.prepare(device: deviceName)
            try state.setMeta("prepared", "1")
        }
        var token = try state.meta("token")
        while true {
            let page: DocumentChanges
            do { page = try await transport.fetchChanges(since: token) } catch let error where error.code == .changeTokenExpired && token != nil {
                token = nil
                continue
            }
            var entries: [RecordZoneChangeEntry] = []
            for change in page.changes {
                switch change {
                case .changed(let record) where record.recordType == ChunkRecord.recordType:
                    // Chunks are not kept in the sync state; inline ones this pass may write.
                    keepInline(record, statistics: &statistics)
                case .changed(let record): entries.append(RecordZoneChangeEntry(record))
                case .deleted(_, let type) where type == ChunkRecord.recordType: continue
                case .deleted(let id, _): entries.append(.deleted(id: id.recordName))
                }
            }
            try state.applyRemote(entries, token: page.token)
            token = page.token
            if !page.moreComing { break }
        }
    }

    /// Keeps an inline chunk that arrived with the zone's changes for this pass's downloads (up to
    /// 256 MB): a second device's first sync then fetches no small file's bytes on its own.
    private func keepInline(_ record: Record, statistics: inout Statistics) {
        guard case .bytes(let bytes)? = record[ChunkRecord.inlineField] else { return }
        statistics.chunksDownloaded += 1
        statistics.bytesDownloaded += bytes.count
        let hash = String(record.recordID.recordName.dropFirst(2))
        guard prefetchedBytes + bytes.count <= 256 << 20, record.recordID.recordName == ChunkRecord.recordName(hash), Chunker.sha256(bytes) == hash else { return }
        if prefetched.updateValue(bytes, forKey: hash) == nil { prefetchedBytes += bytes.count }
    }

    func forgetPrefetched() {
        prefetched = [:]
        prefetchedBytes = 0
    }

    /// The server's items and versions as last pulled.
    func remoteModel() throws(DocumentsError) -> (items: [String: ItemRecord], versions: [VersionRecord]) {
        var items: [String: ItemRecord] = [:]
        var versions: [VersionRecord] = []
        for record in try state.remoteRecords() {
            switch record.recordType {
            case ItemRecord.recordType: if let item = try? ItemRecord(record: record) { items[item.id] = item }
            case VersionRecord.recordType: if let version = try? VersionRecord(record: record) { versions.append(version) }
            default: continue
            }
        }
        return (items, versions)
    }

    /// Each item's path from its name and parents; items whose chain is broken, loops, or holds an
    /// unsafe name have none (they stay on the server, never on disk). Case-only twins in one
    /// folder: the one with the later identifier is left out, so no device writes both names
    /// onto a case-insensitive disk.
    static func paths(_ items: [String: ItemRecord]) -> [String: String] {
        var paths: [String: String] = [:]
        var unsafe: Set<String> = []
        var siblings: [String: String] = [:]
        for item in items.values.sorted(by: { $0.id < $1.id }) {
            let key = (item.parent ?? "") + "/" + item.name.lowercased()
            if siblings[key] != nil { unsafe.insert(item.id) } else { siblings[key] = item.id }
        }
        func path(_ id: String, depth: Int) -> String? {
            if let known = paths[id] { return known }
            guard depth < 256, !unsafe.contains(id), let item = items[id], LocalFolder.isSafeName(item.name), LocalFolder.isSynced(item.name) else { return nil }
            let result: String
            if let parent = item.parent {
                guard let parentPath = path(parent, depth: depth + 1), items[parent]?.kind != .file else { return nil }
                result = parentPath + "/" + item.name
            } else {
                result = item.name
            }
            paths[id] = result
            return result
        }
        for id in items.keys { _ = path(id, depth: 0) }
        return paths
    }

    /// A file's content as read now.
    struct Content {
        var bytes: [UInt8]
        var chunks: [ChunkReference]
        var hash: String
        var entry: DiskEntry
    }

    func readContent(_ path: String, entry: DiskEntry) throws(DocumentsError) -> Content {
        let bytes = try folder.read(path)
        let chunks = Chunker.chunks(bytes)
        return Content(bytes: bytes, chunks: chunks, hash: Chunker.contentHash(chunks), entry: entry)
    }

    enum LocalChange {
        case unchanged
        case modified(Content?)
        case deleted
    }

    /// Stages a local item's new state (committed by `commitStaged`, at the latest when the pass
    /// ends or before anything else is written to the sync state).
    private func stage(_ change: SyncState.Change) throws(DocumentsError) {
        staged.append(change)
        if staged.count >= 2_000 { try commitStaged() }
    }

    /// Commits the staged changes, their files synced to disk first: a few one by one, many with
    /// one `syncfs` (which also waits for whatever else the machine is writing to that disk).
    func commitStaged() throws(DocumentsError) {
        guard !staged.isEmpty else { return }
        if unsyncedFiles.count > 64 {
            try folder.syncToDisk()
        } else {
            for path in unsyncedFiles { try folder.syncToDisk(path) }
        }
        unsyncedFiles = []
        try state.commit(staged)
        staged = []
    }

    /// One pass; true when another should follow (the server changed under it). What it staged
    /// is committed even when it fails part way (those files are written).
    func syncPass(_ statistics: inout Statistics) async throws(DocumentsError) -> Bool {
        do {
            let again = try await syncPassStaged(&statistics)
            try commitStaged()
            return again
        } catch {
            try? commitStaged()
            staged = []
            throw error
        }
    }

    private func syncPassStaged(_ statistics: inout Statistics) async throws(DocumentsError) -> Bool {
        defer { forgetPrefetched() }
        try await pull(&statistics)
        let (remoteItems, versions) = try remoteModel()
        let remotePaths = Self.paths(remoteItems)
        let disk = folder.scan()
        var locals = Dictionary(try state.localItems().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var batch = ModifyBatch()
        var again = false

        // What changed here since the last sync, per known item.
        var changes: [String: LocalChange] = [:]
        for row in locals.values {
            guard let entry = disk[row.path], entry.kind == row.kind else {
                changes[row.id] = row.kind == .file && !row.downloaded && disk[row.path] == nil ? .unchanged : .deleted
                continue
            }
            // An item recorded but never acknowledged by the server is sent (again).
            let acknowledged = row.tag != nil
            if row.kind != .file {
                changes[row.id] = acknowledged ? .unchanged : .modified(nil)
            } else if acknowledged && row.downloaded && entry.size == row.size && entry.mtime == row.mtime {
                changes[row.id] = .unchanged
            } else {
                let content = try readContent(row.path, entry: entry)
                if acknowledged && content.hash == row.contentHash && row.downloaded {
                    var updated = row
                    updated.size = entry.size
                    updated.mtime = entry.mtime
                    try stage(.put(updated))
                    locals[row.id] = updated
                    changes[row.id] = .unchanged
                } else {
                    changes[row.id] = .modified(content)
                }
            }
        }
        // Paths no known item holds any more are new here.
        let occupied = Set(locals.values.filter { !changes[$0.id].isDeleted }.map(\.path))
        var newPaths = disk.keys.filter { !occupied.contains($0) }

        // Small files this pass downloads: their chunks in a few requests.
        let downloads = remoteItems.values.filter { remote in
            guard let row = locals[remote.id] else { return downloadPolicy == .all }
            return row.downloaded && row.tag != remote.changeTag && changes[row.id].isUnchanged
        }
        try await prefetch(downloads, statistics: &statistics)

        // Known items: server side against this side.
        for row in locals.values.sorted(by: { $0.path.split(separator: "/").count < $1.path.split(separator: "/").count }) {
            let change = changes[row.id] ?? .unchanged
            let remote = remoteItems[row.id]
            switch (remote, change) {
            case (nil, .deleted):
                try stage(.forget(row.id))
            case (nil, .unchanged):
                if row.tag == nil { continue }
                // Deleted on the server: deleted here.
                try folder.remove(row.path)
                try stage(.forget(row.id))
                if row.kind != .file { try forgetDescendants(of: row.path, in: &locals) }
            case (nil, .modified(let content)):
                // Never uploaded, or deleted on the server while edited here: the edit survives as a creation.
                var pending = row
                pending.tag = nil
                try stage(.put(pending))
                try upload(row.id, path: row.path, kind: row.kind, content: content, base: nil, locals: locals, batch: &batch)
            case (let remote?, .unchanged):
                guard remote.changeTag != row.tag else { continue }
                try await apply(remote, path: remotePaths[remote.id], row: row, locals: &locals, statistics: &statistics)
            case (let remote?, .deleted):
                if remote.changeTag == row.tag {
                    batch.add(RecordOperation(kind: .delete, record: remote.record(zoneID: transport.zoneID)), item: row.id, path: row.path, kind: .deletion)
                    for version in versions where version.item == row.id {
                        batch.add(RecordOperation(kind: .forceDelete, record: version.record(zoneID: transport.zoneID)), item: row.id, path: nil, kind: .other)
                    }
                } else {
                    var restored = row
                    restored.downloaded = false
                    try await apply(remote, path: remotePaths[remote.id], row: restored, locals: &locals, statistics: &statistics)
                }
            case (let remote?, .modified(let content)):
                if remote.changeTag == row.tag && row.tag != nil {
                    try upload(row.id, path: row.path, kind: row.kind, content: content, base: remote, locals: locals, batch: &batch)
                } else {
                    try await conflict(remote, path: row.path, row: row, content: content, locals: &locals, batch: &batch, statistics: &statistics)
                }
            }
        }

        // Items new on the server.
        let linked = Set(locals.keys)
        for remote in remoteItems.values.sorted(by: { (remotePaths[$0.id]?.count ?? 0) < (remotePaths[$1.id]?.count ?? 0) }) where !linked.contains(remote.id) {
            guard let path = remotePaths[remote.id] else { continue }
            if let entry = disk[path], newPaths.contains(path) {
                // Created here and there under one name: one item, and a conflict when they differ.
                newPaths.removeAll { $0 == path }
                let content = entry.kind == .file ? try readContent(path, entry: entry) : nil
                try await conflict(remote, path: path, row: nil, content: content, locals: &locals, batch: &batch, statistics: &statistics)
                continue
            }
            try await apply(remote, path: path, row: nil, locals: &locals, statistics: &statistics)
        }

        // Items new here: renames of deleted files with the same content, or creations. Looked up
        // by path and by content hash (a scan of every item for each new one made a first sync of
        // many files quadratic).
        var idsByPath: [String: String] = [:]
        var deletedFilesByHash: [String: [LocalItem]] = [:]
        for row in locals.values {
            idsByPath[row.path] = row.id
            if changes[row.id].isDeleted, row.kind == .file, let hash = row.contentHash { deletedFilesByHash[hash, default: []].append(row) }
        }
        var created: [LocalItem] = []
        for path in newPaths.sorted(by: { $0.split(separator: "/").count < $1.split(separator: "/").count }) {
            guard let entry = disk[path] else { continue }
            let content = entry.kind == .file ? try readContent(path, entry: entry) : nil
            if let content, let index = deletedFilesByHash[content.hash]?.firstIndex(where: { remoteItems[$0.id]?.changeTag == $0.tag }),
               let moved = deletedFilesByHash[content.hash]?.remove(at: index), let remote = remoteItems[moved.id] {
                changes[moved.id] = .modified(content)
                batch.remove(item: moved.id)
                var renamed = moved
                renamed.path = path
                try stage(.put(renamed))
                locals[moved.id] = renamed
                idsByPath[path] = moved.id
                try upload(moved.id, path: path, kind: .file, content: content, base: remote, locals: locals, idsByPath: idsByPath, batch: &batch)
                continue
            }
            let id = UUID().uuidString.lowercased()
            let pending = LocalItem(id: id, path: path, kind: entry.kind, contentHash: nil, tag: nil, size: entry.size, mtime: entry.mtime, downloaded: true)
            created.append(pending)
            locals[id] = pending
            idsByPath[path] = id
            try upload(id, path: path, kind: entry.kind, content: content, base: nil, locals: locals, idsByPath: idsByPath, batch: &batch)
        }

        // Recorded before they are sent (one transaction): a kill after the server took them
        // finds the same items again.
        for item in created { staged.append(.put(item)) }
        try commitStaged()
        let overwrites = batch.overwrites
        let held: Set<String>
        (again, held) = try await send(&batch, locals: &locals, statistics: &statistics)
        try await overwrite(overwrites, held: held, locals: &locals, statistics: &statistics)
        return again
    }

    private func forgetDescendants(of path: String, in locals: inout [String: LocalItem]) throws(DocumentsError) {
        for row in locals.values where row.path.hasPrefix(path + "/") {
            try stage(.forget(row.id))
            locals[row.id] = nil
        }
    }

    /// The identifier of the item at a path's parent folder (nil at the top of the container).
    private func parentID(of path: String, locals: [String: LocalItem], idsByPath: [String: String]?) -> String? {
        let parent = (path as NSString).deletingLastPathComponent
        guard !parent.isEmpty else { return nil }
        if let idsByPath { return idsByPath[parent] }
        return locals.values.first { $0.path == parent }?.id
    }

    /// Queues an item's record (and its chunks) for upload.
    /// `idsByPath`, when given, finds the parent folder's item without scanning `locals`.
    private func upload(_ id: String, path: String, kind: ItemKind, content: Content?, base: ItemRecord?, locals: [String: LocalItem],
                        idsByPath: [String: String]? = nil, batch: inout ModifyBatch) throws(DocumentsError) {
        let name = (path as NSString).lastPathComponent
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let date = content.map { $0.entry.mtime / 1_000_000 } ?? base?.contentChangeDate ?? now
        var item = ItemRecord(id: id, name: name, parent: parentID(of: path, locals: locals, idsByPath: idsByPath), kind: kind, size: Int64(content?.bytes.count ?? 0),
                              contentType: ContentType.uti(forName: name, kind: kind), creationDate: base?.creationDate ?? date,
                              contentChangeDate: date, contentHash: content?.hash ?? "", chunks: content?.chunks ?? [], savingComputer: deviceName)
        item.changeTag = base?.changeTag
        if let content { batch.addChunks(content) }
        batch.add(RecordOperation(kind: base == nil ? .create : .replace, record: item.record(zoneID: transport.zoneID)), item: id, path: path,
                  kind: .item(content))
    }

    /// Brings an item from the server onto the disk: moves it if its path changed, writes its
    /// bytes when they are wanted here, or keeps it as a placeholder.
    private func apply(_ remote: ItemRecord, path: String?, row: LocalItem?, locals: inout [String: LocalItem], statistics: inout Statistics)
        async throws(DocumentsError)
    {
        guard let path else { return }
        var oldContent: [UInt8]? = nil
        if let row, row.path != path, FileManager.default.fileExists(atPath: folder.root + "/" + row.path) {
            try folder.move(row.path, to: path)
            if row.kind != .file {
                try commitStaged()
                try state.movePrefix(from: row.path, to: path)
                for other in locals.values where other.path.hasPrefix(row.path + "/") {
                    locals[other.id]?.path = path + other.path.dropFirst(row.path.count)
                }
            }
        }
        if let row, row.downloaded, row.kind == .file { oldContent = try? folder.read(path) }
        switch remote.kind {
        case .folder, .package:
            try folder.makeDirectory(path)
            let entry = LocalFolder.entry(at: folder.root + "/" + path)
            let item = LocalItem(id: remote.id, path: path, kind: remote.kind, contentHash: remote.contentHash, tag: remote.changeTag, size: 0,
                                 mtime: entry?.mtime ?? 0, downloaded: true)
            try stage(.put(item))
            locals[remote.id] = item
        case .file:
            let wanted = (row?.downloaded ?? false) || downloadPolicy == .all
            guard wanted else {
                try? folder.remove(path)
                let item = LocalItem(id: remote.id, path: path, kind: .file, contentHash: remote.contentHash, tag: remote.changeTag, size: remote.size,
                                     mtime: 0, downloaded: false)
                try stage(.put(item))
                locals[remote.id] = item
                return
            }
            let entry = try await download(remote, to: path, reusing: oldContent, durable: false, statistics: &statistics)
            let item = LocalItem(id: remote.id, path: path, kind: .file, contentHash: remote.contentHash, tag: remote.changeTag, size: entry.size,
                                 mtime: entry.mtime, downloaded: true)
            try stage(.put(item))
            locals[remote.id] = item
        }
    }

    /// Writes an item's bytes at `path`, fetching only the chunks `reusing` (the old content) lacks.
    @discardableResult
    /// Not `durable`: the file is synced to disk when the staged changes are committed.
    func download(_ remote: ItemRecord, to path: String, reusing old: [UInt8]?, durable: Bool = true, statistics: inout Statistics)
        async throws(DocumentsError) -> DiskEntry
    {
        var known: [String: ArraySlice<UInt8>] = [:]
        if let old {
            for range in Chunker.boundaries(old) {
                let slice = old[range]
                known[Chunker.sha256(Array(slice))] = slice
            }
        }
        var missing: [ChunkReference] = []
        var wanted: Set<String> = []
        for chunk in remote.chunks where known[chunk.hash] == nil && prefetched[chunk.hash] == nil && wanted.insert(chunk.hash).inserted {
            missing.append(chunk)
        }
        // 64 chunks (at most 16 MB) a request.
        for start in stride(from: 0, to: missing.count, by: 64) {
            let slice = Array(missing[start..<min(start + 64, missing.count)])
            let fetched = try await transport.downloadChunks(slice.map(\.hash))
            for (chunk, bytes) in zip(slice, fetched) {
                try Self.verify(bytes, chunk, path: path)
                statistics.chunksDownloaded += 1
                statistics.bytesDownloaded += bytes.count
                known[chunk.hash] = bytes[...]
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(remote.size))
        for chunk in remote.chunks {
            guard let slice = known[chunk.hash] ?? prefetched[chunk.hash]?[...] else { throw DocumentsError(.invalidServerAnswer, "chunk \(chunk.hash) of '\(path)' did not arrive") }
            bytes.append(contentsOf: slice)
        }
        statistics.itemsDownloaded += 1
        if !durable { unsyncedFiles.append(path) }
        return try folder.write(path, bytes: bytes, modified: remote.contentChangeDate, durable: durable)
    }

    static func verify(_ bytes: [UInt8], _ chunk: ChunkReference, path: String) throws(DocumentsError) {
        guard bytes.count == chunk.size, Chunker.sha256(bytes) == chunk.hash else {
            throw DocumentsError(.invalidServerAnswer, "chunk \(chunk.hash) of '\(path)' does not match its hash")
        }
    }

    /// Fetches in a few large requests the chunks of the small files this pass will download,
    /// rather than file by file (up to 64 MB; larger files fetch their own).
    private func prefetch(_ items: [ItemRecord], statistics: inout Statistics) async throws(DocumentsError) {
        var wanted: [ChunkReference] = []
        var seen: Set<String> = []
        var total = 0
        for item in items where item.kind == .file && item.size <= Chunker.maximumSize {
            for chunk in item.chunks where prefetched[chunk.hash] == nil && seen.insert(chunk.hash).inserted {
                guard total + chunk.size <= 64 << 20 else { break }
                total += chunk.size
                wanted.append(chunk)
            }
        }
        for start in stride(from: 0, to: wanted.count, by: 200) {
            let slice = Array(wanted[start..<min(start + 200, wanted.count)])
            let fetched = try await transport.downloadChunks(slice.map(\.hash))
            for (chunk, bytes) in zip(slice, fetched) {
                try Self.verify(bytes, chunk, path: "a prefetched file")
                statistics.chunksDownloaded += 1
                statistics.bytesDownloaded += bytes.count
                prefetched[chunk.hash] = bytes
            }
        }
    }

    /// Both sides changed an item (or created one under the same name). Equal content: nothing
    /// to do. Otherwise the later content change wins (a tie: the server's, the later server
    /// change), on every device alike; the loser is kept as a conflict version.
    private func conflict(_ remote: ItemRecord, path: String, row: LocalItem?, content: Content?, locals: inout [String: LocalItem],
                          batch: inout ModifyBatch, statistics: inout Statistics) async throws(DocumentsError) {
        let kind = row?.kind ?? remote.kind
        guard let content, remote.kind == .file, kind == .file, content.hash != remote.contentHash else {
            // The same content (or folders): this device holds the server's item.
            let entry = LocalFolder.entry(at: folder.root + "/" + path)
            let item = LocalItem(id: remote.id, path: path, kind: remote.kind, contentHash: remote.contentHash, tag: remote.changeTag,
                                 size: entry?.size ?? 0, mtime: entry?.mtime ?? 0, downloaded: true)
            if let row, row.id != remote.id { try stage(.forget(row.id)) }
            try stage(.put(item))
            locals[remote.id] = item
            return
        }
        statistics.conflicts += 1
        let localDate = content.entry.mtime / 1_000_000
        if let row, row.id != remote.id { try stage(.forget(row.id)); locals[row.id] = nil }
        if localDate > remote.contentChangeDate {
            let loser = VersionRecord(item: remote.id, contentHash: remote.contentHash, chunks: remote.chunks, size: remote.size,
                                      contentChangeDate: remote.contentChangeDate, savingComputer: remote.savingComputer)
            batch.add(RecordOperation(kind: .create, record: loser.record(zoneID: transport.zoneID)), item: nil, path: nil, kind: .other)
            let holder = LocalItem(id: remote.id, path: path, kind: .file, contentHash: remote.contentHash, tag: remote.changeTag,
                                   size: content.entry.size, mtime: content.entry.mtime, downloaded: true)
            try stage(.put(holder))
            locals[remote.id] = holder
            try upload(remote.id, path: path, kind: .file, content: content, base: remote, locals: locals, batch: &batch)
        } else {
            let loser = VersionRecord(item: remote.id, contentHash: content.hash, chunks: content.chunks, size: Int64(content.bytes.count),
                                      contentChangeDate: localDate, savingComputer: deviceName)
            batch.addChunks(content)
            batch.add(RecordOperation(kind: .create, record: loser.record(zoneID: transport.zoneID)), item: nil, path: nil, kind: .other)
            // The edit on disk is overwritten only once the server holds it as a version (after
            // `send`): a failure or a kill before then leaves it there, and the next pass finds
            // the same conflict again.
            batch.overwrites.append(ModifyBatch.Overwrite(remote: remote, path: path, local: content, version: loser.id))
            locals[remote.id] = LocalItem(id: remote.id, path: path, kind: .file, contentHash: remote.contentHash, tag: remote.changeTag,
                                          size: content.entry.size, mtime: content.entry.mtime, downloaded: true)
        }
    }

    /// Writes the winners of conflicts this device lost, now that the server holds each loser as
    /// a version; a file edited again since the scan is left for the next pass.
    private func overwrite(_ overwrites: [ModifyBatch.Overwrite], held: Set<String>, locals: inout [String: LocalItem],
                           statistics: inout Statistics) async throws(DocumentsError) {
        for overwrite in overwrites where held.contains(overwrite.version) {
            guard let now = LocalFolder.entry(at: folder.root + "/" + overwrite.path), now.kind == .file,
                  now.size == overwrite.local.entry.size, now.mtime == overwrite.local.entry.mtime else { continue }
            let remote = overwrite.remote
            let entry = try await download(remote, to: overwrite.path, reusing: overwrite.local.bytes, durable: false, statistics: &statistics)
            let item = LocalItem(id: remote.id, path: overwrite.path, kind: .file, contentHash: remote.contentHash, tag: remote.changeTag,
                                 size: entry.size, mtime: entry.mtime, downloaded: true)
            try stage(.put(item))
            locals[remote.id] = item
        }
    }

    /// Operations split into modify requests: 200 at most, and at most
    /// `ChunkRecord.inlineBytesPerRequest` of inline chunk bytes.
    static func requests(_ operations: [RecordOperation]) -> [[RecordOperation]] {
        var requests: [[RecordOperation]] = []
        var current: [RecordOperation] = []
        var bytes = 0
        for operation in operations {
            let size: Int = if case .bytes(let inline)? = operation.record.fields[ChunkRecord.inlineField] { inline.count } else { 0 }
            if current.count == 200 || (!current.isEmpty && bytes + size > ChunkRecord.inlineBytesPerRequest) {
                requests.append(current)
                current = []
                bytes = 0
            }
            current.append(operation)
            bytes += size
        }
        if !current.isEmpty { requests.append(current) }
        return requests
    }

    /// Sends the batch: missing chunks first (the server lacks them; the rest never cross), then
    /// the records, 200 a request. `again` when a record met a newer server version; `held`, the
    /// versions the server now holds (saved, or there already).
    private func send(_ batch: inout ModifyBatch, locals: inout [String: LocalItem], statistics: inout Statistics) async throws(DocumentsError)
        -> (again: Bool, held: Set<String>)
    {
        let hashes = Array(batch.chunks.keys).sorted()
        var present: Set<String> = []
        for start in stride(from: 0, to: hashes.count, by: 200) {
            let names = hashes[start..<min(start + 200, hashes.count)].map(ChunkRecord.recordName)
            present.formUnion(try await transport.existing(names))
        }
        var chunkOperations: [RecordOperation] = []
        let missing = hashes.filter { !present.contains(ChunkRecord.recordName($0)) }
        // Small chunks travel inside their records; the rest as assets.
        let large = missing.filter { (batch.chunks[$0]?.count ?? 0) > ChunkRecord.inlineLimit }
        for hash in missing where (batch.chunks[hash]?.count ?? 0) <= ChunkRecord.inlineLimit {
            let bytes = Array(batch.chunks[hash] ?? [])
            chunkOperations.append(RecordOperation(kind: .create, record: ChunkRecord.inline(hash, bytes, zoneID: transport.zoneID)))
            statistics.chunksUploaded += 1
            statistics.bytesUploaded += bytes.count
        }
        for start in stride(from: 0, to: large.count, by: 200) {
            let slice = large[start..<min(start + 200, large.count)].map { (hash: $0, bytes: Array(batch.chunks[$0] ?? [])) }
            let values = try await transport.uploadChunks(slice)
            for (chunk, value) in zip(slice, values) {
                var record = Record(recordType: ChunkRecord.recordType, recordID: RecordID(recordName: ChunkRecord.recordName(chunk.hash), zoneID: transport.zoneID))
                record.fields[ChunkRecord.field] = value
                chunkOperations.append(RecordOperation(kind: .create, record: record))
                statistics.chunksUploaded += 1
                statistics.bytesUploaded += chunk.bytes.count
            }
        }
        for answer in await modifyConcurrently(Self.requests(chunkOperations)) {
            for result in try answer.get() {
                if let error = result.error, error.code != .exists { throw DocumentsError(.syncFailed, "saving a chunk: \(error.description)") }
            }
        }
        var again = false
        var held: Set<String> = []
        // New versions first (the server holds a loser before the winner replaces it), then the rest.
        let isNewVersion = { (entry: ModifyBatch.Entry) in entry.kind == .other && entry.operation.kind == .create }
        for entries in [batch.entries.filter(isNewVersion), batch.entries.filter { !isNewVersion($0) }] {
            let slices = stride(from: 0, to: entries.count, by: 200).map { Array(entries[$0..<min($0 + 200, entries.count)]) }
            let answers = await modifyConcurrently(slices.map { $0.map(\.operation) })
            // Every answer is recorded, the failures' after the others'.
            var failure: DocumentsError?
            for (slice, answer) in zip(slices, answers) {
                switch answer {
                case .success(let results): try acknowledge(slice, results, locals: &locals, statistics: &statistics, again: &again, held: &held)
                case .failure(let error): failure = failure ?? error
                }
            }
            if let failure { throw failure }
        }
        batch = ModifyBatch()
        return (again, held)
    }

    /// Records what the server answered to one modify request of `send`: acknowledged items, the
    /// versions it holds, whether another pass is needed.
    private func acknowledge(_ slice: [ModifyBatch.Entry], _ results: [RecordResult], locals: inout [String: LocalItem], statistics: inout Statistics,
                             again: inout Bool, held: inout Set<String>) throws(DocumentsError) {
        var remote: [RecordZoneChangeEntry] = []
        var acknowledged: [LocalItem] = []
        var forgotten: [String] = []
        for (entry, result) in zip(slice, results) {
            switch result {
            case .saved(let record):
                remote.append(RecordZoneChangeEntry(record))
                if record.recordType == VersionRecord.recordType { held.insert(record.recordID.recordName) }
                guard case .item(let content) = entry.kind, let id = entry.item, let path = entry.path, var row = locals[id] else { continue }
                statistics.itemsUploaded += 1
                row.path = path
                row.tag = record.recordChangeTag
                row.contentHash = content?.hash ?? ""
                if let content {
                    row.size = content.entry.size
                    row.mtime = content.entry.mtime
                }
                row.downloaded = true
                acknowledged.append(row)
                locals[id] = row
            case .deleted(let id, _):
                remote.append(.deleted(id: id.recordName))
                if entry.kind == .deletion, let item = entry.item {
                    forgotten.append(item)
                    locals[item] = nil
                }
            case .failed(_, let error):
                switch error.code {
                case .exists where entry.kind == .other:
                    if entry.operation.record.recordType == VersionRecord.recordType { held.insert(entry.operation.record.recordID.recordName) }
                case .notFound where entry.kind != .deletion && entry.operation.kind == .forceDelete: continue
                case .notFound where entry.kind == .deletion:
                    if let item = entry.item { forgotten.append(item); locals[item] = nil }
                case .conflict, .exists, .notFound: again = true
                default: throw DocumentsError(.syncFailed, "saving '\(entry.path ?? entry.operation.record.recordID.recordName)': \(error.description)")
                }
            }
        }
        // The server's answer and what it acknowledged, in one transaction.
        try state.recordRemote(remote, put: acknowledged, forget: forgotten)
    }

    /// Sends modify requests a few at a time (the server commits concurrent ones together): each
    /// one's answer, in request order. Once one fails no more are sent (those are answered with
    /// its error).
    private func modifyConcurrently(_ requests: [[RecordOperation]], limit: Int = 4) async -> [Result<[RecordResult], DocumentsError>] {
        let transport = transport, device = deviceName
        var answers = [Result<[RecordResult], DocumentsError>](repeating: .failure(DocumentsError(.syncFailed, "not sent")), count: requests.count)
        var next = 0
        var failure: DocumentsError?
        while next < requests.count && failure == nil {
            // A window of requests at once; the next window once they are all answered.
            let window = next..<min(next + limit, requests.count)
            let windowAnswers = await withTaskGroup(of: (Int, Result<[RecordResult], DocumentsError>).self) { group in
                for index in window {
                    let operations = requests[index]
                    group.addTask { (index, await Self.modify(transport, operations, device: device)) }
                }
                var answered: [(Int, Result<[RecordResult], DocumentsError>)] = []
                for await answer in group { answered.append(answer) }
                return answered
            }
            for (index, answer) in windowAnswers {
                answers[index] = answer
                if case .failure(let error) = answer { failure = failure ?? error }
            }
            next = window.upperBound
        }
        if let failure { for index in next..<requests.count { answers[index] = .failure(failure) } }
        return answers
    }

    private static func modify(_ transport: any DocumentsTransport, _ operations: [RecordOperation], device: String) async
        -> Result<[RecordResult], DocumentsError>
    {
        do { return .success(try await transport.modify(operations, device: device)) } catch { return .failure(error) }
    }
}

/// The records one sync pass sends, and the chunks they need.
struct ModifyBatch {
    enum Kind: Equatable {
        case item(UbiquityContainer.Content?)
        case deletion
        case other

        static func == (lhs: Kind, rhs: Kind) -> Bool {
            switch (lhs, rhs) {
            case (.item, .item), (.deletion, .deletion), (.other, .other): true
            default: false
            }
        }
    }

    struct Entry {
        var operation: RecordOperation
        var item: String?
        var path: String?
        var kind: Kind
    }

    /// A conflict this device lost: its file becomes the server's content once the server holds
    /// the local content as the version named `version`.
    struct Overwrite {
        var remote: ItemRecord
        var path: String
        var local: UbiquityContainer.Content
        var version: String
    }

    var entries: [Entry] = []
    var chunks: [String: ArraySlice<UInt8>] = [:]
    var overwrites: [Overwrite] = []

    mutating func add(_ operation: RecordOperation, item: String?, path: String?, kind: Kind) {
        entries.append(Entry(operation: operation, item: item, path: path, kind: kind))
    }

    mutating func remove(item: String) { entries.removeAll { $0.item == item } }

    mutating func addChunks(_ content: UbiquityContainer.Content) {
        var offset = 0
        for chunk in content.chunks {
            chunks[chunk.hash] = content.bytes[offset..<(offset + chunk.size)]
            offset += chunk.size
        }
    }
}

extension Optional where Wrapped == UbiquityContainer.LocalChange {
    var isDeleted: Bool {
        if case .deleted? = self { return true }
        return false
    }

    var isUnchanged: Bool {
        if case .unchanged? = self { return true }
        return false
    }
}
