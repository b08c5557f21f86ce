import KQuery
import KQueryContainer

/// The URLs a server gives assets (SPEC §12): where an upload's bytes go, and where a stored
/// asset's bytes are read (signed and time-limited). Without links (the command line), records
/// show their assets as stored.
package struct AssetLinks: Sendable {
    /// The upload URL of a ticket's token.
    package var upload: @Sendable (_ token: String) -> String
    /// A stored asset's `downloadURL`, ending in the literal `${f}` clients replace with a file name.
    package var download: @Sendable (_ asset: StoredAsset) -> String

    package init(upload: @escaping @Sendable (String) -> String, download: @escaping @Sendable (StoredAsset) -> String) {
        self.upload = upload
        self.download = download
    }

    /// The placeholder CloudKit's download URLs end in.
    package static let fileNamePlaceholder = "${f}"

    /// The record with each stored asset as clients read it: `{fileChecksum, size, downloadURL}`.
    package func presenting(_ record: Record) -> Record {
        guard record.holdsAssets else { return record }
        var record = record
        for (key, value) in record.fields where value.holdsAssets {
            switch value {
            case .assetID(let text): record.fields[key] = .assetID(presenting(text))
            case .list(.assetID, let values):
                record.fields[key] = .list(.assetID, values.map { if case .assetID(let text) = $0 { .assetID(presenting(text)) } else { $0 } })
            default: break
            }
        }
        return record
    }

    private func presenting(_ text: String) -> String {
        guard let asset = StoredAsset(storedText: text) else { return text }
        return JSON.object([("fileChecksum", .string(asset.fileChecksum)), ("size", .int(asset.size)), ("downloadURL", .string(download(asset)))])
            .serialized
    }
}

extension AssetLinks {
    func presenting(_ result: RecordResult) -> RecordResult {
        if case .saved(let record) = result { return .saved(presenting(record)) }
        return result
    }

    func presenting(_ change: RecordZoneChange) -> RecordZoneChange {
        if case .changed(let record) = change { return .changed(presenting(record)) }
        return change
    }
}
