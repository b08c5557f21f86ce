import KQuery
import KQueryServer
import KQueryWebServices
import PropertyBased
import Testing

/// The pieces of the upload and download routes that parse what a client sends: the multipart
/// reader (which must find the same file however the body is cut into reads) and the `Range` header.
@Suite struct AssetParsingTests {
    static let boundary = "----KQueryBoundary7MA4YWxkTrZu0gW"

    /// A form field, then the file part with its own headers, then the closing delimiter.
    static func body(_ file: [UInt8], boundary: String = boundary, closed: Bool = true) -> [UInt8] {
        var body = Array("preamble to ignore\r\n--\(boundary)\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nnot the file\r\n".utf8)
        body += Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\nContent-Type: image/png\r\n\r\n".utf8)
        body += file
        if closed { body += Array("\r\n--\(boundary)--\r\n".utf8) }
        return body
    }

    /// Bytes that look like pieces of the delimiter (CR LF, dashes, the boundary's own letters)
    /// without being it, so a reader that matches too early or drops a held-back tail shows it.
    static let tricky: [UInt8] = Array("\r\n-\r\n--\r\n---KQuery\r\n----KQueryBoundary7MA4YWxk\0\u{FF}end\r".utf8) + [0xFF, 0x00, 0x0D]

    /// Feeds `body` cut at `cuts` (ascending offsets) and returns the file, or the error.
    static func read(_ body: [UInt8], cuts: [Int], contentType: String = "multipart/form-data; boundary=\(boundary)") -> Result<[UInt8], ServerError> {
        do throws(ServerError) {
            guard var reader = try MultipartFileReader(contentType: contentType) else { return .failure(.badRequest("not multipart")) }
            var file: [UInt8] = []
            var start = 0
            for cut in cuts + [body.count] where cut >= start {
                file += try reader.feed(body[start..<cut])
                start = cut
            }
            try reader.finish()
            #expect(reader.fileContentType == "image/png")
            return .success(file)
        } catch {
            return .failure(error)
        }
    }

    @Test func everySplitInTwoYieldsTheFile() throws {
        let body = Self.body(Self.tricky)
        for cut in 0...body.count {
            #expect(try Self.read(body, cuts: [cut]).get() == Self.tricky, "cut at \(cut)")
        }
        // One byte at a time, the hardest case for the held-back tail.
        #expect(try Self.read(body, cuts: Array(0...body.count)).get() == Self.tricky)
    }

    @Test func randomSplitsYieldTheFile() async {
        await propertyCheck(count: 300, input: Gen.uint8().array(of: 0...700), Gen.int(in: 0...800).array(of: 0...12), Gen.bool()) { noise, cuts, tricky in
            // Half the files carry the near-delimiters inside random bytes.
            let file = tricky ? noise + Self.tricky + noise : noise
            let body = Self.body(file)
            let read = Self.read(body, cuts: cuts.map { min($0, body.count) }.sorted())
            #expect((try? read.get()) == file, "cuts \(cuts.sorted()): \(read)")
        }
    }

    @Test func aQuotedBoundaryAndAFileFirstAreRead() throws {
        let body = Array("--b c\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\nContent-Type: image/png\r\n\r\nhello\r\n--b c--".utf8)
        #expect(try Self.read(body, cuts: [3], contentType: "multipart/form-data; boundary=\"b c\"").get() == Array("hello".utf8))
        // Parameters in another case and order, with spaces.
        #expect(try Self.read(body, cuts: [], contentType: "Multipart/Form-Data ; charset=utf-8; BOUNDARY=\"b c\"").get() == Array("hello".utf8))
    }

    @Test func malformedBodiesAreRefused() throws {
        func reason(_ body: [UInt8], _ contentType: String = "multipart/form-data; boundary=\(Self.boundary)") -> String? {
            if case .failure(let error) = Self.read(body, cuts: [body.count / 2], contentType: contentType) { return error.reason }
            return nil
        }
        #expect(reason(Self.body(Array("abc".utf8), closed: false))?.contains("ended inside its file part") == true)
        let noFile = Array("--\(Self.boundary)\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nhi\r\n--\(Self.boundary)--\r\n".utf8)
        #expect(reason(noFile)?.contains("no file part") == true)
        // A body that ends before any part's headers end.
        #expect(reason(Array("--\(Self.boundary)\r\nContent-Disposition: form-data".utf8))?.contains("no file part") == true)
        let longHeaders = Array("--\(Self.boundary)\r\nX-Padding: \(String(repeating: "a", count: MultipartFileReader.maximumHeaderBytes + 10))\r\n\r\n".utf8)
        // Too long whether they arrive in one read or in two.
        #expect(reason(longHeaders)?.contains("headers are longer than") == true)
        #expect(Self.read(longHeaders, cuts: [], contentType: "multipart/form-data; boundary=\(Self.boundary)") == .failure(.badRequest(
            "a multipart part's headers are longer than \(MultipartFileReader.maximumHeaderBytes) bytes")))
        let noBoundary = Array(repeating: UInt8(ascii: "x"), count: MultipartFileReader.maximumHeaderBytes + 100)
        #expect(reason(noBoundary)?.contains("no multipart boundary") == true)
        #expect(reason(noBoundary + Array("\r\n--\(Self.boundary)\r\n".utf8))?.contains("no multipart boundary") == true)
        // The boundary parameter: missing, empty, too long.
        #expect(throws: ServerError.self) { try MultipartFileReader(contentType: "multipart/form-data") }
        #expect(throws: ServerError.self) { try MultipartFileReader(contentType: "multipart/form-data; boundary=") }
        #expect(throws: ServerError.self) { try MultipartFileReader(contentType: "multipart/form-data; boundary=\(String(repeating: "b", count: 71))") }
        // Anything else is not multipart: the body is the file.
        #expect(try MultipartFileReader(contentType: "application/octet-stream") == nil)
        #expect(try MultipartFileReader(contentType: "multipart/mixed; boundary=x") == nil)
    }

    @Test func byteRanges() throws {
        let size: Int64 = 1000
        let served: [(String?, Range<Int64>?)] = [
            (nil, nil), ("bytes=0-0", 0..<1), ("bytes=2-5", 2..<6), ("bytes=990-", 990..<1000), ("bytes=0-999", 0..<1000),
            ("bytes=900-5000", 900..<1000), ("bytes=-10", 990..<1000), ("bytes=-5000", 0..<1000), ("BYTES= 3 - 4 ", 3..<5),
            // Malformed or several ranges: answered whole, as a server may ignore Range.
            ("bytes=5-2", nil), ("bytes=a-b", nil), ("bytes=", nil), ("bytes=12", nil), ("items=0-5", nil), ("bytes=-1-2", nil),
            ("bytes=0-1,4-5", nil), ("bytes=0-1, 990-", nil),
        ]
        for (header, range) in served {
            #expect(try ByteRange.parse(header, size: size) == range, "\(header ?? "no header")")
        }
        for header in ["bytes=1000-", "bytes=1000-1001", "bytes=5000-", "bytes=-0"] {
            #expect(throws: ServerError.self, "\(header)") { try ByteRange.parse(header, size: size) }
            do throws(ServerError) { _ = try ByteRange.parse(header, size: size) } catch { #expect(error.httpStatus == 416) }
        }
        // An empty asset has no byte to serve.
        #expect(throws: ServerError.self) { try ByteRange.parse("bytes=0-", size: 0) }
    }
}
