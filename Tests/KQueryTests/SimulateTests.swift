import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery

/// `kquery simulate` end to end, and the Web Services subscription and filterBy readers.
@Suite("Simulate")
struct SimulateTests {
    func file(_ contents: String) throws -> String {
        let url = URL(fileURLWithPath: TemporaryFiles.path("kquery-simulate"))
        try contents.write(to: url, atomically: true, encoding: .utf8)
        return url.path
    }

    /// Each output line parsed, with the random notification ID checked and removed.
    func pushes(_ output: String) throws -> [JSON] {
        try output.split(separator: "\n").map { line in
            let json = try JSON.parse(String(line))
            guard case .object(var envelope) = json, case .object(var payload)? = json["payload"], case .object(var ck)? = payload.first(where: { $0.0 == "ck" }).map(\.1) else {
                Issue.record("not a push envelope: \(line)")
                return json
            }
            #expect(ck.first { $0.0 == "nid" }?.1.stringValue?.count == 36)
            ck.removeAll { $0.0 == "nid" }
            payload = payload.map { $0.0 == "ck" ? ("ck", .object(ck)) : $0 }
            envelope = envelope.map { $0.0 == "payload" ? ("payload", .object(payload)) : $0 }
            return .object(envelope)
        }
    }

    static let subscriptions = """
        [{"subscriptionID":"art-by-mei","subscriptionType":"query",
          "query":{"recordType":"Artwork","filterBy":[{"comparator":"EQUALS","fieldName":"artist","fieldValue":{"value":{"recordName":"mei"},"type":"REFERENCE"}}]},
          "firesOn":["create","update"],
          "notificationInfo":{"alertBody":"New artwork by Mei Chen","shouldBadge":true,"soundName":"default","desiredKeys":["title"],"category":"NEW_ART"}},
         {"subscriptionID":"cheap","subscriptionType":"query","query":{"recordType":"Artwork"},"predicate":"price < 100","firesOnce":true,
          "notificationInfo":{"shouldSendContentAvailable":true}}]
        """

    @Test func pushesForAChangeStream() throws {
        let changes = try file("""
            {"operationType":"create","record":{"recordName":"a1","recordType":"Artwork","fields":{"title":"Sunset","artist":{"recordName":"mei"},"price":50}}}
            {"operationType":"update","record":{"recordName":"a1","recordType":"Artwork","recordChangeTag":"kq1","fields":{"price":40}}}
            {"operationType":"delete","record":{"recordName":"a1"}}
            """)
        let run = try KQueryBinary.run([
            "simulate", "--subscriptions", try file(Self.subscriptions), "--changes", changes, "--container", "iCloud.com.example.Gallery",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try pushes(run.standardOutput).map(\.serialized)
        #expect(lines == [
            #"{"payload":{"aps":{"alert":{"body":"New artwork by Mei Chen"},"badge":1,"sound":"default","category":"NEW_ART"},"ck":{"ce":2,"cid":"iCloud.com.example.Gallery","ckuserid":"_defaultUser","qry":{"sid":"art-by-mei","rid":"a1","zid":"_defaultZone","zoid":"__defaultOwner__","dbs":1,"fo":1,"af":{"title":"Sunset"}}}},"priority":10,"pushType":"alert"}"#,
            #"{"payload":{"aps":{"content-available":1},"ck":{"ce":2,"cid":"iCloud.com.example.Gallery","ckuserid":"_defaultUser","qry":{"sid":"cheap","rid":"a1","zid":"_defaultZone","zoid":"__defaultOwner__","dbs":1,"fo":1}}},"priority":5,"pushType":"background"}"#,
            #"{"payload":{"aps":{"alert":{"body":"New artwork by Mei Chen"},"badge":1,"sound":"default","category":"NEW_ART"},"ck":{"ce":2,"cid":"iCloud.com.example.Gallery","ckuserid":"_defaultUser","qry":{"sid":"art-by-mei","rid":"a1","zid":"_defaultZone","zoid":"__defaultOwner__","dbs":1,"fo":2,"af":{"title":"Sunset"}}}},"priority":10,"pushType":"alert"}"#,
        ])
    }

    @Test func zoneAndDatabasePushesInThePrivateDatabase() throws {
        let subscriptions = try file("""
            [{"subscriptionID":"zone","subscriptionType":"zone","zoneID":{"zoneName":"Gallery","ownerRecordName":"_owner"}},
             {"subscriptionID":"db","subscriptionType":"database","notificationInfo":{"shouldSendContentAvailable":true}}]
            """)
        let changes = try file("""
            {"operationType":"create","record":{"recordName":"a","recordType":"Artwork","zoneID":{"zoneName":"Gallery","ownerRecordName":"_owner"}}}
            {"operationType":"create","record":{"recordName":"b","recordType":"Artwork"}}
            """)
        let run = try KQueryBinary.run(["simulate", "--subscriptions", subscriptions, "--changes", changes, "--database", "private", "--environment", "production"])
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try pushes(run.standardOutput)
        #expect(lines.count == 2)
        #expect(lines.first?["payload"]?["ck"]?["fet"]?["sid"] == .string("zone"))
        #expect(lines.first?["payload"]?["ck"]?["ce"] == .int(1))
        #expect(lines.last?["payload"]?["ck"]?["met"]?["sid"] == .string("db"))
        #expect(lines.last?["payload"]?["ck"]?["met"]?["dbs"] == .int(2))
    }

    @Test(arguments: [
        (#"[{"subscriptionID":"x","subscriptionType":"query","query":{"recordType":"T"},"predicate":"a == 1 OR b == 2"}]"#, "subscription #1: subscription 'x': 1:8: Unexpected expression: a == 1 OR b == 2"),
        (#"[{"subscriptionID":"x","subscriptionType":"zone","zoneID":{"zoneName":"Z"}}]"#, "zone subscriptions are only supported in the private database"),
        (#"[{"subscriptionID":"x","subscriptionType":"query","query":{"recordType":"T"},"predicate":"a == 1"},{"subscriptionID":"y","subscriptionType":"query","query":{"recordType":"T"},"predicate":"1 == a"}]"#, "subscription is duplicate of 'x'"),
        (#"[{"subscriptionID":"x","subscriptionType":"query","query":{"recordType":"T"},"firesOn":[]}]"#, "options must fire on at least one"),
        (#"[{"subscriptionID":"x","subscriptionType":"query","query":{"recordType":"T","filterBy":[{"comparator":"SOUNDS_LIKE","fieldName":"a"}]}}]"#, "Unsupported comparator: SOUNDS_LIKE"),
    ])
    func refusedSubscriptionsExitOne(subscriptions: String, message: String) throws {
        let run = try KQueryBinary.run(["simulate", "--subscriptions", try file(subscriptions), "--changes", try file("")])
        #expect(run.status == 1)
        #expect(run.standardError.contains(message), "\(run.standardError)")
    }

    @Test(arguments: [
        (#"{"operationType":"update","record":{"recordName":"nope","recordType":"T"}}"#, ":1: record 'nope' does not exist"),
        ("{\"operationType\":\"create\",\"record\":{\"recordName\":\"a\",\"recordType\":\"T\"}}\n{\"operationType\":\"create\",\"record\":{\"recordName\":\"a\",\"recordType\":\"T\"}}", ":2: record 'a' already exists"),
        ("{\"operationType\":\"create\",\"record\":{\"recordName\":\"a\",\"recordType\":\"T\"}}\n{\"operationType\":\"update\",\"record\":{\"recordName\":\"a\",\"recordType\":\"T\",\"recordChangeTag\":\"old\"}}", ":2: conflict: record 'a' has changed"),
    ])
    func refusedOperationsExitOneNamingTheLine(changes: String, message: String) throws {
        let run = try KQueryBinary.run(["simulate", "--subscriptions", try file("[]"), "--changes", try file(changes)])
        #expect(run.status == 1)
        #expect(run.standardError.contains(message), "\(run.standardError)")
    }

    @Test func malformedFilesExitTwo() throws {
        let bad = try KQueryBinary.run(["simulate", "--subscriptions", try file("[{"), "--changes", try file("")])
        #expect(bad.status == 2)
        let badChange = try KQueryBinary.run(["simulate", "--subscriptions", try file("[]"), "--changes", try file(#"{"operationType":"explode","record":{}}"#)])
        #expect(badChange.status == 2)
        #expect(badChange.standardError.contains(":1:"))
    }

    /// filterBy read back gives the condition it was written from (SPEC §2.1's comparator column).
    @Test(arguments: [
        "cuisine == 'french'", "seats != 4", "seats < 4", "seats <= 4", "seats > 4", "seats >= 4", "NOT (c IN {'a'})", "c IN {'a', 'b'}",
        "name BEGINSWITH 'Ch'", "NOT (name BEGINSWITH 'Ch')", "tags CONTAINS 'w'", "NOT (tags CONTAINS 'w')", "ANY {'a', 'b'} IN tags",
        "ALL {'a', 'b'} IN tags", "ANY tags BEGINSWITH 't'", "ALL tokenize('after session', 'Cdl') IN allTokens", "SELF CONTAINS 'rose'",
        "distanceToLocation:fromLocation:(loc, location(1.5, 2)) < 100", "chef == reference('alain')", "creationDate > date('2020-01-01')",
        "___parent == nil", "___share != nil", "a == 1 AND b == 'x' AND tags CONTAINS 'y'",
        "NOT (seats < 4)", "NONE tags == 'w'", "allTokens TOKENMATCHES[cdl] 'x y'", "ALL SELF CONTAINS 'x y'", "ANY tags IN {'a'}",
    ])
    func filterByRoundTrip(predicate: String) throws {
        let condition = try ValidatedPredicate(predicate).condition
        let filters = try condition.webServicesFilters(now: 0)
        #expect(try Condition(webServicesFilters: filters) == condition)
    }
}
