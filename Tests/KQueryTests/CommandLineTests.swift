import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery
@testable import kquery

/// `kquery check` and `kquery query` through the binary: outputs, exit statuses, hostile input.
@Suite("Command line")
struct CommandLineTests {
    static var restaurants: String { Fixtures.url("restaurants.ndjson").path }

    func temporaryFile(_ contents: String, name: String = UUID().uuidString) throws -> String {
        let url = URL(fileURLWithPath: TemporaryFiles.register(NSTemporaryDirectory() + "kquery-test-\(name)"))
        try contents.write(to: url, atomically: true, encoding: .utf8)
        return url.path
    }

    @Test func checkPrintsTheCanonicalForm() throws {
        let run = try KQueryBinary.run(["check", "25 >= seats && cuisine = 'french'"])
        #expect(run.status == 0)
        #expect(run.standardOutput == "25 >= seats AND cuisine == \"french\"\n")
        #expect(run.standardError.isEmpty)
    }

    @Test func checkPrintsFilterBy() throws {
        let run = try KQueryBinary.run(["check", "--format", "filterBy", "--arg", "3", "seats > %@"])
        #expect(run.status == 0)
        #expect(run.standardOutput == #"[{"comparator":"GREATER_THAN","fieldName":"seats","fieldValue":{"value":3,"type":"INT64"}}]"# + "\n")
        let extended = try KQueryBinary.run(["check", "--profile", "extended", "--format", "filterBy", "a == 1 OR b == 2"])
        #expect(extended.status == 1)
        #expect(extended.standardError.contains("OR has no Web Services form"))
    }

    @Test func invalidPredicateShowsCaretAndExitsOne() throws {
        let run = try KQueryBinary.run(["check", "cuisine == 'french' OR seats > 70"])
        #expect(run.status == 1)
        #expect(run.standardOutput.isEmpty)
        let lines = run.standardError.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines[0] == #"error: 1:21: Unexpected expression: cuisine == "french" OR seats > 70"#)
        #expect(lines[1] == "  cuisine == 'french' OR seats > 70")
        #expect(lines[2] == "                      ^~")
    }

    /// A predicate may start with `-` (a negative number): it is still the predicate, not an option,
    /// in every subcommand, and a negative `--arg` stays that option's value.
    @Test func predicatesStartingWithAMinus() throws {
        let check = try KQueryBinary.run(["check", "--format", "filterBy", "-27 <= seats AND seats < 30"])
        #expect(check.status == 0, "\(check.standardError)")
        #expect(check.standardOutput.contains(#"{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":-27,"type":"INT64"}}"#))
        let query = try KQueryBinary.run(["query", "--records", Self.restaurants, "--type", "Restaurant", "--format", "names", "-1 < seats AND seats <= 25"])
        #expect(query.status == 0, "\(query.standardError)")
        #expect(query.standardOutput.split(separator: "\n").sorted() == ["p2", "p3"])
        let argument = try KQueryBinary.run(["query", "--records", Self.restaurants, "--type", "Restaurant", "--format", "names", "--arg", "-5", "seats > %@"])
        #expect(argument.status == 0, "\(argument.standardError)")
        #expect(argument.standardOutput.split(separator: "\n").count == 5)
        let invalid = try KQueryBinary.run(["check", "-5"])
        #expect(invalid.status == 1)
        #expect(invalid.standardError.contains("1:"))
    }

    @Test func dashWordsMoveBehindTheTerminator() {
        #expect(KQueryCommand.arguments(["check", "-1 < n"]) == ["check", "--", "-1 < n"])
        #expect(KQueryCommand.arguments(["query", "-1 < n", "--type", "T"]) == ["query", "--type", "T", "--", "-1 < n"])
        #expect(KQueryCommand.arguments(["query", "--limit", "-3", "n > 1"]) == ["query", "--limit=-3", "n > 1"])
        #expect(KQueryCommand.arguments(["check", "--profile", "extended", "a == 1"]) == ["check", "--profile", "extended", "a == 1"])
        #expect(KQueryCommand.arguments(["check", "--", "-1 < n"]) == ["check", "--", "-1 < n"])
        #expect(KQueryCommand.arguments(["check", "-h"]) == ["check", "-h"])
    }

    @Test(arguments: [
        ["check"], ["check", "--profile", "nosuch", "a == 1"], ["check", "--format", "xml", "a == 1"],
        ["check", "--arg", "{bad", "a == %@"], ["query", "--type", "T", "a == 1"], ["query", "--records", "x", "--type", "T", "--limit", "0", "a == 1"],
        ["query", "--records", "x", "--type", "T", "--sort-near", "loc@95,0", "a == 1"], ["nosuchcommand"],
    ])
    func usageErrorsExitTwo(arguments: [String]) throws {
        let run = try KQueryBinary.run(arguments)
        #expect(run.status == 2, "\(arguments): \(run.standardError)")
        #expect(!run.standardError.isEmpty)
    }

    /// Hostile predicates from a file end in a clean error (or answer), never a crash.
    @Test(arguments: [
        String(repeating: "(", count: 100_000) + "a == 1" + String(repeating: ")", count: 100_000),
        String(repeating: "NOT ", count: 50_000) + "a == 1",
        "a IN {" + (0..<20_000).map(String.init).joined(separator: ",") + "}",
        "name MATCHES '" + String(repeating: "(a+)+", count: 2_000) + "'",
    ])
    func hostilePredicatesFromAFile(text: String) throws {
        let path = try temporaryFile(text)
        let run = try KQueryBinary.run(["check", "--profile", "extended", "@" + path])
        #expect(run.status == 1, "\(run.standardError.prefix(200))")
        #expect(run.standardError.hasPrefix("error: 1:"))
    }

    @Test func predicateFileIsRead() throws {
        let path = try temporaryFile("seats > 3\n")
        let run = try KQueryBinary.run(["query", "--records", Self.restaurants, "--type", "Restaurant", "--format", "count", "@" + path])
        #expect(run.status == 0)
        #expect(run.standardOutput == "5\n")
        let missing = try KQueryBinary.run(["check", "@/nonexistent/predicate.txt"])
        #expect(missing.status == 2)
    }

    @Test func malformedRecordsFileExitsTwoNamingTheLine() throws {
        let path = try temporaryFile("{\"recordName\":\"a\",\"recordType\":\"T\"}\n{\"recordName\":\"b\",\"recordType\":\"T\",\"fields\":{\"x\":[1,\"a\"]}}\n")
        let run = try KQueryBinary.run(["query", "--records", path, "--type", "T", "TRUEPREDICATE"])
        #expect(run.status == 2)
        #expect(run.standardOutput.isEmpty)
        #expect(run.standardError.contains("\(path):2: record 'b', field 'x': a list mixes INT64 and STRING"), "\(run.standardError)")
    }

    @Test func outputFormats() throws {
        let base = ["query", "--records", Self.restaurants, "--type", "Restaurant", "--sort", "seats:desc"]
        let names = try KQueryBinary.run(base + ["--format", "names", "cuisine == 'french'"])
        #expect(names.standardOutput == "p5\np1\np3\n")
        let count = try KQueryBinary.run(base + ["--format", "count", "cuisine == 'french'"])
        #expect(count.standardOutput == "3\n")
        let ndjson = try KQueryBinary.run(base + ["--desired-keys", "name", "seats == 12"])
        #expect(ndjson.standardOutput == #"{"recordName":"p2","recordType":"Restaurant","fields":{"name":{"value":"Sushi Kai","type":"STRING"}}}"# + "\n")
        let table = try KQueryBinary.run(base + ["--format", "table", "--desired-keys", "name,seats", "cuisine == 'french'"])
        #expect(table.standardOutput == """
            recordName  name           seats
            ----------  -------------  -----
            p5          Far Away Inn   80
            p1          Le Petit Zinc  40
            p3          Chez Rosé      25.0
            (3 records)

            """)
    }

    @Test func nowIsInjectable() throws {
        let base = ["query", "--records", Self.restaurants, "--type", "Restaurant", "--format", "names"]
        let before = try KQueryBinary.run(base + ["--now", "2005-01-01T00:00:00Z", "opened < now()"])
        #expect(before.standardOutput == "p5\n")
        let bad = try KQueryBinary.run(base + ["--now", "yesterday", "opened < now()"])
        #expect(bad.status == 2)
    }

    /// Paging with the printed cursor returns every result exactly once, in order.
    @Test func cursorsPageThroughEverything() throws {
        let base = ["query", "--records", Self.restaurants, "--type", "Restaurant", "--format", "names", "--sort", "score:desc", "--limit", "2"]
        var seen: [String] = []
        var cursor: [String] = []
        for _ in 0..<5 {
            let run = try KQueryBinary.run(base + cursor + ["TRUEPREDICATE"])
            #expect(run.status == 0)
            seen += run.standardOutput.split(separator: "\n").map(String.init)
            guard let line = run.standardError.split(separator: "\n").first(where: { $0.hasPrefix("next page: --cursor ") }) else { break }
            cursor = ["--cursor", String(line.dropFirst("next page: --cursor ".count))]
        }
        #expect(seen == ["p2", "p1", "p4", "p3", "p5"])
        let foreign = try KQueryBinary.run(["query", "--records", Self.restaurants, "--type", "Restaurant"] + cursor + ["seats > 1"])
        #expect(foreign.status == 2)
    }
}

@Suite("Query paging")
struct QueryPagingTests {
    /// Pages of every size cover the results exactly once, for several sort orders, including
    /// when records are added and removed between pages.
    @Test(arguments: [1, 2, 3, 7, 50])
    func pagesCoverEverythingOnce(limit: Int) throws {
        var rng = SplitMix(seed: UInt64(limit))
        var records = (0..<60).map { RandomData.record(&rng, index: $0) }
        let orders: [[KQuery.SortDescriptor]] = [
            [], [KQuery.SortDescriptor("n")], [KQuery.SortDescriptor("s", ascending: false), KQuery.SortDescriptor("t")],
            [KQuery.SortDescriptor(distanceOf: "loc", from: Location(latitude: 48.85, longitude: 2.35))],
        ]
        for order in orders {
            let predicate = try ValidatedPredicate("TRUEPREDICATE")
            let all = try Query(recordType: "T", predicate: predicate, sortDescriptors: order).perform(on: records, now: 0).records.map(\.recordID)
            let paged = Query(recordType: "T", predicate: predicate, sortDescriptors: order, resultsLimit: limit)
            var seen: [RecordID] = []
            var result = try paged.perform(on: records, now: 0)
            seen += result.records.map(\.recordID)
            while let cursor = result.cursor {
                result = try paged.perform(on: records, now: 0, cursor: QueryCursor(token: cursor.token))
                #expect(result.records.count <= limit)
                seen += result.records.map(\.recordID)
            }
            #expect(seen == all)
        }
        // Saving records between pages: nothing that matched throughout is skipped or repeated.
        let predicate = try ValidatedPredicate("n != nil", profile: .extended)
        let paged = Query(recordType: "T", predicate: predicate, sortDescriptors: [KQuery.SortDescriptor("n")], resultsLimit: limit)
        let stable = Set(try Query(recordType: "T", predicate: predicate).perform(on: records, now: 0).records.map(\.recordID))
        var seen: [RecordID] = []
        var result = try paged.perform(on: records, now: 0)
        seen += result.records.map(\.recordID)
        var added = 0
        while let cursor = result.cursor {
            records.append(Record(recordType: "T", recordName: "new\(added)", fields: ["n": .int64(Int64(added % 50))]))
            added += 1
            result = try paged.perform(on: records, now: 0, cursor: cursor)
            seen += result.records.map(\.recordID)
        }
        #expect(Set(seen).count == seen.count)
        #expect(stable.isSubset(of: Set(seen)))
    }
}
