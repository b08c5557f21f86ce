import Foundation

/// Finds the file in a `multipart/form-data` upload as its bytes stream in (OpenCloudKit and Go
/// clients post assets this way): the first part with a `filename` (or a type other than
/// `text/plain`); parts before it are skipped. Its content is handed out as it arrives, less a tail
/// as long as the closing delimiter, so the body is never held whole. Package access, here rather
/// than in the server, so the request fuzzer (which has no HTTP layer) can feed it.
package struct MultipartFileReader {
    private enum State {
        /// Before the first delimiter.
        case preamble
        /// Reading a part's headers.
        case headers
        /// Reading the file's content.
        case file
        /// Skipping a part that is not the file.
        case skipping
        /// After the file's closing delimiter.
        case done
    }

    /// `--boundary`, which opens each part.
    private let opening: [UInt8]
    /// `CRLF--boundary`, which ends each part's content.
    private let closing: [UInt8]
    private var state = State.preamble
    private var buffer: [UInt8] = []
    /// The file part's `Content-Type`, once its headers are read.
    package private(set) var fileContentType: String?
    /// Whether the file's headers have been read (its content may follow).
    package var foundFile: Bool { state == .file || state == .done }
    package var isComplete: Bool { state == .done }

    package static let maximumHeaderBytes = 16 * 1024

    /// nil unless `contentType` is `multipart/form-data` with a usable boundary.
    package init?(contentType: String) throws(ServerError) {
        let parameters = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let media = parameters.first, media.lowercased() == "multipart/form-data" else { return nil }
        guard let boundaryParameter = parameters.dropFirst().first(where: { $0.lowercased().hasPrefix("boundary=") }) else {
            throw ServerError.badRequest("a multipart/form-data upload needs a boundary parameter")
        }
        var boundary = String(boundaryParameter.dropFirst("boundary=".count))
        if boundary.hasPrefix("\""), boundary.hasSuffix("\""), boundary.count >= 2 { boundary = String(boundary.dropFirst().dropLast()) }
        guard (1...70).contains(boundary.utf8.count) else { throw ServerError.badRequest("a multipart boundary has 1 to 70 characters") }
        opening = Array(("--" + boundary).utf8)
        closing = Array(("\r\n--" + boundary).utf8)
    }

    /// Takes the next bytes of the body; returns the file content they complete.
    package mutating func feed(_ bytes: some Collection<UInt8>) throws(ServerError) -> [UInt8] {
        guard state != .done else { return [] }
        buffer.append(contentsOf: bytes)
        var output: [UInt8] = []
        while true {
            switch state {
            case .preamble:
                // The limits hold however the body is cut into reads: a buffer without the
                // delimiter is too long only once the delimiter could no longer start in time.
                let noBoundary = ServerError.badRequest("no multipart boundary in the first \(Self.maximumHeaderBytes) bytes of the upload")
                guard let at = Self.find(opening, in: buffer) else {
                    if buffer.count > Self.maximumHeaderBytes + opening.count - 1 { throw noBoundary }
                    return output
                }
                if at > Self.maximumHeaderBytes { throw noBoundary }
                buffer.removeSubrange(..<(at + opening.count))
                state = .headers
            case .headers:
                // `--` after a delimiter ends the body: no file part came.
                if buffer.count >= 2, buffer[0] == UInt8(ascii: "-"), buffer[1] == UInt8(ascii: "-") {
                    throw ServerError.badRequest("the multipart upload holds no file part")
                }
                let tooLong = ServerError.badRequest("a multipart part's headers are longer than \(Self.maximumHeaderBytes) bytes")
                guard let end = Self.find(Array("\r\n\r\n".utf8), in: buffer) else {
                    if buffer.count > Self.maximumHeaderBytes + 3 { throw tooLong }
                    return output
                }
                if end > Self.maximumHeaderBytes { throw tooLong }
                let headers = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeSubrange(..<(end + 4))
                var disposition = "", type: String?
                for line in headers.split(separator: "\r\n") {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
                    let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                    if name == "content-disposition" { disposition = value } else if name == "content-type" { type = value }
                }
                let isFile = disposition.lowercased().contains("filename") || (type.map { !$0.lowercased().hasPrefix("text/plain") } ?? false)
                if isFile {
                    fileContentType = type
                    state = .file
                } else {
                    state = .skipping
                }
            case .file, .skipping:
                if let at = Self.find(closing, in: buffer) {
                    if state == .file {
                        output.append(contentsOf: buffer[..<at])
                        buffer = []
                        state = .done
                        return output
                    }
                    buffer.removeSubrange(..<(at + closing.count))
                    state = .headers
                    continue
                }
                // All but what could be the start of the delimiter is content.
                let keep = min(buffer.count, closing.count - 1)
                if state == .file { output.append(contentsOf: buffer[..<(buffer.count - keep)]) }
                buffer.removeSubrange(..<(buffer.count - keep))
                return output
            case .done:
                return output
            }
        }
    }

    /// The body ended: the file must have been closed by its delimiter.
    package func finish() throws(ServerError) {
        guard state == .done else {
            throw ServerError.badRequest(foundFile ? "the multipart upload ended inside its file part" : "the multipart upload holds no file part")
        }
    }

    /// Where `needle` first occurs in `haystack`.
    package static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard let first = needle.first, haystack.count >= needle.count else { return nil }
        return haystack.withUnsafeBufferPointer { hay in
            needle.withUnsafeBufferPointer { pin in
                var index = 0
                let last = hay.count - pin.count
                while index <= last {
                    if hay[index] == first {
                        var matched = 1
                        while matched < pin.count, hay[index + matched] == pin[matched] { matched += 1 }
                        if matched == pin.count { return index }
                    }
                    index += 1
                }
                return nil
            }
        }
    }
}

/// A `Range: bytes=...` header against a resource of `size` bytes (one range; RFC 9110 §14.1.2).
package enum ByteRange {
    /// The range to serve; nil for the whole resource (no header, or one this server ignores);
    /// throws when the range cannot be satisfied.
    package static func parse(_ header: String?, size: Int64) throws(ServerError) -> Range<Int64>? {
        guard let header = header?.trimmingCharacters(in: .whitespaces), header.lowercased().hasPrefix("bytes=") else { return nil }
        let spec = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
        // Several ranges are answered whole (allowed: a server may ignore Range).
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces), last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        let unsatisfiable = ServerError("BAD_REQUEST", "range \(spec) is outside the asset's \(size) bytes", httpStatus: 416)
        if first.isEmpty {
            // `-0` asks for no bytes (unsatisfiable); `-x` is no range at all (served whole).
            guard let suffix = Int64(last) else { return nil }
            guard suffix > 0 else { throw unsatisfiable }
            return max(0, size - suffix)..<size
        }
        guard let start = Int64(first), start >= 0 else { return nil }
        guard start < size else { throw unsatisfiable }
        if last.isEmpty { return start..<size }
        guard let end = Int64(last), end >= start else { return nil }
        return start..<min(size, end + 1)
    }
}
