import Foundation
import KQuery
import KQueryServer
import KQueryTestSupport
import Testing

/// Assets survive kill -9 of `kquery serve`: what the server answered is on disk, whether the
/// client had only uploaded (the receipt) or had saved the record too.
extension ServerProcessTests {
    /// More than one stored chunk, every byte value.
    static let assetBytes: [UInt8] = (0..<((1 << 20) + 4321)).map { UInt8(truncatingIfNeeded: ($0 &* 2654435761) >> 7) }

    /// Starts a server on `directory`, runs `body` with a client, then kills the server with SIGKILL.
    static func runThenKill(_ directory: String, _ body: (ServerClient) async throws -> Void) async throws {
        let secret = try ServerSecret(directory: directory)
        let (process, port) = try startServer(directory: directory)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        try await body(ServerClient(webAuthToken: { secret.webAuthToken(user: $0) }, host: "127.0.0.1", port: port))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
    }

    /// An answered upload is durable: after kill -9 and a restart, its receipt still saves the record
    /// and the download gives the bytes back.
    @Test func anAnsweredUploadSurvivesKill9() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = TemporaryFiles.path("kquery-serve-assets")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var asset = JSON.null
        try await Self.runThenKill(directory) { client in
            asset = try await client.uploadAsset(Self.assetBytes, database: "private", recordName: "k1", field: "file", user: "_k")
            #expect(asset["size"] == .int(Int64(Self.assetBytes.count)))
        }
        try await Self.runThenKill(directory) { client in
            let saved = try await client.post("private", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "k1", "recordType": "Doc", "fields": {"file": {"value": \(asset.serialized)}}}}]}
                """, user: "_k")
            #expect(saved.status == 200, "\(saved.text)")
            let url = try #require(saved.json["records"]?[0]?["fields"]?["file"]?["value"]?["downloadURL"]?.stringValue, "\(saved.text)")
            let download = try await client.fetch(url)
            #expect(download.status == 200 && download.bytes == Self.assetBytes)
        }
    }

    /// An answered modify that saved an asset is durable with its bytes: after kill -9 and a
    /// restart, lookup shows the asset and its download works (whole and by range).
    @Test func aSavedAssetSurvivesKill9() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = TemporaryFiles.path("kquery-serve-assets")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try await Self.runThenKill(directory) { client in
            let asset = try await client.uploadAsset(Self.assetBytes, database: "public", recordName: "k2", field: "file", user: "_k")
            let saved = try await client.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "k2", "recordType": "Doc", "fields": {"file": {"value": \(asset.serialized)}}}}]}
                """, user: "_k")
            #expect(saved.status == 200, "\(saved.text)")
        }
        try await Self.runThenKill(directory) { client in
            let found = try await client.post("public", "records/lookup", #"{"records": [{"recordName": "k2"}]}"#, user: "_k")
            let value = found.json["records"]?[0]?["fields"]?["file"]?["value"]
            #expect(value?["size"] == .int(Int64(Self.assetBytes.count)), "\(found.text)")
            let url = try #require(value?["downloadURL"]?.stringValue, "\(found.text)")
            #expect(try await client.fetch(url).bytes == Self.assetBytes)
            let tail = try await client.fetch(url, headers: [.range: "bytes=1048570-"])
            #expect(tail.status == 206 && tail.bytes == Array(Self.assetBytes[1_048_570...]))
        }
    }
}
