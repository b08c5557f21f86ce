import Crypto
import Foundation
import KQuery
import KQueryServer
import KQueryTestSupport
import Testing

/// `kquery serve` as a process: it listens, logs each request, and on SIGTERM ends waiting polls,
/// finishes, and exits 0.
@Suite(.serialized) struct ServerProcessTests {
    /// The `kquery` built beside this test binary (whatever the scratch path), else `.build/debug`.
    static var kquery: URL {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("kquery")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/kquery")
    }

    /// Reads the child's standard error until the `listening on` line, and returns the port.
    static func port(from pipe: Pipe) throws -> (Int, String) {
        var text = ""
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let data = pipe.fileHandleForReading.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
            if let range = text.range(of: "listening on http://127.0.0.1:") {
                let digits = text[range.upperBound...].prefix { $0.isNumber }
                if let port = Int(digits), text[range.upperBound...].contains(",") { return (port, text) }
            }
        }
        throw CancellationError()
    }

    /// Starts `kquery serve --data directory --port 0 --quiet` with `arguments` on 127.0.0.1 (the
    /// default host), and returns it with the port it listens on.
    static func startServer(directory: String, _ arguments: [String] = []) throws -> (SpawnedProcess, Int) {
        try startServer(storage: ["--data", directory], arguments)
    }

    /// Starts `kquery serve` on `storage` (`--data DIR`, `--postgres URL`) with `--port 0 --quiet`
    /// and `arguments`, and returns it with the port it listens on.
    static func startServer(storage: [String], _ arguments: [String] = []) throws -> (SpawnedProcess, Int) {
        let process = SpawnedProcess()
        process.executableURL = kquery
        process.environment = Process.kqueryEnvironment
        process.arguments = ["serve"] + storage + ["--port", "0", "--quiet"] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        do {
            let (port, _) = try port(from: errors)
            return (process, port)
        } catch {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw error
        }
    }

    /// Sends 60 creates of `Load` records `l0`... at once through `client` and kills the server
    /// (`pid`, SIGKILL) once 15 are acknowledged, the rest in flight; returns the names of those
    /// acknowledged.
    static func createUntilKilled(through client: ServerClient, pid: pid_t, user: String) async -> (acknowledged: [String], firstFailure: String?) {
        let answered = Locked(0)
        // Why the first unacknowledged modify was (refused, or no answer: the kill).
        let firstFailure = Locked<String?>(nil)
        let names = await withTaskGroup(of: String?.self) { group in
            for i in 0..<60 {
                group.addTask {
                    let answer: ServerClient.Answer?
                    do {
                        answer = try await client.post("private", "records/modify", """
                            {"operations": [{"operationType": "create", "record": {"recordName": "l\(i)", "recordType": "Load"}}]}
                            """, user: user)
                    } catch {
                        firstFailure.withLock { $0 = $0 ?? "l\(i): \(error)" }
                        answer = nil
                    }
                    guard let answer, answer.status == 200 else {
                        if let answer { firstFailure.withLock { $0 = $0 ?? "l\(i): \(answer.status) \(answer.json.serialized.prefix(300))" } }
                        return nil
                    }
                    if answered.withLock({ count in count += 1; return count }) == 15 { kill(pid, SIGKILL) }
                    return "l\(i)"
                }
            }
            var names: [String] = []
            for await name in group { if let name { names.append(name) } }
            return names
        }
        return (names, firstFailure.withLock { $0 })
    }

    /// Stops a server started by `startServer` (SIGTERM, then waits).
    static func stop(_ process: SpawnedProcess) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }

    /// A kquery the tests start (`Process.kqueryEnvironment`) ends when the process that started
    /// it does, as a crashed test process's servers must: here a shell starts one in the
    /// background and exits.
    @Test func aServerEndsWhenItsParentDoes() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-orphan-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let shell = SpawnedProcess()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", #""$0" serve --data "$1" --port 0 --quiet >/dev/null 2>&1 & echo $!; sleep 2"#, Self.kquery.path, directory]
        shell.environment = Process.kqueryEnvironment
        let output = Pipe()
        shell.standardOutput = output
        try shell.run()
        shell.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let pid = try #require(pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), "\(text)")
        // Gone, or a zombie its new parent has not reaped.
        func running() -> Bool {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return false }
            return !stat[stat.index(after: close)...].hasPrefix(" Z")
        }
        let deadline = Date().addingTimeInterval(30)
        while running() && Date() < deadline { usleep(100_000) }
        #expect(!running(), "kquery \(pid) outlived its parent")
        if running() { kill(pid, SIGKILL) }
    }

    @Test func sigtermEndsAWaitingPollAndExitsZero() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = TemporaryFiles.path("kquery-serve")
        let process = SpawnedProcess()
        process.executableURL = Self.kquery
        process.environment = Process.kqueryEnvironment
        process.arguments = ["serve", "--data", directory, "--port", "0", "--courier-timeout", "60"]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let (port, _) = try Self.port(from: errors)

        let secret = try ServerSecret(directory: directory)
        let client = ServerClient(webAuthToken: { secret.webAuthToken(user: $0) }, host: "127.0.0.1", port: port)
        let created = try await client.send(.post, "/device/1/iCloud.p/development/tokens/create", body: "{}", user: "_gina")
        #expect(created.status == 200)
        let url = try #require(created.json["webcourierURL"]?.stringValue)
        let range = try #require(url.range(of: "/aps"))
        let poll = String(url[range.lowerBound...])

        let started = Date()
        async let waiting = client.send(.get, poll, apiToken: nil)
        // Long enough for the poll to reach the server on a loaded machine (a connection that has
        // sent nothing yet is closed by the shutdown, legitimately).
        try await Task.sleep(for: .seconds(1))
        kill(process.processIdentifier, SIGTERM)
        let answer = try await waiting
        #expect(answer.status == 204)
        while process.isRunning, Date().timeIntervalSince(started) < 20 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(!process.isRunning)
        #expect(process.terminationStatus == 0)
        #expect(Date().timeIntervalSince(started) < 10)

        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("POST /device/1/iCloud.p/development/tokens/create user=_gina status=200"))
        #expect(log.contains("GET /aps user=_gina status=204"))
    }

    /// kill -9 during a load of modifies: after a restart every acknowledged modify is there, and so
    /// is its push (at least once).
    @Test func killDuringModifiesLosesNothingAcknowledged() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = TemporaryFiles.path("kquery-serve")
        func start() throws -> (SpawnedProcess, Int) { try Self.startServer(directory: directory, ["--courier-timeout", "1"]) }
        let secret = try ServerSecret(directory: { try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true); return directory }())
        var (process, port) = try start()
        // Whatever happens below, no server outlives the test.
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        var client = ServerClient(webAuthToken: { secret.webAuthToken(user: $0) }, host: "127.0.0.1", port: port)
        let subscribed = try await client.post("private", "subscriptions/modify", """
            {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "load", "subscriptionType": "query",
              "query": {"recordType": "Load"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
            """, user: "_k")
        #expect(subscribed.status == 200)

        let (acknowledged, firstFailure) = await Self.createUntilKilled(through: client, pid: process.processIdentifier, user: "_k")
        // Fewer than 15 answers would leave the server running: kill it anyway.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
        #expect(!acknowledged.isEmpty, "\(firstFailure ?? "")")

        (process, port) = try start()
        client = ServerClient(webAuthToken: { secret.webAuthToken(user: $0) }, host: "127.0.0.1", port: port)
        let lookup = "{\"records\": [\(acknowledged.map { "{\"recordName\": \"\($0)\"}" }.joined(separator: ","))]}"
        let found = try await client.post("private", "records/lookup", lookup, user: "_k")
        #expect(found.json["records"]?.elements.filter { $0["recordType"] == .string("Load") }.count == acknowledged.count)

        let created = try await client.send(.post, "/device/1/\(client.container)/development/tokens/create", body: "{}", user: "_k")
        let url = try #require(created.json["webcourierURL"]?.stringValue)
        let poll = String(url[try #require(url.range(of: "/aps")).lowerBound...])
        var pushed: Set<String> = []
        while true {
            let answer = try await client.send(.get, poll, apiToken: nil)
            guard answer.status == 200, let rid = answer.json["ck"]?["qry"]?["rid"]?.stringValue else { break }
            pushed.insert(rid)
        }
        #expect(Set(acknowledged).isSubset(of: pushed))
    }

    /// `--records` imports a records file into the public database at start; `--reset` empties DIR's containers.
    @Test func recordsImportAndReset() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = TemporaryFiles.path("kquery-serve")
        let records = TemporaryFiles.register(directory + "-records.ndjson")
        try #"{"recordName": "r1", "recordType": "Shop", "fields": {"name": "Chez Nous"}}"#.write(toFile: records, atomically: true, encoding: .utf8)

        func start(_ arguments: [String]) throws -> (SpawnedProcess, Int) { try Self.startServer(directory: directory, arguments) }
        func stop(_ process: SpawnedProcess) { Self.stop(process) }

        var (process, port) = try start(["--records", records, "--container", "iCloud.shops"])
        defer { Self.stop(process) }
        var client = ServerClient(webAuthToken: { _ in "" }, host: "127.0.0.1", port: port, container: "iCloud.shops")
        var answer = try await client.post("public", "records/lookup", #"{"records": [{"recordName": "r1"}]}"#)
        stop(process)
        #expect(answer.json["records"]?[0]?["fields"]?["name"]?["value"] == .string("Chez Nous"))
        #expect(process.terminationStatus == 0)

        (process, port) = try start(["--reset"])
        client = ServerClient(webAuthToken: { _ in "" }, host: "127.0.0.1", port: port, container: "iCloud.shops")
        answer = try await client.post("public", "records/lookup", #"{"records": [{"recordName": "r1"}]}"#)
        stop(process)
        #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))
    }

    @Test func aConfiguredServerDeliversToAPNsAndStopsOnSIGTERM() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let apns = try await FakeAPNs.start()
        defer { Task { try await apns.stop() } }
        let directory = TemporaryFiles.path("kquery-serve")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // The key beside the config file, named relative to it.
        try Data(P256.Signing.PrivateKey().pemRepresentation.utf8).write(to: URL(fileURLWithPath: directory + "/AuthKey_K.p8"))
        let config = JSON.object([("apns", .object([
            ("teamID", .string(APNsDeliveryTests.teamID)), ("keyID", .string(APNsDeliveryTests.keyID)), ("privateKeyPath", .string("AuthKey_K.p8")),
            ("topic", .string(APNsDeliveryTests.topic)), ("productionURL", .string(apns.url)), ("sandboxURL", .string(apns.url)),
            ("trustRootsPEM", .string(apns.certificatePEM)),
        ]))])
        try Data(config.serialized.utf8).write(to: URL(fileURLWithPath: directory + "/config.json"))
        let (process, port) = try Self.startServer(directory: directory + "/data", ["--config", directory + "/config.json"])
        defer { Self.stop(process) }
        let secret = try ServerSecret(directory: directory + "/data")
        let client = ServerClient(webAuthToken: { secret.webAuthToken(user: $0) }, host: "127.0.0.1", port: port)
        try await APNsDeliveryTests.queuePush(client)
        try await apns.wait { $0.requests.count >= 1 }
        #expect(apns.requests.map(\.path) == ["/3/device/\(APNsDeliveryTests.device)"])
        #expect(apns.requests.first?.headers["apns-topic"] == APNsDeliveryTests.topic)

        let stopping = ContinuousClock.now
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(ContinuousClock.now - stopping < .seconds(10))
    }
}
