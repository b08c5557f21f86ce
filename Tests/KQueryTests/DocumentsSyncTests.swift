import Foundation
import KQuery
import KQueryContainer
import KQueryDocuments
import KQueryTestSupport
import Testing

/// Devices of one user, each a folder synced through one container in this process.
struct DocumentDevices {
    let container: Container
    let user = "_alice"

    init() throws { container = try Container(containerIdentifier: "iCloud.com.example.documents") }

    func device(_ name: String, policy: UbiquityContainer.DownloadPolicy = .all, directory: String? = nil) throws -> UbiquityContainer {
        let folder = directory ?? TemporaryFiles.path("drive-\(name)")
        return try UbiquityContainer(directory: folder, transport: ContainerDocumentsTransport(container: container, user: user), deviceName: name,
                                     downloadPolicy: policy)
    }
}

@Suite struct DocumentsSyncTests {
    @Test func twoDevicesConvergeThroughCreateEditRenameMoveAndDelete() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone")
        try putFile(a.directory, "Documents/notes.txt", "first", modified: 1_000)
        try putFile(a.directory, "Documents/Trips/plan.md", "# plan", modified: 1_000)
        try putFile(a.directory, "Documents/Report.pages/Index.xml", "<index/>", modified: 1_000)
        try putFile(a.directory, "Documents/Report.pages/Data/image.png", [1, 2, 3], modified: 1_000)
        try putFile(a.directory, "Library/state.json", "{}", modified: 1_000)
        try putFile(a.directory, "Documents/cache.nosync/big.bin", "local only", modified: 1_000)
        try await a.sync()
        try await b.sync()
        var expected = folderTree(a.directory)
        expected = expected.filter { !$0.key.contains(".nosync") }
        #expect(folderTree(b.directory) == expected)
        #expect(folderTree(b.directory)["Documents/cache.nosync"] == nil)

        // Edit on B, rename and move on A, delete a folder on B.
        try putFile(b.directory, "Documents/notes.txt", "second", modified: 2_000)
        try FileManager.default.moveItem(atPath: a.directory + "/Documents/Trips/plan.md", toPath: a.directory + "/Documents/plan-2027.md")
        try FileManager.default.removeItem(atPath: b.directory + "/Library")
        try await b.sync()
        try await a.sync()
        try await b.sync()
        let treeA = folderTree(a.directory).filter { !$0.key.contains(".nosync") }
        #expect(treeA == folderTree(b.directory))
        #expect(treeA["Documents/notes.txt"] == .some(Array("second".utf8)))
        #expect(treeA["Documents/plan-2027.md"] == .some(Array("# plan".utf8)))
        #expect(treeA["Documents/Trips/plan.md"] == nil)
        #expect(treeA["Library"] == nil)
        #expect(try await a.hasUnresolvedConflicts(at: "Documents/notes.txt") == false)
    }

    @Test func offlineEditsBecomeTheSameConflictOnEveryDeviceAndResolveEverywhere() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone")
        let c = try devices.device("ipad")
        try putFile(a.directory, "Documents/list.txt", "milk", modified: 1_000)
        try await a.sync()
        try await b.sync()
        try await c.sync()
        // Both offline: A edits later than B, but B syncs first.
        try putFile(a.directory, "Documents/list.txt", "milk, eggs", modified: 3_000)
        try putFile(b.directory, "Documents/list.txt", "milk, bread", modified: 2_000)
        try await b.sync()
        try await a.sync()
        try await b.sync()
        try await c.sync()
        var currents: [FileVersion?] = []
        var others: [[FileVersion]] = []
        for device in [a, b, c] {
            #expect(try String(contentsOfFile: device.directory + "/Documents/list.txt", encoding: .utf8) == "milk, eggs")
            #expect(try await device.documentState(at: "Documents/list.txt") == .inConflict)
            var current = try await device.currentVersionOfItem(at: "Documents/list.txt")
            current?.hasLocalContents = true
            currents.append(current)
            others.append(try await device.otherVersionsOfItem(at: "Documents/list.txt"))
        }
        #expect(Set(currents).count == 1)
        #expect(others[0].count == 1 && Set(others.map { $0 }).count == 1)
        #expect(others[0].first?.localizedNameOfSavingComputer == "iphone")
        #expect(others[0].first?.isConflict == true && others[0].first?.isResolved == false)
        #expect(DocumentState.inConflict.rawValue == 2 && DocumentState.closed.rawValue == 1)

        // The current version cannot be removed; isResolved cannot go back to false.
        await #expect(throws: DocumentsError.self) { try await c.remove(version: FileVersion.currentIdentifier, at: "Documents/list.txt") }
        let loser = try #require(others[0].first)
        await #expect(throws: DocumentsError.self) { try await c.setResolved(false, version: loser.persistentIdentifier, at: "Documents/list.txt") }

        // C keeps the losing version; every device ends with it current and no conflict.
        try await c.resolve("Documents/list.txt", keep: loser.persistentIdentifier)
        try await a.sync()
        try await b.sync()
        for device in [a, b, c] {
            #expect(try String(contentsOfFile: device.directory + "/Documents/list.txt", encoding: .utf8) == "milk, bread")
            #expect(try await device.unresolvedConflictVersionsOfItem(at: "Documents/list.txt") == [])
            #expect(try await device.otherVersionsOfItem(at: "Documents/list.txt") == [])
            #expect(try await device.documentState(at: "Documents/list.txt") == .normal)
        }
        #expect(try await a.unresolvedConflictVersionsOfItem(at: "Documents/missing.txt") == nil)
    }

    @Test func twoCreationsUnderOneNameAreOneItemWithAConflict() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone")
        try putFile(a.directory, "Documents/todo.txt", "from the mac", modified: 1_000)
        try putFile(b.directory, "Documents/todo.txt", "from the phone", modified: 1_500)
        try await a.sync()
        try await b.sync()
        try await a.sync()
        for device in [a, b] {
            #expect(try String(contentsOfFile: device.directory + "/Documents/todo.txt", encoding: .utf8) == "from the phone")
            #expect(try await device.otherVersionsOfItem(at: "Documents/todo.txt").map(\.localizedNameOfSavingComputer) == ["mac"])
        }
    }

    @Test func aSmallEditSendsOnlyTheChangedChunks() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone")
        var bytes = documentBytes(count: 4_000_000, seed: 5)
        try putFile(a.directory, "Documents/video.mov", bytes, modified: 1_000)
        let first = try await a.sync()
        #expect(first.chunksUploaded == Chunker.chunks(bytes).count)
        try await b.sync()
        bytes.insert(7, at: 2_000_000)
        try putFile(a.directory, "Documents/video.mov", bytes, modified: 2_000)
        let edit = try await a.sync()
        #expect(edit.itemsUploaded == 1 && edit.chunksUploaded >= 1 && edit.chunksUploaded <= 2, "\(edit)")
        let download = try await b.sync()
        #expect(download.chunksDownloaded >= 1 && download.chunksDownloaded <= 2, "\(download)")
        #expect(FileManager.default.contents(atPath: b.directory + "/Documents/video.mov").map { [UInt8]($0) } == bytes)
    }

    @Test func changingOneFileOfALargePackageUploadsOnlyThatFile() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone")
        for index in 0..<200 { try putFile(a.directory, "Documents/Album.package/page\(index).txt", "page \(index)", modified: 1_000) }
        let first = try await a.sync()
        #expect(first.itemsUploaded == 202)
        try await b.sync()
        try putFile(a.directory, "Documents/Album.package/page42.txt", "page forty-two", modified: 2_000)
        let edit = try await a.sync()
        #expect(edit.itemsUploaded == 1 && edit.chunksUploaded == 1, "\(edit)")
        let download = try await b.sync()
        #expect(download.itemsDownloaded == 1, "\(download)")
        #expect(try String(contentsOfFile: b.directory + "/Documents/Album.package/page42.txt", encoding: .utf8) == "page forty-two")
        #expect(try await b.status().first { $0.path == "Documents/Album.package" }?.kind == .package)
    }

    @Test func placeholdersUntilDownloadAndEvictionBackToPlaceholder() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone", policy: .onDemand)
        try putFile(a.directory, "Documents/book.pdf", "%PDF-1.7", modified: 1_000)
        try await a.sync()
        try await b.sync()
        let path = b.directory + "/Documents/book.pdf"
        #expect(!FileManager.default.fileExists(atPath: path))
        var status = try #require(try await b.status().first { $0.path == "Documents/book.pdf" })
        #expect(status.downloadingStatus == .notDownloaded && status.size == 8 && status.contentType == "com.adobe.pdf")
        _ = try await b.download("Documents/book.pdf")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "%PDF-1.7")
        status = try #require(try await b.status().first { $0.path == "Documents/book.pdf" })
        #expect(status.downloadingStatus == .current && status.isUploaded)
        // A downloaded file follows later edits.
        try putFile(a.directory, "Documents/book.pdf", "%PDF-2.0", modified: 2_000)
        try await a.sync()
        try await b.sync()
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "%PDF-2.0")
        try await b.evict("Documents/book.pdf")
        #expect(!FileManager.default.fileExists(atPath: path))
        try await b.sync()
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try await b.status().first { $0.path == "Documents/book.pdf" }?.downloadingStatus == .notDownloaded)
        #expect(try await a.status().first { $0.path == "Documents/book.pdf" } != nil)
        // An edit not uploaded yet is never evicted.
        try putFile(a.directory, "Documents/book.pdf", "%PDF-3.0", modified: 3_000)
        await #expect(throws: DocumentsError.self) { try await a.evict("Documents/book.pdf") }
    }

    @Test func hostileNamesFromTheServerAreNeverWrittenOutsideTheFolder() async throws {
        let devices = try DocumentDevices()
        let writer = try devices.device("mac")
        try await writer.sync()
        let outside = TemporaryFiles.path("drive-outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let zone = ZoneID(zoneName: UbiquityContainer.zoneName)
        let database = try devices.container.database(.private, user: devices.user)
        let names = ["..", ".", "", "a/../../escape.txt", "nul\0name.txt", String(repeating: "x", count: 10_000), "/etc/passwd", "Notes.txt", "notes.txt"]
        var operations: [RecordOperation] = []
        for (index, name) in names.enumerated() {
            let item = ItemRecord(id: "hostile-\(index)", name: name, parent: nil, kind: .file, size: 0, contentType: "public.data", creationDate: 1,
                                  contentChangeDate: 1, contentHash: "", chunks: [], savingComputer: "attacker")
            operations.append(RecordOperation(kind: .create, record: item.record(zoneID: zone)))
        }
        // A child of a file, and a loop of two folders.
        operations.append(RecordOperation(kind: .create, record: ItemRecord(id: "child", name: "c.txt", parent: "hostile-7", kind: .file, size: 0,
            contentType: "public.data", creationDate: 1, contentChangeDate: 1, contentHash: "", chunks: [], savingComputer: "x").record(zoneID: zone)))
        for (id, parent) in [("loop-1", "loop-2"), ("loop-2", "loop-1")] {
            operations.append(RecordOperation(kind: .create, record: ItemRecord(id: id, name: id, parent: parent, kind: .folder, size: 0,
                contentType: "public.folder", creationDate: 1, contentChangeDate: 1, contentHash: "", chunks: [], savingComputer: "x").record(zoneID: zone)))
        }
        _ = try database.modify(operations, atomic: false)
        let reader = try devices.device("iphone", directory: outside + "/folder")
        try await reader.sync()
        // Beside the folder: only the folder and its own sync state.
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).filter { !$0.hasPrefix(".folder.kquerydocs") } == ["folder"])
        // Of the case-only twins exactly one is written.
        #expect(Set(folderTree(reader.directory).keys) == ["Notes.txt"])
        #expect(!FileManager.default.fileExists(atPath: (outside as NSString).deletingLastPathComponent + "/escape.txt"))
    }

    /// A case-only rename made on one device is a rename of the one item everywhere: never both
    /// names, never a second item.
    @Test func aCaseOnlyRenameIsOneItemRenamed() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone", policy: .all)
        try putFile(a.directory, "Documents/Notes.txt", "notes", modified: 1_000)
        try await a.sync()
        try await b.sync()
        let database = try devices.container.database(.private, user: devices.user)
        func files() throws -> [String: String] {
            let changes = try database.zoneChanges(ZoneID(zoneName: UbiquityContainer.zoneName), since: nil)
            var files: [String: String] = [:]
            for case .changed(let record) in changes.changes where record.recordType == ItemRecord.recordType {
                if let item = try? ItemRecord(record: record), item.kind == .file { files[item.id] = item.name }
            }
            return files
        }
        let before = try files()
        try FileManager.default.moveItem(atPath: a.directory + "/Documents/Notes.txt", toPath: a.directory + "/Documents/notes.txt")
        try await a.sync()
        try await b.sync()
        #expect(Set(folderTree(b.directory).keys) == ["Documents", "Documents/notes.txt"])
        #expect(try await b.status().filter { $0.kind == .file }.map(\.path) == ["Documents/notes.txt"])
        let after = try files()
        #expect(before.count == 1 && after == [before.keys.first ?? "": "notes.txt"], "\(before) \(after)")
    }

    @Test func aLosingEditStaysOnDiskUntilTheServerHoldsItAsAVersion() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        try putFile(a.directory, "Documents/list.txt", "milk", modified: 1_000)
        try await a.sync()
        let folder = TemporaryFiles.path("drive-iphone")
        let working = ContainerDocumentsTransport(container: devices.container, user: devices.user)
        try await UbiquityContainer(directory: folder, transport: working, deviceName: "iphone", downloadPolicy: .all).sync()
        // Both edit offline; the phone's edit is older, so it loses.
        try putFile(a.directory, "Documents/list.txt", "milk, eggs", modified: 3_000)
        try await a.sync()
        try putFile(folder, "Documents/list.txt", "milk, bread", modified: 2_000)
        // The connection drops when the phone sends its losing edit as a version.
        let dropping = try UbiquityContainer(directory: folder, transport: DroppingVersions(base: working), deviceName: "iphone", downloadPolicy: .all)
        await #expect(throws: DocumentsError.self) { try await dropping.sync() }
        #expect(try String(contentsOfFile: folder + "/Documents/list.txt", encoding: .utf8) == "milk, bread")
        // With the server back, the edit becomes the conflict version and the winner is written.
        let phone = try UbiquityContainer(directory: folder, transport: working, deviceName: "iphone", downloadPolicy: .all)
        try await phone.sync()
        #expect(try String(contentsOfFile: folder + "/Documents/list.txt", encoding: .utf8) == "milk, eggs")
        let loser = try #require(try await phone.otherVersionsOfItem(at: "Documents/list.txt").first)
        #expect(loser.localizedNameOfSavingComputer == "iphone")
        try await phone.resolve("Documents/list.txt", keep: loser.persistentIdentifier)
        #expect(try String(contentsOfFile: folder + "/Documents/list.txt", encoding: .utf8) == "milk, bread")
    }

    @Test func killedBetweenWritingAndRecordingFindsTheSameEditAgain() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        try putFile(a.directory, "Documents/a.txt", "one", modified: 1_000)
        try await a.sync()
        // The server took a save whose answer this device never recorded (kill -9 after the
        // modify): the next sync adopts it, with no duplicate and no conflict.
        let other = try devices.device("mac", directory: TemporaryFiles.path("drive-copy"))
        try await other.sync()
        try putFile(other.directory, "Documents/a.txt", "two", modified: 2_000)
        try await other.sync()
        try putFile(a.directory, "Documents/a.txt", "two", modified: 2_000)
        try await a.sync()
        #expect(try await a.otherVersionsOfItem(at: "Documents/a.txt") == [])
        #expect(try await a.status().map(\.path) == ["Documents", "Documents/a.txt"])
    }
}

/// A transport whose connection drops whenever a modify carries a document version.
private struct DroppingVersions: DocumentsTransport {
    let base: ContainerDocumentsTransport
    var zoneID: ZoneID { base.zoneID }
    func prepare(device: String) async throws(DocumentsError) { try await base.prepare(device: device) }
    func fetchChanges(since token: String?) async throws(DocumentsError) -> DocumentChanges { try await base.fetchChanges(since: token) }
    func existing(_ recordNames: [String]) async throws(DocumentsError) -> Set<String> { try await base.existing(recordNames) }
    func modify(_ operations: [RecordOperation], device: String) async throws(DocumentsError) -> [RecordResult] {
        if operations.contains(where: { $0.record.recordType == VersionRecord.recordType }) { throw DocumentsError(.syncFailed, "connection lost") }
        return try await base.modify(operations, device: device)
    }
    func uploadChunks(_ chunks: [(hash: String, bytes: [UInt8])]) async throws(DocumentsError) -> [FieldValue] { try await base.uploadChunks(chunks) }
    func downloadChunks(_ hashes: [String]) async throws(DocumentsError) -> [[UInt8]] { try await base.downloadChunks(hashes) }
    func waitForChange(device: String) async {}
    func stopListening() {}
}
