import Foundation
import KQuery
import KQueryContainer

/// A version of an item, with `NSFileVersion`'s names and meaning (SPEC §15): the current
/// version, or one kept by a conflict (`isConflict`) until it is resolved and removed.
public struct FileVersion: Hashable, Sendable {
    /// The item's path in the container (`Documents/notes.txt`).
    public var path: String
    /// The current version's is `current`; a conflict version's, its record name.
    public var persistentIdentifier: String
    public var modificationDate: Date
    /// The name of the device that saved it (`localizedNameOfSavingComputer`).
    public var localizedNameOfSavingComputer: String?
    public var isConflict: Bool
    public var isResolved: Bool
    /// Whether its bytes are on this device (a conflict version's are on the server until
    /// `replaceItem(at:)` writes them).
    public var hasLocalContents: Bool
    public var size: Int64
    public var contentHash: String

    public static let currentIdentifier = "current"
}

/// `UIDocument.State`, with Apple's raw values (research 2.5).
public struct DocumentState: OptionSet, Hashable, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let normal: DocumentState = []
    public static let closed = DocumentState(rawValue: 1)
    public static let inConflict = DocumentState(rawValue: 2)
    public static let savingError = DocumentState(rawValue: 4)
    public static let editingDisabled = DocumentState(rawValue: 8)
    public static let progressAvailable = DocumentState(rawValue: 16)
}

/// `NSURLUbiquitousItemDownloadingStatus` (and the metadata's `…DownloadingStatusKey`), with
/// Apple's strings.
public enum DownloadingStatus: String, Hashable, Sendable {
    case notDownloaded = "NSURLUbiquitousItemDownloadingStatusNotDownloaded"
    case downloaded = "NSURLUbiquitousItemDownloadingStatusDownloaded"
    case current = "NSURLUbiquitousItemDownloadingStatusCurrent"
}

/// An item as the folder and the server know it, for `status` and metadata queries.
public struct ItemStatus: Hashable, Sendable {
    public var path: String
    public var kind: ItemKind
    public var size: Int64
    public var contentType: String
    public var creationDate: Date
    public var contentChangeDate: Date
    public var downloadingStatus: DownloadingStatus
    public var isUploaded: Bool
    public var hasUnresolvedConflicts: Bool
}

extension UbiquityContainer {
    /// What the last sync knows of an item at `path`: its server record and its row here.
    private func known(_ path: String) throws(DocumentsError) -> (item: ItemRecord, versions: [VersionRecord], row: LocalItem?)? {
        let (items, versions) = try remoteModel()
        let paths = Self.paths(items)
        guard let id = paths.first(where: { $0.value == path })?.key, let item = items[id] else { return nil }
        let row = try state.localItems().first { $0.id == id }
        return (item, versions.filter { $0.item == id }.sorted { ($0.contentChangeDate, $0.id) < ($1.contentChangeDate, $1.id) }, row)
    }

    private static func version(_ version: VersionRecord, path: String) -> FileVersion {
        FileVersion(path: path, persistentIdentifier: version.id, modificationDate: Date(timeIntervalSince1970: Double(version.contentChangeDate) / 1000),
                    localizedNameOfSavingComputer: version.savingComputer, isConflict: true, isResolved: version.resolved, hasLocalContents: false,
                    size: version.size, contentHash: version.contentHash)
    }

    /// `currentVersionOfItem(at:)`: nil when no such item is known.
    public func currentVersionOfItem(at path: String) throws(DocumentsError) -> FileVersion? {
        guard let found = try known(path) else { return nil }
        return FileVersion(path: path, persistentIdentifier: FileVersion.currentIdentifier,
                           modificationDate: Date(timeIntervalSince1970: Double(found.item.contentChangeDate) / 1000),
                           localizedNameOfSavingComputer: found.item.savingComputer, isConflict: false, isResolved: true,
                           hasLocalContents: found.row?.downloaded ?? false, size: found.item.size, contentHash: found.item.contentHash)
    }

    /// `otherVersionsOfItem(at:)`: every version but the current one.
    public func otherVersionsOfItem(at path: String) throws(DocumentsError) -> [FileVersion] {
        guard let found = try known(path) else { return [] }
        return found.versions.map { Self.version($0, path: path) }
    }

    /// `unresolvedConflictVersionsOfItem(at:)`: nil when the item does not exist.
    public func unresolvedConflictVersionsOfItem(at path: String) throws(DocumentsError) -> [FileVersion]? {
        guard let found = try known(path) else { return nil }
        return found.versions.filter { !$0.resolved }.map { Self.version($0, path: path) }
    }

    public func hasUnresolvedConflicts(at path: String) throws(DocumentsError) -> Bool {
        !(try unresolvedConflictVersionsOfItem(at: path) ?? []).isEmpty
    }

    /// The document state: `inConflict` while conflict versions are unresolved, `closed` for an
    /// item that is not known.
    public func documentState(at path: String) throws(DocumentsError) -> DocumentState {
        guard try known(path) != nil else { return .closed }
        return try hasUnresolvedConflicts(at: path) ? .inConflict : .normal
    }

    private func version(_ identifier: String, at path: String) throws(DocumentsError) -> (item: ItemRecord, version: VersionRecord, row: LocalItem?) {
        guard let found = try known(path) else { throw DocumentsError(.notFound, "no item at '\(path)'") }
        guard let version = found.versions.first(where: { $0.id == identifier }) else {
            throw DocumentsError(.notFound, "'\(path)' has no version '\(identifier)'")
        }
        return (found.item, version, found.row)
    }

    /// `isResolved = true` for a conflict version, on the server. Setting false is refused, as
    /// Apple's raises.
    public func setResolved(_ resolved: Bool, version identifier: String, at path: String) async throws(DocumentsError) {
        guard resolved else { throw DocumentsError(.refused, "isResolved cannot be set to false (a resolved conflict stays resolved)") }
        let (_, version, _) = try self.version(identifier, at: path)
        guard !version.resolved else { return }
        var updated = version
        updated.resolved = true
        try await save([RecordOperation(kind: .replace, record: updated.record(zoneID: transport.zoneID))], what: "resolving '\(path)'")
    }

    /// `remove()`: deletes a conflict version from the server. The current version cannot be removed.
    public func remove(version identifier: String, at path: String) async throws(DocumentsError) {
        guard identifier != FileVersion.currentIdentifier else { throw DocumentsError(.refused, "the current version of '\(path)' cannot be removed") }
        let (_, version, _) = try self.version(identifier, at: path)
        try await save([RecordOperation(kind: .forceDelete, record: version.record(zoneID: transport.zoneID))], what: "removing a version of '\(path)'")
    }

    /// `removeOtherVersionsOfItem(at:)`: removes every version but the current one.
    public func removeOtherVersionsOfItem(at path: String) async throws(DocumentsError) {
        guard let found = try known(path) else { throw DocumentsError(.notFound, "no item at '\(path)'") }
        guard !found.versions.isEmpty else { return }
        try await save(found.versions.map { RecordOperation(kind: .forceDelete, record: $0.record(zoneID: transport.zoneID)) }, what: "removing the versions of '\(path)'")
    }

    /// `replaceItem(at:)`: makes a conflict version's content the item's current content (here and
    /// on the server; the replaced content is not kept).
    public func replaceItem(at path: String, with identifier: String) async throws(DocumentsError) {
        guard identifier != FileVersion.currentIdentifier else { return }
        try await sync()
        let (item, version, row) = try self.version(identifier, at: path)
        var statistics = Statistics()
        var replaced = item
        replaced.contentHash = version.contentHash
        replaced.chunks = version.chunks
        replaced.size = version.size
        replaced.contentChangeDate = Int64(Date().timeIntervalSince1970 * 1000)
        replaced.savingComputer = deviceName
        let entry = try await download(replaced, to: path, reusing: row?.downloaded == true ? try? folder.read(path) : nil, statistics: &statistics)
        replaced.contentChangeDate = entry.mtime / 1_000_000
        let saved = try await save([RecordOperation(kind: .replace, record: replaced.record(zoneID: transport.zoneID))], what: "replacing '\(path)'")
        try state.put(LocalItem(id: item.id, path: path, kind: .file, contentHash: version.contentHash, tag: saved.first?.recordChangeTag, size: entry.size,
                                mtime: entry.mtime, downloaded: true))
    }

    /// Resolves a conflict as `kquery drive resolve` does: `keep` (default: the current version)
    /// becomes current, then every other version is removed (and so resolved) everywhere.
    public func resolve(_ path: String, keep identifier: String = FileVersion.currentIdentifier) async throws(DocumentsError) {
        try await replaceItem(at: path, with: identifier)
        try await removeOtherVersionsOfItem(at: path)
        try await sync()
    }

    /// Saves records now; a refused one is an error. Returns the saved records.
    @discardableResult
    private func save(_ operations: [RecordOperation], what: String) async throws(DocumentsError) -> [Record] {
        var saved: [Record] = []
        var remote: [RecordZoneChangeEntry] = []
        for result in try await transport.modify(operations, device: deviceName) {
            switch result {
            case .saved(let record):
                saved.append(record)
                remote.append(RecordZoneChangeEntry(record))
            case .deleted(let id, _): remote.append(.deleted(id: id.recordName))
            case .failed(let id, let error) where error.code == .notFound: remote.append(.deleted(id: id.recordName))
            case .failed(_, let error):
                throw DocumentsError(error.code == .conflict ? .refused : .syncFailed, "\(what): \(error.description) (sync, then try again)")
            }
        }
        try state.recordRemote(remote)
        return saved
    }

    // MARK: Status, download, evict

    /// Every item the container knows, by path.
    public func status() throws(DocumentsError) -> [ItemStatus] {
        let (items, versions) = try remoteModel()
        let paths = Self.paths(items)
        let rows = Dictionary(try state.localItems().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let conflicted = Set(versions.filter { !$0.resolved }.map(\.item))
        var result: [ItemStatus] = []
        for (id, path) in paths {
            guard let item = items[id] else { continue }
            let row = rows[id]
            let status: DownloadingStatus = item.kind != .file ? .current
                : row?.downloaded != true ? .notDownloaded : row?.contentHash == item.contentHash ? .current : .downloaded
            result.append(ItemStatus(path: path, kind: item.kind, size: item.size, contentType: item.contentType,
                                     creationDate: Date(timeIntervalSince1970: Double(item.creationDate) / 1000),
                                     contentChangeDate: Date(timeIntervalSince1970: Double(item.contentChangeDate) / 1000), downloadingStatus: status,
                                     isUploaded: row?.tag == item.changeTag, hasUnresolvedConflicts: conflicted.contains(id)))
        }
        // Items made here and not uploaded yet.
        let uploaded = Set(paths.values)
        for row in rows.values where !uploaded.contains(row.path) {
            let date = Date(timeIntervalSince1970: Double(row.mtime) / 1e9)
            result.append(ItemStatus(path: row.path, kind: row.kind, size: row.size, contentType: ContentType.uti(forName: (row.path as NSString).lastPathComponent, kind: row.kind),
                                     creationDate: date, contentChangeDate: date, downloadingStatus: .current, isUploaded: false, hasUnresolvedConflicts: false))
        }
        return result.sorted { $0.path < $1.path }
    }

    /// `startDownloadingUbiquitousItem(at:)`: fetches a placeholder's bytes (a folder's files too).
    public func download(_ path: String) async throws(DocumentsError) -> Statistics {
        defer { forgetPrefetched() }
        var statistics = Statistics()
        try await pull(&statistics)
        let (items, _) = try remoteModel()
        let paths = Self.paths(items)
        let targets = paths.filter { $0.value == path || $0.value.hasPrefix(path + "/") }
        guard !targets.isEmpty else { throw DocumentsError(.notFound, "no item at '\(path)'") }
        let rows = Dictionary(try state.localItems().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        for (id, target) in targets.sorted(by: { $0.value < $1.value }) {
            guard let item = items[id] else { continue }
            if item.kind != .file {
                try folder.makeDirectory(target)
                continue
            }
            if let row = rows[id], row.downloaded { continue }
            let entry = try await download(item, to: target, reusing: nil, statistics: &statistics)
            try state.put(LocalItem(id: id, path: target, kind: .file, contentHash: item.contentHash, tag: item.changeTag, size: entry.size,
                                    mtime: entry.mtime, downloaded: true))
        }
        publish()
        return statistics
    }

    /// `evictUbiquitousItem(at:)`: removes the local bytes of an uploaded file; the item stays,
    /// as a placeholder. Refused while the file has changes not uploaded.
    public func evict(_ path: String) async throws(DocumentsError) {
        guard let row = try state.localItems().first(where: { $0.path == path }) else { throw DocumentsError(.notFound, "no item at '\(path)'") }
        guard row.kind == .file else { throw DocumentsError(.refused, "'\(path)' is a folder: evict its files") }
        guard row.downloaded else { return }
        guard let entry = LocalFolder.entry(at: folder.root + "/" + path), entry.size == row.size, entry.mtime == row.mtime, row.tag != nil else {
            throw DocumentsError(.refused, "'\(path)' has changes that are not uploaded yet: sync first")
        }
        try folder.remove(path)
        var evicted = row
        evicted.downloaded = false
        evicted.mtime = 0
        try state.put(evicted)
        publish()
    }
}
