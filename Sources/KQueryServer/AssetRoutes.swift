import Hummingbird
import KQuery
import KQueryContainer
import KQueryWebServices
import ServiceLifecycle

import Foundation

/// The two asset routes outside `/database` (SPEC §12): the upload URL `assets/upload` hands out,
/// which takes the bytes of one asset (the URL is the credential, as Apple's CDN URLs are), and
/// the signed, expiring download URL records are read with.
extension CloudKitServer {
    static let uploadPath = "/assets/upload"
    static let downloadPath = "/assets/download"

    /// The URLs of assets in answers to `request` (on the host the client reached).
    func assetLinks(_ request: Request, containerIdentifier: String) -> AssetLinks {
        let port = boundPort.withLock { $0 } ?? configuration.port
        let base = "http://\(request.head.authority ?? "\(configuration.host):\(port)")"
        let secret = secret, lifetime = configuration.assetDownloadLifetime
        return AssetLinks(
            upload: { token in "\(base)\(Self.uploadPath)/\(containerIdentifier)/\(token)" },
            download: { asset in
                let expires = String(Int64(Date().timeIntervalSince1970 + lifetime))
                let token = secret.token("asset", [containerIdentifier, asset.contentHash, String(asset.size), expires])
                return "\(base)\(Self.downloadPath)/\(containerIdentifier)/\(token)/\(AssetLinks.fileNamePlaceholder)"
            })
    }

    func assetRoutes(_ router: Router<ServerContext>) {
        router.post(RouterPath(Self.uploadPath + "/:container/:token")) { request, context in await self.receiveAsset(request, context) }
        router.get(RouterPath(Self.downloadPath + "/:container/:token/:file")) { request, context in await self.sendAsset(request, context) }
        router.get(RouterPath(Self.downloadPath + "/:container/:token")) { request, context in await self.sendAsset(request, context) }
    }

    /// The upload URL: the body, raw (any or no `Content-Type`) or `multipart/form-data`, becomes
    /// the asset; answers `{"singleFile": {...}}` once it is durable. Streamed: the body is written
    /// a chunk at a time and never held whole; one of a chunk at most is stored in one transaction.
    func receiveAsset(_ request: Request, _ context: ServerContext) async -> Response {
        do throws(ServerError) {
            // The URL is the credential, checked by the container: one that does not exist has no
            // upload URLs (and is not made for a stranger's request).
            guard let container = try containers.existingContainer(context.parameters.get("container") ?? "") else {
                throw ServerError.notFound("this upload URL is unknown or has expired: ask assets/upload for another")
            }
            let token = context.parameters.get("token") ?? ""
            let declaredType = request.headers[.contentType]
            var multipart = try declaredType.flatMap { type throws(ServerError) in try MultipartFileReader(contentType: type) }
            // A form-encoded body is what `curl -d@file` (Apple's example) sends: its bytes are the file.
            let rawType = declaredType.flatMap { $0.lowercased().hasPrefix("application/x-www-form-urlencoded") ? nil : $0 }
            var writer: AssetUploadWriter?
            let chunkSize = AssetPolicy.chunkSize
            var pending: [UInt8] = []
            pending.reserveCapacity(chunkSize)
            // The chunk being written while the next one is read: the socket and the disk work at
            // once, and at most two chunks are held. A written chunk's buffer collects the next
            // one (a new megabyte each time cost page faults and grew the heap).
            var writing: Task<[UInt8], any Error>?
            var spare: [UInt8]?
            /// Starts writing a body larger than one chunk (smaller ones are stored whole at the end).
            func begin(_ type: String?) async throws(ServerError) -> AssetUploadWriter {
                if let writer { return writer }
                let started = try await run { () throws(ContainerError) in try container.beginAssetUpload(token: token, contentType: type) }
                writer = started
                return started
            }
            /// Waits for the chunk being written, if any.
            func settle() async throws(ServerError) {
                guard let task = writing else { return }
                writing = nil
                do { spare = try await task.value } catch let error as ServerError { throw error } catch {
                    throw ServerError("INTERNAL_ERROR", "the upload could not be written: \(error)", httpStatus: 500)
                }
            }
            /// Hands the collected bytes to the writer on a blocking thread, once the chunk before
            /// them is written.
            func flush(_ writer: AssetUploadWriter) async throws(ServerError) {
                guard !pending.isEmpty else { return }
                let bytes = pending
                pending = []
                try await settle()
                pending = spare.take() ?? []
                pending.removeAll(keepingCapacity: true)
                pending.reserveCapacity(chunkSize)
                writing = Task {
                    try await self.run { () throws(ContainerError) -> [UInt8] in
                        try writer.append(chunk: bytes)
                        return bytes
                    }
                }
            }
            /// Collects bytes, a whole chunk at a time.
            func take(_ bytes: some Collection<UInt8>) async throws(ServerError) {
                var rest = bytes[...]
                while !rest.isEmpty {
                    let taken = rest.prefix(chunkSize - pending.count)
                    pending.append(contentsOf: taken)
                    rest = rest.dropFirst(taken.count)
                    if pending.count == chunkSize { try await flush(try await begin(multipart?.fileContentType ?? rawType)) }
                }
            }
            do {
                for try await buffer in request.body {
                    if multipart != nil {
                        try await take(try multipart!.feed(buffer.readableBytesView))
                    } else {
                        try await take(buffer.readableBytesView)
                    }
                }
                try multipart?.finish()
                if writer == nil {
                    let bytes = pending, type = multipart?.fileContentType ?? rawType
                    let uploaded = try await run { () throws(ContainerError) in try container.storeAsset(token: token, contentType: type, bytes: bytes) }
                    return Self.response(ServiceAnswer(json: .object([("singleFile", uploaded.webServicesJSON)])), loggingIn: context.entry)
                }
                let active = try await begin(rawType)
                try await flush(active)
                try await settle()
            } catch {
                // The writer is used by one task at a time: the chunk in flight lands (or fails) first.
                _ = await writing?.result
                writer?.abandon()
                if let error = error as? ServerError { throw error }
                throw ServerError.badRequest("the upload's body could not be read: \(error)")
            }
            let active = try await begin(rawType)
            let uploaded = try await run { () throws(ContainerError) in try active.finish() }
            return Self.response(ServiceAnswer(json: .object([("singleFile", uploaded.webServicesJSON)])), loggingIn: context.entry)
        } catch {
            return Self.response(ServiceAnswer(json: error.webServicesJSON, status: error.httpStatus), loggingIn: context.entry)
        }
    }

    /// The download URL: checks its signature and expiry, then sends the bytes (a `Range` gets 206).
    /// The last path segment is the client's file name (or the literal `${f}`), named in
    /// `Content-Disposition` when it is a name.
    func sendAsset(_ request: Request, _ context: ServerContext) async -> Response {
        do throws(ServerError) {
            let identifier = context.parameters.get("container") ?? ""
            guard let token = context.parameters.get("token"), let parts = secret.parts("asset", of: token), parts.count == 4,
                  parts[0] == identifier, let expires = Int64(parts[3])
            else { throw ServerError.accessDenied("this asset download URL is not valid") }
            guard Double(expires) >= Date().timeIntervalSince1970 else {
                throw ServerError.accessDenied("this asset download URL has expired: fetch the record again for a fresh one")
            }
            let container = try containers.container(identifier)
            let hash = parts[1]
            guard let blob = try await run({ () throws(ContainerError) in try container.assetBlob(hash) }) else {
                throw ServerError.notFound("the asset is no longer stored")
            }
            let range = try ByteRange.parse(request.headers[.range], size: blob.size)
            let served = range ?? 0..<blob.size
            var headers: HTTPFields = [.contentType: blob.contentType, .acceptRanges: "bytes", .contentLength: String(served.count)]
            if let range { headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(blob.size)" }
            if let name = context.parameters.get("file")?.removingPercentEncoding, name != AssetLinks.fileNamePlaceholder,
               !name.isEmpty, name.utf8.count <= 255, !name.contains(where: { $0 == "\"" || $0 == "\\" || $0.isNewline || $0 == "/" }) {
                headers[.contentDisposition] = "attachment; filename=\"\(name)\""
            }
            let chunkSize = Int64(AssetPolicy.chunkSize)
            return Response(
                status: range == nil ? .ok : .partialContent, headers: headers,
                body: ResponseBody(contentLength: Int(served.count)) { writer in
                    var offset = served.lowerBound
                    while offset < served.upperBound {
                        let index = Int(offset / chunkSize)
                        guard let chunk = try await self.run({ () throws(ContainerError) in try container.assetChunk(hash, index: index) }) else {
                            throw ServerError("INTERNAL_ERROR", "asset \(hash) is missing its chunk \(index)", httpStatus: 500)
                        }
                        let start = Int(offset - Int64(index) * chunkSize)
                        let end = min(chunk.count, Int(served.upperBound - Int64(index) * chunkSize))
                        guard start < end else { throw ServerError("INTERNAL_ERROR", "asset \(hash) has a short chunk \(index)", httpStatus: 500) }
                        try await writer.write(ByteBuffer(bytes: chunk[start..<end]))
                        offset += Int64(end - start)
                    }
                    try await writer.finish(nil)
                })
        } catch {
            return Self.response(ServiceAnswer(json: error.webServicesJSON, status: error.httpStatus), loggingIn: context.entry)
        }
    }

    /// Runs container work on a blocking thread, its error as the server's.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws(ContainerError) -> T) async throws(ServerError) -> T {
        do throws(ContainerError) { return try await blockingWork.run(body) } catch { throw ServerError(error) }
    }
}

/// Collects what assets leave behind (expired uploads, spent receipts, blobs nothing refers to
/// past their grace period) in every open container, every `interval`.
struct AssetCollector: Service {
    let containers: ContainerDirectory
    let interval: Duration

    func run() async throws {
        while !Task.isShuttingDownGracefully {
            // The sleep ends with the server's shutdown, not after it.
            do { try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) } } catch { return }
            for container in containers.openContainers { _ = try? container.collectAssets() }
        }
    }
}
