import Crypto
import KQuery
import KQueryContainer
import KQueryServer
import Testing
import KQueryWebServices

import Foundation

/// `kquery serve` delivering pushes to APNs (SPEC §10), against `FakeAPNs`: the request APNs gets,
/// its provider token, and what each answer does to the push and the device token.
@Suite struct APNsDeliveryTests {
    static let teamID = "TEAM123456"
    static let keyID = "KEY7654321"
    static let topic = "com.example.tests"
    static let device = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"

    /// A harness whose server delivers to `apns`, retrying fast; `logs` collects delivery's reports.
    static func harness(_ apns: FakeAPNs, key: P256.Signing.PrivateKey, logs: Locked<[String]>, directory: String? = nil,
                        attempts: Int = 5, poll: Duration = .milliseconds(300)) throws -> ServerHarness {
        var configuration = try APNsConfiguration(teamID: teamID, keyID: keyID, privateKeyPEM: key.pemRepresentation, topic: topic)
        configuration.productionURL = apns.url
        configuration.sandboxURL = apns.url
        configuration.trustRoots = [apns.certificate]
        configuration.initialBackoff = .milliseconds(10)
        configuration.maximumAttempts = attempts
        configuration.pollInterval = poll
        configuration.log = { line in logs.withLock { $0.append(line) } }
        return ServerHarness(directory: directory) { $0.apns = configuration }
    }

    /// Registers `device` for `user`, subscribes them to new Notes (collapsing on `topic`), and creates one.
    /// `modifyingFrom` names the device making the change (the modify's `apnsToken`).
    static func queuePush(_ c: ServerClient, user: String = "_dave", record: String = "n1", subscribe: Bool = true,
                          modifyingFrom: String? = nil) async throws {
        var answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/register",
                                      body: #"{"apnsEnvironment": "development", "apnsToken": "\#(device)"}"#, user: user)
        #expect(answer.status == 200)
        if subscribe {
            answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "notes", "subscriptionType": "query",
                  "query": {"recordType": "Note"}, "firesOn": ["create"],
                  "notificationInfo": {"alertBody": "new note", "collapseIDKey": "topic"}}}]}
                """, user: user)
            #expect(answer.status == 200)
        }
        let device = modifyingFrom.map { #""apnsToken": "\#($0)", "# } ?? ""
        answer = try await c.post("private", "records/modify", """
            {\(device)"operations": [{"operationType": "create", "record": {"recordName": "\(record)", "recordType": "Note",
              "fields": {"topic": {"value": "groceries"}}}}]}
            """, user: user)
        #expect(answer.status == 200)
    }

    static func container(_ c: ServerClient) throws -> Container {
        try #require(c.server).containers.container(c.container)
    }

    /// Waits until the container has nothing left for `channels` (APNs by default).
    static func waitForAcknowledgement(_ c: ServerClient, on channels: DeliveryChannel = .apns) async throws {
        let container = try Self.container(c)
        let deadline = ContinuousClock.now + .seconds(15)
        while try !container.pendingNotifications(for: channels).isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    static func base64URL(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }

    @Test func aModifysPushReachesTheDeviceWithEveryHeader() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let key = P256.Signing.PrivateKey()
        let publicKey = key.publicKey.rawRepresentation
        let logs = Locked<[String]>([])
        try await Self.harness(apns, key: key, logs: logs).run { c in
            let before = Date().timeIntervalSince1970
            try await Self.queuePush(c)
            try await apns.wait { $0.requests.count >= 1 }
            try await Self.waitForAcknowledgement(c)
            try await Task.sleep(for: .milliseconds(400))
            #expect(apns.requests.count == 1)
            let request = try #require(apns.requests.first)
            // The web courier has not taken it yet: it is still queued for the courier alone.
            let pending = try #require(try Self.container(c).pendingNotifications(for: .webCourier).first)

            #expect(request.version.major == 2)
            #expect(request.method == "POST")
            #expect(request.path == "/3/device/\(Self.device)")
            #expect(request.headers["apns-topic"] == Self.topic)
            #expect(request.headers["apns-push-type"] == "alert")
            #expect(request.headers["apns-priority"] == "10")
            #expect(request.headers["apns-expiration"] == String(pending.created / 1000 + 86_400))
            let nid = try #require(pending.payload["ck"]?["nid"]?.stringValue)
            #expect(request.headers["apns-id"] == nid.lowercased())
            #expect(request.headers["apns-collapse-id"] == "groceries")
            #expect(request.body == Array(pending.payload.serialized.utf8))

            let authorization = try #require(request.headers["authorization"])
            #expect(authorization.hasPrefix("bearer "))
            let parts = authorization.dropFirst("bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
            try #require(parts.count == 3)
            let header = try JSON.parse(String(decoding: try #require(Self.base64URL(parts[0])), as: UTF8.self))
            let claims = try JSON.parse(String(decoding: try #require(Self.base64URL(parts[1])), as: UTF8.self))
            #expect(header["alg"] == .string("ES256"))
            #expect(header["kid"] == .string(Self.keyID))
            #expect(claims["iss"] == .string(Self.teamID))
            let issued = try #require(claims["iat"].flatMap { if case .int(let i) = $0 { i } else { nil } })
            #expect(Double(issued) >= before.rounded(.down) - 1 && Double(issued) <= Date().timeIntervalSince1970 + 1)
            let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Self.base64URL(parts[2])))
            let verifier = try P256.Signing.PublicKey(rawRepresentation: publicKey)
            #expect(verifier.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))

            // The web courier still delivers the same push; then it leaves the outbox.
            var answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: "_dave")
            let url = try #require(answer.json["webcourierURL"]?.stringValue)
            answer = try await c.send(.get, try ServerCourierTests.pathAndQuery(url), apiToken: nil)
            #expect(answer.status == 200)
            #expect(answer.json["ck"]?["nid"] == .string(nid))
            // Acknowledged once the answer is written, which may be just after the client read it.
            try await Self.waitForAcknowledgement(c, on: .all)
            #expect(try Self.container(c).pendingNotifications().isEmpty)
        }
        #expect(logs.withLock { $0 }.isEmpty)
    }

    @Test func theDeviceThatMadeTheChangeIsSkipped() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let other = String(Self.device.reversed())
        try await Self.harness(apns, key: P256.Signing.PrivateKey(), logs: Locked([])).run { c in
            let answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/register",
                                          body: #"{"apnsEnvironment": "development", "apnsToken": "\#(other)"}"#, user: "_dave")
            #expect(answer.status == 200)
            // Saved from `device`: the push goes to the user's other device only.
            try await Self.queuePush(c, modifyingFrom: Self.device)
            try await apns.wait { $0.requests.count >= 1 }
            try await Self.waitForAcknowledgement(c)
            #expect(apns.requests.map(\.path) == ["/3/device/\(other)"])
            // A change that names no device goes to both.
            let plain = try await c.post("private", "records/modify",
                                         #"{"operations": [{"operationType": "create", "record": {"recordName": "n2", "recordType": "Note"}}]}"#, user: "_dave")
            #expect(plain.status == 200)
            try await apns.wait { $0.requests.count >= 3 }
            try await Self.waitForAcknowledgement(c)
            #expect(Set(apns.requests.dropFirst().map(\.path)) == ["/3/device/\(other)", "/3/device/\(Self.device)"])
        }
    }

    // Reads the device tokens' file; on PostgreSQL they are a table (PostgresNodesTests covers it).
    @Test(.enabled(if: !ServerHarness.onPostgres)) func unregisteredDeviceIsForgottenAndThePushAcknowledged() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let key = P256.Signing.PrivateKey()
        let logs = Locked<[String]>([])
        apns.script([(410, #"{"reason":"Unregistered","timestamp":1700000000000}"#)])
        let harness = try Self.harness(apns, key: key, logs: logs)
        try await harness.run { c in
            try await Self.queuePush(c)
            try await apns.wait { $0.requests.count >= 1 }
            try await Self.waitForAcknowledgement(c)
            #expect(try Self.container(c).pendingNotifications(for: .apns).isEmpty)
        }
        #expect(apns.requests.count == 1)
        #expect(logs.withLock { $0 }.contains { $0.contains("Unregistered") && $0.contains(Self.device) })
        let file = (harness.directory as NSString).appendingPathComponent("device-tokens.json")
        #expect(!(try String(contentsOfFile: file, encoding: .utf8)).contains(Self.device))

        // After a restart the device is still gone: a new push goes nowhere and is acknowledged at once.
        // First let the stopped server's container file close (its last connection checkpoints and
        // removes the WAL, holding the file's lock while it does).
        let wal = (harness.directory as NSString).appendingPathComponent("iCloud.com.example.tests.container-wal")
        let deadline = ContinuousClock.now + .seconds(5)
        while FileManager.default.fileExists(atPath: wal), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        try await Self.harness(apns, key: key, logs: logs, directory: harness.directory).run { c in
            let answer = try await c.post("private", "records/modify",
                                          #"{"operations": [{"operationType": "create", "record": {"recordName": "n2", "recordType": "Note"}}]}"#, user: "_dave")
            #expect(answer.status == 200, "\(answer.text)")
            try await Self.waitForAcknowledgement(c)
            #expect(try Self.container(c).pendingNotifications(for: .apns).isEmpty)
            #expect(try Self.container(c).pendingNotifications(for: .webCourier).count == 2)
        }
        #expect(apns.requests.count == 1)
    }

    @Test func throttlingAndServerErrorsAreRetriedUntilDelivered() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let logs = Locked<[String]>([])
        apns.script([(429, #"{"reason":"TooManyRequests"}"#), (500, #"{"reason":"InternalServerError"}"#), (503, #"{"reason":"ServiceUnavailable"}"#)])
        try await Self.harness(apns, key: P256.Signing.PrivateKey(), logs: logs).run { c in
            try await Self.queuePush(c)
            try await apns.wait { $0.requests.count >= 4 }
            try await Self.waitForAcknowledgement(c)
            #expect(try Self.container(c).pendingNotifications(for: .apns).isEmpty)
        }
        let requests = apns.requests
        #expect(requests.count == 4)
        #expect(Set(requests.map(\.body)).count == 1)
        #expect(Set(requests.compactMap { $0.headers["apns-id"] }).count == 1)
        #expect(logs.withLock { $0 }.isEmpty)
    }

    // Reads the device tokens' file; on PostgreSQL they are a table (PostgresNodesTests covers it).
    @Test(.enabled(if: !ServerHarness.onPostgres)) func badDeviceTokenIsDroppedNotRetried() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let logs = Locked<[String]>([])
        apns.script([(400, #"{"reason":"BadDeviceToken"}"#)])
        let harness = try Self.harness(apns, key: P256.Signing.PrivateKey(), logs: logs)
        try await harness.run { c in
            try await Self.queuePush(c)
            try await apns.wait { $0.requests.count >= 1 }
            try await Self.waitForAcknowledgement(c)
            // Another poll passes without sending it again.
            try await Task.sleep(for: .milliseconds(500))
            #expect(try Self.container(c).pendingNotifications(for: .apns).isEmpty)
        }
        #expect(apns.requests.count == 1)
        #expect(logs.withLock { $0 }.contains { $0.contains("400 BadDeviceToken") && $0.contains("dropped") })
        let file = (harness.directory as NSString).appendingPathComponent("device-tokens.json")
        #expect(try String(contentsOfFile: file, encoding: .utf8).contains(Self.device))
    }

    @Test func payloadTooLargeIsDroppedNotRetried() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let logs = Locked<[String]>([])
        apns.script([(413, #"{"reason":"PayloadTooLarge"}"#)])
        try await Self.harness(apns, key: P256.Signing.PrivateKey(), logs: logs).run { c in
            try await Self.queuePush(c)
            try await apns.wait { $0.requests.count >= 1 }
            try await Self.waitForAcknowledgement(c)
            try await Task.sleep(for: .milliseconds(500))
        }
        #expect(apns.requests.count == 1)
        #expect(logs.withLock { $0 }.contains { $0.contains("413 PayloadTooLarge") })
    }

    // Counts the passes only modifies start; on PostgreSQL every commit's NOTIFY wakes the APNs duty too.
    @Test(.enabled(if: !ServerHarness.onPostgres)) func exhaustedRetriesLeaveThePushPendingForALaterPass() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let logs = Locked<[String]>([])
        let failure = (status: 503, body: #"{"reason":"ServiceUnavailable"}"#)
        apns.script([failure, failure, failure])
        // No polling: only modifies start a pass, so what each pass did can be counted.
        try await Self.harness(apns, key: P256.Signing.PrivateKey(), logs: logs, attempts: 3, poll: .seconds(3600)).run { c in
            try await Self.queuePush(c)
            try await apns.wait { _ in logs.withLock { $0 }.contains { $0.contains("left pending") } }
            try await Task.sleep(for: .milliseconds(200))
            #expect(apns.requests.count == 3)
            let pending = try Self.container(c).pendingNotifications(for: .apns)
            #expect(pending.count == 1)
            // The next pass (here woken by another modify) sends it again, and now APNs takes both.
            try await Self.queuePush(c, record: "n2", subscribe: false)
            try await apns.wait { $0.requests.count >= 5 }
            try await Self.waitForAcknowledgement(c)
            #expect(try Self.container(c).pendingNotifications(for: .apns).isEmpty)
            #expect(apns.requests[3].body == Array(try #require(pending.first).payload.serialized.utf8))
        }
        #expect(apns.requests.count == 5)
    }

    @Test func eachEnvironmentGoesToItsHostAndADownHostWaitsForTheNextPass() async throws {
        let live = try await FakeAPNs.start()
        defer { Task { try await live.stop() } }
        let gone = try await FakeAPNs.start()
        try await gone.stop()
        let logs = Locked<[String]>([])
        var harness = try Self.harness(live, key: P256.Signing.PrivateKey(), logs: logs, attempts: 2, poll: .seconds(3600))
        harness.configuration.apns?.sandboxURL = gone.url
        // Each attempt on the down host lasts the timeout; the live host's request must fit in it
        // too, and its TLS handshake took more than 300 ms while the suites ran in parallel on
        // PostgreSQL (it then got nothing): 2 s, and the wait below allows both attempts.
        harness.configuration.apns?.requestTimeout = .seconds(2)
        let production = String(repeating: "0f", count: 32)
        let development = [String(repeating: "1a", count: 32), String(repeating: "2b", count: 32)]
        try await harness.run { c in
            for (environment, token) in [("production", production), ("development", development[0]), ("development", development[1])] {
                let answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/register",
                                              body: #"{"apnsEnvironment": "\#(environment)", "apnsToken": "\#(token)"}"#, user: "_dave")
                #expect(answer.status == 200)
            }
            try await Self.queuePush(c)
            try await live.wait(timeout: .seconds(30)) { _ in logs.withLock { $0 }.contains { $0.contains("left pending") } }
            // The devices are tried in an order of the store's (on PostgreSQL development first):
            // the production request may still be on its way when the sandbox's is given up.
            try await live.wait(timeout: .seconds(30)) { $0.requests.contains { $0.path == "/3/device/\(production)" } }
            try await Task.sleep(for: .milliseconds(200))
            // The production device got it from the production host; the sandbox host never answered.
            #expect(live.requests.map(\.path).contains("/3/device/\(production)"))
            #expect(!live.requests.contains { $0.path.contains(development[0]) || $0.path.contains(development[1]) })
            // One development device spent its retries; the other was not tried against the down host.
            #expect(logs.withLock { $0 }.filter { $0.contains("left pending") }.count == 1)
            #expect(try Self.container(c).pendingNotifications(for: .apns).count == 1)
        }
    }

    @Test func aBadAPNsConfigurationNamesItsField() throws {
        func refusal(_ text: String) -> String? {
            var configuration = ServerConfiguration(dataDirectory: "/nonexistent")
            do throws(ServerError) { try configuration.load(configurationText: text) } catch { return error.reason }
            return nil
        }
        let key = P256.Signing.PrivateKey().pemRepresentation.replacingOccurrences(of: "\n", with: "\\n")
        #expect(refusal(#"{"apns": {"teamID": "T", "keyID": "K", "topic": "t", "privateKey": "nope"}}"#)?.contains("apns.privateKey") == true)
        #expect(refusal(#"{"apns": {"keyID": "K", "topic": "t", "privateKey": "\#(key)"}}"#)?.contains("apns.teamID") == true)
        #expect(refusal(#"{"apns": {"teamID": "T", "keyID": "K", "topic": "t"}}"#)?.contains("privateKeyPath") == true)
        #expect(refusal(#"{"apns": {"teamID": "T", "keyID": "K", "topic": "t", "privateKeyPath": "/nonexistent/AuthKey.p8"}}"#)?
            .contains("apns.privateKeyPath") == true)
        #expect(refusal(#"{"apns": {"teamID": "T", "keyID": "K", "topic": "t", "privateKey": "\#(key)", "sandboxURL": "api.push"}}"#)?
            .contains("apns.sandboxURL") == true)
        #expect(refusal(#"{"apns": {"teamID": "T", "keyID": "K", "topic": "t", "privateKey": "\#(key)", "trustRootsPEM": "x"}}"#)?
            .contains("apns.trustRootsPEM") == true)
        var configuration = ServerConfiguration(dataDirectory: "/nonexistent")
        try configuration.load(configurationText: #"{"apns": {"teamID": "T", "keyID": "K", "topic": "t", "privateKey": "\#(key)", "productionURL": "https://127.0.0.1:2197/"}}"#)
        #expect(configuration.apns?.productionURL == "https://127.0.0.1:2197")
        #expect(configuration.apns?.sandboxURL == "https://api.sandbox.push.apple.com")
    }
}
