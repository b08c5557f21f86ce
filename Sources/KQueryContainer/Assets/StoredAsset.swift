import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// An asset as a record keeps it (SPEC §12): what clients see (`fileChecksum`, `size`) and the
/// content hash that finds its bytes. A record's asset field holds `storedText`, so records,
/// change logs and files carry assets as they carry any ASSETID value.
public struct StoredAsset: Hashable, Sendable {
    /// Opaque to clients: base64 of `0x01` and the SHA-1 of the bytes (the shape CloudKit's have).
    public var fileChecksum: String
    public var size: Int64
    /// SHA-256 of the bytes, in hex: the blob's name in storage.
    public var contentHash: String

    public init(fileChecksum: String, size: Int64, contentHash: String) {
        self.fileChecksum = fileChecksum
        self.size = size
        self.contentHash = contentHash
    }

    /// The field value's text: `{"fileChecksum":"…","size":N,"contentHash":"…"}`.
    public var storedText: String {
        JSON.object([("fileChecksum", .string(fileChecksum)), ("size", .int(size)), ("contentHash", .string(contentHash))]).serialized
    }

    /// The asset an ASSETID value's text describes, if it is a stored asset (not a client's
    /// dictionary that still carries a receipt).
    public init?(storedText text: String) {
        guard text.utf8.first == UInt8(ascii: "{"), let json = try? JSON.parse(text), json["receipt"] == nil,
              let checksum = json["fileChecksum"]?.stringValue, let size = json["size"]?.int64Value,
              let hash = json["contentHash"]?.stringValue, Self.isContentHash(hash)
        else { return nil }
        self.init(fileChecksum: checksum, size: size, contentHash: hash)
    }

    /// Whether `text` is a SHA-256 in lower-case hex (a blob name; nothing else reaches storage).
    public static func isContentHash(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}

/// What an upload or a rereference gives the client to save in a record's asset field: Web
/// Services' `singleFile` dictionary.
public struct UploadedAsset: Hashable, Sendable {
    public var fileChecksum: String
    public var size: Int64
    public var receipt: String
    /// Private and shared databases' assets carry these (public ones do not, as CloudKit's).
    public var wrappingKey: String?
    public var referenceChecksum: String?

    /// `{fileChecksum, size, receipt[, wrappingKey, referenceChecksum]}`.
    public var webServicesJSON: JSON {
        var members: [(String, JSON)] = [("fileChecksum", .string(fileChecksum)), ("size", .int(size)), ("receipt", .string(receipt))]
        if let wrappingKey { members.append(("wrappingKey", .string(wrappingKey))) }
        if let referenceChecksum { members.append(("referenceChecksum", .string(referenceChecksum))) }
        return .object(members)
    }
}

/// Where an upload's bytes are bound to go: a field of a record in a zone of one database. A
/// receipt made for one binding is refused for any other.
public struct AssetBinding: Hashable, Sendable {
    public var database: DatabaseKey
    public var zoneID: ZoneID
    public var recordName: String
    public var fieldName: String

    public init(database: DatabaseKey, zoneID: ZoneID, recordName: String, fieldName: String) {
        self.database = database
        self.zoneID = zoneID
        self.recordName = recordName
        self.fieldName = fieldName
    }
}

/// A URL handed out by `assets/upload`, waiting for its bytes.
public struct AssetUploadTicket: Hashable, Sendable {
    public enum State: Int, Sendable {
        case waiting = 0
        case receiving = 1
        case received = 2
    }

    /// The upload URL's secret part.
    public var token: String
    public var binding: AssetBinding
    public var recordType: String?
    /// Milliseconds since 1970.
    public var expires: Int64
    public var state: State

    package init(token: String, binding: AssetBinding, recordType: String?, expires: Int64, state: State) {
        self.token = token
        self.binding = binding
        self.recordType = recordType
        self.expires = expires
        self.state = state
    }
}

/// A receipt as stored: what it is bound to, the blob it names, until when it is good.
package struct AssetReceiptEntry: Hashable, Sendable {
    package var receipt: String
    package var binding: AssetBinding
    package var asset: StoredAsset
    package var expires: Int64
    package var spent: Bool

    package init(receipt: String, binding: AssetBinding, asset: StoredAsset, expires: Int64, spent: Bool) {
        self.receipt = receipt
        self.binding = binding
        self.asset = asset
        self.expires = expires
        self.spent = spent
    }
}

/// A stored blob's facts.
public struct AssetBlob: Hashable, Sendable {
    public var contentHash: String
    public var size: Int64
    public var fileChecksum: String
    /// The media type of the upload that first brought these bytes.
    public var contentType: String
    /// When the blob last lost a reference, or was uploaded (milliseconds since 1970): it may go
    /// a grace period after, once nothing refers to it.
    package var released: Int64

    package init(contentHash: String, size: Int64, fileChecksum: String, contentType: String, released: Int64) {
        self.contentHash = contentHash
        self.size = size
        self.fileChecksum = fileChecksum
        self.contentType = contentType
        self.released = released
    }
}

/// The limits and lifetimes of a container's assets (SPEC §12 and its Decisions).
public struct AssetPolicy: Sendable, Hashable {
    /// Bytes per asset (50 MB, CloudKit's documented limit for an Asset field).
    public var maximumSize: Int64 = 50_000_000
    /// Asset fields per `assets/upload` request.
    public var maximumTokens = 200
    /// How long an upload URL takes bytes (15 minutes).
    public var uploadLifetime: Int64 = 15 * 60 * 1000
    /// How long a receipt can be saved into its record (an hour).
    public var receiptLifetime: Int64 = 60 * 60 * 1000
    /// How long an unreferenced blob is kept before it is collected (a day).
    public var gracePeriod: Int64 = 24 * 60 * 60 * 1000
    /// Bytes per stored chunk: an upload is written and a download read a chunk at a time.
    public var chunkSize = 1 << 20

    public init() {}
}

extension FieldValue {
    /// The texts of an asset value or an asset list (nothing for other kinds).
    package var assetTexts: [String] {
        switch self {
        case .assetID(let text): [text]
        case .list(.assetID, let values): values.compactMap { if case .assetID(let text) = $0 { text } else { nil } }
        default: []
        }
    }

    /// Whether the value is an asset or a list of assets.
    package var holdsAssets: Bool {
        switch self {
        case .assetID: true
        case .list(.assetID, let values): !values.isEmpty
        default: false
        }
    }
}

extension Record {
    /// The content hashes of the stored assets the record holds.
    var assetContentHashes: Set<String> {
        var hashes: Set<String> = []
        fields.forEachField { _, value in
            guard value.holdsAssets else { return }
            for text in value.assetTexts { if let asset = StoredAsset(storedText: text) { hashes.insert(asset.contentHash) } }
        }
        return hashes
    }

    /// Whether any field holds an asset.
    package var holdsAssets: Bool { fields.containsValue { $0.holdsAssets } }
}
