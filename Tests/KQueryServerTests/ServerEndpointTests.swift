import KQuery
import KQueryServer
import Testing

/// Every Web Services endpoint over real HTTP on loopback.
@Suite struct ServerEndpointTests {
    @Test func zonesRecordsAndChanges() async throws {
        try await ServerHarness().run { c in
            let alice = "_alice"
            var answer = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Notes"}}}]}"#, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["zones"]?[0]?["zoneID"]?["zoneName"] == .string("Notes"))

            answer = try await c.get("private", "zones/list", user: alice)
            #expect(answer.json["zones"]?.elements.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }.contains("Notes") == true)

            answer = try await c.post("private", "zones/lookup", #"{"zones": [{"zoneName": "Notes"}, {"zoneName": "Nope"}]}"#, user: alice)
            #expect(answer.json["zones"]?[0]?["zoneID"]?["zoneName"] == .string("Notes"))
            #expect(answer.json["zones"]?[1]?["serverErrorCode"] == .string("ZONE_NOT_FOUND"))

            answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Notes"}, "operations": [
                  {"operationType": "create", "record": {"recordName": "n1", "recordType": "Note", "fields": {"title": {"value": "Hello"}, "stars": {"value": 3}}}},
                  {"operationType": "create", "record": {"recordName": "n2", "recordType": "Note", "fields": {"title": {"value": "World", "type": "STRING"}, "stars": {"value": 5, "type": "INT64"}}}}
                ]}
                """, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.count == 2)
            let tag = answer.json["records"]?[0]?["recordChangeTag"]?.stringValue
            #expect(tag != nil)

            answer = try await c.post("private", "records/lookup", #"{"zoneID": {"zoneName": "Notes"}, "records": [{"recordName": "n1"}, {"recordName": "missing"}]}"#, user: alice)
            #expect(answer.json["records"]?[0]?["fields"]?["title"]?["value"] == .string("Hello"))
            #expect(answer.json["records"]?[1]?["serverErrorCode"] == .string("NOT_FOUND"))

            answer = try await c.post("private", "records/query", """
                {"zoneID": {"zoneName": "Notes"}, "query": {"recordType": "Note",
                 "filterBy": [{"comparator": "GREATER_THAN", "fieldName": "stars", "fieldValue": {"value": 2}}],
                 "sortBy": [{"fieldName": "stars", "ascending": false}]}}
                """, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["n2", "n1"])

            answer = try await c.post("private", "records/changes", #"{"zoneID": {"zoneName": "Notes"}}"#, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.count == 2)
            let zoneToken = try #require(answer.json["syncToken"]?.stringValue)

            answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Notes"}, "operations": [{"operationType": "delete", "record": {"recordName": "n1", "recordChangeTag": "\(tag ?? "")"}}]}
                """, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["deleted"] == .bool(true))

            answer = try await c.post("private", "changes/zone", """
                {"zones": [{"zoneID": {"zoneName": "Notes"}, "syncToken": "\(zoneToken)"}, {"zoneID": {"zoneName": "Nope"}}]}
                """, user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["zones"]?[0]?["records"]?[0]?["recordName"] == .string("n1"))
            #expect(answer.json["zones"]?[0]?["records"]?[0]?["deleted"] == .bool(true))
            #expect(answer.json["zones"]?[1]?["serverErrorCode"] == .string("ZONE_NOT_FOUND"))

            answer = try await c.post("private", "changes/database", "{}", user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["zones"]?.elements.contains { $0["zoneID"]?["zoneName"] == .string("Notes") } == true)
            #expect(answer.json["syncToken"]?.stringValue != nil)

            answer = try await c.post("private", "zones/changes", "{}", user: alice)
            #expect(answer.status == 200)
            #expect(answer.json["metaSyncToken"]?.stringValue != nil)

            answer = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "delete", "zone": {"zoneID": {"zoneName": "Notes"}}}]}"#, user: alice)
            #expect(answer.json["zones"]?[0]?["deleted"] == .bool(true))
            answer = try await c.post("private", "records/changes", #"{"zoneID": {"zoneName": "Notes"}}"#, user: alice)
            #expect(answer.status == 404)
            #expect(answer.json["serverErrorCode"] == .string("ZONE_NOT_FOUND"))
        }
    }

    @Test func queryFiltersSortsAndPages() async throws {
        try await ServerHarness().run { c in
            var operations: [String] = []
            for i in 0..<7 {
                let latitude = 48.0 + Double(i) * 0.1
                operations.append("""
                    {"operationType": "create", "record": {"recordName": "s\(i)", "recordType": "Shop", "fields": {
                      "name": {"value": "shop \(i)"}, "rank": {"value": \(i)},
                      "place": {"value": {"latitude": \(latitude), "longitude": 2.0}, "type": "LOCATION"}}}}
                    """)
            }
            var answer = try await c.post("public", "records/modify", #"{"operations": [\#(operations.joined(separator: ","))]}"#)
            #expect(answer.status == 200)

            // relativeLocation: nearest to s6 first.
            answer = try await c.post("public", "records/query", """
                {"query": {"recordType": "Shop", "sortBy": [{"fieldName": "place", "relativeLocation": {"latitude": 48.6, "longitude": 2.0}}]}, "resultsLimit": 3}
                """)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["s6", "s5", "s4"])
            let marker = try #require(answer.json["continuationMarker"]?.stringValue)
            answer = try await c.post("public", "records/query", """
                {"query": {"recordType": "Shop", "sortBy": [{"fieldName": "place", "relativeLocation": {"latitude": 48.6, "longitude": 2.0}}]},
                 "resultsLimit": 3, "continuationMarker": "\(marker)"}
                """)
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["s3", "s2", "s1"])

            // The KQuery predicate extension, and desiredKeys.
            answer = try await c.post("public", "records/query", """
                {"query": {"recordType": "Shop", "predicate": "rank >= 5", "sortBy": [{"fieldName": "rank"}]}, "desiredKeys": ["rank"]}
                """)
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["s5", "s6"])
            #expect(answer.json["records"]?[0]?["fields"]?["name"] == nil)
            #expect(answer.json["records"]?[0]?["fields"]?["rank"]?["value"] == .int(5))

            // IN and BEGINS_WITH, a NEAR filter.
            answer = try await c.post("public", "records/query", """
                {"query": {"recordType": "Shop", "filterBy": [
                  {"comparator": "IN", "fieldName": "rank", "fieldValue": {"value": [1, 2, 3], "type": "INT64_LIST"}},
                  {"comparator": "BEGINS_WITH", "fieldName": "name", "fieldValue": {"value": "shop"}}], "sortBy": [{"fieldName": "rank"}]}}
                """)
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["s1", "s2", "s3"])

            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "Shop", "filterBy": [{"comparator": "NOPE", "fieldName": "rank", "fieldValue": {"value": 1}}]}}"#)
            #expect(answer.status == 400)
            #expect(answer.json["serverErrorCode"] == .string("BAD_REQUEST"))
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "Shop"}, "continuationMarker": "garbage"}"#)
            #expect(answer.status == 400)
        }
    }

    @Test func perRecordErrorsConflictsAndAtomicity() async throws {
        try await ServerHarness().run { c in
            let bob = "_bob"
            _ = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Z"}}}]}"#, user: bob)
            var answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {"recordName": "a", "recordType": "T", "fields": {"x": {"value": 1}}}}]}
                """, user: bob)
            let tag = try #require(answer.json["records"]?[0]?["recordChangeTag"]?.stringValue)

            // Default zone: not atomic, so per-record errors and HTTP 200.
            answer = try await c.post("private", "records/modify", """
                {"operations": [
                  {"operationType": "create", "record": {"recordName": "d1", "recordType": "T"}},
                  {"operationType": "update", "record": {"recordName": "ghost", "recordType": "T", "recordChangeTag": "x", "fields": {}}}]}
                """, user: bob)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["recordName"] == .string("d1"))
            #expect(answer.json["records"]?[1]?["serverErrorCode"]?.stringValue != nil)

            answer = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "d1", "recordType": "T"}}]}"#, user: bob)
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("EXISTS"))

            // A stale tag in an atomic zone: 400 ATOMIC_ERROR, the culprit CONFLICT, the sibling ATOMIC_ERROR, nothing applied.
            answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Z"}, "operations": [
                  {"operationType": "create", "record": {"recordName": "b", "recordType": "T"}},
                  {"operationType": "update", "record": {"recordName": "a", "recordType": "T", "recordChangeTag": "stale", "fields": {"x": {"value": 2}}}}]}
                """, user: bob)
            #expect(answer.status == 400)
            #expect(answer.json["serverErrorCode"] == .string("ATOMIC_ERROR"))
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ATOMIC_ERROR"))
            #expect(answer.json["records"]?[1]?["serverErrorCode"] == .string("CONFLICT"))
            answer = try await c.post("private", "records/lookup", #"{"zoneID": {"zoneName": "Z"}, "records": [{"recordName": "b"}]}"#, user: bob)
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))

            // Non-atomic: the good one applies.
            answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Z"}, "atomic": false, "operations": [
                  {"operationType": "update", "record": {"recordName": "a", "recordType": "T", "recordChangeTag": "\(tag)", "fields": {"x": {"value": 2}}}},
                  {"operationType": "update", "record": {"recordName": "a2", "recordType": "T", "recordChangeTag": "stale", "fields": {}}}]}
                """, user: bob)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["fields"]?["x"]?["value"] == .int(2))

            // A record in a zone that does not exist.
            answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Missing"}, "operations": [{"operationType": "create", "record": {"recordName": "m", "recordType": "T"}}]}
                """, user: bob)
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ZONE_NOT_FOUND"))

            // A VALIDATE reference to a missing record.
            answer = try await c.post("private", "records/modify", """
                {"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {"recordName": "r", "recordType": "T",
                  "fields": {"owner": {"value": {"recordName": "nobody", "action": "VALIDATE"}, "type": "REFERENCE"}}}}]}
                """, user: bob)
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("VALIDATING_REFERENCE_ERROR"))

            // forceDelete, then a delete with the old tag.
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "forceDelete", "record": {"recordName": "a"}}]}"#, user: bob)
            #expect(answer.json["records"]?[0]?["deleted"] == .bool(true))
        }
    }

    @Test func subscriptionsAndUsers() async throws {
        try await ServerHarness().run { c in
            let carol = "_carol"
            var answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "big", "subscriptionType": "query",
                  "query": {"recordType": "Order", "filterBy": [{"comparator": "GREATER_THAN", "fieldName": "total", "fieldValue": {"value": 100}}]},
                  "firesOn": ["create", "update"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
                """, user: carol)
            #expect(answer.status == 200)
            #expect(answer.json["subscriptions"]?[0]?["subscriptionID"] == .string("big"))

            answer = try await c.get("private", "subscriptions/list", user: carol)
            #expect(answer.json["subscriptions"]?.elements.count == 1)
            answer = try await c.post("private", "subscriptions/lookup", #"{"subscriptions": [{"subscriptionID": "big"}, {"subscriptionID": "none"}]}"#, user: carol)
            #expect(answer.json["subscriptions"]?[0]?["subscriptionType"] == .string("query"))
            #expect(answer.json["subscriptions"]?[1]?["serverErrorCode"] == .string("NOT_FOUND"))

            answer = try await c.post("private", "subscriptions/modify", #"{"operations": [{"operationType": "create", "subscription": {"subscriptionID": "bad", "subscriptionType": "weird"}}]}"#, user: carol)
            #expect(answer.status == 200)
            #expect(answer.json["subscriptions"]?[0]?["serverErrorCode"] == .string("BAD_REQUEST"))

            answer = try await c.post("private", "subscriptions/modify", #"{"operations": [{"operationType": "delete", "subscription": {"subscriptionID": "big"}}]}"#, user: carol)
            #expect(answer.json["subscriptions"]?[0]?["deleted"] == .bool(true))
            answer = try await c.get("private", "subscriptions/list", user: carol)
            #expect(answer.json["subscriptions"]?.elements.isEmpty == true)

            answer = try await c.get("private", "users/current", user: carol)
            #expect(answer.json["userRecordName"] == .string(carol))
        }
    }

    @Test func dataSurvivesARestart() async throws {
        let harness = ServerHarness()
        try await harness.run { c in
            let answer = try await c.post("public", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "kept", "recordType": "T"}}]}"#)
            #expect(answer.status == 200)
        }
        try await ServerHarness(directory: harness.directory).run { c in
            let answer = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "kept"}]}"#)
            #expect(answer.json["records"]?[0]?["recordType"] == .string("T"))
        }
    }
}
