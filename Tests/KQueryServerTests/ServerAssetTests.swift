import Hummingbird
import HummingbirdTesting
import KQuery
import KQueryContainer
import KQueryServer
import KQueryWebServices
import Testing

import Foundation

/// Assets over real HTTP on loopback (SPEC §12): the three steps, both body forms, receipts,
/// downloads with `${f}` and `Range`, rereference, limits, and what is refused.
@Suite struct ServerAssetTests {
    /// Bytes every test uploads: not valid UTF-8, with a CR LF and a NUL inside.
    static let bytes: [UInt8] = Array("photo\r\n\0".utf8) + (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 200) }

    @Test func rawAndMultipartUploadsAreSavedAndDownloaded() async throws {
        try await ServerHarness().run { c in
            // Raw, as CloudKit JS and MistKit send it, saved with no "type" as Apple's example does.
            let raw = try await c.uploadAsset(Self.bytes, database: "public", recordName: "a1", field: "image", user: "_alice")
            #expect(raw["receipt"]?.stringValue != nil && raw["size"] == .int(Int64(Self.bytes.count)))
            #expect(raw["wrappingKey"] == nil, "public assets carry no wrapping key")
            #expect(raw["fileChecksum"]?.stringValue?.count == 28)
            var answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a1", "recordType": "Artwork",
                  "fields": {"image": {"value": \(raw.serialized)}, "title": {"value": "Raw"}}}}]}
                """, user: "_alice")
            #expect(answer.status == 200, "\(answer.text)")
            let saved = answer.json["records"]?[0]?["fields"]?["image"]
            #expect(saved?["type"] == .string("ASSETID"))
            #expect(saved?["value"]?["receipt"] == nil && saved?["value"]?["contentHash"] == nil)
            let url = try #require(saved?["value"]?["downloadURL"]?.stringValue)
            #expect(url.hasSuffix("/${f}"))
            // The literal `${f}` (NIO's client will not send it: a socket does), and encoded.
            let literal = try c.rawGET(url)
            #expect(literal.status == 200 && literal.body == Self.bytes)
            let encoded = try await c.fetch(url.replacingOccurrences(of: "${f}", with: "$%7Bf%7D"))
            #expect(encoded.status == 200 && encoded.bytes == Self.bytes)
            let named = try await c.fetch(url.replacingOccurrences(of: "${f}", with: "photo.jpg"))
            #expect(named.bytes == Self.bytes && named.header("content-disposition") == #"attachment; filename="photo.jpg""#)

            // Multipart, as OpenCloudKit and Go clients send it (a form field first), typed ASSETID.
            let multipart = try await c.uploadAsset(Self.bytes, database: "public", recordName: "a2", field: "image", user: "_alice", multipart: true)
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a2", "recordType": "Artwork",
                  "fields": {"image": {"value": \(multipart.serialized), "type": "ASSETID"}}}}]}
                """, user: "_alice")
            #expect(answer.status == 200, "\(answer.text)")
            #expect(multipart["fileChecksum"] == raw["fileChecksum"], "the same bytes have the same checksum")

            // Every read shows the download URL: lookup, query, and the image's bytes through each.
            answer = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "a2"}]}"#, user: "_alice")
            let looked = try #require(answer.json["records"]?[0]?["fields"]?["image"]?["value"]?["downloadURL"]?.stringValue)
            #expect(try await c.fetch(looked).bytes == Self.bytes)
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "Artwork"}}"#, user: "_alice")
            #expect(answer.json["records"]?.elements.allSatisfy { $0["fields"]?["image"]?["value"]?["downloadURL"]?.stringValue != nil } == true)
        }
    }

    @Test func rangesAreServed() async throws {
        try await ServerHarness().run { c in
            let url = try await c.savedAssetURL(Self.bytes, user: "_alice")
            let cases: [(range: String, status: Int, slice: Range<Int>?)] = [
                ("bytes=2-5", 206, 2..<6), ("bytes=-3", 206, (Self.bytes.count - 3)..<Self.bytes.count), ("bytes=300-", 206, 300..<Self.bytes.count),
                ("bytes=0-100000", 206, 0..<Self.bytes.count), ("bytes=100000-", 416, nil), ("bytes=0-1,4-5", 200, 0..<Self.bytes.count),
            ]
            for (range, status, slice) in cases {
                let answer = try await c.fetch(url, headers: [.range: range])
                #expect(answer.status == status, "\(range)")
                if let slice { #expect(answer.bytes == Array(Self.bytes[slice]), "\(range)") }
                if status == 206, let slice {
                    #expect(answer.header("content-range") == "bytes \(slice.lowerBound)-\(slice.upperBound - 1)/\(Self.bytes.count)")
                }
            }
        }
    }

    @Test func receiptsAreBoundAndSpentOnce() async throws {
        try await ServerHarness().run { c in
            _ = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Z"}}}]}"#, user: "_alice")
            func save(_ asset: JSON, record: String = "r1", field: String = "file", zone: String? = nil, user: String = "_alice") async throws -> JSON? {
                let zoneMember = zone.map { #", "zoneID": {"zoneName": "\#($0)"}"# } ?? ""
                let answer = try await c.post("private", "records/modify", """
                    {"operations": [{"operationType": "create", "record": {"recordName": "\(record)", "recordType": "Doc"\(zoneMember),
                      "fields": {"\(field)": {"value": \(asset.serialized), "type": "ASSETID"}}}}]}
                    """, user: user)
                return answer.json["records"]?[0]
            }
            let asset = try await c.uploadAsset(Self.bytes, database: "private", recordName: "r1", field: "file", user: "_alice")
            #expect(asset["wrappingKey"]?.stringValue != nil && asset["referenceChecksum"]?.stringValue != nil)
            var forged = asset
            if case .object(var members) = forged, let at = members.firstIndex(where: { $0.0 == "receipt" }) {
                members[at].1 = .string("not-a-receipt")
                forged = .object(members)
            }
            let refusals: [(String, JSON?)] = [
                ("unknown", try await save(forged)),
                ("another record", try await save(asset, record: "r2")),
                ("another field", try await save(asset, field: "other")),
                ("another zone", try await save(asset, zone: "Z")),
                ("another database", try await save(asset, user: "_bob")),
                ("no receipt", try await save(.object([("fileChecksum", asset["fileChecksum"]!), ("size", asset["size"]!)]))),
            ]
            for (what, result) in refusals {
                #expect(result?["serverErrorCode"] == .string("BAD_REQUEST"), "\(what): \(result?.serialized ?? "nil")")
            }
            #expect(try await save(asset)?["recordChangeTag"] != nil, "the receipt works once for its own record and field")
            let again = try await save(asset, record: "r1")
            #expect(again?["serverErrorCode"] != nil)
            #expect(try await save(asset, record: "r3")?["reason"]?.stringValue?.contains("already used") == true)

            // A fetched record saved again, its asset unchanged (no receipt), keeps it.
            let fetched = try await c.post("private", "records/lookup", #"{"records": [{"recordName": "r1"}]}"#, user: "_alice")
            let record = try #require(fetched.json["records"]?[0])
            let update = try await c.post("private", "records/modify", """
                {"operations": [{"operationType": "update", "record": \(record.serialized)}]}
                """, user: "_alice")
            #expect(update.status == 200 && update.json["records"]?[0]?["fields"]?["file"]?["value"]?["downloadURL"] != nil, "\(update.text)")
        }
    }

    @Test func expiredReceiptsAndUploadURLsAreRefused() async throws {
        try await ServerHarness({ $0.assetPolicy.receiptLifetime = 0 }).run { c in
            let asset = try await c.uploadAsset(Self.bytes, database: "public", recordName: "r1", field: "file", user: "_alice")
            let answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "r1", "recordType": "Doc", "fields": {"file": {"value": \(asset.serialized)}}}}]}
                """, user: "_alice")
            #expect(answer.json["records"]?[0]?["reason"]?.stringValue?.contains("expired") == true, "\(answer.text)")
        }
        try await ServerHarness({ $0.assetPolicy.uploadLifetime = 0 }).run { c in
            let url = try await c.uploadURL(database: "public", recordName: "r1", field: "file", user: "_alice")
            #expect(try await c.fetch(url, method: .post, body: Self.bytes).status == 404)
        }
    }

    @Test func uploadURLsAreUsedOnceAndUnknownOnesRefused() async throws {
        try await ServerHarness().run { c in
            let url = try await c.uploadURL(database: "public", recordName: "r1", field: "file", user: "_alice")
            #expect(try await c.fetch(url, method: .post, body: Self.bytes).status == 200)
            let second = try await c.fetch(url, method: .post, body: Self.bytes)
            #expect(second.status == 400 && second.json["serverErrorCode"] == .string("BAD_REQUEST"))
            let unknown = url.dropLast(4) + "AAAA"
            #expect(try await c.fetch(String(unknown), method: .post, body: Self.bytes).status == 404)
            // An upload to a container that does not exist is refused, and does not make it.
            let elsewhere = url.replacingOccurrences(of: "/\(c.container)/", with: "/iCloud.never.made/")
            #expect(elsewhere != url)
            #expect(try await c.fetch(elsewhere, method: .post, body: Self.bytes).status == 404)
            let directory = try #require(c.server).configuration.dataDirectory
            #expect(!FileManager.default.fileExists(atPath: directory + "/iCloud.never.made.container"))
            let noFile = try await c.fetch(url, method: .post, body: Array("--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nhi\r\n--b--\r\n".utf8),
                                           headers: [.contentType: "multipart/form-data; boundary=b"])
            #expect(noFile.status == 400)
            // Requests for upload URLs: anonymous, too many, no field, a missing zone.
            #expect(try await c.post("public", "assets/upload", #"{"tokens": [{"fieldName": "f"}]}"#).status == 421)
            let many = "[" + Array(repeating: #"{"fieldName": "f"}"#, count: 201).joined(separator: ",") + "]"
            #expect(try await c.post("public", "assets/upload", #"{"tokens": \#(many)}"#, user: "_alice").status == 400)
            #expect(try await c.post("public", "assets/upload", #"{"tokens": [{"recordType": "T"}]}"#, user: "_alice").status == 400)
            let missingZone = try await c.post("private", "assets/upload", #"{"zoneID": {"zoneName": "Nope"}, "tokens": [{"fieldName": "f"}]}"#, user: "_alice")
            #expect(missingZone.status == 404 && missingZone.json["serverErrorCode"] == .string("ZONE_NOT_FOUND"))
        }
    }

    /// curl sends `Expect: 100-continue` with a body over 1 MiB and waits for `100 Continue` before
    /// sending it (a second, when none comes): the upload URL answers it at once.
    @Test func uploadURLsAnswerExpectContinue() async throws {
        try await ServerHarness().run { c in
            let url = try await c.uploadURL(database: "public", recordName: "r1", field: "file", user: "_alice")
            let path = String(url.dropFirst("http://\(c.host):\(c.port)".count))
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            try #require(fd >= 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(c.port).bigEndian)
            address.sin_addr.s_addr = inet_addr(c.host)
            let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            try #require(connected == 0)
            // A server that never answers fails the test rather than hanging it (generous: the
            // whole suite in parallel, PostgreSQL clusters starting, slows every sync).
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            func send(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
            func receive(until marker: String) -> String {
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while MultipartTestSearch.find(Array(marker.utf8), in: received) == nil {
                    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if count <= 0 { break }
                    received += buffer[0..<count]
                }
                return String(decoding: received, as: UTF8.self)
            }
            send(Array("POST \(path) HTTP/1.1\r\nHost: \(c.host)\r\nContent-Length: \(Self.bytes.count)\r\nExpect: 100-continue\r\n\r\n".utf8))
            // Nothing of the body is sent until the interim answer comes.
            let interim = receive(until: "\r\n\r\n")
            #expect(interim.hasPrefix("HTTP/1.1 100 Continue\r\n"), "\(interim)")
            send(Self.bytes)
            let final = receive(until: "}}")
            #expect(final.hasPrefix("HTTP/1.1 200 OK\r\n") && final.contains("\"singleFile\""), "\(final)")
        }
    }

    @Test func fiftyMegabytesAreTakenAndOneByteMoreRefused() async throws {
        try await ServerHarness().run { c in
            let limit = 50_000_000
            var big = [UInt8](repeating: 0, count: limit + 1)
            for index in stride(from: 0, to: big.count, by: 4096) { big[index] = UInt8(truncatingIfNeeded: index >> 12) }
            let over = try await c.fetch(try await c.uploadURL(database: "public", recordName: "big", field: "f", user: "_alice"), method: .post, body: big)
            #expect(over.status == 413 && over.json["serverErrorCode"] == .string("QUOTA_EXCEEDED"))
            big.removeLast()
            let asset = try await c.uploadAsset(big, database: "public", recordName: "big", field: "f", user: "_alice")
            #expect(asset["size"] == .int(Int64(limit)))
            let answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "big", "recordType": "Doc", "fields": {"f": {"value": \(asset.serialized)}}}}]}
                """, user: "_alice")
            let url = try #require(answer.json["records"]?[0]?["fields"]?["f"]?["value"]?["downloadURL"]?.stringValue)
            let tail = try await c.fetch(url, headers: [.range: "bytes=-5000"])
            #expect(tail.bytes == Array(big.suffix(5000)))
        }
    }

    @Test func forgedAndExpiredDownloadURLsAreRefused() async throws {
        try await ServerHarness().run { c in
            let url = try await c.savedAssetURL(Self.bytes, user: "_alice")
            var forged = Array(url)
            let at = try #require(url.range(of: "/assets/download/")).upperBound
            let position = url.distance(from: url.startIndex, to: at) + 40
            forged[position] = forged[position] == "A" ? "B" : "A"
            #expect(try await c.fetch(String(forged)).status == 403)
            let otherContainer = url.replacingOccurrences(of: "/\(c.container)/", with: "/iCloud.other/")
            #expect(try await c.fetch(otherContainer).status == 403)
        }
        try await ServerHarness({ $0.assetDownloadLifetime = -10 }).run { c in
            let url = try await c.savedAssetURL(Self.bytes, user: "_alice")
            let answer = try await c.fetch(url)
            #expect(answer.status == 403 && answer.json["reason"]?.stringValue?.contains("expired") == true)
        }
    }

    @Test func rereferencedAssetsServeAnotherRecord() async throws {
        try await ServerHarness().run { c in
            _ = try await c.savedAssetURL(Self.bytes, user: "_alice", record: "first")
            var answer = try await c.post("public", "assets/rereference", #"{"assets": [{"recordName": "first", "fieldName": "file"}, {"recordName": "missing", "fieldName": "file"}, {"recordName": "first", "fieldName": "nope"}]}"#, user: "_alice")
            #expect(answer.status == 200)
            let fresh = try #require(answer.json["assets"]?[0])
            #expect(fresh["receipt"]?.stringValue != nil)
            #expect(answer.json["assets"]?[1]?["serverErrorCode"] == .string("NOT_FOUND"))
            #expect(answer.json["assets"]?[2]?["serverErrorCode"] == .string("NOT_FOUND"))
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "second", "recordType": "Doc", "fields": {"copy": {"value": \(fresh.serialized)}}}}]}
                """, user: "_alice")
            let url = try #require(answer.json["records"]?[0]?["fields"]?["copy"]?["value"]?["downloadURL"]?.stringValue, "\(answer.text)")
            #expect(try await c.fetch(url).bytes == Self.bytes)
            // Another user's private database cannot rereference what it cannot see.
            answer = try await c.post("private", "assets/rereference", #"{"assets": [{"recordName": "first", "fieldName": "file"}]}"#, user: "_bob")
            #expect(answer.json["assets"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))
        }
    }

    @Test func assetListsAreSavedAndRead() async throws {
        try await ServerHarness().run { c in
            let first = try await c.uploadAsset(Self.bytes, database: "public", recordName: "l", field: "pages", user: "_alice")
            let second = try await c.uploadAsset(Array(Self.bytes.reversed()), database: "public", recordName: "l", field: "pages", user: "_alice")
            let answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "l", "recordType": "Doc",
                  "fields": {"pages": {"value": [\(first.serialized), \(second.serialized)], "type": "ASSET_LIST"}}}}]}
                """, user: "_alice")
            let pages = answer.json["records"]?[0]?["fields"]?["pages"]
            #expect(pages?["type"] == .string("ASSETID_LIST"), "\(answer.text)")
            let urls = pages?["value"]?.elements.compactMap { $0["downloadURL"]?.stringValue } ?? []
            #expect(urls.count == 2)
            if urls.count == 2 { #expect(try await c.fetch(urls[1]).bytes == Array(Self.bytes.reversed())) }
        }
    }
}

extension ServerClient {
    struct RawAnswer {
        var status: Int
        var bytes: [UInt8]
        var headers: HTTPFields
        var json: JSON { (try? JSON.parse(String(decoding: bytes, as: UTF8.self))) ?? .null }
        func header(_ name: String) -> String? { headers.first { $0.name.canonicalName == name.lowercased() }?.value }
    }

    /// A request to a URL the server handed out (upload or download), with a raw body.
    func fetch(_ url: String, method: HTTPRequest.Method = .get, body: [UInt8]? = nil, headers: HTTPFields = [:]) async throws -> RawAnswer {
        let prefix = "http://\(host):\(port)"
        guard url.hasPrefix(prefix) else { throw ServerError("BAD_REQUEST", "not this server's URL: \(url)", httpStatus: 400) }
        let client = TestClient(host: host, port: port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        defer { Task { try? await client.shutdown() } }
        // A URL as clients use it: `${f}` replaced (here by its encoding).
        let path = String(url.dropFirst(prefix.count)).replacingOccurrences(of: "${f}", with: "%24%7Bf%7D")
        let response = try await client.execute(.init(path, method: method, headers: headers,
                                                       body: body.map { ByteBuffer(bytes: $0) }))
        return RawAnswer(status: Int(response.status.code), bytes: response.body.map { Array($0.readableBytesView) } ?? [], headers: response.headers)
    }

    /// A GET written by hand on a socket, the path sent exactly as given: the status and the body.
    func rawGET(_ url: String) throws -> (status: Int, body: [UInt8]) {
        let path = String(url.dropFirst("http://\(host):\(port)".count))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        defer { close(fd) }
        // A read that never ends would hold one of the cooperative pool's threads for good: fail instead.
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr(host)
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            response += buffer[0..<count]
        }
        guard let end = MultipartTestSearch.find(Array("\r\n\r\n".utf8), in: response) else { throw POSIXError(.EBADMSG) }
        let head = String(decoding: response[..<end], as: UTF8.self)
        let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        return (status, Array(response[(end + 4)...]))
    }

    /// An upload URL for one field.
    func uploadURL(database: String, recordName: String, field: String, user: String, zone: String? = nil) async throws -> String {
        let zoneMember = zone.map { #""zoneID": {"zoneName": "\#($0)"}, "# } ?? ""
        let answer = try await post(database, "assets/upload", #"{\#(zoneMember)"tokens": [{"recordName": "\#(recordName)", "recordType": "Doc", "fieldName": "\#(field)"}]}"#, user: user)
        guard let url = answer.json["tokens"]?[0]?["url"]?.stringValue else { throw ServerError("BAD_REQUEST", "no upload URL: \(answer.text)", httpStatus: 400) }
        return url
    }

    /// Steps one and two: the `singleFile` dictionary for `bytes`.
    func uploadAsset(_ bytes: [UInt8], database: String, recordName: String, field: String, user: String, multipart: Bool = false) async throws -> JSON {
        let url = try await uploadURL(database: database, recordName: recordName, field: field, user: user)
        let answer: RawAnswer
        if multipart {
            let boundary = "----kquery\(UUID().uuidString)"
            var body = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nignored\r\n".utf8)
            body += Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"files\"; filename=\"file.file\"\r\nContent-Type: application/octet-stream\r\n\r\n".utf8)
            body += bytes + Array("\r\n--\(boundary)--\r\n".utf8)
            answer = try await fetch(url, method: .post, body: body, headers: [.contentType: "multipart/form-data; boundary=\(boundary)"])
        } else {
            answer = try await fetch(url, method: .post, body: bytes, headers: [.contentType: "image/png"])
        }
        guard answer.status == 200, let file = answer.json["singleFile"] else {
            throw ServerError("BAD_REQUEST", "upload failed: \(answer.status) \(String(decoding: answer.bytes.prefix(300), as: UTF8.self))", httpStatus: 400)
        }
        return file
    }

    /// Uploads `bytes`, saves them in field `file` of a public record, and returns its download URL.
    func savedAssetURL(_ bytes: [UInt8], user: String, record: String = "r1") async throws -> String {
        let asset = try await uploadAsset(bytes, database: "public", recordName: record, field: "file", user: user)
        let answer = try await post("public", "records/modify", """
            {"operations": [{"operationType": "create", "record": {"recordName": "\(record)", "recordType": "Doc", "fields": {"file": {"value": \(asset.serialized)}}}}]}
            """, user: user)
        guard let url = answer.json["records"]?[0]?["fields"]?["file"]?["value"]?["downloadURL"]?.stringValue else {
            throw ServerError("BAD_REQUEST", "not saved: \(answer.text)", httpStatus: 400)
        }
        return url
    }
}

enum MultipartTestSearch {
    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        return (0...(haystack.count - needle.count)).first { Array(haystack[$0..<($0 + needle.count)]) == needle }
    }
}
