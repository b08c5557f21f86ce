import Foundation
import KQuery
import KQueryServer
import Testing

/// `kquery serve` as a process: it listens, logs each request, and on SIGTERM ends waiting polls,
/// finishes, and exits 0.
@Suite struct ServerProcessTests {
    static var kquery: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
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

    @Test func sigtermEndsAWaitingPollAndExitsZero() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = NSTemporaryDirectory() + "kquery-serve-\(UUID().uuidString)"
        let process = Process()
        process.executableURL = Self.kquery
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
        try await Task.sleep(for: .milliseconds(300))
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

    /// `--records` imports a records file into the public database at start; `--reset` empties DIR's containers.
    @Test func recordsImportAndReset() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let directory = NSTemporaryDirectory() + "kquery-serve-\(UUID().uuidString)"
        let records = directory + "-records.ndjson"
        try #"{"recordName": "r1", "recordType": "Shop", "fields": {"name": "Chez Nous"}}"#.write(toFile: records, atomically: true, encoding: .utf8)

        func start(_ arguments: [String]) throws -> (Process, Int) {
            let process = Process()
            process.executableURL = Self.kquery
            process.arguments = ["serve", "--data", directory, "--port", "0", "--quiet"] + arguments
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let (port, _) = try Self.port(from: errors)
            return (process, port)
        }
        func stop(_ process: Process) {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }

        var (process, port) = try start(["--records", records, "--container", "iCloud.shops"])
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
}
