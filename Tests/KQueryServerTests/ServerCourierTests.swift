import KQuery
@testable import KQueryServer
import Testing

import Foundation

/// tokens/create and tokens/register, and pushes on the web courier (SPEC §10).
@Suite struct ServerCourierTests {
    /// The path and query of a web courier URL.
    static func pathAndQuery(_ url: String) throws -> String {
        let afterScheme = try #require(url.range(of: "://")).upperBound
        let slash = try #require(url[afterScheme...].firstIndex(of: "/"))
        return String(url[slash...])
    }

    @Test func webCourierDeliversTheModifysPush() async throws {
        try await ServerHarness().run { c in
            let dave = "_dave"
            var answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: #"{"apnsEnvironment": "development"}"#, user: dave)
            #expect(answer.status == 200)
            #expect(answer.json["apnsEnvironment"] == .string("development"))
            let url = try #require(answer.json["webcourierURL"]?.stringValue)
            #expect(url.hasPrefix("http://127.0.0.1:\(c.port)/"))
            let poll = try Self.pathAndQuery(url)

            // Nothing queued: 204 after the (short) timeout.
            answer = try await c.send(.get, poll, apiToken: nil)
            #expect(answer.status == 204)

            answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
                  "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"alertBody": "new note"}}}]}
                """, user: dave)
            #expect(answer.status == 200)

            // A push queued before the poll is there at once; each is delivered once.
            _ = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "n2", "recordType": "Note"}}]}"#, user: dave)
            answer = try await c.send(.get, poll, apiToken: nil)
            #expect(answer.json["ck"]?["qry"]?["rid"] == .string("n2"))
            answer = try await c.send(.get, poll, apiToken: nil)
            #expect(answer.status == 204)

            // Another user's courier gets none of Dave's pushes; a forged courier token is refused.
            answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: "_eve")
            let evePoll = try Self.pathAndQuery(try #require(answer.json["webcourierURL"]?.stringValue))
            _ = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "n3", "recordType": "Note"}}]}"#, user: dave)
            answer = try await c.send(.get, evePoll, apiToken: nil)
            #expect(answer.status == 204)
            answer = try await c.send(.get, "/aps?tok=bogus.00", apiToken: nil)
            #expect(answer.status == 401)
            answer = try await c.send(.get, poll, apiToken: nil)
            #expect(answer.json["ck"]?["qry"]?["rid"] == .string("n3"))
        }
    }

    /// A poll waiting when the modify commits receives its push. The courier's timeout outlives
    /// any modify, however loaded the machine, so the poll can only end with the push.
    @Test func aWaitingPollReceivesThePushOfAModifyCommittedMeanwhile() async throws {
        try await ServerHarness { $0.courierTimeout = .seconds(30) }.run { c in
            let dave = "_dave"
            var answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: dave)
            let poll = try Self.pathAndQuery(try #require(answer.json["webcourierURL"]?.stringValue))
            answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
                  "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"alertBody": "new note"}}}]}
                """, user: dave)
            #expect(answer.status == 200)

            async let waiting = c.send(.get, poll, apiToken: nil)
            try await Task.sleep(for: .milliseconds(100))
            answer = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "n1", "recordType": "Note"}}]}"#, user: dave)
            #expect(answer.status == 200)
            let push = try await waiting
            #expect(push.status == 200)
            #expect(push.json["ck"]?["qry"]?["sid"] == .string("notes"))
            #expect(push.json["ck"]?["qry"]?["rid"] == .string("n1"))
            #expect(push.json["aps"]?["alert"] != nil)
        }
    }

    /// Pushes wake the polls of the users they are for, not everyone's: with ten polls of Eve
    /// waiting, twenty modifies queuing pushes for Dave make none of them read the outbox again
    /// (each did, twenty times over, when every push woke every poll); a push for Eve wakes hers.
    @Test func pushesWakeOnlyTheirUsersPolls() async throws {
        try await ServerHarness { $0.courierTimeout = .seconds(30) }.run { c in
            let courier = try #require(c.server?.courier)
            for user in ["_dave", "_eve"] {
                let answer = try await c.post("private", "subscriptions/modify", """
                    {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
                      "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"alertBody": "new note"}}}]}
                    """, user: user)
                #expect(answer.status == 200)
            }
            var polls: [String] = []
            for _ in 0..<10 {
                let answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: "_eve")
                polls.append(try Self.pathAndQuery(try #require(answer.json["webcourierURL"]?.stringValue)))
            }
            let waiting = polls.map { poll in Task { try await c.send(.get, poll, apiToken: nil) } }
            // Each poll has looked once, found nothing, and waits.
            var looks = await courier.looks
            for _ in 0..<500 where looks < polls.count {
                try await Task.sleep(for: .milliseconds(10))
                looks = await courier.looks
            }
            #expect(looks == polls.count)
            for note in 0..<20 {
                let answer = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "d\#(note)", "recordType": "Note"}}]}"#, user: "_dave")
                #expect(answer.status == 200)
            }
            try await Task.sleep(for: .milliseconds(300))   // wakes sent through PostgreSQL arrive
            #expect(await courier.looks == looks, "Dave's pushes woke Eve's polls")
            // Eve's pushes, one for each poll: each ends with one.
            let notes = (0..<polls.count).map { #"{"operationType": "create", "record": {"recordName": "e\#($0)", "recordType": "Note"}}"# }
            let answer = try await c.post("private", "records/modify", #"{"operations": ["# + notes.joined(separator: ",") + "]}", user: "_eve")
            #expect(answer.status == 200)
            var delivered: [String] = []
            for poll in waiting { delivered.append(try await poll.value.json["ck"]?["qry"]?["rid"]?.stringValue ?? "none") }
            #expect(delivered.sorted() == (0..<polls.count).map { "e\($0)" }.sorted())
        }
    }

    /// A backlog of other users' pushes never hides a user's own, and two polls waiting at once
    /// never get the same push (it is reserved while its answer is written). The polls outlive
    /// any modify, so each ends with a push: two pushes, one each.
    @Test func pollsFindTheirUsersPushesPastABacklogAndNeverShareOne() async throws {
        try await ServerHarness { $0.courierTimeout = .seconds(30) }.run { c in
            let dave = "_dave"
            var answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: dave)
            let poll = try Self.pathAndQuery(try #require(answer.json["webcourierURL"]?.stringValue))
            for user in [dave, "_eve"] {
                answer = try await c.post("private", "subscriptions/modify", """
                    {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
                      "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"alertBody": "new note"}}}]}
                    """, user: user)
                #expect(answer.status == 200)
            }
            // Eve's backlog, queued ahead of Dave's push.
            let eveNotes = (0..<150).map { #"{"operationType": "create", "record": {"recordName": "e\#($0)", "recordType": "Note"}}"# }
            for batch in stride(from: 0, to: eveNotes.count, by: 50) {
                answer = try await c.post("private", "records/modify", #"{"operations": ["# + eveNotes[batch..<batch + 50].joined(separator: ",") + "]}", user: "_eve")
                #expect(answer.status == 200)
            }

            // Two polls wait; one push wakes both, one takes it and the other waits on for the next.
            async let first = c.send(.get, poll, apiToken: nil)
            async let second = c.send(.get, poll, apiToken: nil)
            try await Task.sleep(for: .milliseconds(200))
            for note in ["d1", "d2"] {
                answer = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "\#(note)", "recordType": "Note"}}]}"#, user: dave)
                #expect(answer.status == 200)
            }
            let answers = try await [first, second]
            #expect(answers.map(\.status) == [200, 200])
            #expect(answers.compactMap { $0.json["ck"]?["qry"]?["rid"]?.stringValue }.sorted() == ["d1", "d2"])
            // Acknowledged once written: not delivered again, so the next poll gets the next push.
            answer = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "d3", "recordType": "Note"}}]}"#, user: dave)
            #expect(answer.status == 200)
            answer = try await c.send(.get, poll, apiToken: nil)
            #expect(answer.json["ck"]?["qry"]?["rid"] == .string("d3"))
        }
    }

    @Test func aClientDoesNotGetThePushesOfItsOwnChanges() async throws {
        try await ServerHarness().run { c in
            func courier(_ body: String) async throws -> (token: String, poll: String) {
                let answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: body, user: "_dave")
                #expect(answer.status == 200)
                return (try #require(answer.json["apnsToken"]?.stringValue), try Self.pathAndQuery(try #require(answer.json["webcourierURL"]?.stringValue)))
            }
            // CloudKit JS sends a clientId: the same client gets the same token, another client another.
            let laptop = try await courier(#"{"clientId": "laptop-1"}"#)
            #expect(try await courier(#"{"clientId": "laptop-1"}"#).token == laptop.token)
            let phone = try await courier(#"{"clientId": "phone-2"}"#)
            #expect(phone.token != laptop.token)
            #expect(try await courier("{}").token != (try await courier("{}")).token)
            #expect(try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: #"{"clientId": 7}"#, user: "_dave").status == 400)

            var answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
                  "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
                """, user: "_dave")
            #expect(answer.status == 200)
            func create(_ name: String, from device: String?) async throws {
                let named = device.map { #""apnsToken": "\#($0)", "# } ?? ""
                let answer = try await c.post("private", "records/modify",
                    #"{\#(named)"operations": [{"operationType": "create", "record": {"recordName": "\#(name)", "recordType": "Note"}}]}"#, user: "_dave")
                #expect(answer.status == 200, "\(answer.text)")
            }
            // The laptop's own change does not come back to it: its poll skips it (and it is spent).
            try await create("n1", from: laptop.token)
            answer = try await c.send(.get, laptop.poll, apiToken: nil)
            #expect(answer.status == 204)
            answer = try await c.send(.get, phone.poll, apiToken: nil)
            #expect(answer.status == 204)
            // The phone gets the laptop's change; the laptop gets the phone's, past an own one queued before it.
            try await create("n2", from: laptop.token)
            answer = try await c.send(.get, phone.poll, apiToken: nil)
            #expect(answer.json["ck"]?["qry"]?["rid"] == .string("n2"))
            try await create("n3", from: laptop.token)
            try await create("n4", from: phone.token)
            answer = try await c.send(.get, laptop.poll, apiToken: nil)
            #expect(answer.json["ck"]?["qry"]?["rid"] == .string("n4"))
            // A change naming no device reaches whichever client polls.
            try await create("n5", from: nil)
            answer = try await c.send(.get, laptop.poll, apiToken: nil)
            #expect(answer.json["ck"]?["qry"]?["rid"] == .string("n5"))
            // Acknowledged once the answer is written, which may be just after the client read it.
            let container = try #require(c.server).containers.container(c.container)
            let deadline = ContinuousClock.now + .seconds(10)
            while try !container.pendingNotifications().isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(try container.pendingNotifications().isEmpty)
            // A malformed device is refused, nothing applied.
            answer = try await c.post("private", "records/modify",
                #"{"apnsToken": 5, "operations": [{"operationType": "create", "record": {"recordName": "n6", "recordType": "Note"}}]}"#, user: "_dave")
            #expect(answer.status == 400)
            #expect(answer.json["reason"]?.stringValue?.contains("apnsToken") == true)
        }
    }

    // Reads the device tokens' file; on PostgreSQL they are a table (PostgresNodesTests covers it).
    @Test(.enabled(if: !ServerHarness.onPostgres)) func tokensNeedAUserAndRegisterDevices() async throws {
        let harness = ServerHarness()
        try await harness.run { c in
            var answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}")
            #expect(answer.status == 421)
            answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/register",
                                      body: #"{"apnsEnvironment": "production", "apnsToken": "a1b2c3"}"#, user: "_frank")
            #expect(answer.status == 200)
            #expect(answer.json["apnsToken"] == .string("a1b2c3"))
            answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/register", body: #"{"apnsEnvironment": "production"}"#, user: "_frank")
            #expect(answer.status == 400)
        }
        let saved = try String(contentsOfFile: harness.directory + "/device-tokens.json", encoding: .utf8)
        #expect(saved.contains("a1b2c3"))
    }
}
