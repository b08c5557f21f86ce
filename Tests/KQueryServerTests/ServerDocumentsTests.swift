import Foundation
import KQuery
import KQueryDocuments
import KQueryServer
import KQueryTestSupport
import Testing

/// iCloud Documents against a real `kquery serve` on loopback: devices through the library's Web
/// Services transport and through `kquery drive`, and kill -9 in the middle of transfers.
@Suite(.serialized) struct ServerDocumentsTests {
    static let containerID = "iCloud.com.example.drive"

    /// A running server and what a device needs to reach it.
    struct Server {
        let process: SpawnedProcess
        let port: Int
        let token: String

        func device(_ name: String, directory: String? = nil, policy: UbiquityContainer.DownloadPolicy = .all) throws -> UbiquityContainer {
            let transport = WebServicesDocumentsTransport(server: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: containerID, apiToken: "t",
                                                          webAuthToken: token)
            return try UbiquityContainer(directory: directory ?? TemporaryFiles.path("drive-\(name)"), transport: transport, deviceName: name,
                                         downloadPolicy: policy)
        }

        var flags: [String] { ["--server", "http://127.0.0.1:\(port)", "--api-token", "t", "--web-auth-token", token, "--container", containerID] }

        func stop() {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    static func start(_ data: String = TemporaryFiles.path("drive-serve")) throws -> Server {
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let secret = try ServerSecret(directory: data)
        let (process, port) = try ServerProcessTests.startServer(directory: data)
        return Server(process: process, port: port, token: secret.webAuthToken(user: "_d"))
    }

    /// `kquery drive ARGUMENTS` to its end, waited for off the concurrency pool.
    static func drive(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
        try await offThePool { try driveNow(arguments) }
    }

    private static func driveNow(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
        let process = SpawnedProcess()
        process.executableURL = ServerKeyValueStoreProcessTests.kquery
        process.environment = Process.kqueryEnvironment
        process.arguments = ["drive"] + arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self), String(decoding: errors, as: UTF8.self))
    }

    @Test func threeDevicesConvergeAndShareOneConflict() async throws {
        let server = try Self.start()
        defer { server.stop() }
        let devices = try ["mac", "iphone", "ipad"].map { try server.device($0) }
        try putFile(devices[0].directory, "Documents/a.txt", "a", modified: 1_000)
        try putFile(devices[1].directory, "Documents/Folder/b.txt", "b", modified: 1_000)
        try putFile(devices[2].directory, "Documents/Deck.key/slide1.xml", "<s/>", modified: 1_000)
        for _ in 0..<2 { for device in devices { try await device.sync() } }
        let tree = folderTree(devices[0].directory)
        #expect(tree.count == 6, "\(tree.keys.sorted())")
        for device in devices { #expect(folderTree(device.directory) == tree) }

        // Offline edits on two devices, then a rename and a delete on the third.
        try putFile(devices[0].directory, "Documents/a.txt", "a from the mac", modified: 2_000)
        try putFile(devices[1].directory, "Documents/a.txt", "a from the phone", modified: 2_500)
        try FileManager.default.moveItem(atPath: devices[2].directory + "/Documents/Folder/b.txt", toPath: devices[2].directory + "/Documents/b.txt")
        try FileManager.default.removeItem(atPath: devices[2].directory + "/Documents/Deck.key/slide1.xml")
        for _ in 0..<2 { for device in devices { try await device.sync() } }
        let after = folderTree(devices[0].directory)
        for device in devices {
            #expect(folderTree(device.directory) == after)
            #expect(try await device.otherVersionsOfItem(at: "Documents/a.txt").map(\.localizedNameOfSavingComputer) == ["mac"])
        }
        #expect(after["Documents/a.txt"] == .some(Array("a from the phone".utf8)))
        #expect(after["Documents/b.txt"] != nil && after["Documents/Folder/b.txt"] == nil && after["Documents/Deck.key/slide1.xml"] == nil)

        try await devices[2].resolve("Documents/a.txt")
        for device in devices {
            try await device.sync()
            #expect(try await device.hasUnresolvedConflicts(at: "Documents/a.txt") == false)
            #expect(try await device.otherVersionsOfItem(at: "Documents/a.txt").isEmpty)
        }
    }

    @Test func driveCommandsSyncReportAndRefuse() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ServerKeyValueStoreProcessTests.kquery.path), "build kquery first")
        let server = try Self.start()
        defer { server.stop() }
        let a = TemporaryFiles.path("drive-cli-a")
        let b = TemporaryFiles.path("drive-cli-b")
        var bytes = documentBytes(count: 20_000_000, seed: 20)
        try putFile(a, "Documents/big.bin", bytes, modified: 1_000)
        try putFile(a, "Documents/notes.txt", "hello", modified: 1_000)
        let first = try await Self.drive(["sync", a, "--stats", "--device-name", "mac"] + server.flags)
        #expect(first.status == 0, "\(first.error)")
        let firstStats = try JSON.parse(first.output.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(firstStats["itemsUploaded"] == .int(3) && (firstStats["chunksUploaded"]?.int64Value ?? 0) > 100, "\(first.output)")

        // A 1-byte insertion in the middle of 20 MB: at most 2 chunks cross.
        bytes.insert(1, at: 10_000_000)
        try putFile(a, "Documents/big.bin", bytes, modified: 2_000)
        let edit = try await Self.drive(["sync", a, "--stats", "--device-name", "mac"] + server.flags)
        let editStats = try JSON.parse(edit.output.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(editStats["itemsUploaded"] == .int(1) && (1...2).contains(editStats["chunksUploaded"]?.int64Value ?? 0), "\(edit.output)")

        // A second device on demand: placeholders, then a download.
        #expect(try await Self.drive(["sync", b, "--device-name", "phone", "--download", "on-demand"] + server.flags).status == 0)
        let status = try await Self.drive(["status", b, "Documents/big.bin"] + server.flags)
        let line = try JSON.parse(status.output.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(line["downloadingStatus"] == .string("NSURLUbiquitousItemDownloadingStatusNotDownloaded") && line["size"] == .int(20_000_001))
        #expect(try await Self.drive(["download", b, "Documents/big.bin"] + server.flags).status == 0)
        #expect(FileManager.default.contents(atPath: b + "/Documents/big.bin").map { [UInt8]($0) } == bytes)
        #expect(try await Self.drive(["evict", b, "Documents/big.bin"] + server.flags).status == 0)
        #expect(!FileManager.default.fileExists(atPath: b + "/Documents/big.bin"))

        let versions = try await Self.drive(["versions", b, "Documents/notes.txt"] + server.flags)
        #expect(versions.status == 0, "\(versions.error)")
        let versionsJSON = try JSON.parse(versions.output)
        #expect(versionsJSON["current"]?["id"] == .string("current"), "\(versions.output)")
        let refused = try await Self.drive(["evict", b, "Documents/missing.txt"] + server.flags)
        #expect(refused.status == 1 && refused.error.contains("refused"), "\(refused.error)")
        #expect(try await Self.drive(["sync", b, "--download", "sometimes"] + server.flags).status == 2)
        #expect(try await Self.drive(["sync", b, "--container", Self.containerID]).status == 2)
        #expect(try await Self.drive(["resolve", b, "Documents/notes.txt", "--keep", "v-nope"] + server.flags).status == 1)
    }

    /// `kquery drive sync` killed with SIGKILL at random moments while it uploads (and another
    /// while it downloads): once a sync finishes, every device holds the same files, once each,
    /// with no conflict made by the kills.
    @Test func killedDuringUploadAndDownloadNeitherLosesNorDuplicates() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ServerKeyValueStoreProcessTests.kquery.path), "build kquery first")
        let server = try Self.start()
        defer { server.stop() }
        let a = TemporaryFiles.path("drive-kill-a")
        let b = TemporaryFiles.path("drive-kill-b")
        for index in 0..<8 { try putFile(a, "Documents/file\(index).bin", documentBytes(count: 1_500_000, seed: UInt64(index + 1)), modified: 1_000 + index) }
        for index in 0..<30 { try putFile(a, "Documents/small/\(index).txt", "small \(index)", modified: 1_000) }
        var generator = SystemRandomNumberGenerator()
        for (folder, name) in [(a, "mac"), (b, "phone")] {
            for _ in 0..<6 {
                let process = SpawnedProcess()
                process.executableURL = ServerKeyValueStoreProcessTests.kquery
                process.environment = Process.kqueryEnvironment
                process.arguments = ["drive", "sync", folder, "--device-name", name, "--download", "all"] + server.flags
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                try await Task.sleep(for: .milliseconds(Int.random(in: 50...400, using: &generator)))
                kill(process.processIdentifier, SIGKILL)
                try await offThePool { process.waitUntilExit() }
            }
            let done = try await Self.drive(["sync", folder, "--device-name", name, "--download", "all"] + server.flags)
            #expect(done.status == 0, "\(done.error)")
        }
        #expect(try await Self.drive(["sync", a, "--device-name", "mac"] + server.flags).status == 0)
        #expect(folderTree(a) == folderTree(b))
        #expect(folderTree(a).count == 8 + 30 + 2)
        let status = try await Self.drive(["status", a] + server.flags)
        let lines = status.output.split(separator: "\n")
        #expect(lines.count == 8 + 30 + 2)
        #expect(!status.output.contains("\"hasUnresolvedConflicts\":true"))
        // No half-written download is left beside either folder.
        for folder in [a, b] {
            let staging = UbiquityContainer.statePath(for: folder) + "-staging"
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []).isEmpty)
        }
    }

    /// The server killed with SIGKILL at random moments while one device uploads to it and
    /// another downloads from it: restarted on the same data, a sync finishes on each and both
    /// hold the same files, once each, with no conflict made by the kills.
    @Test func serverKilledDuringUploadAndDownloadLosesNothing() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ServerKeyValueStoreProcessTests.kquery.path), "build kquery first")
        let data = TemporaryFiles.path("drive-serve-killed")
        let a = TemporaryFiles.path("drive-server-kill-a")
        let b = TemporaryFiles.path("drive-server-kill-b")
        for index in 0..<8 { try putFile(a, "Documents/file\(index).bin", documentBytes(count: 1_500_000, seed: UInt64(index + 21)), modified: 1_000 + index) }
        for index in 0..<30 { try putFile(a, "Documents/small/\(index).txt", "small \(index)", modified: 1_000) }
        var generator = SystemRandomNumberGenerator()
        for (folder, name) in [(a, "mac"), (b, "phone")] {
            for _ in 0..<4 {
                let server = try Self.start(data)
                let sync: Task<UbiquityContainer.Statistics, any Error>
                do {
                    let device = try server.device(name, directory: folder)
                    sync = Task { try await device.sync() }
                    try await Task.sleep(for: .milliseconds(Int.random(in: 30...300, using: &generator)))
                } catch {
                    // The server is stopped on every way out, a failed step's included.
                    server.stop()
                    throw error
                }
                server.stop()
                // Failed with the server, or done before it went.
                _ = await sync.result
            }
        }
        let server = try Self.start(data)
        defer { server.stop() }
        try await server.device("mac", directory: a).sync()
        try await server.device("phone", directory: b).sync()
        try await server.device("mac", directory: a).sync()
        #expect(folderTree(a) == folderTree(b))
        #expect(folderTree(a).count == 8 + 30 + 2)
        for (folder, name) in [(a, "mac"), (b, "phone")] {
            let items = try await server.device(name, directory: folder).status()
            #expect(items.count == 8 + 30 + 2)
            #expect(!items.contains { $0.hasUnresolvedConflicts || !$0.isUploaded })
        }
    }

    /// A metadata query on a watching device lists another device's edit: the server pushes the
    /// change through the web courier and the watcher syncs (no timed assertion: within 20 s).
    @Test func aWatchingQueryListsAnotherDevicesEditThroughAPush() async throws {
        let server = try Self.start()
        defer { server.stop() }
        let editor = try server.device("mac")
        let watcher = try server.device("phone")
        try putFile(editor.directory, "Documents/notes.txt", "first", modified: 1_000)
        try await editor.sync()
        try await watcher.sync()
        let query = try MetadataQuery(predicate: "kMDItemFSName LIKE '*.txt'")
        query.notificationBatchingInterval = .zero
        let notes = Locked<[MetadataQueryNotification]>([])
        let querying = Task { await query.run(on: watcher) { note in notes.withLock { $0.append(note) } } }
        let watching = Task { await watcher.watch() }
        defer {
            watching.cancel()
            watcher.stopListening()
            querying.cancel()
        }
        try putFile(editor.directory, "Documents/notes.txt", "second", modified: 2_000)
        try putFile(editor.directory, "Documents/todo.txt", "new", modified: 2_000)
        try await editor.sync()
        func listed() -> (added: Set<String>, changed: Set<String>) {
            notes.withLock { notes in
                var added: Set<String> = [], changed: Set<String> = []
                for case .didUpdate(let a, let c, _) in notes {
                    added.formUnion(a.map(\.relativePath))
                    changed.formUnion(c.map(\.relativePath))
                }
                return (added, changed)
            }
        }
        let deadline = ContinuousClock.now.advanced(by: .seconds(20))
        while ContinuousClock.now < deadline, listed().added.isEmpty || listed().changed.isEmpty {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(listed().added == ["Documents/todo.txt"] && listed().changed == ["Documents/notes.txt"], "\(listed())")
        #expect(try String(contentsOfFile: watcher.directory + "/Documents/notes.txt", encoding: .utf8) == "second")
        notes.withLock { notes in
            #expect(notes.first.map { if case .didStartGathering = $0 { true } else { false } } == true)
        }
    }

    /// `kquery drive sync --watch` and `kquery drive query --watch`: one device's edits reach the
    /// other's folder and query output while both run.
    @Test func driveWatchAndQueryFollowAnotherDevice() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ServerKeyValueStoreProcessTests.kquery.path), "build kquery first")
        let server = try Self.start()
        defer { server.stop() }
        let a = TemporaryFiles.path("drive-watch-a")
        let b = TemporaryFiles.path("drive-watch-b")
        try putFile(a, "Documents/one.txt", "one", modified: 1_000)
        #expect(try await Self.drive(["sync", a, "--device-name", "mac"] + server.flags).status == 0)

        let watcher = SpawnedProcess()
        watcher.executableURL = ServerKeyValueStoreProcessTests.kquery
        watcher.environment = Process.kqueryEnvironment
        watcher.arguments = ["drive", "sync", b, "--watch", "--download", "all", "--device-name", "phone"] + server.flags
        watcher.standardOutput = FileHandle.nullDevice
        watcher.standardError = FileHandle.nullDevice
        try watcher.run()
        defer {
            kill(watcher.processIdentifier, SIGKILL)
            watcher.waitUntilExit()
        }
        let query = SpawnedProcess()
        query.executableURL = ServerKeyValueStoreProcessTests.kquery
        query.environment = Process.kqueryEnvironment
        query.arguments = ["drive", "query", TemporaryFiles.path("drive-watch-c"), "--watch", "8", "--device-name", "ipad", "--sort", "kMDItemFSName"]
            + server.flags + ["kMDItemFSName LIKE '*.txt'"]
        let output = Pipe()
        query.standardOutput = output
        query.standardError = FileHandle.nullDevice
        try query.run()
        func exists(_ path: String) async throws -> Bool {
            for _ in 0..<200 where !FileManager.default.fileExists(atPath: path) { try await Task.sleep(for: .milliseconds(50)) }
            return FileManager.default.fileExists(atPath: path)
        }
        #expect(try await exists(b + "/Documents/one.txt"))
        try await Task.sleep(for: .seconds(2))
        try putFile(a, "Documents/two.txt", "two", modified: 2_000)
        #expect(try await Self.drive(["sync", a, "--device-name", "mac"] + server.flags).status == 0)
        #expect(try await exists(b + "/Documents/two.txt"))
        let text = try await offThePool { () -> String in
            let data = output.fileHandleForReading.readDataToEndOfFile()
            query.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
        let lines = try text.split(separator: "\n").map { try JSON.parse(String($0)) }
        #expect(lines.map { $0["notification"]?.stringValue ?? "" }.prefix(3) == ["gathering", "progress", "finished"], "\(text)")
        #expect(lines.first { $0["notification"] == .string("finished") }?["results"]?.arrayElements?.count == 1, "\(text)")
        let update = lines.first { $0["notification"] == .string("update") }
        #expect(update?["added"]?[0]?["path"] == .string("Documents/two.txt"), "\(text)")
    }

    /// `kquery drive --db FILE --user NAME`: two folders synced through a container file, no server.
    @Test func driveSyncsThroughAContainerFile() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ServerKeyValueStoreProcessTests.kquery.path), "build kquery first")
        let file = TemporaryFiles.path("drive-db") + ".kquery"
        let a = TemporaryFiles.path("drive-db-a")
        let b = TemporaryFiles.path("drive-db-b")
        let flags = ["--db", file, "--user", "_me", "--container", Self.containerID]
        try putFile(a, "Documents/Folder/note.txt", "from a", modified: 1_000)
        let first = try await Self.drive(["sync", a, "--device-name", "mac", "--stats"] + flags)
        #expect(first.status == 0, "\(first.error)")
        let second = try await Self.drive(["sync", b, "--device-name", "phone", "--download", "all"] + flags)
        #expect(second.status == 0, "\(second.error)")
        #expect(try String(contentsOfFile: b + "/Documents/Folder/note.txt", encoding: .utf8) == "from a")
        let status = try await Self.drive(["status", b, "Documents/Folder/note.txt"] + flags)
        #expect(status.output.contains("\"isUploaded\":true"), "\(status.output)")
        #expect(try await Self.drive(["sync", b, "--db", file, "--container", Self.containerID]).status == 2)
    }
}
