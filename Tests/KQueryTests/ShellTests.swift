import Foundation
import KQuery
import KQueryTestSupport
import Testing

/// The interactive shell (`kquery` with no subcommand, `kquery -f FILE`), driven through the binary:
/// scripted sessions through a pipe, and one session through a pseudo-terminal.
@Suite("Shell")
struct ShellTests {
    static var records: String { Fixtures.url("restaurants.ndjson").path }

    /// Runs `lines` through a pipe into `kquery` (plus `arguments`).
    func session(_ lines: [String], arguments: [String] = []) throws -> KQueryBinary.Run {
        try KQueryBinary.run(arguments, input: lines.joined(separator: "\n") + "\n")
    }

    func lines(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { !$0.isEmpty }
    }

    @Test func loadTypesAndFields() throws {
        let run = try session([".load \(Self.records)", ".types", ".fields Restaurant", ".fields Chef"])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardError.isEmpty)
        #expect(run.standardOutput == """
            loaded 6 records (2 types)
            Chef        1
            Restaurant  5
            blurb     STRING
            chef      REFERENCE
            cuisine   STRING
            location  LOCATION
            name      STRING
            opened    TIMESTAMP
            score     DOUBLE
            seats     INT64, DOUBLE
            tags      STRING_LIST
            name   STRING
            seats  INT64

            """)
    }

    @Test func queryLineWithSortByAndLimit() throws {
        let run = try session([
            ".load \(Self.records)", ".mode names",
            "Restaurant WHERE cuisine == 'french' SORT BY seats DESC",
            "-- keywords are case-insensitive; LIMIT applies after sorting",
            "Restaurant where cuisine == 'french' sort by seats desc limit 2",
            "Restaurant WHERE seats > 10 SORT BY score DESC, seats ASC LIMIT 3",
            "Chef",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p5", "p1", "p3", "p5", "p1", "p2", "p4", "p1", "alain"])
    }

    @Test func sortByAndLimitOnlyOutsideQuotes() throws {
        let run = try session([
            ".load \(Self.records)", ".mode count",
            "Restaurant WHERE name == 'a SORT BY b LIMIT 2'",
            "Restaurant WHERE cuisine IN {'french', 'SORT BY'} LIMIT 1",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "0", "1"])
    }

    @Test func defaultSortAndLimit() throws {
        let run = try session([
            ".load \(Self.records)", ".mode names", ".sort seats DESC", ".limit 2", "Restaurant",
            ".limit", "Restaurant WHERE cuisine == 'french'", ".sort", ".mode count", "Restaurant",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p5", "p1", "p5", "p1", "p3", "5"])
    }

    @Test func tableModeIsTheDefault() throws {
        let run = try session([".load \(Self.records)", "Restaurant WHERE cuisine == 'mexican'"])
        #expect(run.status == 0, "\(run.standardError)")
        let output = lines(run.standardOutput)
        #expect(output.count == 5)
        #expect(output[1].hasPrefix("recordName  blurb"))
        #expect(output[2].hasPrefix("----------"))
        #expect(output[3].hasPrefix("p4          Tacos and terraces"))
        #expect(output[4] == "(1 record)")
    }

    @Test func variablesBindWithSet() throws {
        let run = try session([
            ".load \(Self.records)", ".mode names", ".set c \"french\"", ".set $few 30",
            "Restaurant WHERE cuisine == $c AND seats > $few SORT BY seats", ".set",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p1", "p5", "$c = \"french\"", "$few = 30"])
    }

    @Test func unboundVariableAndBadJSONAreErrors() throws {
        let run = try session([".set x oops", "Restaurant WHERE cuisine == $nope"], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardError.contains("error: .set x: invalid JSON"))
        #expect(run.standardError.contains("nope"))
    }

    @Test func extendedProfileEnablesOr() throws {
        let query = "Restaurant WHERE cuisine == 'mexican' OR seats < 20"
        let refused = try session([".load \(Self.records)", ".mode names", query])
        #expect(refused.status == 1)
        #expect(refused.standardError.contains("Unexpected expression: cuisine == \"mexican\" OR"))
        let run = try session([".load \(Self.records)", ".mode names", ".profile extended", ".profile", query + " SORT BY seats"])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "extended", "p2", "p4"])
    }

    @Test func explain() throws {
        let run = try session([".load \(Self.records)", ".explain Restaurant WHERE cuisine = 'french' && seats BETWEEN {10, 50}"])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == [
            "loaded 6 records (2 types)",
            "predicate: cuisine == \"french\" AND seats BETWEEN {10, 50}",
            #"filterBy:  [{"comparator":"EQUALS","fieldName":"cuisine","fieldValue":{"value":"french","type":"STRING"}},{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":10,"type":"INT64"}},{"comparator":"LESS_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":50,"type":"INT64"}}]"#,
            "plan:",
            "  QUERY Restaurant (5 records)",
            "    scan every record",
            "    test each candidate: cuisine == \"french\" AND seats BETWEEN {10, 50}",
        ])
        let invalid = try session([".explain seats > 1 OR seats < 0"])
        #expect(invalid.status == 1)
        #expect(invalid.standardError.contains("^"))
    }

    @Test func timer() throws {
        let run = try session([".load \(Self.records)", ".timer on", ".mode count", "Restaurant", ".timer off", "Chef"])
        #expect(run.status == 0, "\(run.standardError)")
        let output = lines(run.standardOutput)
        #expect(output.count == 4)
        #expect(output[1] == "5")
        #expect(output[2].wholeMatch(of: /Run Time: real \d+\.\d{6}/) != nil, "\(output[2])")
        #expect(output[3] == "1")
    }

    @Test func invalidPredicateStopsTheScript() throws {
        let run = try session([".load \(Self.records)", "Restaurant WHERE seats >> 3", ".types"])
        #expect(run.status == 1)
        #expect(run.standardOutput == "loaded 6 records (2 types)\n")
        let error = lines(run.standardError)
        #expect(error.count == 3, "\(run.standardError)")
        #expect(error.first?.hasPrefix("error: 1:") == true)
        #expect(error.dropFirst().first == "  seats >> 3")
        #expect(error.last?.trimmingCharacters(in: .whitespaces).hasPrefix("^") == true)
        #expect(!run.standardError.contains("\u{1B}["))
    }

    @Test func keepGoingRunsTheRest() throws {
        let run = try session([".load \(Self.records)", "Restaurant WHERE seats >> 3", ".types"], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardOutput.contains("Restaurant  5"))
        #expect(run.standardError.contains("^"))
        let clean = try session([".load \(Self.records)", ".types"], arguments: ["--keep-going"])
        #expect(clean.status == 0)
    }

    @Test func scriptFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = directory.appendingPathComponent("script.kq")
        try """
            -- a script
            .load \(Self.records)
            .mode names

            Restaurant WHERE cuisine == 'french' \\
                AND seats > 30 SORT BY seats
            Restaurant WHERE cuisine IN {'japanese',
                'mexican'} SORT BY seats DESC
            .quit
            .types
            """.write(to: script, atomically: true, encoding: .utf8)
        let run = try KQueryBinary.run(["-f", script.path])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p1", "p5", "p4", "p2"])

        let failing = directory.appendingPathComponent("failing.kq")
        try ".frobnicate\n.load \(Self.records)\n".write(to: failing, atomically: true, encoding: .utf8)
        let stopped = try KQueryBinary.run(["-f", failing.path])
        #expect(stopped.status == 1)
        #expect(stopped.standardOutput.isEmpty)
        let kept = try KQueryBinary.run(["-f", failing.path, "--keep-going"])
        #expect(kept.status == 1)
        #expect(kept.standardOutput == "loaded 6 records (2 types)\n")

        let missing = try KQueryBinary.run(["-f", directory.appendingPathComponent("nope.kq").path])
        #expect(missing.status == 2)
    }

    @Test func unknownCommand() throws {
        let run = try session([".foo bar"])
        #expect(run.status == 1)
        #expect(run.standardError == "error: unknown command '.foo' (try .help)\n")
    }

    @Test func openKeepsTheRecordsInAFile() throws {
        let holder = TemporaryDatabasePath()
        let first = try session([
            ".open \(holder.path)", ".load \(Self.records)",
            #".save {"recordName": "p9", "recordType": "Restaurant", "fields": {"cuisine": "french", "seats": 12}}"#,
            ".delete p1",
        ])
        #expect(first.status == 0, "\(first.standardError)")
        #expect(lines(first.standardOutput) == [
            // A new file is a container file; without .user, records go to the public database.
            "opened \(holder.path): 0 records (0 types)", "loaded 6 records (2 types) into development/public", "0 pushes", "0 pushes",
        ])
        let second = try session([".mode names", "Restaurant WHERE cuisine == 'french' SORT BY seats"], arguments: ["--db", holder.path])
        #expect(second.status == 0, "\(second.standardError)")
        #expect(lines(second.standardOutput).contains("p9"))
        #expect(!lines(second.standardOutput).contains("p1"))
        let missing = try session([".open /nonexistent-directory/x.db"])
        #expect(missing.status == 1)
        #expect(missing.standardError.hasPrefix("error: /nonexistent-directory/x.db: "))
    }

    /// A container file keeps zones, records, subscriptions and pushes per user: `.user`, `.zone`,
    /// `.zones`, `.changes`, and `.subscribe` that survives reopening the file.
    @Test func containerFileKeepsZonesAndSubscriptions() throws {
        let holder = TemporaryDatabasePath()
        let first = try session([
            ".open \(holder.path)", ".user _alice", ".zone Notes", ".zones",
            #".subscribe notes ZONE Notes ALERT "zone changed""#, ".subscribe big Note WHERE words > 10",
            #".save {"recordName": "n1", "recordType": "Note", "fields": {"words": 40}}"#, "Note WHERE words > 1", ".changes",
        ])
        #expect(first.status == 0, "\(first.standardError)")
        let out = lines(first.standardOutput)
        #expect(out.prefix(5) == ["opened \(holder.path): 0 records (0 types)", "_alice: the private database", "created zone Notes", "  _defaultZone", "* Notes"])
        let pushes = out.filter { $0.hasPrefix("{\"payload\"") }.map { try? KQuery.JSON.parse($0) }
        #expect(pushes.compactMap { $0?["payload"]?["ck"]?["fet"]?["zid"]?.stringValue } == ["Notes"])
        #expect(pushes.compactMap { $0?["payload"]?["ck"]?["qry"]?["rid"]?.stringValue } == ["n1"])
        #expect(out.contains("2 pushes"))
        #expect(out.contains { $0.hasPrefix("n1 ") })
        let changes = try KQuery.JSON.parse(try #require(out.last))
        #expect(changes["records"]?[0]?["recordName"] == .string("n1"))

        // Reopened: the subscriptions are still there and fire; another user sees none of it.
        let second = try session([".user _alice", ".subscriptions", ".zone Notes", ".delete n1"], arguments: ["--db", holder.path])
        #expect(second.status == 0, "\(second.standardError)")
        #expect(lines(second.standardOutput).contains { $0.hasPrefix("big ") && $0.contains("words > 10") })
        #expect(lines(second.standardOutput).contains("2 pushes"))
        let other = try session([".user _bob", ".zones", ".subscriptions"], arguments: ["--db", holder.path])
        #expect(lines(other.standardOutput) == ["_bob: the private database", "* _defaultZone", "no subscriptions in the private database (try .subscribe)"])
        // A database file made by kquery import still opens as one.
        let databaseFile = TemporaryDatabasePath()
        #expect(try KQueryBinary.run(["import", "--db", databaseFile.path, "--records", Self.records]).status == 0)
        let opened = try session([".open \(databaseFile.path)", ".zones"])
        #expect(lines(opened.standardOutput) == ["opened \(databaseFile.path): 6 records (2 types)"])
        #expect(opened.standardError.contains("open a container file first"))
        // Container commands need a container file.
        let memory = try session([".zones"])
        #expect(memory.status == 1)
        #expect(memory.standardError.contains("open a container file first"))
    }

    @Test func schemaCommandDeclaresShowsAndDrops() throws {
        let schemaFile = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-\(UUID().uuidString).ckdb").path
        defer { try? FileManager.default.removeItem(atPath: schemaFile) }
        try Data("""
            DEFINE SCHEMA RECORD TYPE Restaurant (cuisine STRING QUERYABLE, seats NUMBER, name STRING, location LOCATION,
                tags LIST<STRING>, score DOUBLE, opened TIMESTAMP, chef REFERENCE, blurb STRING);
            RECORD TYPE Chef (name STRING, seats INT64);
            """.utf8).write(to: URL(fileURLWithPath: schemaFile))
        let run = try session([
            ".load \(Self.records)", ".schema \(schemaFile)", ".fields Chef", ".mode names",
            "Restaurant WHERE cuisine == 'french'", "Restaurant WHERE seats > 10", ".schema NONE", "Restaurant WHERE seats > 100",
        ], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(lines(run.standardOutput).starts(with: ["loaded 6 records (2 types)", "schema declared: 2 record types", "name   STRING", "seats  INT64"]))
        #expect(run.standardError.contains("error: 1:1: Field 'seats' is not marked sortable\n  seats > 10\n  ^~~~~"))
        #expect(lines(run.standardOutput).contains("schema dropped"))
    }

    @Test func helpListsEveryCommand() throws {
        let help = try session([".help"])
        #expect(help.status == 0)
        let helpLines = help.standardOutput.split(separator: "\n")
        for command in [".load", ".open", ".schema", ".types", ".fields", ".profile", ".set", ".mode", ".sort", ".limit", ".timer", ".explain", ".quit", ".exit",
                        ".database", ".save", ".delete", ".subscribe", ".subscriptions", ".unsubscribe"] {
            #expect(helpLines.contains { $0.hasPrefix(command + " ") }, "\(command)")
        }
        #expect(help.standardOutput.contains(".subscribe ID ZONE ZONENAME"))
        #expect(help.standardOutput.contains(".subscribe ID DATABASE"))
    }

    // MARK: - Subscriptions and record changes

    /// The stdout lines that are push envelopes, parsed.
    func pushes(_ text: String) throws -> [KQuery.JSON] {
        try lines(text).filter { $0.hasPrefix("{") }.map { try KQuery.JSON.parse($0) }
    }

    /// `payload.ck.qry` (or `fet`, `met`) of a push envelope.
    func section(_ push: KQuery.JSON, _ key: String = "qry") -> KQuery.JSON? {
        push["payload"]?["ck"]?[key]
    }

    @Test func subscribeSaveQueryDeleteUnsubscribe() throws {
        let run = try session([
            ".load \(Self.records)",
            ".subscribe french Restaurant WHERE cuisine == 'french'",
            ".subscriptions",
            #".save {"recordName":"p9","recordType":"Restaurant","fields":{"cuisine":"french"}}"#,
            ".mode names",
            "Restaurant WHERE cuisine == 'french' SORT BY recordID",
            ".delete p9",
            "Restaurant WHERE cuisine == 'french' SORT BY recordID",
            ".unsubscribe french",
            ".subscriptions",
            #".save {"recordName":"p10","recordType":"Restaurant","fields":{"cuisine":{"value":"french","type":"STRING"}}}"#,
            ".mode count",
            "Restaurant",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardError.isEmpty)
        let output = lines(run.standardOutput)
        #expect(output.count == 19, "\(run.standardOutput)")
        guard output.count == 19 else { return }
        #expect(output[0] == "loaded 6 records (2 types)")
        #expect(output[1].split(separator: " ", omittingEmptySubsequences: true) == ["id", "kind", "recordType", "predicate", "options"])
        #expect(output[2].hasPrefix("------"))
        #expect(output[3].split(separator: " ", omittingEmptySubsequences: true).map(String.init)
                == ["french", "query", "Restaurant", "cuisine", "==", "\"french\"", "fires", "create,update,delete"], "\(output[3])")
        #expect(output[4] == "(1 subscription)")
        // The save fires one push: a query notification for p9, created.
        let created = try KQuery.JSON.parse(output[5])
        #expect(section(created)?["sid"] == .string("french"))
        #expect(section(created)?["rid"] == .string("p9"))
        #expect(section(created)?["fo"] == .int(1))
        #expect(section(created)?["dbs"] == .int(1))
        #expect(created["payload"]?["ck"]?["cid"] == .string("iCloud.kquery.shell"))
        #expect(created["payload"]?["ck"]?["ce"] == .int(2))
        #expect(created["payload"]?["ck"]?["nid"]?.stringValue != nil)
        #expect(output[6] == "1 push")
        // The query sees the saved record, then not the deleted one.
        #expect(Array(output[7...10]) == ["p1", "p3", "p5", "p9"])
        let deleted = try KQuery.JSON.parse(output[11])
        #expect(section(deleted)?["sid"] == .string("french"))
        #expect(section(deleted)?["rid"] == .string("p9"))
        #expect(section(deleted)?["fo"] == .int(3))
        #expect(output[12] == "1 push")
        #expect(Array(output[13...15]) == ["p1", "p3", "p5"])
        #expect(output[16] == "no subscriptions in the public database (try .subscribe)")
        #expect(output[17] == "0 pushes")
        #expect(run.standardOutput.hasSuffix("0 pushes\n6\n"))
    }

    @Test func updatesFireAndFiresOptionsFilter() throws {
        let run = try session([
            ".load \(Self.records)",
            ".subscribe big Restaurant WHERE seats > 30 FIRES update,delete",
            ".subscribe all Restaurant FIRES create ALERT \"New place: it's open\"",
            #".save {"recordName":"n1","recordType":"Restaurant","fields":{"seats":50}}"#,
            #".save {"recordName":"n1","recordType":"Restaurant","fields":{"seats":60}}"#,
            ".subscriptions",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        let pushes = try pushes(run.standardOutput)
        #expect(pushes.count == 2, "\(run.standardOutput)")
        guard pushes.count == 2 else { return }
        // The create fires only `all` (big does not fire on create), with its alert.
        #expect(section(pushes[0])?["sid"] == .string("all"))
        #expect(pushes[0]["payload"]?["aps"]?["alert"]?["body"] == .string("New place: it's open"))
        // The replace is an update: only `big`.
        #expect(section(pushes[1])?["sid"] == .string("big"))
        #expect(section(pushes[1])?["fo"] == .int(2))
        #expect(lines(run.standardOutput).filter { $0.hasSuffix(" push") || $0.hasSuffix(" pushes") } == ["1 push", "1 push"])
        #expect(run.standardOutput.contains("fires update,delete"))
        #expect(run.standardOutput.contains(#"fires create alert "New place: it's open""#))
        #expect(run.standardOutput.contains("seats > 30"))
        #expect(run.standardOutput.contains("TRUEPREDICATE"))
    }

    @Test func invalidSubscriptionPredicateShowsTheCaret() throws {
        let run = try session([".subscribe f Restaurant WHERE cuisine == 'french' OR seats > 70 ONCE", ".subscriptions"])
        #expect(run.status == 1)
        #expect(run.standardOutput.isEmpty)
        let error = lines(run.standardError)
        #expect(error.count == 3, "\(run.standardError)")
        #expect(error.first == #"error: 1:21: Unexpected expression: cuisine == "french" OR seats > 70"#)
        #expect(error.dropFirst().first == "  cuisine == 'french' OR seats > 70")
        #expect(error.last == "                      ^~")
    }

    @Test func subscriptionsUseTheCloudkitProfileEvenInExtended() throws {
        let run = try session([".profile extended", ".subscribe f Restaurant WHERE seats > 1 OR seats < 0"])
        #expect(run.status == 1)
        #expect(run.standardError.contains("Unexpected expression: seats > 1 OR"))
    }

    @Test func duplicateSubscriptionIsRefused() throws {
        let run = try session([
            ".subscribe a Restaurant WHERE cuisine == 'french'",
            ".subscribe b Restaurant WHERE cuisine = \"french\"",
            ".subscribe c Restaurant WHERE cuisine == 'french' ONCE",
            ".subscribe a Restaurant WHERE cuisine == 'japanese'",
            ".subscriptions",
        ], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardError == "error: subscription is duplicate of 'a'\n")
        // c differs by its options; saving under an existing ID replaces it.
        #expect(run.standardOutput.contains("(2 subscriptions)"))
        #expect(run.standardOutput.contains(#"cuisine == "japanese""#))
        #expect(run.standardOutput.contains("fires create,update,delete once"))
    }

    @Test func onceRemovesTheSubscriptionAfterItsFirstPush() throws {
        let run = try session([
            ".subscribe once Restaurant WHERE seats > 10 ONCE",
            ".subscriptions",
            #".save {"recordName":"a","recordType":"Restaurant","fields":{"seats":20}}"#,
            #".save {"recordName":"b","recordType":"Restaurant","fields":{"seats":30}}"#,
            ".subscriptions",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        let output = lines(run.standardOutput)
        #expect(output.contains { $0.hasPrefix("once ") && $0.hasSuffix("fires create,update,delete once") }, "\(run.standardOutput)")
        let pushes = try pushes(run.standardOutput)
        #expect(pushes.count == 1)
        #expect(pushes.first.flatMap { section($0)?["rid"] } == .string("a"))
        #expect(output.filter { $0.hasSuffix(" push") || $0.hasSuffix(" pushes") } == ["1 push", "0 pushes"])
        #expect(output.last == "no subscriptions in the public database (try .subscribe)")
    }

    @Test func zoneAndDatabaseSubscriptionsInThePrivateDatabase() throws {
        let inZone = #"{"recordName":"z1","recordType":"Note","zoneID":{"zoneName":"Notes"},"fields":{"text":"hi"}}"#
        let run = try session([
            ".subscribe q Note",
            ".database private",
            ".database",
            ".subscribe notes ZONE Notes ALERT 'zone changed'",
            ".subscribe everything DATABASE",
            ".subscriptions",
            ".save " + inZone,
            #".save {"recordName":"d1","recordType":"Note","fields":{"text":"default zone"}}"#,
            ".delete z1 Notes",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardError == "note: subscriptions are kept per database: removed 1 subscription\n")
        let output = lines(run.standardOutput)
        #expect(output.first == "private")
        #expect(output.contains { $0.hasPrefix("notes ") && $0.contains("zone Notes") && $0.hasSuffix(#"alert "zone changed""#) }, "\(run.standardOutput)")
        #expect(output.contains { $0.hasPrefix("everything ") && $0.contains("database") }, "\(run.standardOutput)")
        #expect(!output.contains { $0.hasPrefix("q ") })
        let pushes = try pushes(run.standardOutput)
        // The save in Notes fires both; the save in the default zone neither; the delete both again.
        #expect(output.filter { $0.hasSuffix(" push") || $0.hasSuffix(" pushes") } == ["2 pushes", "0 pushes", "2 pushes"])
        #expect(pushes.count == 4)
        guard pushes.count == 4 else { return }
        #expect(section(pushes[0], "fet")?["sid"] == .string("notes"))
        #expect(section(pushes[0], "fet")?["zid"] == .string("Notes"))
        #expect(section(pushes[0], "fet")?["dbs"] == .int(2))
        #expect(pushes[0]["payload"]?["aps"]?["alert"]?["body"] == .string("zone changed"))
        #expect(section(pushes[1], "met")?["sid"] == .string("everything"))
        #expect(section(pushes[1], "met")?["dbs"] == .int(2))
        #expect(section(pushes[2], "fet")?["sid"] == .string("notes"))
        #expect(section(pushes[3], "met")?["sid"] == .string("everything"))
    }

    @Test func subscriptionKindsTheDatabaseRefuses() throws {
        let run = try session([
            ".subscribe z ZONE Notes",
            ".subscribe d DATABASE",
            ".database shared",
            ".subscribe q Note",
            ".subscribe z ZONE Notes ONCE",
        ], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(lines(run.standardError) == [
            "error: subscription 'z': zone subscriptions are only supported in the private database",
            "error: subscription 'd': database subscriptions are not supported in the public database",
            "error: subscription 'q': query subscriptions are not supported in the shared database",
            "error: FIRES and ONCE apply to query subscriptions only",
        ])
    }

    @Test func badSubscribeSaveDeleteAndUnsubscribe() throws {
        let run = try session([
            ".subscribe",
            ".subscribe x",
            ".subscribe x Restaurant cuisine == 'french'",
            ".subscribe x Restaurant WHERE",
            ".subscribe x Restaurant FIRES create,destroy",
            ".unsubscribe nope",
            ".save {oops}",
            #".save {"recordName":"r"}"#,
            ".delete nope",
            ".delete",
            ".database elsewhere",
        ], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardOutput.isEmpty)
        let error = lines(run.standardError)
        #expect(error.count == 11, "\(run.standardError)")
        guard error.count == 11 else { return }
        #expect(error[0].hasPrefix("error: usage: .subscribe ID TYPE"))
        #expect(error[1].hasPrefix("error: usage: .subscribe ID TYPE"))
        #expect(error[2] == "error: expected WHERE, FIRES, ONCE or ALERT after the record type 'Restaurant', got 'cuisine'")
        #expect(error[3] == "error: WHERE needs a predicate")
        #expect(error[4] == #"error: malformed FIRES clause: expected FIRES create,update,delete, ONCE or ALERT "text""#, "\(error[4])")
        #expect(error[5] == "error: no subscription 'nope' in the public database")
        #expect(error[6].hasPrefix("error: .save: invalid JSON: "))
        #expect(error[7] == "error: .save: record 'r' has no \"recordType\" string")
        #expect(error[8] == "error: record 'nope' does not exist")
        #expect(error[9] == "error: usage: .delete NAME [ZONE]")
        #expect(error[10] == "error: usage: .database public|private|shared")
    }

    @Test func subscribeClausesAreSplitOutsideQuotes() throws {
        let run = try session([
            ".set minimum 10",
            ".subscribe s Restaurant WHERE name == 'ONCE ALERT \"x\"' AND seats > $minimum FIRES create, update ALERT 'it\\'s'",
            ".subscribe t Restaurant WHERE name IN {'FIRES', 'create'} ONCE",
            ".subscriptions",
            #".save {"recordName":"a","recordType":"Restaurant","fields":{"name":"ONCE ALERT \"x\"","seats":11}}"#,
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardOutput.contains(#"name == "ONCE ALERT \"x\"" AND seats > 10"#), "\(run.standardOutput)")
        #expect(run.standardOutput.contains(#"fires create,update alert "it's""#), "\(run.standardOutput)")
        #expect(run.standardOutput.contains(#"name IN {"FIRES", "create"}"#), "\(run.standardOutput)")
        let pushes = try pushes(run.standardOutput)
        #expect(pushes.count == 1)
        #expect(pushes.first.flatMap { section($0)?["sid"] } == .string("s"))
    }

    @Test func multiLineSaveContinues() throws {
        let run = try session([
            ".subscribe all Restaurant",
            #".save {"recordName":"m1","recordType":"Restaurant","#,
            #"      "fields":{"seats":4}}"#,
            ".mode names",
            "Restaurant",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput).suffix(2) == ["1 push", "m1"])
    }

    @Test func malformedRecordsFileLoadsNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("bad.ndjson")
        try #"{"recordName":"a","recordType":"T","fields":{}}"#.appending("\n{oops\n").write(to: file, atomically: true, encoding: .utf8)
        let run = try session([".load \(file.path)", ".types"], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardError.hasPrefix("error: \(file.path):2: "))
        #expect(run.standardOutput == "no records loaded (try .load FILE)\n")
    }

    @Test func quitStopsWithStatusZero() throws {
        let run = try session([".load \(Self.records)", ".quit", ".frobnicate"])
        #expect(run.status == 0)
        #expect(run.standardError.isEmpty)
    }

    @Test func badQueryLines() throws {
        let run = try session(["Restaurant cuisine == 'french'", "Restaurant WHERE", "Restaurant LIMIT 0", "Restaurant SORT BY seats UP", "== 3"],
                              arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(lines(run.standardError) == [
            "error: expected WHERE after the record type 'Restaurant'",
            "error: WHERE needs a predicate",
            "error: LIMIT needs a number of at least 1, got '0'",
            "error: sort direction must be ASC or DESC, got 'UP'",
            "error: expected 'TYPE [WHERE PREDICATE]' or a dot-command, got '==' (try .help)",
        ])
    }

    // MARK: - Through a pseudo-terminal

    static let hasPexpect: Bool = {
        let process = SpawnedProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", "import pexpect"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }()

    /// Types `Resta<TAB> WHERE cui<TAB> == 'french'` on a pseudo-terminal (python3's pexpect) and reads
    /// the screen back through a small VT100 emulator; also Ctrl-C on a half-typed line and `.quit`.
    @Test(.enabled(if: hasPexpect, "needs python3 with pexpect"), .timeLimit(.minutes(1)))
    func tabCompletionOnATerminal() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let driver = directory.appendingPathComponent("drive_shell.py")
        try Self.driverScript.write(to: driver, atomically: true, encoding: .utf8)
        let transcript = directory.appendingPathComponent("screen.txt")

        let process = SpawnedProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", driver.path, KQueryBinary.url.path, Self.records, directory.path, transcript.path]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(45)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            Issue.record("the pty driver did not finish in time")
            return
        }
        let screen = (try? String(contentsOf: transcript, encoding: .utf8)) ?? ""
        let rows = screen.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(rows.first == "STATUS exit 0", "\(screen)")
        #expect(rows.contains("kquery> Restaurant WHERE cuisine == 'french'"), "\(screen)")
        #expect(rows.contains { $0.hasPrefix("p1 ") && $0.contains("Le Petit Zinc") }, "\(screen)")
        #expect(rows.contains { $0.hasPrefix("p3 ") && $0.contains("Chez Rosé") }, "\(screen)")
        #expect(rows.contains { $0.hasPrefix("p5 ") && $0.contains("Far Away Inn") }, "\(screen)")
        #expect(rows.contains("(3 records)"), "\(screen)")
        // Ctrl-C dropped the half-typed line: the next prompt ran .types, and nothing failed.
        #expect(rows.contains("kquery> Restaurant WHERE sea"), "\(screen)")
        #expect(rows.contains("Restaurant  5"), "\(screen)")
        #expect(!screen.contains("error:"), "\(screen)")
        // History is kept in $HOME/.kquery_history, with the completed words.
        let history = (try? String(contentsOf: directory.appendingPathComponent(".kquery_history"), encoding: .utf8)) ?? ""
        #expect(history.contains(#"Restaurant\040WHERE\040cuisine\040==\040'french'"#) || history.contains("Restaurant WHERE cuisine == 'french'"), "\(history)")
        #expect(!history.contains("WHERE sea"), "\(history)")
    }

    static let driverScript = #"""
        import os, re, sys
        import pexpect

        binary, fixture, home, transcript_path = sys.argv[1:5]

        class Screen:
            """A VT100 subset, enough for libedit's redraws: CR, LF, BS, CHA, CUF, CUB, CUU, CUD, EL, ED."""
            def __init__(self):
                self.lines = [[]]; self.row = 0; self.col = 0
            def down(self, n):
                self.row += n
                while len(self.lines) <= self.row: self.lines.append([])
            def put(self, ch):
                line = self.lines[self.row]
                while len(line) < self.col: line.append(' ')
                if self.col < len(line): line[self.col] = ch
                else: line.append(ch)
                self.col += 1
            def feed(self, text):
                i = 0
                while i < len(text):
                    ch = text[i]
                    if ch == '\x1b':
                        m = re.match(r'\x1b\[([0-9;?]*)([A-Za-z@])', text[i:])
                        if not m:
                            i += 2; continue
                        args = [int(a) for a in m.group(1).replace('?', '').split(';') if a]
                        n = args[0] if args else 1
                        cmd = m.group(2)
                        if cmd == 'G': self.col = max(0, n - 1)
                        elif cmd == 'C': self.col += n
                        elif cmd == 'D': self.col = max(0, self.col - n)
                        elif cmd == 'A': self.row = max(0, self.row - n)
                        elif cmd == 'B': self.down(n)
                        elif cmd == 'K': del self.lines[self.row][self.col:]
                        elif cmd == 'J': del self.lines[self.row][self.col:]; del self.lines[self.row + 1:]
                        i += len(m.group(0)); continue
                    if ch == '\r': self.col = 0
                    elif ch == '\n': self.down(1)
                    elif ch == '\b': self.col = max(0, self.col - 1)
                    elif ord(ch) >= 32: self.put(ch)
                    i += 1
            def text(self):
                return '\n'.join(''.join(line).rstrip() for line in self.lines)

        env = dict(os.environ)
        env['HOME'] = home
        env['TERM'] = 'xterm'
        env.pop('NO_COLOR', None)
        screen = Screen()
        child = pexpect.spawn(binary, [], env=env, encoding='utf-8', timeout=10, dimensions=(40, 220))

        def wait(text):
            child.expect_exact(text)
            screen.feed(child.before + child.after)

        status = 'not finished'
        try:
            wait('kquery> ')
            child.send('.load ' + fixture + '\r')
            wait('loaded 6 records')
            wait('kquery> ')
            child.send('Resta\t')
            wait('urant ')
            child.send('WHERE cui\t')
            wait('sine ')
            child.send("== 'french'\r")
            wait('(3 records)')
            wait('kquery> ')
            child.send('Restaurant WHERE sea')
            wait('sea')
            child.send('\x03')
            wait('kquery> ')
            child.send('.types\r')
            wait('Restaurant  5')
            wait('kquery> ')
            child.send('.quit\r')
            child.expect(pexpect.EOF)
            screen.feed(child.before)
            child.close()
            status = 'exit %s' % child.exitstatus
        except Exception as error:
            status = 'failed: %s: %s' % (type(error).__name__, str(error).splitlines()[0] if str(error) else '')
            child.close(force=True)
        with open(transcript_path, 'w') as out:
            out.write('STATUS ' + status + '\n')
            out.write(screen.text() + '\n')
        """#
}
