import Foundation
import KQuery
import KQueryServer
import Testing

/// Bad requests are answered with CloudKit's error JSON, change nothing, and the server keeps serving.
@Suite struct ServerHostileInputTests {
    @Test func malformedRequests() async throws {
        try await ServerHarness { $0.maximumBodySize = 4096 }.run { c in
            var answer = try await c.post("public", "records/modify", String(repeating: " ", count: 5000) + "{}")
            #expect(answer.status == 413)
            #expect(answer.json["serverErrorCode"] == .string("QUOTA_EXCEEDED"))

            for body in [#"{"operations": [ "#, "not json", "[1, 2]", #"{"operations": 7}"#,
                         #"{"operations": [{"operationType": "explode", "record": {"recordName": "x", "recordType": "T"}}]}"#,
                         #"{"operations": [{"operationType": "create", "record": {"recordName": 5, "recordType": "T"}}]}"#,
                         #"{"operations": [{"operationType": "create", "record": {"recordName": "x", "recordType": "T", "fields": {"n": {"value": "a", "type": "INT64"}}}}]}"#,
                         String(repeating: "[", count: 3_000)] {
                answer = try await c.post("public", "records/modify", body)
                #expect(answer.status == 400, "\(body.prefix(60))")
                #expect(answer.json["serverErrorCode"] == .string("BAD_REQUEST"), "\(body.prefix(60))")
                #expect(answer.json["reason"]?.stringValue != nil)
            }
            // Nothing of the refused requests was applied.
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.isEmpty == true)

            answer = try await c.post("public", "zones/modify", #"{"operations": [{"operationType": "rename", "zone": {"zoneID": {"zoneName": "Z"}}}]}"#)
            #expect(answer.status == 400)
            answer = try await c.send(.post, "/database/1/\(c.container)/staging/public/records/query", body: "{}")
            #expect(answer.status == 400)
            answer = try await c.send(.post, "/database/1/\(c.container)/development/everyone/records/query", body: "{}")
            #expect(answer.status == 400)
            for container in ["..%2F..%2Fetc", ".hidden", "a%00b"] {
                answer = try await c.send(.post, "/database/1/\(container)/development/public/records/query", body: #"{"query": {"recordType": "T"}}"#)
                #expect([400, 404].contains(answer.status), "\(container)")
            }
            answer = try await c.send(.post, c.path("public", "records/explode"), body: "{}")
            #expect(answer.status == 404)
            #expect(answer.json["serverErrorCode"] == .string("NOT_FOUND"))

            // Still serving.
            answer = try await c.post("public", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "ok", "recordType": "T"}}]}"#)
            #expect(answer.status == 200)
        }
    }

    /// Values as long as a record holds, names as long as CloudKit allows and names PostgreSQL
    /// cannot hold, on either storage: long values save, read back whole, compare and sort
    /// exactly (PostgreSQL answered 500 for a string over 2.7 KB: its index entries are
    /// bounded); a record name over 255 characters is refused; a name holding U+0000 is answered
    /// (refused on PostgreSQL) and never fails the modifies committed with it (on PostgreSQL it
    /// failed their whole batch, and left their requests unanswered); a query of many tests and
    /// sort fields is answered at once (PostgreSQL spent minutes and gigabytes planning it).
    @Test func longValuesAndHostileNamesAreAnsweredAndHarmNobody() async throws {
        try await ServerHarness().run { c in
            var generator = SystemRandomNumberGenerator()
            func random(_ count: Int) -> String {
                String((0..<count).map { _ in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".randomElement(using: &generator) ?? "a" })
            }
            let shared = random(3_000)
            let values = ["v0": random(100_000), "v1": shared + "b", "v2": shared + "a", "v3": shared, "v4": "short"]
            for (name, value) in values {
                let bytes = Data(value.utf8).base64EncodedString()
                let answer = try await c.post("public", "records/modify", """
                    {"operations": [{"operationType": "create", "record": {"recordName": "\(name)", "recordType": "Long", "fields": {
                    "t": {"value": "\(value)"}, "l": {"value": ["\(value.prefix(6_000))", "x"], "type": "STRING_LIST"}, "b": {"value": "\(bytes)", "type": "BYTES"}}}}]}
                    """)
                #expect(answer.status == 200, "\(name): \(answer.json)")
                #expect(answer.json["records"]?.elements.first?["serverErrorCode"] == nil, "\(name): \(answer.json)")
            }
            let looked = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "v0"}]}"#)
            #expect(looked.json["records"]?.elements.first?["fields"]?["t"]?["value"]?.stringValue == values["v0"])
            // Sorted by the long strings, a page at a time: in byte order, ties of the first kilobyte included.
            let expected = values.keys.sorted { ValueOrder.compareBytes(values[$0] ?? "", values[$1] ?? "") < 0 }
            var names: [String] = []
            var marker: String?
            repeat {
                let continuation = marker.map { #", "continuationMarker": "\#($0)""# } ?? ""
                let page = try await c.post("public", "records/query", """
                    {"query": {"recordType": "Long", "sortBy": [{"fieldName": "t"}]}, "resultsLimit": 2\(continuation)}
                    """)
                #expect(page.status == 200, "\(page.json)")
                names += page.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } ?? []
                marker = page.json["continuationMarker"]?.stringValue
            } while marker != nil && names.count < 10
            #expect(names == expected)
            let greater = values.keys.filter { ValueOrder.compareBytes(values[$0] ?? "", shared) > 0 }.sorted()
            for (comparator, value, matches) in [("EQUALS", shared + "a", ["v2"]), ("GREATER_THAN", shared, greater), ("BEGINS_WITH", String(shared.prefix(2_500)), ["v1", "v2", "v3"])] {
                let answer = try await c.post("public", "records/query", """
                    {"query": {"recordType": "Long", "filterBy": [{"comparator": "\(comparator)", "fieldName": "t", "fieldValue": {"value": "\(value)"}}]}}
                    """)
                #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue }.sorted() == matches, "\(comparator)")
            }

            // CloudKit's 255 characters at most for a record name.
            for (length, status) in [(255, 200), (256, 400)] {
                let answer = try await c.post("public", "records/modify", """
                    {"operations": [{"operationType": "create", "record": {"recordName": "\(String(repeating: "n", count: length))", "recordType": "Long"}}]}
                    """)
                #expect(answer.status == status, "\(length): \(answer.json)")
            }

            // A reference (one the server tracks) must name a record that can exist.
            let farReference = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "far", "recordType": "Long", "fields": {
                "r": {"value": {"recordName": "\(String(repeating: "n", count: 256))", "action": "DELETE_SELF"}, "type": "REFERENCE"}}}}]}
                """)
            #expect(farReference.status == 400, "\(farReference.json)")
            // Subscription IDs are bounded as record names; one PostgreSQL cannot hold is refused alone.
            func subscription(_ id: String, _ type: String) -> String {
                #"{"operationType": "create", "subscription": {"subscriptionID": "\#(id)", "subscriptionType": "query", "query": {"recordType": "\#(type)"}, "firesOn": ["create"]}}"#
            }
            let subscriptions = try await c.post("private", "subscriptions/modify", """
                {"operations": [\(subscription("s1", "A")), \(subscription("s\\u0000", "B")), \(subscription("s3", "C")), \(subscription(String(repeating: "s", count: 256), "D"))]}
                """, user: "_u1")
            let refusals = subscriptions.json["subscriptions"]?.elements.map { $0["serverErrorCode"]?.stringValue }
            #expect(refusals == [nil, ServerHarness.onPostgres ? "BAD_REQUEST" : nil, nil, "BAD_REQUEST"], "\(subscriptions.json)")
            // An upload URL only for a field a record can have.
            for token in [#"{"recordName": "\#(String(repeating: "n", count: 256))", "recordType": "Long", "fieldName": "f"}"#,
                          #"{"recordName": "p", "recordType": "Long", "fieldName": "f\u0000"}"#] {
                let upload = try await c.post("private", "assets/upload", #"{"tokens": [\#(token)]}"#, user: "_u1")
                #expect(upload.status == 400, "\(upload.json)")
            }
            // A device token is bounded too (PostgreSQL indexes it).
            let device = try await c.send(.post, "/device/1/\(c.container)/development/tokens/register",
                                          body: #"{"apnsEnvironment": "development", "apnsToken": "\#(String(repeating: "a", count: 600))"}"#, user: "_u1")
            #expect(device.status == 400, "\(device.json)")

            // Names holding U+0000 among modifies that commit together.
            let answers = try await withThrowingTaskGroup(of: (Int, ServerClient.Answer).self) { group in
                for index in 0..<24 {
                    group.addTask {
                        let body = switch index {
                        case 5: #"{"operations": [{"operationType": "create", "record": {"recordName": "bad\u0000name", "recordType": "Long"}}]}"#
                        case 9: #"{"zoneID": {"zoneName": "z\u0000"}, "operations": [{"operationType": "create", "record": {"recordName": "z", "recordType": "Long"}}]}"#
                        case 13: #"{"operations": [{"operationType": "create", "record": {"recordName": "r", "recordType": "Long", "fields": {"r": {"value": {"recordName": "t\u0000", "action": "DELETE_SELF"}, "type": "REFERENCE"}}}}]}"#
                        default: #"{"operations": [{"operationType": "create", "record": {"recordName": "ok\#(index)", "recordType": "Batch", "fields": {"i": {"value": \#(index)}}}}]}"#
                        }
                        return (index, try await c.post("public", "records/modify", body))
                    }
                }
                var answers: [(Int, ServerClient.Answer)] = []
                for try await answer in group { answers.append(answer) }
                return answers
            }
            #expect(answers.count == 24)
            for (index, answer) in answers where ![5, 9, 13].contains(index) {
                #expect(answer.status == 200 && answer.json["records"]?.elements.first?["serverErrorCode"] == nil, "\(index): \(answer.json)")
            }
            for (index, answer) in answers where [5, 9, 13].contains(index) {
                #expect([200, 400].contains(answer.status), "\(index): \(answer.json)")
                if ServerHarness.onPostgres && index != 9 { #expect(answer.json["serverErrorCode"] == .string("BAD_REQUEST")) }
            }
            let batch = try await c.post("public", "records/query", #"{"query": {"recordType": "Batch"}, "resultsLimit": 100}"#)
            #expect(batch.json["records"]?.elements.count == 21)

            // At most 200 items a request, as CloudKit answers at most 200 (a body of 2 MB named 60,000).
            for (database, operation, body) in [
                ("public", "records/lookup", #"{"records": [\#((0...200).map { #"{"recordName": "n\#($0)"}"# }.joined(separator: ","))]}"#),
                ("private", "zones/lookup", #"{"zones": [\#((0...200).map { #"{"zoneName": "z\#($0)"}"# }.joined(separator: ","))]}"#),
                ("private", "subscriptions/lookup", #"{"subscriptions": [\#((0...200).map { #"{"subscriptionID": "s\#($0)"}"# }.joined(separator: ","))]}"#),
                ("private", "changes/zone", #"{"zones": [\#((0...200).map { #"{"zoneID": {"zoneName": "z\#($0)"}}"# }.joined(separator: ","))]}"#),
                ("public", "users/lookup/email", #"{"users": [\#((0...200).map { #"{"emailAddress": "u\#($0)@example.com"}"# }.joined(separator: ","))]}"#),
                ("private", "zones/modify", #"{"operations": [\#((0...200).map { #"{"operationType": "create", "zone": {"zoneID": {"zoneName": "z\#($0)"}}}"# }.joined(separator: ","))]}"#),
            ] {
                let answer = try await c.post(database, operation, body, user: "_u1")
                #expect(answer.status == 400 && answer.json["serverErrorCode"] == .string("LIMIT_EXCEEDED"), "\(operation): \(answer.json)")
            }

            // A sort names a field as a filter does.
            let badSort = try await c.post("public", "records/query", #"{"query": {"recordType": "Batch", "sortBy": [{"fieldName": "i\u0000"}]}}"#)
            #expect(badSort.status == 400 && badSort.json["serverErrorCode"] == .string("BAD_REQUEST"), "\(badSort.json)")

            // Many tests and many sort fields.
            let tests = (0..<200).map { #"{"comparator": "NOT_EQUALS", "fieldName": "i", "fieldValue": {"value": \#(1_000 + $0)}}"# }.joined(separator: ", ")
            let sorts = ([#"{"fieldName": "i", "ascending": false}"#] + (0..<40).map { #"{"fieldName": "f\#($0)"}"# }).joined(separator: ", ")
            let many = try await c.post("public", "records/query", """
                {"query": {"recordType": "Batch", "filterBy": [\(tests)], "sortBy": [\(sorts)]}, "resultsLimit": 100}
                """)
            #expect(many.status == 200, "\(many.json)")
            let ordered = (0..<24).reversed().filter { ![5, 9, 13].contains($0) }.map { "ok\($0)" }
            #expect(many.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ordered)
        }
    }
}

/// Many clients at once: every request is answered, no modify is lost, the server keeps serving.
@Suite struct ServerConcurrencyTests {
    @Test func concurrentModifiesAndQueries() async throws {
        try await ServerHarness().run { c in
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<120 {
                    group.addTask {
                        if i % 3 == 0 {
                            return try await c.post("public", "records/query", #"{"query": {"recordType": "Hit"}}"#).status
                        }
                        return try await c.post("private", "records/modify", """
                            {"operations": [{"operationType": "create", "record": {"recordName": "h\(i)", "recordType": "Hit", "fields": {"i": {"value": \(i)}}}}]}
                            """, user: "_u\(i % 4)").status
                    }
                }
                var statuses: [Int] = []
                for try await status in group { statuses.append(status) }
                return statuses
            }
            #expect(statuses.count == 120)
            #expect(statuses.allSatisfy { $0 == 200 })
            var total = 0
            for user in 0..<4 {
                let answer = try await c.post("private", "records/query", #"{"query": {"recordType": "Hit"}}"#, user: "_u\(user)")
                total += answer.json["records"]?.elements.count ?? 0
            }
            #expect(total == 80)
        }
    }
}
