import KQuery

/// An item's kind: a file, a folder, or a package (a folder shown as one document; its inner
/// files are items of their own).
public enum ItemKind: String, Hashable, Sendable, Codable {
    case file, folder, package
}

/// An item as the server holds it (SPEC §15): record type `DocumentItem`, record name the item's
/// identifier (kept through renames and moves), with `name`, `parentItem` (a reference; none at
/// the top of the container), `kind`, `size`, `contentType`, `creationDate`, `contentChangeDate`,
/// `contentHash`, `chunks` (`hash:size` strings) and `savingComputer`.
public struct ItemRecord: Hashable, Sendable {
    public static let recordType = "DocumentItem"

    public var id: String
    public var name: String
    public var parent: String?
    public var kind: ItemKind
    public var size: Int64
    public var contentType: String
    /// Milliseconds since 1970.
    public var creationDate: Int64
    public var contentChangeDate: Int64
    public var contentHash: String
    public var chunks: [ChunkReference]
    public var savingComputer: String
    public var changeTag: String?

    public init(id: String, name: String, parent: String?, kind: ItemKind, size: Int64, contentType: String, creationDate: Int64,
                contentChangeDate: Int64, contentHash: String, chunks: [ChunkReference], savingComputer: String, changeTag: String? = nil) {
        self.id = id
        self.name = name
        self.parent = parent
        self.kind = kind
        self.size = size
        self.contentType = contentType
        self.creationDate = creationDate
        self.contentChangeDate = contentChangeDate
        self.contentHash = contentHash
        self.chunks = chunks
        self.savingComputer = savingComputer
        self.changeTag = changeTag
    }

    public func record(zoneID: ZoneID) -> Record {
        var fields = Fields()
        fields["name"] = .string(name)
        if let parent { fields["parentItem"] = .reference(Reference(recordID: RecordID(recordName: parent, zoneID: zoneID))) }
        fields["kind"] = .string(kind.rawValue)
        fields["size"] = .int64(size)
        fields["contentType"] = .string(contentType)
        fields["creationDate"] = .timestamp(creationDate)
        fields["contentChangeDate"] = .timestamp(contentChangeDate)
        fields["contentHash"] = .string(contentHash)
        fields["chunks"] = ChunkReference.field(chunks)
        fields["savingComputer"] = .string(savingComputer)
        var record = Record(recordType: Self.recordType, recordID: RecordID(recordName: id, zoneID: zoneID), fields: fields)
        record.recordChangeTag = changeTag
        return record
    }

    /// An item record read back; one that is not well formed is an error, never trusted.
    public init(record: Record) throws(DocumentsError) {
        let id = record.recordID.recordName
        func bad(_ what: String) -> DocumentsError { DocumentsError(.invalidServerAnswer, "item '\(id)': \(what)") }
        guard case .string(let name)? = record["name"] else { throw bad("no name") }
        guard case .string(let kindText)? = record["kind"], let kind = ItemKind(rawValue: kindText) else { throw bad("no kind") }
        var parent: String?
        if case .reference(let reference)? = record["parentItem"] { parent = reference.recordID.recordName }
        guard case .int64(let size)? = record["size"], size >= 0 else { throw bad("no size") }
        guard case .timestamp(let created)? = record["creationDate"], case .timestamp(let changed)? = record["contentChangeDate"] else { throw bad("no dates") }
        guard case .string(let hash)? = record["contentHash"] else { throw bad("no contentHash") }
        guard let chunks = ChunkReference.list(record["chunks"]) else { throw bad("a chunk that is not hash:size") }
        guard chunks.reduce(0, { $0 + Int64($1.size) }) == (kind == .file ? size : 0) else { throw bad("its chunks do not add up to its size") }
        let contentType: String = if case .string(let type)? = record["contentType"] { type } else { ContentType.uti(forName: name, kind: kind) }
        let computer: String = if case .string(let device)? = record["savingComputer"] { device } else { "" }
        self.init(id: id, name: name, parent: parent, kind: kind, size: size, contentType: contentType, creationDate: created, contentChangeDate: changed,
                  contentHash: hash, chunks: chunks, savingComputer: computer, changeTag: record.recordChangeTag)
    }
}

/// A conflict version as the server holds it: record type `DocumentVersion`, naming its item
/// (`item`), with the losing content (`contentHash`, `chunks`, `size`), its `contentChangeDate`,
/// the `savingComputer` that wrote it, and `resolved` (0 or 1). Its record name follows from the
/// item and the content, so every device that records the same loss writes the same record.
public struct VersionRecord: Hashable, Sendable {
    public static let recordType = "DocumentVersion"

    public var id: String
    public var item: String
    public var contentHash: String
    public var chunks: [ChunkReference]
    public var size: Int64
    public var contentChangeDate: Int64
    public var savingComputer: String
    public var resolved: Bool
    public var changeTag: String?

    public static func identifier(item: String, contentHash: String, date: Int64, computer: String) -> String {
        "v-" + Chunker.sha256(Array("\(item)|\(contentHash)|\(date)|\(computer)".utf8)).prefix(40)
    }

    public init(item: String, contentHash: String, chunks: [ChunkReference], size: Int64, contentChangeDate: Int64, savingComputer: String,
                resolved: Bool = false) {
        id = Self.identifier(item: item, contentHash: contentHash, date: contentChangeDate, computer: savingComputer)
        self.item = item
        self.contentHash = contentHash
        self.chunks = chunks
        self.size = size
        self.contentChangeDate = contentChangeDate
        self.savingComputer = savingComputer
        self.resolved = resolved
    }

    public func record(zoneID: ZoneID) -> Record {
        var fields = Fields()
        fields["item"] = .reference(Reference(recordID: RecordID(recordName: item, zoneID: zoneID)))
        fields["contentHash"] = .string(contentHash)
        fields["chunks"] = ChunkReference.field(chunks)
        fields["size"] = .int64(size)
        fields["contentChangeDate"] = .timestamp(contentChangeDate)
        fields["savingComputer"] = .string(savingComputer)
        fields["resolved"] = .int64(resolved ? 1 : 0)
        var record = Record(recordType: Self.recordType, recordID: RecordID(recordName: id, zoneID: zoneID), fields: fields)
        record.recordChangeTag = changeTag
        return record
    }

    public init(record: Record) throws(DocumentsError) {
        let id = record.recordID.recordName
        func bad(_ what: String) -> DocumentsError { DocumentsError(.invalidServerAnswer, "version '\(id)': \(what)") }
        guard case .reference(let item)? = record["item"] else { throw bad("no item") }
        guard case .string(let hash)? = record["contentHash"], case .int64(let size)? = record["size"], size >= 0,
              case .timestamp(let date)? = record["contentChangeDate"]
        else { throw bad("no content") }
        guard let chunks = ChunkReference.list(record["chunks"]) else { throw bad("a chunk that is not hash:size") }
        let computer: String = if case .string(let device)? = record["savingComputer"] { device } else { "" }
        self.id = id
        self.item = item.recordID.recordName
        contentHash = hash
        self.chunks = chunks
        self.size = size
        contentChangeDate = date
        savingComputer = computer
        resolved = record["resolved"] == .int64(1)
        changeTag = record.recordChangeTag
    }
}

/// A chunk on the server: record type `DocumentChunk`, named `c-` and the chunk's SHA-256, its
/// bytes the asset in `data` (stored once by content, SPEC §12): SPEC §15's Decision, "a chunk is
/// an asset stored once by its hash". Keeping a small chunk's bytes in the record's own `bytes`
/// field instead (a hundred chunks a modify) made a first sync of 10,000 small files about four
/// times faster (docs/PERFORMANCE.md), but departs from that Decision: writing inline is off
/// (`inlineLimit` 0) until the Decision changes; a chunk record holding inline bytes is still read.
public enum ChunkRecord {
    public static let recordType = "DocumentChunk"
    public static let field = "data"
    public static let inlineField = "bytes"
    public static let inlineLimit = 0
    /// The inline bytes one modify carries at most: their base64 stays well under the server's
    /// 2 MB request limit.
    static let inlineBytesPerRequest = 1 << 20

    public static func recordName(_ hash: String) -> String { "c-" + hash }

    /// A chunk record holding its bytes inline.
    public static func inline(_ hash: String, _ bytes: [UInt8], zoneID: ZoneID) -> Record {
        var record = Record(recordType: recordType, recordID: RecordID(recordName: recordName(hash), zoneID: zoneID))
        record.fields[inlineField] = .bytes(bytes)
        return record
    }
}

extension ChunkReference {
    /// The chunks a record's `chunks` field lists (none when it has none); nil when one is not `hash:size`.
    static func list(_ value: FieldValue?) -> [ChunkReference]? {
        guard case .list(_, let values)? = value else { return [] }
        var chunks: [ChunkReference] = []
        for value in values {
            guard case .string(let text) = value, let chunk = ChunkReference(text: text) else { return nil }
            chunks.append(chunk)
        }
        return chunks
    }

    /// The `chunks` field for a list of chunks (none for an empty file).
    static func field(_ chunks: [ChunkReference]) -> FieldValue? {
        chunks.isEmpty ? nil : .list(.string, chunks.map { .string($0.text) })
    }
}

/// Uniform type identifiers from file name extensions, as the metadata's `kMDItemContentType`.
public enum ContentType {
    static let byExtension: [String: String] = [
        "txt": "public.plain-text", "text": "public.plain-text", "md": "net.daringfireball.markdown", "rtf": "public.rtf",
        "html": "public.html", "htm": "public.html", "json": "public.json", "xml": "public.xml", "csv": "public.comma-separated-values-text",
        "pdf": "com.adobe.pdf", "png": "public.png", "jpg": "public.jpeg", "jpeg": "public.jpeg", "gif": "com.compuserve.gif",
        "heic": "public.heic", "tiff": "public.tiff", "mp3": "public.mp3", "m4a": "com.apple.m4a-audio", "mov": "com.apple.quicktime-movie",
        "mp4": "public.mpeg-4", "zip": "public.zip-archive", "swift": "public.swift-source", "plist": "com.apple.property-list",
        "rtfd": "com.apple.rtfd", "pages": "com.apple.iwork.pages.sffpages", "numbers": "com.apple.iwork.numbers.sffnumbers",
        "key": "com.apple.iwork.keynote.sffkey", "bundle": "com.apple.bundle", "package": "com.apple.package",
    ]

    /// Folder extensions that make a folder a package (one document).
    public static let packageExtensions: Set<String> = ["rtfd", "pages", "numbers", "key", "bundle", "package", "pkgdoc"]

    public static func uti(forName name: String, kind: ItemKind) -> String {
        if kind == .folder { return "public.folder" }
        let ext = name.split(separator: ".", omittingEmptySubsequences: false).count > 1 ? String(name.split(separator: ".").last ?? "").lowercased() : ""
        if let type = byExtension[ext] { return type }
        return kind == .package ? "com.apple.package" : "public.data"
    }
}
