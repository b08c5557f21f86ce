import KQuery

import Foundation

extension ContainerDatabase {
    /// The operations with every `{"$file": "PATH"}` asset value (the command line's way to put a
    /// local file into an asset field, optionally with `"contentType"`) uploaded, a chunk at a
    /// time, and replaced by its receipt, bound to the operation's record and field. Relative paths
    /// are read from the working directory.
    public func uploadingFiles(_ operations: [RecordOperation]) throws(ContainerError) -> [RecordOperation] {
        guard operations.contains(where: { $0.record.holdsAssets }) else { return operations }
        var result = operations
        for index in operations.indices where operations[index].record.holdsAssets {
            var record = operations[index].record
            for (key, value) in record.fields where value.holdsAssets {
                func upload(_ text: String) throws(ContainerError) -> FieldValue {
                    guard let json = try? JSON.parse(text), let path = json["$file"]?.stringValue else { return .assetID(text) }
                    let uploaded = try uploadFile(path, contentType: json["contentType"]?.stringValue, recordName: record.recordID.recordName,
                                                  fieldName: key.name, recordType: record.recordType, in: record.recordID.zoneID)
                    return .assetID(uploaded.webServicesJSON.serialized)
                }
                switch value {
                case .assetID(let text): record.fields[key] = try upload(text)
                case .list(.assetID, let values):
                    var uploaded: [FieldValue] = []
                    for case .assetID(let text) in values { uploaded.append(try upload(text)) }
                    record.fields[key] = .list(.assetID, uploaded)
                default: break
                }
            }
            result[index] = RecordOperation(kind: operations[index].kind, record: record)
        }
        return result
    }

    /// Uploads the file at `path` for a field of a record.
    public func uploadFile(
        _ path: String, contentType: String? = nil, recordName: String, fieldName: String, recordType: String? = nil, in zoneID: ZoneID = .default
    ) throws(ContainerError) -> UploadedAsset {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw ContainerError(.badRequest, "\(path): cannot read the file") }
        defer { try? handle.close() }
        guard let ticket = try requestAssetUploads([AssetFieldRequest(recordName: recordName, recordType: recordType, fieldName: fieldName)], in: zoneID).first
        else { throw ContainerError(.internalError, "no upload ticket was made") }
        let writer = try container.beginAssetUpload(token: ticket.token, contentType: contentType ?? Self.mediaType(ofFile: path))
        do throws(ContainerError) {
            while true {
                let data: Data
                do { data = try handle.read(upToCount: AssetPolicy.chunkSize) ?? Data() } catch {
                    throw ContainerError(.badRequest, "\(path): \(error.localizedDescription)")
                }
                if data.isEmpty { break }
                try writer.append(data)
            }
            return try writer.finish()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// The media type a file's extension suggests (downloads are served with it).
    static func mediaType(ofFile path: String) -> String? {
        let types = [
            "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp", "heic": "image/heic",
            "svg": "image/svg+xml", "pdf": "application/pdf", "txt": "text/plain", "json": "application/json", "mp4": "video/mp4",
            "mov": "video/quicktime", "mp3": "audio/mpeg", "m4a": "audio/mp4", "zip": "application/zip", "html": "text/html",
        ]
        return types[(path as NSString).pathExtension.lowercased()]
    }
}
