import Hummingbird
import KQuery
import KQueryServer
import Testing

/// What real CloudKit clients (MistKit, CloudKit JS) tripped on, over HTTP on loopback (SPEC §11).
@Suite struct ServerClientCompatibilityTests {
    static let rotated = "X-Apple-CloudKit-Web-Auth-Token"

    /// An empty `filterBy` is TRUEPREDICATE: a query subscription with one is saved, and a query
    /// with one finds every record of the type.
    @Test func anEmptyFilterByMatchesEverything() async throws {
        try await ServerHarness().run { c in
            let alice = "_alice"
            var answer = try await c.post("private", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a", "recordType": "Note"}},
                                {"operationType": "create", "record": {"recordName": "b", "recordType": "Note"}}]}
                """, user: alice)
            #expect(answer.status == 200)
            answer = try await c.post("private", "records/query", #"{"query": {"recordType": "Note", "filterBy": []}}"#, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue }.sorted() == ["a", "b"])
            answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "all-notes", "subscriptionType": "query",
                  "query": {"recordType": "Note", "filterBy": []}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
                """, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["subscriptions"]?[0]?["serverErrorCode"] == nil, "\(answer.text)")
            #expect(answer.json["subscriptions"]?[0]?["predicate"] == .string("TRUEPREDICATE"))
        }
    }

    /// A delete's result names the record's type (and its zone outside the default one): MistKit
    /// takes a result without `recordType` for an error.
    @Test(arguments: [nil, "Notes"] as [String?]) func aDeletionAnswersItsRecordType(zone: String?) async throws {
        try await ServerHarness().run { c in
            let alice = "_alice"
            let zoneMember = zone.map { #""zoneID": {"zoneName": "\#($0)"}, "# } ?? ""
            if let zone {
                let created = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "\#(zone)"}}}]}"#, user: alice)
                #expect(created.status == 200)
            }
            var answer = try await c.post("private", "records/modify", #"{\#(zoneMember)"operations": [{"operationType": "create", "record": {"recordName": "n", "recordType": "Note"}}]}"#, user: alice)
            #expect(answer.status == 200)
            answer = try await c.post("private", "records/modify", #"{\#(zoneMember)"operations": [{"operationType": "forceDelete", "record": {"recordName": "n"}}]}"#, user: alice)
            #expect(answer.status == 200)
            let result = try #require(answer.json["records"]?[0])
            #expect(result["recordName"] == .string("n"))
            #expect(result["recordType"] == .string("Note"))
            #expect(result["deleted"] == .bool(true))
            #expect(result["zoneID"]?["zoneName"] == zone.map(JSON.string))
        }
    }

    /// `created` and `modified` are `{timestamp, userRecordName, deviceID}` in every answer that
    /// carries records: modify and lookup (the JSON tree) and query (the byte writer).
    @Test func recordStampsCarryADeviceID() async throws {
        try await ServerHarness().run { c in
            let alice = "_alice"
            let saved = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "n", "recordType": "Note"}}]}"#, user: alice)
            let looked = try await c.post("private", "records/lookup", #"{"records": [{"recordName": "n"}]}"#, user: alice)
            let queried = try await c.post("private", "records/query", #"{"query": {"recordType": "Note"}}"#, user: alice)
            for answer in [saved, looked, queried] {
                let record = try #require(answer.json["records"]?[0])
                for stamp in ["created", "modified"] {
                    #expect(record[stamp]?["timestamp"]?.int64Value != nil)
                    #expect(record[stamp]?["userRecordName"] == .string(alice))
                    #expect(record[stamp]?["deviceID"]?.stringValue?.isEmpty == false, "\(answer.text)")
                }
            }
        }
    }

    /// CloudKit JS sends `ckWebAuthToken=null` (or `undefined`, or nothing) when nobody is signed
    /// in: no token, not a bad one. Public reads work; private ones ask for sign-in, naming a page.
    @Test(arguments: ["null", "undefined", ""]) func anAbsentTokenIsNoToken(value: String) async throws {
        try await ServerHarness().run { c in
            let body = #"{"query": {"recordType": "Note"}}"#
            var answer = try await c.send(.post, c.path("public", "records/query"), body: body, query: ["ckWebAuthToken=\(value)"])
            #expect(answer.status == 200, "\(answer.text)")
            answer = try await c.send(.post, c.path("private", "records/query"), body: body, query: ["ckWebAuthToken=\(value)"])
            #expect(answer.status == 421)
            #expect(answer.json["serverErrorCode"] == .string("AUTHENTICATION_REQUIRED"))
            let redirect = try #require(answer.json["redirectURL"]?.stringValue)
            #expect(redirect == "http://127.0.0.1:\(c.port)/signin")
            let page = try await c.send(.get, "/signin", apiToken: nil)
            #expect(page.status == 200)
            #expect(page.text.contains("kquery token --data"))
        }
    }

    /// Every 421 names where to sign in, whichever check refused the request.
    @Test func everyAuthenticationRequiredAnswerHasARedirectURL() async throws {
        try await ServerHarness().run { c in
            let answers = [
                try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#, apiToken: nil),
                try await c.get("public", "users/current"),
                try await c.get("private", "zones/list"),
                try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}"),
            ]
            for answer in answers {
                #expect(answer.status == 421)
                #expect(answer.json["redirectURL"]?.stringValue?.hasSuffix("/signin") == true, "\(answer.text)")
            }
        }
    }

    /// A query in a zone that does not exist is ZONE_NOT_FOUND, as saves and change fetches are;
    /// the default zone always exists.
    @Test func aQueryInAMissingZoneIsZoneNotFound() async throws {
        try await ServerHarness().run { c in
            var answer = try await c.post("private", "records/query", #"{"zoneID": {"zoneName": "Nope"}, "query": {"recordType": "Note"}}"#, user: "_alice")
            #expect(answer.status == 404)
            #expect(answer.json["serverErrorCode"] == .string("ZONE_NOT_FOUND"))
            answer = try await c.post("public", "records/query", #"{"zoneID": {"zoneName": "Nope"}, "query": {"recordType": "Note"}}"#)
            #expect(answer.status == 404)
            answer = try await c.post("private", "records/query", #"{"zoneID": {"zoneName": "_defaultZone"}, "query": {"recordType": "Note"}}"#, user: "_alice")
            #expect(answer.status == 200)
        }
    }

    /// With single-use tokens, an answer that fails spends nothing and hands out nothing: CloudKit
    /// JS keeps its token then, and its next request must still be taken.
    @Test func aFailedRequestDoesNotSpendASingleUseToken() async throws {
        try await ServerHarness { $0.singleUseWebAuthTokens = true }.run { c in
            let token = c.token("_alice")
            let failures = [
                try await c.send(.post, c.path("private", "records/query"), body: "{not json", query: ["ckWebAuthToken=\(token)"]),
                try await c.send(.post, c.path("private", "records/query"), body: #"{"zoneID": {"zoneName": "Nope"}, "query": {"recordType": "T"}}"#,
                                 query: ["ckWebAuthToken=\(token)"]),
            ]
            for failure in failures {
                #expect(failure.status >= 400)
                #expect(failure.header(Self.rotated) == nil)
            }
            let good = try await c.send(.post, c.path("private", "records/query"), body: #"{"query": {"recordType": "T"}}"#, query: ["ckWebAuthToken=\(token)"])
            #expect(good.status == 200, "\(good.text)")
            let next = try #require(good.header(Self.rotated))
            // Now it is spent, and the next one works.
            let reused = try await c.send(.post, c.path("private", "records/query"), body: #"{"query": {"recordType": "T"}}"#, query: ["ckWebAuthToken=\(token)"])
            #expect(reused.status == 401)
            let followed = try await c.send(.post, c.path("private", "records/query"), body: #"{"query": {"recordType": "T"}}"#, query: ["ckWebAuthToken=\(next)"])
            #expect(followed.status == 200)
        }
    }

    /// Zone answers name the real owner, however the request spelled it (`__defaultOwner__` or none).
    @Test(arguments: [#"{"zoneName": "Notes"}"#, #"{"zoneName": "Notes", "ownerRecordName": "__defaultOwner__"}"#])
    func zoneAnswersNameTheRealOwner(zoneID: String) async throws {
        try await ServerHarness().run { c in
            let alice = "_alice"
            var answer = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": \#(zoneID)}}]}"#, user: alice)
            #expect(answer.json["zones"]?[0]?["zoneID"]?["ownerRecordName"] == .string(alice), "\(answer.text)")
            answer = try await c.get("private", "zones/list", user: alice)
            #expect(answer.json["zones"]?[1]?["zoneID"]?["ownerRecordName"] == .string(alice))
            answer = try await c.post("private", "zones/lookup", #"{"zones": [\#(zoneID)]}"#, user: alice)
            #expect(answer.json["zones"]?[0]?["zoneID"]?["ownerRecordName"] == .string(alice))
            answer = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "delete", "zone": {"zoneID": \#(zoneID)}}]}"#, user: alice)
            #expect(answer.json["zones"]?[0]?["zoneID"]?["ownerRecordName"] == .string(alice))
            #expect(answer.json["zones"]?[0]?["deleted"] == .bool(true))
        }
    }
}
