import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery
@testable import KQueryContainer

#if canImport(Glibc)
import Glibc
#endif

/// The container commands through the binary: zones, modify, changes, subscriptions, notifications,
/// query and import on a container file, and a modify stream killed with SIGKILL.
@Suite("Container command line")
struct ContainerCommandLineTests {
    static func temporaryPath(_ name: String) -> String {
        let path = TemporaryFiles.path("kquery-\(name)", suffix: ".sqlite")
        // SQLite's companions, which a killed writer leaves.
        for companion in ["-wal", "-shm", "-journal"] { TemporaryFiles.register(path + companion) }
        return path
    }

    static func file(_ contents: String) throws -> String {
        let path = TemporaryFiles.path("kquery-input", suffix: ".json")
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func json(_ run: KQueryBinary.Run) throws -> JSON {
        try JSON.parse(run.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The local-cache workflow of CloudKit's guides, on the command line: zones, a database
    /// subscription, a modify, database changes, zone changes with a token, and the pushes queued.
    @Test func localCacheWorkflow() throws {
        let db = Self.temporaryPath("workflow")
        defer { try? FileManager.default.removeItem(atPath: db) }
        let user = ["--db", db, "--user", "_alice"]

        let zones = try KQueryBinary.run(["zones"] + user + ["--create", "Notes"])
        #expect(zones.status == 0, "\(zones.standardError)")
        #expect(try json(zones)["zones"]?[0]?["zoneID"]?["zoneName"] == .string("Notes"))
        let subscriptions = try Self.file("""
            [{"subscriptionID":"everything","subscriptionType":"database","notificationInfo":{"shouldSendContentAvailable":true}},
             {"subscriptionID":"big","subscriptionType":"query","query":{"recordType":"Note"},"predicate":"words > 10",
              "zoneID":{"zoneName":"Notes"},"notificationInfo":{"alertBody":"A long note"}}]
            """)
        let saved = try KQueryBinary.run(["subscriptions"] + user + ["--save", subscriptions])
        #expect(saved.status == 0, "\(saved.standardError)")
        #expect(try json(saved)["subscriptions"]?[1]?["predicate"] == .string("words > 10"))

        let modify = try KQueryBinary.run(["modify"] + user + ["--zone", "Notes", "-"], input: """
            {"operationType":"create","record":{"recordName":"n1","recordType":"Note","fields":{"words":{"value":40}}}}
            {"operationType":"create","record":{"recordName":"n2","recordType":"Note","fields":{"words":3}}}
            """)
        #expect(modify.status == 0, "\(modify.standardError)")
        let records = try json(modify)["records"]
        #expect(records?[0]?["recordChangeTag"]?.stringValue != nil)
        #expect(records?[1]?["zoneID"]?["zoneName"] == .string("Notes"))

        let database = try KQueryBinary.run(["changes"] + user)
        #expect(database.status == 0, "\(database.standardError)")
        #expect(try json(database)["zones"]?[0]?["zoneID"]?["zoneName"] == .string("Notes"))

        let first = try KQueryBinary.run(["changes"] + user + ["--zone", "Notes", "--limit", "1"])
        let firstJSON = try json(first)
        #expect(firstJSON["moreComing"] == .bool(true))
        #expect(firstJSON["records"]?[0]?["recordName"] == .string("n1"))
        let token = try #require(firstJSON["syncToken"]?.stringValue)
        let rest = try json(try KQueryBinary.run(["changes"] + user + ["--zone", "Notes", "--token", token]))
        #expect(rest["records"]?[0]?["recordName"] == .string("n2"))
        #expect(rest["moreComing"] == .bool(false))

        // Deleting n1 is a deleted record in the next zone changes, with its record type.
        let delete = try KQueryBinary.run(["modify"] + user + ["--zone", "Notes", "-"], input: #"{"operationType":"forceDelete","record":{"recordName":"n1"}}"#)
        #expect(delete.status == 0, "\(delete.standardError)")
        let after = try json(try KQueryBinary.run(["changes"] + user + ["--zone", "Notes", "--token", try #require(rest["syncToken"]?.stringValue)]))
        #expect(after["records"]?.serialized == #"[{"recordName":"n1","recordType":"Note","deleted":true}]"#)

        // The pushes: the database subscription for each modify, the query one for n1's creation and deletion.
        let pending = try KQueryBinary.run(["notifications", "--db", db])
        let lines = try pending.standardOutput.split(separator: "\n").map { try JSON.parse(String($0)) }
        #expect(lines.compactMap { $0["subscriptionID"]?.stringValue }.sorted() == ["big", "big", "everything", "everything"])
        #expect(lines.allSatisfy { $0["payload"]?["ck"]?["cid"] == .string("iCloud.kquery.local") })
        #expect(lines.first { $0["subscriptionID"] == .string("big") }?["payload"]?["ck"]?["qry"]?["dbs"] == .int(2))
        let ids = lines.compactMap { $0["id"]?.int64Value }.map(String.init)
        #expect(try KQueryBinary.run(["notifications", "--db", db] + ids.flatMap { ["--ack", $0] }).status == 0)
        #expect(try KQueryBinary.run(["notifications", "--db", db]).standardOutput.isEmpty)
    }

    @Test func refusalsExitOneWithCloudKitsCodes() throws {
        let db = Self.temporaryPath("refusals")
        defer { try? FileManager.default.removeItem(atPath: db) }
        // A custom zone in the public database.
        let publicZone = try KQueryBinary.run(["zones", "--db", db, "--create", "Z"])
        #expect(publicZone.status == 1)
        #expect(try json(publicZone)["zones"]?[0]?["serverErrorCode"] == .string("BAD_REQUEST"))
        // A record in a zone that does not exist: a per-record error, exit 1.
        let missingZone = try KQueryBinary.run(["modify", "--db", db, "--user", "_u", "--zone", "Nowhere", "-"],
                                               input: #"{"operationType":"create","record":{"recordName":"a","recordType":"T"}}"#)
        #expect(missingZone.status == 1)
        #expect(try json(missingZone)["records"]?[0]?["serverErrorCode"] == .string("ZONE_NOT_FOUND"))
        // An unknown operation type: the body is refused whole, exit 2, nothing written.
        let unknown = try KQueryBinary.run(["modify", "--db", db, "-"], input: #"{"operations":[{"operationType":"upsert","record":{"recordName":"a","recordType":"T"}}]}"#)
        #expect(unknown.status == 2)
        #expect(unknown.standardError.contains("operations[0]: unknown operationType \"upsert\""))
        // Garbage and foreign tokens.
        #expect(try KQueryBinary.run(["zones", "--db", db, "--user", "_u", "--create", "Z"]).status == 0)
        let garbage = try KQueryBinary.run(["changes", "--db", db, "--user", "_u", "--zone", "Z", "--token", "not-a-token"])
        #expect(garbage.status == 1)
        #expect(garbage.standardError.contains("BAD_REQUEST: invalid sync token"))
        let other = try json(try KQueryBinary.run(["changes", "--db", db, "--user", "_u"]))["syncToken"]?.stringValue ?? ""
        let foreign = try KQueryBinary.run(["changes", "--db", db, "--user", "_v", "--token", other])
        #expect(foreign.status == 1)
        #expect(foreign.standardError.contains("invalid sync token"))
        // A private database needs a user; a bad scope is a usage error.
        #expect(try KQueryBinary.run(["zones", "--db", db, "--database", "private"]).status == 2)
        #expect(try KQueryBinary.run(["zones", "--db", db, "--database", "secret"]).status == 2)
        // A database file is not a container file.
        let databaseFile = Self.temporaryPath("database")
        defer { try? FileManager.default.removeItem(atPath: databaseFile) }
        #expect(try KQueryBinary.run(["import", "--db", databaseFile, "--records", Fixtures.url("restaurants.ndjson").path]).status == 0)
        let wrongKind = try KQueryBinary.run(["zones", "--db", databaseFile])
        #expect(wrongKind.status == 2)
        #expect(wrongKind.standardError.contains("not a KQuery container file"))
    }

    /// `import` and `query --db` work on a container file: the public database's default zone
    /// unless --database, --user or --zone say otherwise.
    @Test func importAndQueryAContainerFile() throws {
        let db = Self.temporaryPath("import")
        defer { try? FileManager.default.removeItem(atPath: db) }
        #expect(try KQueryBinary.run(["modify", "--db", db, "-"], input: #"{"operations":[]}"#).status == 0)
        let restaurants = Fixtures.url("restaurants.ndjson").path
        let imported = try KQueryBinary.run(["import", "--db", db, "--records", restaurants])
        #expect(imported.status == 0, "\(imported.standardError)")
        let names = try KQueryBinary.run(["query", "--db", db, "--type", "Restaurant", "--format", "names", "seats > 25"])
        #expect(names.standardOutput.split(separator: "\n").sorted() == ["p1", "p4", "p5"])
        let count = try KQueryBinary.run(["query", "--db", db, "--type", "Restaurant", "--format", "count", "TRUEPREDICATE"])
        #expect(count.standardOutput == "5\n")
        let privately = try KQueryBinary.run(["query", "--db", db, "--user", "_u", "--type", "Restaurant", "--format", "count", "TRUEPREDICATE"])
        #expect(privately.standardOutput == "0\n")
    }

    /// Committed means durable, with its notifications: a modify stream killed with SIGKILL at
    /// random points leaves every acknowledged modify in the file, each committed record with its
    /// push in the outbox, and no push for a record that did not commit.
    @Test(arguments: [3, 17, 41])
    func killedModifyStreamLosesNothingAcknowledged(acknowledged: Int) throws {
        let db = Self.temporaryPath("crash")
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: db + suffix) }
        }
        let user = ["--db", db, "--user", "_u"]
        #expect(try KQueryBinary.run(["zones"] + user + ["--create", "Z"]).status == 0)
        let subscription = try Self.file(#"{"subscriptionID":"all","subscriptionType":"query","query":{"recordType":"Item"},"predicate":"n >= 0","notificationInfo":{"alertBody":"new"}}"#)
        #expect(try KQueryBinary.run(["subscriptions"] + user + ["--save", subscription]).status == 0)

        let process = SpawnedProcess()
        process.executableURL = KQueryBinary.url
        process.arguments = ["modify"] + user + ["--zone", "Z", "--stream", "-"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        func line(_ index: Int) -> Data {
            Data(#"{"operations":[{"operationType":"create","record":{"recordName":"r\#(index)","recordType":"Item","fields":{"n":\#(index)}}}]}"#.utf8 + [10])
        }
        var reader = LineReader(handle: output.fileHandleForReading)
        var acknowledgedNames: [String] = []
        for index in 0..<acknowledged {
            input.fileHandleForWriting.write(line(index))
            let next = reader.next()
            let answer = try JSON.parse(try #require(next))
            #expect(answer["records"]?[0]?["recordName"] == .string("r\(index)"))
            acknowledgedNames.append("r\(index)")
        }
        // More modifies in flight, then the kill, wherever the process is.
        for index in acknowledged..<(acknowledged + 30) { input.fileHandleForWriting.write(line(index)) }
        usleep(UInt32.random(in: 0...3_000))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)

        let container = try Container(containerIdentifier: "iCloud.kquery.local", path: db)
        let database = try container.database(.private, user: "_u")
        var present: Set<String> = []
        var token: SyncToken?
        repeat {
            let changes = try database.zoneChanges(ZoneID(zoneName: "Z"), since: token)
            present.formUnion(changes.changedRecords.map(\.recordID.recordName))
            token = changes.syncToken
            if !changes.moreComing { break }
        } while true
        #expect(Set(acknowledgedNames).isSubset(of: present), "lost: \(Set(acknowledgedNames).subtracting(present).sorted())")
        let pushed = try container.pendingNotifications(limit: 10_000).compactMap { $0.payload["ck"]?["qry"]?["rid"]?.stringValue }
        #expect(pushed.count == Set(pushed).count)
        #expect(Set(pushed) == present, "records without pushes: \(present.subtracting(pushed).sorted()); pushes without records: \(Set(pushed).subtracting(present).sorted())")
    }
}

/// Lines from a pipe, read as they arrive.
struct LineReader {
    let handle: FileHandle
    var buffer = Data()

    init(handle: FileHandle) { self.handle = handle }

    mutating func next() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: 10) {
                let line = buffer[buffer.startIndex..<newline]
                buffer.removeSubrange(buffer.startIndex...newline)
                return String(decoding: line, as: UTF8.self)
            }
            let chunk = handle.availableData
            if chunk.isEmpty { return nil }
            buffer.append(chunk)
        }
    }
}
