#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery
@testable import KQueryStore

/// `kquery import`, `schema`, `index`, and `query --db`, through the binary.
@Suite("Command line: database")
struct StoreCommandLineTests {
    static var gallery: String { Fixtures.repositoryRoot.appendingPathComponent("Samples/gallery.ndjson").path }
    static var gallerySchema: String { Fixtures.repositoryRoot.appendingPathComponent("Samples/gallery.ckdb").path }

    @Test func importThenQuery() throws {
        let holder = TemporaryDatabasePath()
        let imported = try KQueryBinary.run(["import", "--db", holder.path, "--records", Self.gallery])
        #expect(imported.status == 0, "\(imported.standardError)")
        #expect(imported.standardOutput.hasPrefix("imported 360 records into \(holder.path) (360 new, 0 replaced) in "))
        let again = try KQueryBinary.run(["import", "--db", holder.path, "--records", Self.gallery])
        #expect(again.standardOutput.contains("(0 new, 360 replaced)"))

        let scan = try KQueryBinary.run(["query", "--records", Self.gallery, "--type", "Artwork", "--format", "names", "--sort", "price:desc", "price > 50000"])
        let database = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "--format", "names", "--sort", "price:desc", "--limit", "200", "price > 50000"])
        #expect(database.status == 0, "\(database.standardError)")
        #expect(database.standardOutput == scan.standardOutput)
        #expect(!database.standardOutput.isEmpty)

        // Pages of 100 by default, with the cursor on stderr.
        let everything = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "--format", "names", "TRUEPREDICATE"])
        #expect(everything.standardOutput.split(separator: "\n").count == 100)
        let token = try #require(everything.standardError.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        let next = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "--format", "names", "--cursor", token, "TRUEPREDICATE"])
        #expect(next.status == 0, "\(next.standardError)")
        #expect(Set(next.standardOutput.split(separator: "\n")).isDisjoint(with: Set(everything.standardOutput.split(separator: "\n"))))
    }

    @Test func explainAndDeclaredIndexes() throws {
        let holder = TemporaryDatabasePath()
        _ = try KQueryBinary.run(["import", "--db", holder.path, "--records", Self.gallery])
        let before = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "--explain", "medium == 'oil' AND price > 50000"])
        #expect(before.standardOutput.contains("scan every record"))
        #expect(try KQueryBinary.run(["index", "--db", holder.path, "Artwork", "medium", "queryable"]).status == 0)
        #expect(try KQueryBinary.run(["index", "--db", holder.path, "Artwork", "price", "sortable"]).status == 0)
        let listed = try KQueryBinary.run(["index", "--db", holder.path])
        #expect(listed.standardOutput == "Artwork.medium queryable\nArtwork.price sortable\n")
        let after = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "--explain", "medium == 'oil' AND price > 50000"])
        #expect(after.status == 0)
        #expect(after.standardOutput.contains("the equality index on medium: medium == \"oil\""), "\(after.standardOutput)")
        let bad = try KQueryBinary.run(["index", "--db", holder.path, "Artwork", "price"])
        #expect(bad.status == 2)
    }

    @Test func schemaRefusesQueriesWithACaret() throws {
        let holder = TemporaryDatabasePath()
        let imported = try KQueryBinary.run(["import", "--db", holder.path, "--records", Self.gallery, "--schema", Self.gallerySchema])
        #expect(imported.status == 0, "\(imported.standardError)")
        let printed = try KQueryBinary.run(["schema", "--db", holder.path])
        #expect(try Schema(text: printed.standardOutput) == Schema(text: String(contentsOfFile: Self.gallerySchema, encoding: .utf8)))
        let refused = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "year > 2000 AND description == 'x'"])
        #expect(refused.status == 1)
        #expect(refused.standardError == "error: 1:17: Field 'description' is not marked queryable\n  year > 2000 AND description == 'x'\n" + String(repeating: " ", count: 18) + "^~~~~~~~~~~\n")
        #expect(refused.standardOutput.isEmpty)
        let sorted = try KQueryBinary.run(["query", "--db", holder.path, "--type", "Artwork", "--sort", "medium", "TRUEPREDICATE"])
        #expect(sorted.status == 1)
        #expect(sorted.standardError == "error: --sort: Field 'medium' is not marked sortable\n")
    }

    @Test func badInputExitsTwoAndKeepsTheDatabase() throws {
        let holder = TemporaryDatabasePath()
        _ = try KQueryBinary.run(["import", "--db", holder.path, "--records", Self.gallery])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let broken = directory.appendingPathComponent("broken.ndjson")
        try Data("{\"recordName\":\"x\",\"recordType\":\"Artwork\",\"fields\":{}}\n{\"recordName\": oops}\n".utf8).write(to: broken)
        let run = try KQueryBinary.run(["import", "--db", holder.path, "--records", broken.path])
        #expect(run.status == 2)
        #expect(run.standardError.hasPrefix("error: \(broken.path):2:"))
        #expect(try Database(path: holder.path).recordCount == 360)

        let schema = directory.appendingPathComponent("bad.ckdb")
        try Data("DEFINE SCHEMA RECORD TYPE A (x BLOB);".utf8).write(to: schema)
        let badSchema = try KQueryBinary.run(["schema", "--db", holder.path, "--set", schema.path])
        #expect(badSchema.status == 2)
        #expect(badSchema.standardError == "error: \(schema.path):1:32: unknown field type 'BLOB' (expected ASSET, BYTES, DOUBLE, INT64, LOCATION, NUMBER, REFERENCE, STRING, TIMESTAMP or LIST<...>)\n")

        let notADatabase = try KQueryBinary.run(["query", "--db", broken.path, "--type", "Artwork", "TRUEPREDICATE"])
        #expect(notADatabase.status == 2)
        #expect(notADatabase.standardError.hasPrefix("error: \(broken.path): "))
    }

    /// Kills `kquery import` in the middle of its transaction, then reopens: the database holds what
    /// it held before, whole and readable, and a later import completes.
    @Test func killedImportLeavesTheDatabaseConsistent() throws {
        let holder = TemporaryDatabasePath()
        let (directory, big) = try Self.bigRecordsFile { index in
            #"{"recordName":"big-\#(index)","recordType":"Artwork","fields":{"price":\#(index),"title":"A title long enough to make the pages fill up quickly, number \#(index)","tags":["a","b","c"]}}"#
        }
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try KQueryBinary.run(["import", "--db", holder.path, "--records", Self.gallery]).status == 0)

        var killedMidWrite = 0
        for _ in 0..<3 {
            let process = try Self.start(["import", "--db", holder.path, "--records", big.path])
            // The rollback journal exists while the import's transaction writes pages.
            let journal = holder.path + "-journal"
            let deadline = Date().addingTimeInterval(120)
            while process.isRunning, !FileManager.default.fileExists(atPath: journal), Date() < deadline { usleep(1_000) }
            if process.isRunning {
                usleep(UInt32.random(in: 0..<200_000))
                kill(process.processIdentifier, SIGKILL)
                killedMidWrite += 1
            }
            process.waitUntilExit()
            let reopened = try Database(path: holder.path)
            #expect(reopened.recordCount == 360 || reopened.recordCount == 60_360, "a partial import: \(reopened.recordCount) records")
            if reopened.recordCount == 60_360 { break }
        }
        #expect(killedMidWrite > 0, "the import always finished before it could be killed")
        let finished = try KQueryBinary.run(["import", "--db", holder.path, "--records", big.path])
        #expect(finished.status == 0, "\(finished.standardError)")
        let reopened = try Database(path: holder.path)
        #expect(reopened.recordCount == 60_360)
        #expect(reopened.record(RecordID(recordName: "big-59999"))?["price"] == .int64(59_999))
    }

    /// Kills `kquery query` at random moments of its open, most of them while it writes the file's
    /// index snapshot (the rollback journal exists then): every reopen finds all the records and
    /// indexes that answer as a scan, whether it loads a snapshot or builds the indexes again.
    @Test func killedWhileKeepingItsIndexSnapshotTheFileStaysWhole() throws {
        let holder = TemporaryDatabasePath()
        let (directory, big) = try Self.bigRecordsFile { index in
            #"{"recordName":"big-\#(index)","recordType":"Artwork","fields":{"price":\#(index % 1_000),"title":"sunset \#(index % 97) harbour w\#(index)"}}"#
        }
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try KQueryBinary.run(["import", "--db", holder.path, "--records", big.path]).status == 0)
        #expect(try KQueryBinary.run(["index", "--db", holder.path, "Artwork", "price", "sortable"]).status == 0)
        #expect(try KQueryBinary.run(["index", "--db", holder.path, "Artwork", "title", "searchable"]).status == 0)
        let queries = ["price < 3", "ALL tokenize('sunset 7', 'Cdl') IN allTokens"]
        var killedMidWrite = 0
        for round in 0..<6 {
            let process = try Self.start(["query", "--db", holder.path, "--type", "Artwork", "price < 3"])
            let journal = holder.path + "-journal"
            let deadline = Date().addingTimeInterval(120)
            // Half the rounds wait for the snapshot's transaction (a journal once the open has
            // loaded the records: the file's first write, at the very start, is long over); the
            // others kill the open earlier.
            if round % 2 == 0 {
                let loaded = Date().addingTimeInterval(0.1)
                while process.isRunning, Date() < loaded || !FileManager.default.fileExists(atPath: journal), Date() < deadline { usleep(100) }
                usleep(UInt32.random(in: 0..<1_000))
            } else {
                usleep(UInt32.random(in: 0..<300_000))
            }
            let midWrite = process.isRunning && FileManager.default.fileExists(atPath: journal)
            kill(process.processIdentifier, SIGKILL)
            if midWrite { killedMidWrite += 1 }
            process.waitUntilExit()
            let reopened = try Database(path: holder.path)
            #expect(reopened.recordCount == 60_000)
            for predicate in queries {
                let query = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate(predicate))
                let indexed = try StorePlannerTests.allPages(reopened, query, now: 0).map(\.recordID)
                #expect(indexed == reopened.performByScan(query, now: 0).map(\.recordID), "\(predicate)")
                #expect(!indexed.isEmpty)
            }
            // A write makes the snapshot stale: the next open builds the indexes and writes one again.
            try reopened.createZone(ZoneID(zoneName: "Z\(round)", ownerName: "_o"))
        }
        #expect(killedMidWrite > 0, "the snapshot was always written before it could be killed")
        // Opened whole once more, the snapshot is there for the next open.
        _ = try Database(path: holder.path)
        #expect(try Database(path: holder.path).indexSnapshotTypes == ["Artwork"])
    }

    /// A new directory holding `big.ndjson`: 60,000 records, `line(index)` each.
    static func bigRecordsFile(_ line: (Int) -> String) throws -> (directory: URL, file: URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("big.ndjson")
        try Data((0..<60_000).map { line($0) + "\n" }.joined().utf8).write(to: file)
        return (directory, file)
    }

    /// `kquery` with `arguments`, running in the background, its output dropped.
    static func start(_ arguments: [String]) throws -> SpawnedProcess {
        let process = SpawnedProcess()
        process.executableURL = KQueryBinary.url
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }
}
