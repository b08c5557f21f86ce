import Foundation
import KQuery
import KQueryTestSupport
import Testing

/// `kquery kvs` through the binary: two devices (two directories) of one user on a container file.
@Suite("Key-value store command line")
struct KeyValueStoreCommandLineTests {
    static func flags(_ db: String, device: String, user: String = "_alice") -> [String] {
        ["--db", db, "--user", user, "--container", "iCloud.com.example.kvs", "--device", device]
    }

    /// set, get, list, remove and sync on two devices, with every JSON form, and sync's
    /// notification lines.
    @Test func twoDevicesOnAContainerFile() throws {
        let db = TemporaryFiles.path("kvs-cli", suffix: ".sqlite")
        let phone = Self.flags(db, device: TemporaryFiles.path("kvs-phone"))
        let laptop = Self.flags(db, device: TemporaryFiles.path("kvs-laptop"))
        let value = #"{"columns":2,"data":{"$data":"AAEC"},"ratio":0.5,"since":{"$date":"2026-11-27T12:00:00Z"},"tags":["a",true]}"#
        // Flags go anywhere after the subcommand's name.
        let set = try KQueryBinary.run(["kvs", "set"] + phone + ["layout", value])
        #expect(set.status == 0, "\(set.standardError)")
        #expect(try KQueryBinary.run(["kvs", "set", "theme"] + phone + [#""dark""#]).status == 0)
        let got = try KQueryBinary.run(["kvs", "get", "layout"] + phone)
        #expect(got.standardOutput == value + "\n")
        let sync = try KQueryBinary.run(["kvs", "sync"] + laptop)
        #expect(sync.status == 0, "\(sync.standardError)")
        #expect(sync.standardOutput == #"{"reason":1,"changedKeys":["layout","theme"]}"# + "\n")
        let list = try KQueryBinary.run(["kvs", "list"] + laptop)
        #expect(list.standardOutput == #"{"layout":"# + value + #","theme":"dark"}"# + "\n")
        #expect(try KQueryBinary.run(["kvs", "remove", "theme"] + laptop).status == 0)
        let again = try KQueryBinary.run(["kvs", "sync"] + phone)
        #expect(again.standardOutput == #"{"reason":0,"changedKeys":["theme"]}"# + "\n")
        let missing = try KQueryBinary.run(["kvs", "get", "theme"] + phone)
        #expect(missing.status == 1 && missing.standardOutput.isEmpty)
        #expect(try KQueryBinary.run(["kvs", "sync"] + phone).standardOutput.isEmpty)
    }

    /// A refused write exits 1 naming the limit; bad flags and bad values exit 2.
    @Test func exitStatuses() throws {
        let db = TemporaryFiles.path("kvs-cli", suffix: ".sqlite")
        let device = Self.flags(db, device: TemporaryFiles.path("kvs-device"))
        // An argument is at most 128 KiB: nine of 120,000 bytes break the total of 1,048,576.
        let chunk = "\"" + String(repeating: "x", count: 120_000) + "\""
        for index in 0..<8 { #expect(try KQueryBinary.run(["kvs", "set", "big\(index)"] + device + [chunk]).status == 0) }
        let refused = try KQueryBinary.run(["kvs", "set", "big8"] + device + [chunk])
        #expect(refused.status == 1 && refused.standardError.contains("Exceeded maximum total bytes (1048576)"), "\(refused.standardError)")
        let long = try KQueryBinary.run(["kvs", "set", String(repeating: "k", count: 129), "1"] + device)
        #expect(long.status == 1 && long.standardError.contains("maximum allowed UTF-16 code units of (128)"))
        #expect(try KQueryBinary.run(["kvs", "set", "k", "null"] + device).status == 2)
        #expect(try KQueryBinary.run(["kvs", "set", "k", "{not json"] + device).status == 2)
        #expect(try KQueryBinary.run(["kvs", "set", "k", #"{"$date": "yesterday"}"#] + device).status == 2)
        #expect(try KQueryBinary.run(["kvs", "list", "--container", "c", "--device", "/tmp/x"]).status == 2)
        #expect(try KQueryBinary.run(["kvs", "list", "--db", db, "--container", "c", "--device", "/tmp/x"]).status == 2)
        #expect(try KQueryBinary.run(["kvs", "list", "--db", db, "--server", "http://h", "--user", "u", "--container", "c", "--device", "/tmp/x"]).status == 2)
        #expect(try KQueryBinary.run(["kvs", "list"] + device + ["--environment", "staging"]).status == 2)
        #expect(try KQueryBinary.run(["kvs", "watch", "--for", "-1"] + device).status == 2)
    }

    /// `watch` prints another device's change as it arrives, and stops when `--for` runs out.
    @Test func watchPrintsChangesAsTheyArrive() async throws {
        let db = TemporaryFiles.path("kvs-cli", suffix: ".sqlite")
        let watcher = Self.flags(db, device: TemporaryFiles.path("kvs-watcher"))
        let writer = Self.flags(db, device: TemporaryFiles.path("kvs-writer"))
        #expect(try KQueryBinary.run(["kvs", "sync"] + watcher).status == 0)
        #expect(try KQueryBinary.run(["kvs", "sync"] + writer).status == 0)
        let process = SpawnedProcess()
        process.executableURL = KQueryBinary.url
        process.arguments = ["kvs", "watch", "--for", "8"] + watcher
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The watcher polls the file every 250 ms: a write a moment later reaches it. The write
        // and the watcher's eight seconds run on a thread of their own: off the concurrency pool,
        // which other tests' servers need, and on time however busy the pool is.
        let (written, data) = try await offThePool {
            Thread.sleep(forTimeInterval: 1)
            let written = try KQueryBinary.run(["kvs", "set", "greeting", #""hello""#] + writer).status
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (written, data)
        }
        #expect(written == 0)
        #expect(process.terminationStatus == 0)
        #expect(String(decoding: data, as: UTF8.self).contains(#"{"reason":0,"changedKeys":["greeting"]}"#))
    }
}
