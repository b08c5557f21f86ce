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
