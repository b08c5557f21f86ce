import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery

/// `kquery users` through the binary: add, replace and list the local users of a data directory,
/// and its refusals (exit 2).
@Suite("Users command line")
struct UsersCommandLineTests {
    @Test func addReplaceAndList() throws {
        let directory = TemporaryFiles.path("kquery-users")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let data = ["users", "--data", directory]
        var run = try KQueryBinary.run(data + ["add", "_ann", "--email", "ann@example.com", "--phone", "+1 555 010 0100", "--given", "Ann", "--family", "Lee", "--discoverable"])
        #expect(run.status == 0, "\(run.standardError)")
        run = try KQueryBinary.run(data + ["add", "_bo"])
        #expect(run.status == 0, "\(run.standardError)")
        run = try KQueryBinary.run(data + ["list"])
        #expect(run.status == 0)
        var lines = run.standardOutput.split(separator: "\n").map { try? JSON.parse(String($0)) }
        #expect(lines.count == 2)
        #expect(lines[0]?["name"] == .string("_ann"))
        #expect(lines[0]?["emailAddress"] == .string("ann@example.com"))
        #expect(lines[0]?["givenName"] == .string("Ann"))
        #expect(lines[0]?["discoverable"] == .bool(true))
        #expect(lines[1]?["name"] == .string("_bo"))
        #expect(lines[1]?["discoverable"] == .bool(false))
        // Adding a name again replaces the user.
        run = try KQueryBinary.run(data + ["add", "_ann", "--email", "ann@example.org"])
        #expect(run.status == 0)
        lines = try KQueryBinary.run(data + ["list"]).standardOutput.split(separator: "\n").map { try? JSON.parse(String($0)) }
        #expect(lines.count == 2)
        #expect(lines[0]?["emailAddress"] == .string("ann@example.org"))
        #expect(lines[0]?["discoverable"] == .bool(false))
        #expect(lines[0]?["givenName"] == nil)
    }

    @Test(arguments: [
        ["add"], ["add", "_a", "--email", "not-an-address"], ["add", "_a", "--phone", "call me"], ["add", "two words"],
        ["list", "_a"], ["list", "--discoverable"], ["remove", "_a"], ["add", "_a", "--unknown"],
    ])
    func badArgumentsExitTwo(arguments: [String]) throws {
        let directory = TemporaryFiles.path("kquery-users")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let run = try KQueryBinary.run(["users", "--data", directory] + arguments)
        #expect(run.status == 2, "\(arguments): \(run.standardError)")
        #expect(!run.standardError.isEmpty)
    }

    /// A query subscription read from a file with an empty `filterBy` is TRUEPREDICATE, as one
    /// without it is.
    @Test func subscriptionsWithAnEmptyFilterBySave() throws {
        let db = ContainerCommandLineTests.temporaryPath("empty-filter")
        defer { try? FileManager.default.removeItem(atPath: db) }
        let file = try ContainerCommandLineTests.file("""
            {"subscriptionID": "all", "subscriptionType": "query", "query": {"recordType": "Note", "filterBy": []}}
            """)
        let run = try KQueryBinary.run(["subscriptions", "--db", db, "--user", "_alice", "--save", file])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardOutput.contains(#""predicate":"TRUEPREDICATE""#))
    }
}
