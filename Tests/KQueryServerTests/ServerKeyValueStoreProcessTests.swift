import Foundation
import KQuery
import KQueryContainer
import KQueryKeyValueStore
import KQueryServer
import KQueryTestSupport
import Testing

/// Key-value storage survives kill -9, of a device in the middle of its writes and uploads, and
/// of the server: no value whose write was acknowledged is lost.
@Suite(.serialized) struct ServerKeyValueStoreProcessTests {
    static var kquery: URL { ServerProcessTests.kquery }

    static func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = SpawnedProcess()
        process.executableURL = kquery
        process.environment = Process.kqueryEnvironment
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// `kquery kvs set` processes on one device, each killed with SIGKILL at a random moment (in
    /// its write, its upload, or after): every set that exited 0 is on the device afterwards, and
    /// once the device syncs, on the container and on a second device.
    @Test func aDeviceKilledMidWriteOrSyncLosesNoAcknowledgedValue() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let db = TemporaryFiles.path("kvs-kill", suffix: ".sqlite")
        let device = TemporaryFiles.path("kvs-kill-device")
        let flags = ["--db", db, "--user", "_k", "--container", "iCloud.com.example.kill", "--device", device]
        var acknowledged: [Int] = []
        var generator = SystemRandomNumberGenerator()
        for index in 0..<40 {
            let process = try ChildProcess(Self.kquery.path, ["kvs", "set", "key\(index)", "\(index)"] + flags)
            try await Task.sleep(for: .milliseconds(Int.random(in: 0...250, using: &generator)))
            process.kill(SIGKILL)
            if process.waitForExit() == 0 { acknowledged.append(index) }
        }
        // Some finished, some were cut short (a kill that came first, or in the write or the upload).
        #expect(!acknowledged.isEmpty && acknowledged.count < 40, "\(acknowledged.count) of 40 acknowledged")
        let listed = try Self.run(["kvs", "list"] + flags)
        #expect(listed.status == 0)
        let values = try JSON.parse(listed.output)
        for index in acknowledged { #expect(values["key\(index)"] == .int(Int64(index)), "key\(index) was acknowledged") }
        #expect(try Self.run(["kvs", "sync"] + flags).status == 0)
        let other = TemporaryFiles.path("kvs-kill-other")
        let otherFlags = ["--db", db, "--user", "_k", "--container", "iCloud.com.example.kill", "--device", other]
        #expect(try Self.run(["kvs", "sync"] + otherFlags).status == 0)
        let seen = try JSON.parse(try Self.run(["kvs", "list"] + otherFlags).output)
        for index in acknowledged { #expect(seen["key\(index)"] == .int(Int64(index)), "key\(index) reached the other device") }
    }

    static func startServer(_ directory: String) throws -> (SpawnedProcess, Int) {
        try ServerProcessTests.startServer(directory: directory)
    }

    static func device(port: Int, directory: String, secret: ServerSecret) throws -> UbiquitousKeyValueStore {
        let transport = WebServicesTransport(
            server: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: "iCloud.com.example.kill", storeIdentifier: "kill",
            apiToken: "t", webAuthToken: secret.webAuthToken(user: "_k"))
        var configuration = UbiquitousKeyValueStore.Configuration(storeIdentifier: "kill", deviceDirectory: directory, transport: transport)
        configuration.automaticallySyncs = false
        return try UbiquitousKeyValueStore(configuration: configuration)
    }

    /// The server killed with SIGKILL after answering uploads: a restarted server still has every
    /// value a sync reported done, and a new device gets them all.
    @Test func theServerKilledLosesNoAcknowledgedValue() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.kquery.path), "build kquery first")
        let data = TemporaryFiles.path("kvs-kill-serve")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let secret = try ServerSecret(directory: data)
        let directory = TemporaryFiles.path("kvs-kill-device")
        var expected: [String: PropertyListValue] = [:]
        do {
            let (server, port) = try Self.startServer(data)
            defer { if server.isRunning { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() } }
            let store = try Self.device(port: port, directory: directory, secret: secret)
            for index in 0..<30 {
                try store.set(Int64(index), forKey: "k\(index)")
                expected["k\(index)"] = .integer(Int64(index))
                if index % 5 == 4 { _ = try await store.syncNow() }
            }
            try store.set(Data(count: 150_000), forKey: "large")
            expected["large"] = .data(Data(count: 150_000))
            _ = try await store.syncNow()
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        let (server, port) = try Self.startServer(data)
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }
        let fresh = try Self.device(port: port, directory: TemporaryFiles.path("kvs-kill-new"), secret: secret)
        _ = try await fresh.syncNow()
        #expect(fresh.values == expected)
    }
}
