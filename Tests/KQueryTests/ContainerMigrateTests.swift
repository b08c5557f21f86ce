import Foundation
@testable import KQueryPostgres
import KQueryTestSupport
import Testing
@testable import KQuery
@testable import KQueryContainer

/// `kquery migrate` (SPEC §16): a container file copied into PostgreSQL and back holds the same
/// records, tombstones, change history, zones, subscriptions and queued pushes; running the copy
/// again (as after a crash) changes nothing and queues no push twice.
@Suite struct ContainerMigrateTests {
    typealias F = ContainerFixture

    /// Everything a storage's container shows, in a comparable form.
    static func snapshot(_ storage: any ContainerStorage, limit: Int = 1000) throws -> [String] {
        try storage.read { tx throws(ContainerError) in
            var lines: [String] = []
            for (key, stored) in try tx.allDatabases().sorted(by: { $0.key.description < $1.key.description }) {
                lines.append("\(key) sequence \(stored.sequence) horizon \(stored.horizon)")
                for zone in try tx.zones(in: stored) { lines.append("zone \(zone)") }
                for change in try tx.zoneChanges(of: stored, after: 0, limit: 1000) { lines.append("zone change \(change)") }
                for zoneID in [ZoneID.default] + (try tx.zones(in: stored).map(\.zoneID)) {
                    for (sequence, change) in try tx.recordChanges(in: zoneID, of: stored, after: 0, includingDeletions: true, limit: limit) {
                        lines.append("\(sequence) \(change)")
                    }
                }
                for subscription in try tx.subscriptions(in: stored) { lines.append("subscription \(subscription)") }
            }
            for notification in try tx.pendingNotifications(for: .all, limit: 1000) {
                lines.append("push \(notification.subscriptionID) \(notification.owner) \(notification.payload.serialized)")
            }
            // Each blob with its bytes.
            for blob in try tx.assetBlobs(after: "", limit: 1000) {
                var bytes: [UInt8] = []
                var index = 0
                while let chunk = try tx.assetChunk(blob.contentHash, index: index) {
                    bytes += chunk
                    index += 1
                }
                lines.append("blob \(blob.contentHash) \(blob.size) \(blob.fileChecksum) \(blob.contentType) \(bytes.count) \(bytes.hashValue)")
            }
            // Upload tickets (one cut off while its bytes arrived reads as not begun: so it is copied)
            // and receipts.
            for ticket in try tx.assetUploads(after: "", limit: 1000) {
                let state = ticket.state == .receiving ? .waiting : ticket.state
                lines.append("upload \(ticket.token) \(ticket.binding) \(ticket.recordType ?? "-") \(ticket.expires) \(state)")
            }
            for receipt in try tx.assetReceipts(after: "", limit: 1000) {
                lines.append("receipt \(receipt.receipt) \(receipt.binding) \(receipt.asset) \(receipt.expires) \(receipt.spent)")
            }
            return lines
        }
    }

    @Test func aContainerGoesToPostgreSQLAndBackWhole() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        var expiredToken: SyncToken?
        var waiting: AssetUploadTicket?, unsaved: UploadedAsset?, cutOff = ""
        do {
            let container = try F.container(path: path)
            let database = try F.privateDatabase(container)
            _ = try database.saveSubscription(Subscription(subscriptionID: "db", kind: .database(recordType: nil), options: [.firesOnRecordCreation]))
            var operations: [RecordOperation] = []
            for i in 0..<25 { operations.append(F.operation(.create, F.record("n\(i)", zone: F.zone, ["i": .int64(Int64(i))]))) }
            _ = try database.modify(operations)
            expiredToken = try database.zoneChanges(F.zone, since: nil).syncToken
            _ = try database.modify([F.operation(.forceDelete, F.record("n3", zone: F.zone))])
            // Deletions forgotten past a horizon: tokens from before it are expired, on the copies too.
            try database.compactChangeHistory(keepingLast: 0)
            _ = try database.deleteZone(F.otherZone)
            _ = try container.database(.public).modify([F.operation(.create, F.record("p", ["name": .string("public")]))])
            // An asset of three chunks and a bit, saved into a record.
            let file = F.temporaryPath()
            defer { F.remove(file) }
            let bytes = (0..<(3 * AssetPolicy.chunkSize + 1234)).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 7) }
            #expect(FileManager.default.createFile(atPath: file, contents: Data(bytes)))
            let withAsset = try database.uploadingFiles([F.operation(.create, F.record("a", zone: F.zone, ["file": .assetID(#"{"$file": "\#(file)"}"#)]))])
            _ = try database.modify(withAsset)
            // Uploads a client has not finished with: a URL not used yet, bytes uploaded and not
            // yet saved into a record, and an upload cut off while its bytes were arriving.
            waiting = try #require(try database.requestAssetUploads([AssetFieldRequest(recordName: "w", fieldName: "file")], in: F.zone).first)
            unsaved = try database.uploadAsset([7, 8, 9], recordName: "u", fieldName: "file", in: F.zone)
            let cut = try #require(try database.requestAssetUploads([AssetFieldRequest(recordName: "c", fieldName: "file")], in: F.zone).first)
            cutOff = cut.token
            let writer = try container.beginAssetUpload(token: cut.token, contentType: nil)
            try writer.append([1, 2, 3])
        }
        // A token a client holds, taken before the copy: the copies read it.
        let heldToken = try Container(containerIdentifier: "iCloud.migrated", path: path).database(.private, user: "_u1").zoneChanges(F.zone, since: nil).syncToken
        let original = try Self.snapshot(ContainerCopy.fileStorage(path: path))
        #expect(original.count > 30)
        // The copy reads the file with statements (not mirrored): what the container's own
        // storage, answering from its mirror, reads too.
        #expect(try Self.snapshot(SQLiteContainerStorage(path: path)) == original)

        let location = try #require(PostgresLocation(url: try PostgresCluster.start().createDatabase()))
        let identifier = "iCloud.migrated"
        let database = try PostgresContainerStorage(location: location, containerIdentifier: identifier)
        var counts = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: path), to: database, pageSize: 7)
        #expect(counts.records == 26 && counts.tombstones == 0 && counts.subscriptions == 1)
        #expect(original.contains { $0.contains("horizon") && !$0.hasSuffix("horizon 0") })
        #expect(counts.assets == 2 && counts.assetBytes == Int64(3 * AssetPolicy.chunkSize + 1234 + 3))
        #expect(original.contains { $0.hasPrefix("blob ") })
        #expect(counts.notifications > 0 && counts.notifications == original.filter { $0.hasPrefix("push ") }.count)
        // Four tickets (the two finished uploads keep theirs), two receipts (one saved into "a").
        #expect(counts.uploads == 4 && counts.receipts == 2, "\(counts)")
        #expect(try Self.snapshot(database) == original)
        #expect(try database.read { tx throws(ContainerError) in try tx.assetUpload(cutOff)?.state } == .waiting)
        // Again, as after a crash: the same, and the pushes not queued twice.
        counts = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: path), to: database, pageSize: 7)
        #expect(counts.notifications == 0)
        #expect(try Self.snapshot(database) == original)

        let back = F.temporaryPath()
        defer { F.remove(back) }
        _ = try ContainerCopy.copy(from: PostgresContainerStorage(location: location, containerIdentifier: identifier), to: ContainerCopy.fileStorage(path: back))
        #expect(try Self.snapshot(ContainerCopy.fileStorage(path: back)) == original)
        #expect(try Self.snapshot(SQLiteContainerStorage(path: back)) == original)
        // The copy is a container that works: a token-less change fetch lists the records left.
        var noGrace = AssetPolicy()
        noGrace.gracePeriod = 0
        let reopened = try Container(containerIdentifier: identifier, path: back, assetPolicy: noGrace, clock: { 1_700_000_000_000 })
        let changes = try reopened.database(.private, user: "_u1").zoneChanges(F.zone, since: nil)
        #expect(changes.changes.count == 25)
        // The source's secret came along: the token taken before the copy reads on the copy.
        let since = try reopened.database(.private, user: "_u1").zoneChanges(F.zone, since: heldToken)
        #expect(since.changes.isEmpty)
        #expect(throws: ContainerError.self) { try reopened.database(.private, user: "_u1").zoneChanges(F.zone, since: expiredToken) }
        // The copy's record refers to its blob, the unsaved upload's receipt to its own: the collector keeps both.
        let asset = try #require(try reopened.database(.private, user: "_u1").asset(RecordID(recordName: "a", zoneID: F.zone), field: "file"))
        #expect(try reopened.collectAssets().blobs == 0)
        #expect(try reopened.assetBlob(asset.contentHash)?.size == Int64(3 * AssetPolicy.chunkSize + 1234))
        // The copy takes the upload URL and the receipt handed out before it.
        do {
            let copy = try Container(containerIdentifier: identifier, storage: database, clock: { 1_700_000_000_000 })
            let copied = try F.privateDatabase(copy)
            let token = try #require(waiting).token
            let writer = try copy.beginAssetUpload(token: token, contentType: nil)
            try writer.append([4, 5, 6])
            let finished = try writer.finish()
            let saved = try copied.modify([
                F.operation(.create, F.record("w", zone: F.zone, ["file": .assetID(finished.webServicesJSON.serialized)])),
                F.operation(.create, F.record("u", zone: F.zone, ["file": .assetID(try #require(unsaved).webServicesJSON.serialized)])),
            ])
            #expect(saved.results.allSatisfy { if case .saved = $0 { true } else { false } }, "\(saved.results)")
        }
    }

    @Test func theCommandCopiesBothWaysAndPrintsTheCounts() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        _ = try F.container(path: path).database(.public).modify([F.operation(.create, F.record("p"))])
        let url = try PostgresCluster.start().createDatabase()
        // The schema the container learned, beside its file, goes with it.
        let learned = "DEFINE SCHEMA\n    RECORD TYPE Note (\n        title STRING\n    );\n"
        try Data(learned.utf8).write(to: URL(fileURLWithPath: path + ".ckdb"))
        defer { F.remove(path + ".ckdb") }
        let into = try KQueryBinary.run(["migrate", "--from", path, "--to-postgres", url, "--container", "iCloud.cli"])
        #expect(into.status == 0, "\(into.standardError)")
        #expect(into.standardOutput.contains("copied 1 databases, 0 zones, 1 records"))
        let location = try #require(PostgresLocation(url: url))
        do {
            let containers = try PostgresContainers(location: location, connections: 1)
            defer { containers.close() }
            #expect(try containers.learnedSchema("iCloud.cli")?.text == learned)
        }
        let back = F.temporaryPath()
        defer { F.remove(back); F.remove(back + ".ckdb") }
        let out = try KQueryBinary.run(["migrate", "--from-postgres", url, "--to", back, "--container", "iCloud.cli"])
        #expect(out.status == 0, "\(out.standardError)")
        #expect(try String(contentsOfFile: back + ".ckdb", encoding: .utf8).contains("RECORD TYPE Note"))
        #expect(try Container(containerIdentifier: "iCloud.cli", path: back).database(.public).record(RecordID(recordName: "p")) != nil)
        let refused = try KQueryBinary.run(["migrate", "--from", path, "--to-postgres", "postgresql://nobody", "--container", "x"])
        #expect(refused.status != 0 && refused.standardError.contains("not a postgresql://user[:password]@host[:port]/database URL"), "\(refused.standardError)")
        for command in [["serve", "--postgres"], ["token", "--user", "_a", "--postgres"], ["users", "list", "--postgres"], ["query", "--type", "Note", "n >= 1", "--postgres"]] {
            let bad = try KQueryBinary.run(command + ["postgresql://nobody@127.0.0.1:99999/k"])
            #expect(bad.status != 0 && bad.standardError.contains("not a postgresql://"), "\(command): \(bad.standardError)")
        }
        // A mistyped source is an error, and nothing is made for it.
        let missing = path + "-typo"
        let noFile = try KQueryBinary.run(["migrate", "--from", missing, "--to-postgres", url, "--container", "iCloud.other"])
        #expect(noFile.status == 2 && noFile.standardError.contains("no container file at"), "\(noFile.standardError)")
        #expect(!FileManager.default.fileExists(atPath: missing))
        let noContainer = try KQueryBinary.run(["migrate", "--from-postgres", url, "--to", F.temporaryPath(), "--container", "iCloud.typo"])
        #expect(noContainer.status == 2 && noContainer.standardError.contains("holds no container iCloud.typo"), "\(noContainer.standardError)")
        let stillOne = try KQueryBinary.run(["migrate", "--from-postgres", url, "--to", F.temporaryPath(), "--container", "iCloud.typo"])
        #expect(stillOne.status == 2, "the refused copy made no container row")
    }

    /// `kquery query --postgres URL`: the container a served database holds answers in SQL, a page
    /// at a time with a cursor, counts every match, and `--explain` prints each statement with
    /// PostgreSQL's plan, reading no records into memory.
    @Test func theQueryCommandRunsOnPostgreSQL() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        _ = try F.container(path: path).database(.public).modify((0..<5).map { F.operation(.create, F.record("p\($0)", ["n": .int64(Int64($0))])) })
        let url = try PostgresCluster.start().createDatabase()
        let into = try KQueryBinary.run(["migrate", "--from", path, "--to-postgres", url, "--container", "iCloud.q"])
        #expect(into.status == 0, "\(into.standardError)")
        let query = ["query", "--postgres", url, "--container", "iCloud.q", "--type", "Note", "--sort", "n:desc"]
        let page = try KQueryBinary.run(query + ["--format", "names", "--limit", "2", "n >= 1"])
        #expect(page.status == 0 && page.standardOutput == "p4\np3\n", "\(page.standardOutput) \(page.standardError)")
        let cursor = try #require(page.standardError.components(separatedBy: "--cursor ").last?.trimmingCharacters(in: .whitespacesAndNewlines))
        let next = try KQueryBinary.run(query + ["--format", "names", "--limit", "2", "--cursor", cursor, "n >= 1"])
        #expect(next.standardOutput == "p2\np1\n", "\(next.standardOutput) \(next.standardError)")
        let count = try KQueryBinary.run(query + ["--format", "count", "--limit", "2", "n >= 1"])
        #expect(count.standardOutput == "4\n", "\(count.standardOutput) \(count.standardError)")
        let explained = try KQueryBinary.run(query + ["--explain", "n >= 1"])
        #expect(explained.status == 0 && explained.standardOutput.contains("Statement 1 of 2") && explained.standardOutput.contains("Plan:"),
                "\(explained.standardOutput) \(explained.standardError)")
        // The private database of a user with no records, and a container that is not there.
        let empty = try KQueryBinary.run(query + ["--user", "_nobody", "--format", "count", "n >= 1"])
        #expect(empty.status == 0 && empty.standardOutput == "0\n", "\(empty.standardOutput) \(empty.standardError)")
        let typo = try KQueryBinary.run(["query", "--postgres", url, "--container", "iCloud.typo", "--type", "Note", "n >= 1"])
        #expect(typo.status == 2 && typo.standardError.contains("holds no container iCloud.typo"), "\(typo.standardError)")
        let both = try KQueryBinary.run(["query", "--postgres", url, "--db", path, "--type", "Note", "n >= 1"])
        #expect(both.status != 0 && both.standardError.contains("give one of --records FILE, --db FILE or --postgres URL"), "\(both.standardError)")
    }

    /// Names and strings with every character COPY's text format and array literals escape, and
    /// the ones that test quoting and normalization.
    static let awkward = [
        "plain", "new\nline", "cr\rlf\r\n", "back\\slash", "\\N", "\\x41", "quote\"d", "it's", "com,ma", "{brace}", "}{",
        "NULL", "null", " padded ", "emoji \u{1F389}\u{1F469}\u{200D}\u{1F467}", "caf\u{E9}", "cafe\u{301}", "\u{7F}\u{1}", "tab\there",
    ]

    static let longPrefix = String(repeating: "q", count: 1_200)

    /// Records whose names, strings, string lists and references hold `awkward` text (zone names,
    /// types and field names are identifiers), copied by COPY: the copy reads back the same, and
    /// answers queries as the file does.
    @Test func awkwardTextCrossesTheCopyIntactAndAnswersQueriesAsTheFile() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        let zone = ZoneID(zoneName: "z-awkward.1", ownerName: "_u1")
        do {
            let container = try F.container(path: path)
            let database = try container.database(.private, user: "_u1")
            try database.createZone(zone)
            for zoneID in [ZoneID.default, zone] {
                var operations: [RecordOperation] = []
                for (index, text) in Self.awkward.enumerated() {
                    var record = F.record("\(text)-\(index)", type: "Item", zone: zoneID, [
                        "s": .string(text), "l": .list(.string, [.string(text), .string(""), .string("x")]), "i": .int64(Int64(index)),
                        // Longer than an index entry holds: one head for all, the tails differ.
                        "t": .string(Self.longPrefix + text),
                    ])
                    // Each refers to the one before it (its reference row names that one).
                    if index > 0 { record.fields["r"] = F.reference("\(Self.awkward[index - 1])-\(index - 1)", zone: zoneID, .deleteSelf) }
                    operations.append(F.operation(.create, record))
                }
                _ = try database.modify(operations)
            }
            _ = try database.modify([F.operation(.forceDelete, F.record("tab\there-\(Self.awkward.count - 1)", type: "Item", zone: zone))])
        }
        let original = try Self.snapshot(ContainerCopy.fileStorage(path: path))
        let location = try #require(PostgresLocation(url: try PostgresCluster.start().createDatabase()))
        let identifier = F.identifier
        let counts = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: path), to: PostgresContainerStorage(location: location, containerIdentifier: identifier), pageSize: 5)
        #expect(counts.records == 2 * Self.awkward.count - 1 && counts.tombstones == 1)
        #expect(try Self.snapshot(PostgresContainerStorage(location: location, containerIdentifier: identifier)) == original)

        let file = try F.container(path: path).database(.private, user: "_u1")
        let containers = try PostgresContainers(location: location, connections: 2)
        defer { containers.close() }
        let copy = try containers.openContainer(identifier).database(.private, user: "_u1")
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        for text in Self.awkward {
            let conditions: [Condition] = [
                .field(.user(FieldKey("s")), .compare(.equal, .value(.string(text)), [])),
                .field(.user(FieldKey("l")), .contains(.value(.string(text)), [])),
                .field(.user(FieldKey("s")), .string(.beginsWith, text, [])),
                .tokens(.all, text: text),
                .field(.user(FieldKey("t")), .compare(.equal, .value(.string(Self.longPrefix + text)), [])),
                .field(.user(FieldKey("t")), .compare(.greaterThan, .value(.string(Self.longPrefix + text)), [])),
            ]
            for zoneID in [ZoneID.default, zone] {
                for condition in conditions {
                    let query = Query(recordType: "Item", condition: condition, sortDescriptors: [KQuery.SortDescriptor("s")], resultsLimit: 100, zoneID: zoneID)
                    let expected = try file.query(query, cursor: nil, now: now).records.map(\.recordID)
                    #expect(try copy.query(query, cursor: nil, now: now).records.map(\.recordID) == expected, "\(condition) in \(zoneID)")
                }
            }
        }
        for field in ["s", "t"] {
            let sorted = Query(recordType: "Item", condition: .constant(true), sortDescriptors: [KQuery.SortDescriptor(field, ascending: false)], resultsLimit: 100, zoneID: zone)
            #expect(try copy.query(sorted, cursor: nil, now: now).records.map(\.recordID) == file.query(sorted, cursor: nil, now: now).records.map(\.recordID))
        }
    }

    /// PostgreSQL text cannot hold U+0000: COPY's rows refuse it, and a copy of a record named
    /// with one fails as a bad request, naming the record.
    @Test func aNulInANameIsRefused() throws {
        var rows = PostgresCopyText()
        #expect(throws: PostgresCopyText.UnstorableText.self) { try rows.text("a\u{0}b") }
        #expect(throws: PostgresCopyText.UnstorableText.self) { try rows.textArray(["ok", "a\u{0}"]) }
        let path = F.temporaryPath()
        defer { F.remove(path) }
        _ = try F.container(path: path).database(.public).modify([F.operation(.create, F.record("ok")), F.operation(.create, F.record("a\u{0}b"))])
        let location = try #require(PostgresLocation(url: try PostgresCluster.start().createDatabase()))
        let error = containerError {
            _ = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: path), to: PostgresContainerStorage(location: location, containerIdentifier: "iCloud.nul"))
        }
        #expect(error?.code == .badRequest && error?.reason.contains("U+0000") == true, "\(String(describing: error))")
    }

    /// `kquery migrate` killed with SIGKILL wherever it is (copying pages, building the indexes),
    /// then run again until it finishes: the copy holds every record, tombstone, subscription and
    /// asset of the file once, its indexes are all there, and it answers queries as the file.
    /// A node opening the database after a kill builds the indexes the copy had put off.
    @Test func aKilledMigrateResumesWithNothingLostOrTwice() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        do {
            let container = try F.container(path: path)
            let database = try F.privateDatabase(container)
            _ = try database.saveSubscription(Subscription(subscriptionID: "db", kind: .database(recordType: nil), options: [.firesOnRecordCreation]))
            for batch in 0..<80 {
                let operations = (0..<200).map { index in
                    let number = batch * 200 + index
                    return F.operation(.create, F.record("n\(number)", type: "Item", zone: number % 3 == 0 ? .default : F.zone, [
                        "price": .int64(Int64(number % 1000)), "title": .string("sunset \(number % 7) w\(number)"),
                        "tags": .list(.string, [.string("t\(number % 5)"), .string("all")]),
                    ]))
                }
                _ = try database.modify(operations)
            }
            _ = try database.modify((0..<200).map { F.operation(.forceDelete, F.record("n\($0 * 37)", zone: $0 * 37 % 3 == 0 ? .default : F.zone)) })
            let file = F.temporaryPath()
            defer { F.remove(file) }
            #expect(FileManager.default.createFile(atPath: file, contents: Data((0..<(AssetPolicy.chunkSize + 99)).map { UInt8(truncatingIfNeeded: $0) })))
            _ = try database.modify(try database.uploadingFiles([F.operation(.create, F.record("a", zone: F.zone, ["file": .assetID(#"{"$file": "\#(file)"}"#)]))]))
        }
        let original = try Self.snapshot(ContainerCopy.fileStorage(path: path), limit: 100_000)
        #expect(original.filter { $0.contains("deleted(") }.count == 200)
        let cluster = try PostgresCluster.start()
        let url = try cluster.createDatabase()
        let name = try #require(url.split(separator: "/").last.map(String.init))
        let arguments = ["migrate", "--from", path, "--to-postgres", url, "--container", F.identifier]
        let indexes = "SELECT count(*) FROM pg_indexes WHERE indexname IN (\(PostgresSchema.deferredIndexes.map { "'\($0.name)'" }.joined(separator: ",")))"

        var killed = 0
        for round in 0..<4 {
            let process = try StoreCommandLineTests.start(arguments)
            // Records arriving: the copy is under way (the first round kills it at its first pages).
            let deadline = Date().addingTimeInterval(120)
            // (No table yet while the schema is being made: not yet.)
            while process.isRunning, Date() < deadline,
                  (Int((try? cluster.psql(name, "SELECT count(*) FROM records"))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0) == 0 {
                usleep(2_000)
            }
            if process.isRunning {
                usleep(round == 0 ? 0 : UInt32.random(in: 0..<400_000))
                kill(process.processIdentifier, SIGKILL)
                killed += 1
            }
            process.waitUntilExit()
            if round == 0, killed == 1 {
                #expect(try cluster.psql(name, indexes).trimmingCharacters(in: .whitespacesAndNewlines) != "\(PostgresSchema.deferredIndexes.count)", "the indexes are put off until the end")
            }
        }
        #expect(killed > 0, "the copy always finished before it could be killed")
        // A node opening the database while the copy's indexes are missing builds them.
        let location = try #require(PostgresLocation(url: url))
        _ = try PostgresContainerStorage(location: location, containerIdentifier: F.identifier)
        #expect(try cluster.psql(name, indexes).trimmingCharacters(in: .whitespacesAndNewlines) == "\(PostgresSchema.deferredIndexes.count)")

        let finished = try KQueryBinary.run(arguments)
        #expect(finished.status == 0, "\(finished.standardError)")
        #expect(try Self.snapshot(PostgresContainerStorage(location: location, containerIdentifier: F.identifier), limit: 100_000) == original)
        #expect(try cluster.psql(name, indexes).trimmingCharacters(in: .whitespacesAndNewlines) == "\(PostgresSchema.deferredIndexes.count)")
        // The query values once per record field: as many as a copy made in one go.
        let once = try cluster.createDatabase()
        let onceRun = try KQueryBinary.run(["migrate", "--from", path, "--to-postgres", once, "--container", F.identifier])
        #expect(onceRun.status == 0, "\(onceRun.standardError)")
        let valueCount = "SELECT count(*), count(DISTINCT record_id) FROM record_values"
        #expect(try cluster.psql(name, valueCount) == cluster.psql(try #require(once.split(separator: "/").last.map(String.init)), valueCount))

        let file = try F.container(path: path).database(.private, user: "_u1")
        let containers = try PostgresContainers(location: location, connections: 2)
        defer { containers.close() }
        let copy = try containers.openContainer(F.identifier).database(.private, user: "_u1")
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        for condition: Condition in [
            .field(.user(FieldKey("price")), .compare(.equal, .value(.int64(42)), [])),
            .field(.user(FieldKey("tags")), .contains(.value(.string("t3")), [])),
            .tokens(.all, text: "sunset 3"),
        ] {
            for zoneID in [ZoneID.default, F.zone] {
                let query = Query(recordType: "Item", condition: condition, sortDescriptors: [KQuery.SortDescriptor("price")], resultsLimit: 400, zoneID: zoneID)
                #expect(try copy.query(query, cursor: nil, now: now).records.map(\.recordID) == file.query(query, cursor: nil, now: now).records.map(\.recordID))
            }
        }
    }
}
