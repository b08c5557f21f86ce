import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery
@testable import KQueryContainer

/// Assets through the binary: `{"$file": PATH}` in `kquery modify`, `kquery import` and the shell,
/// `kquery asset get` writing the bytes back exactly, and `kquery asset collect`.
@Suite("Asset command line")
struct AssetCommandLineTests {
    /// Binary bytes (every byte value, no pattern a chunk boundary would hide): more than one
    /// stored chunk when `count` passes a MiB.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    static func file(_ bytes: [UInt8], suffix: String = ".bin") throws -> String {
        let path = TemporaryFiles.path("kquery-asset", suffix: suffix)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    static func contents(_ path: String) -> [UInt8]? { FileManager.default.contents(atPath: path).map { Array($0) } }

    /// A JSON string literal for a path.
    static func quoted(_ path: String) -> String { JSON.string(path).serialized }

    /// Runs the binary with standard output kept as bytes (`asset get --out -` writes binary).
    static func runForBytes(_ arguments: [String]) throws -> (status: Int32, output: [UInt8], error: String) {
        let process = SpawnedProcess()
        process.executableURL = KQueryBinary.url
        process.arguments = arguments
        let output = Pipe(), error = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Standard error is read on another thread so a full pipe cannot stall the child.
        let errorText = Locked(Data())
        let reader = Thread { errorText.withLock { $0 = error.fileHandleForReading.readDataToEndOfFile() } }
        reader.start()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while reader.isExecuting || !reader.isFinished { Thread.sleep(forTimeInterval: 0.01) }
        return (process.terminationStatus, Array(bytes), String(decoding: errorText.withLock { $0 }, as: UTF8.self))
    }

    func json(_ run: KQueryBinary.Run) throws -> JSON {
        try JSON.parse(run.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// `kquery modify` uploads each `$file` (with its `contentType`, else one from the extension)
    /// into its field, lists included; `kquery asset get` writes each back byte for byte, to a
    /// file or standard output; a wrong record, field or index is exit 1.
    @Test func modifyUploadsFilesAndGetWritesThemBack() throws {
        let db = ContainerCommandLineTests.temporaryPath("assets")
        let big = Self.bytes((1 << 20) + (1 << 19) + 123, seed: 1), small = Self.bytes(777, seed: 2)
        let bigFile = try Self.file(big), smallFile = try Self.file(small, suffix: ".png")
        let modify = try KQueryBinary.run(["modify", "--db", db, "-"], input: """
            {"operations": [{"operationType": "create", "record": {"recordName": "p1", "recordType": "Photo", "fields": {
              "image": {"value": {"$file": \(Self.quoted(bigFile)), "contentType": "image/x-test"}},
              "thumb": {"value": {"$file": \(Self.quoted(smallFile))}},
              "gallery": {"value": [{"$file": \(Self.quoted(smallFile))}, {"$file": \(Self.quoted(bigFile))}], "type": "ASSETID_LIST"},
              "title": {"value": "Sunset"}}}}]}
            """)
        #expect(modify.status == 0, "\(modify.standardError)")
        let fields = try json(modify)["records"]?[0]?["fields"]
        #expect(fields?["image"]?["value"]?["size"] == .int(Int64(big.count)), "\(modify.standardOutput)")
        #expect(fields?["image"]?["value"]?["receipt"] == nil, "a saved asset shows no receipt")
        #expect(fields?["gallery"]?["value"]?[1]?["size"] == .int(Int64(big.count)))

        // Each field back to a file, exactly; the list by index.
        for (field, index, expected) in [("image", nil, big), ("thumb", nil, small), ("gallery", 0, small), ("gallery", 1, big)] as [(String, Int?, [UInt8])] {
            let out = TemporaryFiles.path("kquery-asset-out", suffix: ".bin")
            let get = try KQueryBinary.run(["asset", "get", "--db", db, "--out", out] + (index.map { ["--index", String($0)] } ?? []) + ["p1", field])
            #expect(get.status == 0, "\(field): \(get.standardError)")
            #expect(get.standardError.contains("wrote \(expected.count) bytes to \(out)"))
            #expect(Self.contents(out) == expected, "\(field) \(index.map(String.init) ?? "")")
        }
        // To standard output: the bytes alone.
        let piped = try Self.runForBytes(["asset", "get", "--db", db, "--out", "-", "p1", "image"])
        #expect(piped.status == 0, "\(piped.error)")
        #expect(piped.output == big)

        // The media types downloads are served with: the given one, else the extension's.
        let container = try Container(containerIdentifier: "iCloud.kquery.local", path: db)
        let stored = try container.database(.public).asset(RecordID(recordName: "p1", zoneID: .default), field: "image")
        let thumb = try container.database(.public).asset(RecordID(recordName: "p1", zoneID: .default), field: "thumb")
        #expect(try container.assetBlob(try #require(stored?.contentHash))?.contentType == "image/x-test")
        #expect(try container.assetBlob(try #require(thumb?.contentHash))?.contentType == "image/png")

        // What is not there: exit 1, a message, no file written.
        let missingOut = TemporaryFiles.path("kquery-asset-out", suffix: ".bin")
        for arguments in [["p2", "image"], ["p1", "nothing"], ["p1", "title"], ["--index", "2", "p1", "gallery"], ["p1", "gallery"]] {
            let get = try KQueryBinary.run(["asset", "get", "--db", db, "--out", missingOut] + arguments)
            #expect(get.status == 1, "\(arguments)")
            #expect(get.standardError.hasPrefix("error: NOT_FOUND: "), "\(arguments): \(get.standardError)")
            #expect(!FileManager.default.fileExists(atPath: missingOut), "\(arguments)")
        }
        let unindexed = try KQueryBinary.run(["asset", "get", "--db", db, "--out", missingOut, "p1", "gallery"])
        #expect(unindexed.standardError.contains("it holds a list of 2 assets, pick one with --index"), "\(unindexed.standardError)")
    }

    /// A `$file` that cannot be read refuses the whole modify: a clear error, a nonzero exit, and
    /// nothing saved (not even the operations whose files were fine).
    @Test func aMissingLocalFileSavesNothing() throws {
        let db = ContainerCommandLineTests.temporaryPath("assets-missing")
        let good = try Self.file(Self.bytes(100, seed: 3))
        let missing = NSTemporaryDirectory() + "kquery-no-such-file-\(UUID().uuidString).jpg"
        let modify = try KQueryBinary.run(["modify", "--db", db, "-"], input: """
            {"operationType": "create", "record": {"recordName": "ok", "recordType": "Photo", "fields": {"image": {"value": {"$file": \(Self.quoted(good))}}}}}
            {"operationType": "create", "record": {"recordName": "bad", "recordType": "Photo", "fields": {"image": {"value": {"$file": \(Self.quoted(missing))}}}}}
            """)
        #expect(modify.status == 2, "a file that cannot be read is a bad input")
        #expect(modify.standardError.contains(missing) && modify.standardError.contains("cannot read the file"), "\(modify.standardError)")
        #expect(modify.standardOutput.isEmpty)
        let count = try KQueryBinary.run(["query", "--db", db, "--type", "Photo", "--format", "count", "TRUEPREDICATE"])
        #expect(count.standardOutput == "0\n", "\(count.standardError)")
    }

    /// `kquery import` uploads the `$file` values of an NDJSON records file, into a custom zone too.
    @Test func importUploadsFiles() throws {
        let db = ContainerCommandLineTests.temporaryPath("assets-import")
        #expect(try KQueryBinary.run(["zones", "--db", db, "--user", "_u", "--create", "Album"]).status == 0)
        let first = Self.bytes((1 << 20) + 5, seed: 4), second = Self.bytes(10, seed: 5)
        let firstFile = try Self.file(first), secondFile = try Self.file(second)
        let records = try ContainerCommandLineTests.file("""
            {"recordName": "a", "recordType": "Photo", "zoneID": {"zoneName": "Album"}, "fields": {"image": {"value": {"$file": \(Self.quoted(firstFile))}}}}
            {"recordName": "b", "recordType": "Photo", "zoneID": {"zoneName": "Album"}, "fields": {"image": {"value": {"$file": \(Self.quoted(secondFile)), "contentType": "text/plain"}}, "n": 2}}
            """)
        let imported = try KQueryBinary.run(["import", "--db", db, "--user", "_u", "--records", records])
        #expect(imported.status == 0, "\(imported.standardError)")
        #expect(imported.standardOutput.hasPrefix("imported 2 records"))
        for (name, expected) in [("a", first), ("b", second)] {
            let out = TemporaryFiles.path("kquery-asset-out")
            let get = try KQueryBinary.run(["asset", "get", "--db", db, "--user", "_u", "--zone", "Album", "--out", out, name, "image"])
            #expect(get.status == 0, "\(name): \(get.standardError)")
            #expect(Self.contents(out) == expected, "\(name)")
        }
        // Both receipts were spent by the import (collected); the bytes are referred to (kept).
        let collect = try KQueryBinary.run(["asset", "collect", "--db", db])
        #expect(collect.status == 0, "\(collect.standardError)")
        #expect(try json(collect) == JSON.object([("blobs", .int(0)), ("bytes", .int(0)), ("uploads", .int(0)), ("receipts", .int(2))]))
    }

    /// The shell's `.save` takes `$file` values in a container file; `asset get` reads them back.
    @Test func shellSaveUploadsFiles() throws {
        let db = ContainerCommandLineTests.temporaryPath("assets-shell")
        let bytes = Self.bytes(3 << 19, seed: 6)
        let path = try Self.file(bytes, suffix: ".jpg")
        let session = try KQueryBinary.run([], input: """
            .open \(db)
            .user _alice
            .save {"recordName": "s1", "recordType": "Photo", "fields": {"image": {"value": {"$file": \(Self.quoted(path))}}}}
            .save {"recordName": "s2", "recordType": "Photo", "fields": {"image": {"value": {"$file": "/nonexistent/x.jpg"}}}}

            """)
        #expect(session.standardError.contains("/nonexistent/x.jpg: cannot read the file"), "\(session.standardError)")
        let out = TemporaryFiles.path("kquery-asset-out")
        let get = try KQueryBinary.run(["asset", "get", "--db", db, "--user", "_alice", "--out", out, "s1", "image"])
        #expect(get.status == 0, "\(get.standardError)")
        #expect(Self.contents(out) == bytes)
        let missing = try KQueryBinary.run(["asset", "get", "--db", db, "--user", "_alice", "--out", out, "s2", "image"])
        #expect(missing.status == 1, "the failed save saved nothing")
    }

    /// `kquery asset collect` removes what nothing refers to once its time is up, and says so as JSON.
    @Test func collectReportsWhatItRemoved() throws {
        let db = ContainerCommandLineTests.temporaryPath("assets-collect")
        let bytes = Self.bytes(2 << 20, seed: 7)
        let path = try Self.file(bytes)
        #expect(try KQueryBinary.run(["modify", "--db", db, "-"], input: """
            {"operationType": "create", "record": {"recordName": "c1", "recordType": "Photo", "fields": {"image": {"value": {"$file": \(Self.quoted(path))}}}}}
            """).status == 0)
        #expect(try KQueryBinary.run(["modify", "--db", db, "-"], input: #"{"operationType": "forceDelete", "record": {"recordName": "c1"}}"#).status == 0)
        // Within the grace period the bytes stay; the spent receipt goes.
        var collect = try KQueryBinary.run(["asset", "collect", "--db", db])
        #expect(collect.status == 0, "\(collect.standardError)")
        #expect(try json(collect) == JSON.object([("blobs", .int(0)), ("bytes", .int(0)), ("uploads", .int(0)), ("receipts", .int(1))]))
        // A day and a bit later (a container whose clock is ahead), they go.
        do {
            let later = Int64(Date().timeIntervalSince1970 * 1000) + AssetPolicy().gracePeriod + 60_000
            let container = try Container(containerIdentifier: "iCloud.kquery.local", path: db, clock: { later })
            let collected = try container.collectAssets()
            #expect(collected.blobs == 1 && collected.bytes == Int64(bytes.count), "\(collected)")
        }
        collect = try KQueryBinary.run(["asset", "collect", "--db", db])
        #expect(collect.status == 0)
        #expect(try json(collect) == JSON.object([("blobs", .int(0)), ("bytes", .int(0)), ("uploads", .int(0)), ("receipts", .int(0))]))
    }
}
