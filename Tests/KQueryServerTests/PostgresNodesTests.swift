import Crypto
import Foundation
import HummingbirdWSClient
import KQuery
import KQueryServer
import KQueryTestSupport
import Logging
import Testing

/// Several `kquery serve --postgres URL` processes on one PostgreSQL (SPEC §16, issue #36): any
/// node answers any request, tokens cross nodes, a subscription saved through one fires for a
/// modify through another, a push queued on one reaches a poll held on another, and a SIGKILL
/// loses nothing acknowledged. Each test has a database of its own in the test process's
/// throwaway cluster.
@Suite(.serialized) struct PostgresNodesTests {
    /// The kquery binary beside the test bundle (the build folder the tests were built in).
    static var kquery: URL {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("kquery")
        return FileManager.default.isExecutableFile(atPath: beside.path) ? beside : ServerProcessTests.kquery
    }

    /// A node: `kquery serve --postgres url --port 0 --quiet`, with the port it listens on.
    static func startNode(_ url: String, _ arguments: [String] = []) throws -> (SpawnedProcess, Int) {
        try ServerProcessTests.startServer(storage: ["--postgres", url], arguments)
    }

    /// `kquery token --postgres url --user name`.
    static func token(_ url: String, user: String) throws -> String {
        let process = SpawnedProcess()
        process.executableURL = kquery
        process.environment = Process.kqueryEnvironment
        process.arguments = ["token", "--postgres", url, "--user", user]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func clients(_ url: String, users: [String], ports: [Int]) async throws -> [ServerClient] {
        var tokens: [String: String] = [:]
        for user in users { tokens[user] = try await offThePool { try token(url, user: user) } }
        let issued = tokens
        return ports.map { port in ServerClient(webAuthToken: { issued[$0] ?? "" }, host: "127.0.0.1", port: port) }
    }

    static func kill9(_ process: SpawnedProcess) {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// Two nodes on a database of their own in the throwaway cluster, each started with
    /// `arguments`, and a client of each for the user `_k`.
    struct Nodes {
        let nodeA: SpawnedProcess, nodeB: SpawnedProcess
        let a: ServerClient, b: ServerClient
        func stop() { PostgresNodesTests.kill9(nodeA); PostgresNodesTests.kill9(nodeB) }
    }

    static func twoNodes(_ arguments: [String] = []) async throws -> Nodes {
        try #require(FileManager.default.isExecutableFile(atPath: kquery.path), "build kquery first")
        let url = try PostgresCluster.start().createDatabase()
        let (nodeA, portA) = try startNode(url, arguments)
        let nodeB: SpawnedProcess, portB: Int
        do { (nodeB, portB) = try startNode(url, arguments) } catch { kill9(nodeA); throw error }
        do {
            let clients = try await Self.clients(url, users: ["_k"], ports: [portA, portB])
            return Nodes(nodeA: nodeA, nodeB: nodeB, a: clients[0], b: clients[1])
        } catch {
            kill9(nodeA); kill9(nodeB); throw error
        }
    }

    @Test func anyNodeAnswersAndTokensCrossNodes() async throws {
        let nodes = try await Self.twoNodes()
        defer { nodes.stop() }
        let (a, b) = (nodes.a, nodes.b)

        // A modify acknowledged by A is read by B, with the web auth token `kquery token` made.
        let saved = try await a.post("private", "records/modify", """
            {"operations": [{"operationType": "create", "record": {"recordName": "n1", "recordType": "Note", "fields": {"title": {"value": "one"}}}}]}
            """, user: "_k")
        #expect(saved.status == 200)
        let looked = try await b.post("private", "records/lookup", #"{"records": [{"recordName": "n1"}]}"#, user: "_k")
        #expect(looked.json["records"]?[0]?["fields"]?["title"]?["value"] == .string("one"))
        let queried = try await b.post("private", "records/query", #"{"query": {"recordType": "Note"}}"#, user: "_k")
        #expect(queried.json["records"]?.elements.count == 1)

        // A zone made through A is used through B, and a sync token from B works on A: A's next
        // change is all it lists.
        let zone = try await a.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Notes"}}}]}"#, user: "_k")
        #expect(zone.status == 200)
        _ = try await b.post("private", "records/modify", """
            {"operations": [{"operationType": "create", "record": {"recordName": "z1", "recordType": "Item"}}], "zoneID": {"zoneName": "Notes"}}
            """, user: "_k")
        let changes = try await b.post("private", "changes/zone", #"{"zones": [{"zoneID": {"zoneName": "Notes"}}]}"#, user: "_k")
        #expect(changes.json["zones"]?[0]?["records"]?.elements.map { $0["recordName"]?.stringValue } == ["z1"])
        let syncToken = try #require(changes.json["zones"]?[0]?["syncToken"]?.stringValue)
        _ = try await a.post("private", "records/modify", """
            {"operations": [{"operationType": "create", "record": {"recordName": "z2", "recordType": "Item"}}], "zoneID": {"zoneName": "Notes"}}
            """, user: "_k")
        let since = try await a.post("private", "changes/zone", """
            {"zones": [{"zoneID": {"zoneName": "Notes"}, "syncToken": "\(syncToken)"}]}
            """, user: "_k")
        #expect(since.status == 200)
        #expect(since.json["zones"]?[0]?["records"]?.elements.map { $0["recordName"]?.stringValue } == ["z2"])

        // A query continuation from A works on B.
        for i in 2...6 {
            _ = try await a.post("private", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "n\(i)", "recordType": "Note"}}]}
                """, user: "_k")
        }
        let first = try await a.post("private", "records/query", #"{"query": {"recordType": "Note"}, "resultsLimit": 4}"#, user: "_k")
        let marker = try #require(first.json["continuationMarker"]?.stringValue)
        let rest = try await b.post("private", "records/query", """
            {"query": {"recordType": "Note"}, "resultsLimit": 4, "continuationMarker": "\(marker)"}
            """, user: "_k")
        #expect(rest.status == 200)
        #expect((first.json["records"]?.elements.count ?? 0) + (rest.json["records"]?.elements.count ?? 0) == 6)
    }

    /// What each node kept in a file of its own is every node's on PostgreSQL: the user directory
    /// `kquery users --postgres` keeps, and a container's learned schema. A node that read the
    /// schema before another grew it still refuses a value of another type than the other node
    /// learned, and nodes learning fields at the same moment all keep theirs.
    @Test func theUserDirectoryAndTheLearnedSchemaAreEveryNodes() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let url = try PostgresCluster.start().createDatabase()
        let (nodeA, portA) = try Self.startNode(url)
        defer { Self.kill9(nodeA) }
        let (nodeB, portB) = try Self.startNode(url)
        defer { Self.kill9(nodeB) }
        let added = try await offThePool {
            try ServerKeyValueStoreProcessTests.run(["users", "--postgres", url, "add", "_ann", "--email", "ann@example.com", "--given", "Ann", "--discoverable"])
        }
        #expect(added.status == 0)
        let listed = try await offThePool { try ServerKeyValueStoreProcessTests.run(["users", "--postgres", url, "list"]) }
        #expect(listed.status == 0 && listed.output.contains("\"_ann\"") && listed.output.contains("ann@example.com"), "\(listed.output)")
        let clients = try await Self.clients(url, users: ["_k"], ports: [portA, portB])
        let (a, b) = (clients[0], clients[1])
        for client in [a, b] {
            let found = try await client.post("public", "users/lookup/email", #"{"users": [{"emailAddress": "ann@example.com"}]}"#, user: "_k")
            #expect(found.json["users"]?[0]?["userRecordName"] == .string("_ann"), "\(found.text)")
        }

        func save(_ client: ServerClient, _ name: String, _ type: String, _ fields: String) async throws -> ServerClient.Answer {
            try await client.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "\(name)", "recordType": "\(type)", "fields": {\(fields)}}}]}
                """, user: "_k")
        }
        // B reads the schema (title only), then A learns price as INT64.
        #expect(try await save(b, "a1", "Artwork", #""title": {"value": "Dawn"}"#).status == 200)
        #expect(try await save(a, "a2", "Artwork", #""price": {"value": 80}"#).status == 200)
        let refused = try await save(b, "a3", "Artwork", #""price": {"value": "cheap"}"#)
        #expect(refused.status == 400)
        #expect(refused.json["reason"] == .string("operations[0]: invalid attempt to set value type STRING for field 'price' for type 'Artwork', defined to be: INT64"))

        // Twelve saves at once, through both nodes, each learning a field of its own.
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<12 {
                group.addTask { try await save(index % 2 == 0 ? a : b, "g\(index)", "Grow", #""f\#(index)": {"value": \#(index)}"#).status }
            }
            for try await status in group { #expect(status == 200) }
        }
        for (client, field) in [(a, "f1"), (b, "f0"), (a, "f11"), (b, "f10")] {
            let wrong = try await save(client, "w\(field)", "Grow", "\"\(field)\": {\"value\": \"text\"}")
            #expect(wrong.json["reason"]?.stringValue?.hasSuffix("for field '\(field)' for type 'Grow', defined to be: INT64") == true, "\(wrong.text)")
        }
    }

    /// With single-use web auth tokens, a token spent on one node is spent on every node (the
    /// nodes share the ledger in PostgreSQL), and a request that failed on one gives it back.
    @Test func aSingleUseTokenSpentOnOneNodeIsSpentOnEvery() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let url = try PostgresCluster.start().createDatabase()
        let (nodeA, portA) = try Self.startNode(url, ["--single-use-web-auth-tokens"])
        defer { Self.kill9(nodeA) }
        let (nodeB, portB) = try Self.startNode(url, ["--single-use-web-auth-tokens"])
        defer { Self.kill9(nodeB) }
        let token = try await offThePool { try Self.token(url, user: "_k") }
        let a = ServerClient(webAuthToken: { _ in token }, host: "127.0.0.1", port: portA)
        let b = ServerClient(webAuthToken: { _ in token }, host: "127.0.0.1", port: portB)
        let query = #"{"query": {"recordType": "Note"}}"#
        // Refused on A (a body that is no JSON): the token is given back, not spent.
        let failed = try await a.post("private", "records/query", "not json", user: "_k")
        #expect(failed.status == 400)
        // Spent on B, with the next token in the answer.
        let spent = try await b.post("private", "records/query", query, user: "_k")
        #expect(spent.status == 200, "\(spent.text)")
        let next = try #require(spent.header("X-Apple-CloudKit-Web-Auth-Token"))
        #expect(next != token)
        // Spent for A too, and for B again.
        for client in [a, b] {
            let again = try await client.post("private", "records/query", query, user: "_k")
            #expect(again.status == 401)
            #expect(again.json["reason"]?.stringValue?.contains("already used") == true, "\(again.text)")
        }
        // The next token works once, on A.
        let c = ServerClient(webAuthToken: { _ in next }, host: "127.0.0.1", port: portA)
        #expect(try await c.post("private", "records/query", query, user: "_k").status == 200)
    }

    /// A subscription saved through A fires for a modify through B, and the push B queued reaches a
    /// courier poll held on A (LISTEN/NOTIFY wakes it), once.
    @Test func aSubscriptionThroughOneNodeFiresForAModifyThroughAnother() async throws {
        let nodes = try await Self.twoNodes(["--courier-timeout", "5"])
        defer { nodes.stop() }
        let (a, b) = (nodes.a, nodes.b)

        let subscribed = try await a.post("private", "subscriptions/modify", """
            {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
              "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
            """, user: "_k")
        #expect(subscribed.status == 200)
        let created = try await a.send(.post, "/device/1/\(a.container)/development/tokens/create", body: "{}", user: "_k")
        let courierURL = try #require(created.json["webcourierURL"]?.stringValue)
        let poll = String(courierURL[try #require(courierURL.range(of: "/aps")).lowerBound...])

        async let waiting = a.send(.get, poll, apiToken: nil)
        try await Task.sleep(for: .milliseconds(500))
        let saved = try await b.post("private", "records/modify", """
            {"operations": [{"operationType": "create", "record": {"recordName": "pushed", "recordType": "Note"}}]}
            """, user: "_k")
        #expect(saved.status == 200)
        let answer = try await waiting
        #expect(answer.status == 200)
        #expect(answer.json["ck"]?["qry"]?["rid"]?.stringValue == "pushed")
        // Delivered once: nothing is left for a poll on either node. (A acknowledges once its
        // answer is written, a moment after the client has it; the client polls again after that.)
        try await Task.sleep(for: .seconds(1))
        let again = try await b.send(.get, poll, apiToken: nil)
        #expect(again.status == 204 || again.json["ck"]?["qry"]?["rid"]?.stringValue != "pushed")
    }

    /// Two polls for one user, one held on each node, and one push: exactly one poll gets it.
    @Test func twoPollsOnTwoNodesDeliverOnePushOnce() async throws {
        let nodes = try await Self.twoNodes(["--courier-timeout", "4"])
        defer { nodes.stop() }
        let (a, b) = (nodes.a, nodes.b)
        _ = try await a.post("private", "subscriptions/modify", """
            {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
              "query": {"recordType": "Note"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
            """, user: "_k")
        let created = try await a.send(.post, "/device/1/\(a.container)/development/tokens/create", body: "{}", user: "_k")
        let courierURL = try #require(created.json["webcourierURL"]?.stringValue)
        let poll = String(courierURL[try #require(courierURL.range(of: "/aps")).lowerBound...])
        async let onA = a.send(.get, poll, apiToken: nil)
        async let onB = b.send(.get, poll, apiToken: nil)
        try await Task.sleep(for: .milliseconds(500))
        _ = try await a.post("private", "records/modify", """
            {"operations": [{"operationType": "create", "record": {"recordName": "once", "recordType": "Note"}}]}
            """, user: "_k")
        let answers = try await [onA, onB]
        #expect(answers.filter { $0.status == 200 }.count == 1)
        #expect(answers.filter { $0.status == 204 }.count == 1)
    }

    /// One user's two devices, each with a WebSocket stream, one on each node: a push is taken
    /// from the user's queue once, by either stream, and the other hears it too through
    /// PostgreSQL's NOTIFY, once.
    @Test(.timeLimit(.minutes(2))) func everyStreamOfAUserOnEveryNodeHearsEachPush() async throws {
        let nodes = try await Self.twoNodes(["--courier-timeout", "300"])
        defer { nodes.stop() }
        let (a, b) = (nodes.a, nodes.b)
        let subscribed = try await a.post("private", "subscriptions/modify", """
            {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "msgs", "subscriptionType": "query",
              "query": {"recordType": "Msg"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
            """, user: "_k")
        #expect(subscribed.status == 200)
        func stream(_ client: ServerClient, device: String) async throws -> String {
            let made = try await client.send(.post, "/device/1/\(client.container)/development/tokens/create", body: #"{"clientId": "\#(device)"}"#, user: "_k")
            let url = try #require(made.json["webcourierURL"]?.stringValue)
            let query = try #require(url.split(separator: "?").last)
            return "ws://127.0.0.1:\(client.port)/aps/stream?\(query)"
        }
        let onA = try await stream(a, device: "device-a"), onB = try await stream(b, device: "device-b")
        let heard = Locked<[String: [String]]>([:])
        @Sendable func listen(_ url: String, as name: String) async throws {
            try await WebSocketClient.connect(url: url, logger: Logger(label: "ws-test")) { inbound, _, _ in
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message, let rid = try? JSON.parse(text)["ck"]?["qry"]?["rid"]?.stringValue else { continue }
                    heard.withLock { $0[name, default: []].append(rid) }
                }
            }
        }
        func create(_ name: String) async throws {
            let saved = try await a.post("private", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "\(name)", "recordType": "Msg"}}]}
                """, user: "_k")
            #expect(saved.status == 200)
        }
        func heardBy(_ name: String) -> [String] { heard.withLock { $0[name, default: []] }.filter { !$0.hasPrefix("probe-") } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await listen(onA, as: "a") }
            group.addTask { try await listen(onB, as: "b") }
            // Probes until both streams are open and have heard one (taken, or a copy).
            var probes = 0
            while heard.withLock({ $0["a"] == nil || $0["b"] == nil }) && probes < 100 {
                probes += 1
                try await create("probe-\(probes)")
                try await Task.sleep(for: .milliseconds(200))
            }
            try #require(probes < 100, "both streams open")
            for name in ["m1", "m2", "m3"] { try await create(name) }
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline && (heardBy("a").count < 3 || heardBy("b").count < 3) {
                try await Task.sleep(for: .milliseconds(100))
            }
            try await Task.sleep(for: .milliseconds(500))   // a copy twice would come by now
            #expect(heardBy("a").sorted() == ["m1", "m2", "m3"])
            #expect(heardBy("b").sorted() == ["m1", "m2", "m3"])
            group.cancelAll()
        }
    }

    /// SIGKILL of a node under a load of modifies: every acknowledged modify is read through the
    /// other node, once.
    @Test func killingANodeLosesNothingAcknowledged() async throws {
        let nodes = try await Self.twoNodes()
        defer { nodes.stop() }
        let (a, b) = (nodes.a, nodes.b)

        let (acknowledged, firstFailure) = await ServerProcessTests.createUntilKilled(through: a, pid: nodes.nodeA.processIdentifier, user: "_k")
        Self.kill9(nodes.nodeA)
        #expect(nodes.nodeA.terminationReason == .uncaughtSignal)
        #expect(acknowledged.count >= 15, "the first modify not acknowledged: \(firstFailure ?? "none")")
        let found = try await b.post("private", "records/query", #"{"query": {"recordType": "Load"}, "resultsLimit": 200}"#, user: "_k")
        let names = found.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } ?? []
        #expect(Set(acknowledged).isSubset(of: Set(names)))
        #expect(names.count == Set(names).count)
    }

    /// A device registered through a node without APNs gets its push from the node holding the
    /// APNs duty: registrations live in the database, not in the node that took them.
    @Test func theAPNsNodeDeliversToADeviceRegisteredOnAnother() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let key = P256.Signing.PrivateKey()
        let configuration = JSON.object([("apns", .object([
            ("teamID", .string(APNsDeliveryTests.teamID)), ("keyID", .string(APNsDeliveryTests.keyID)), ("privateKey", .string(key.pemRepresentation)),
            ("topic", .string(APNsDeliveryTests.topic)), ("productionURL", .string(apns.url)), ("sandboxURL", .string(apns.url)),
            ("trustRootsPEM", .string(apns.certificatePEM)),
        ]))])
        let path = TemporaryFiles.path("apns-node") + ".json"
        try Data(configuration.serialized.utf8).write(to: URL(fileURLWithPath: path))
        let url = try PostgresCluster.start().createDatabase()
        let (delivering, deliveringPort) = try Self.startNode(url, ["--config", path])
        defer { Self.kill9(delivering) }
        let (other, otherPort) = try Self.startNode(url)
        defer { Self.kill9(other) }
        let clients = try await Self.clients(url, users: ["_dave"], ports: [deliveringPort, otherPort])
        try await APNsDeliveryTests.queuePush(clients[1])
        try await apns.wait { $0.requests.count >= 1 }
        #expect(apns.requests.first?.path == "/3/device/\(APNsDeliveryTests.device)")
    }
}
