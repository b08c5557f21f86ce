import Foundation
import KQuery
import KQueryContainer
import KQueryKeyValueStore
import KQueryServer

// Key-value storage benchmarks (issue #35's aims), release build:
//   swift run -c release KeyValueStoreBenchmarks
// 1. `set` on a device, persisted, before any upload: median (aim under 20 µs).
// 2. A new device pulls a full store (1,024 keys, 1 MB) from `kquery serve` on loopback, and from
//    a container in process (aim under 1 s).
// 3. A `set` on one device reaching another device's notification through `kquery serve` and its
//    web courier, upload delay zero: p50 and p99 over BENCH_KVS_CHANGES changes (default 1,000;
//    aim p99 under 100 ms).

func environmentInt(_ name: String, _ fallback: Int) -> Int { Int(ProcessInfo.processInfo.environment[name] ?? "") ?? fallback }

func temporaryDirectory(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "kquery-bench-\(name)-\(UUID().uuidString)"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

func percentile(_ values: [Double], _ fraction: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.down)))]
}

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

let directories = Locked<[String]>([])

func firstPort(_ ports: AsyncStream<Int>) async -> Int? {
    var iterator = ports.makeAsyncIterator()
    return await iterator.next()
}

// MARK: 1. set

do {
    let directory = temporaryDirectory("kvs-set")
    directories.withLock { $0.append(directory) }
    let store = try UbiquitousKeyValueStore(configuration: .init(storeIdentifier: "bench", deviceDirectory: directory))
    var timings: [Double] = []
    let rounds = environmentInt("BENCH_KVS_SETS", 100_000)
    timings.reserveCapacity(rounds)
    for index in 0..<rounds {
        let key = "key\(index % 1000)"
        let start = now()
        try store.set("value number \(index)", forKey: key)
        timings.append(Double(now() - start) / 1e3)
    }
    print(String(format: "set (persisted, before upload): median %.2f µs, p99 %.2f µs over %d sets (aim: median under 20 µs)",
                 percentile(timings, 0.5), percentile(timings, 0.99), rounds))
}

// MARK: Devices on a server

func device(_ port: Int, _ server: CloudKitServer, user: String, automatic: Bool, directory: String? = nil) throws -> UbiquitousKeyValueStore {
    let path = directory ?? temporaryDirectory("kvs-device")
    directories.withLock { $0.append(path) }
    let transport = WebServicesTransport(
        server: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: "iCloud.com.example.bench", storeIdentifier: "bench",
        apiToken: "bench", webAuthToken: server.webAuthToken(user: user))
    var configuration = UbiquitousKeyValueStore.Configuration(storeIdentifier: "bench", deviceDirectory: path, transport: transport)
    configuration.automaticallySyncs = automatic
    configuration.uploadDelay = .zero
    configuration.minimumUploadInterval = .zero
    return try UbiquitousKeyValueStore(configuration: configuration)
}

/// 1,024 keys whose values make 1 MB of binary property lists together.
func fillFullStore(_ store: UbiquitousKeyValueStore) throws {
    let overhead = PropertyListValue.binaryPropertyList(.data(Data(count: 1000))).count - 1000
    let each = 1_048_576 / 1024 - overhead
    for index in 0..<1024 { try store.set(Data(repeating: UInt8(index % 251), count: each), forKey: "key\(index)") }
}

let serverData = temporaryDirectory("kvs-serve")
directories.withLock { $0.append(serverData) }
var configuration = ServerConfiguration(dataDirectory: serverData)
configuration.host = "127.0.0.1"
configuration.port = 0
configuration.logsRequests = false
let server = try CloudKitServer(configuration: configuration)
let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
let serving = Task { try await server.run { port in portContinuation.yield(port) } }
guard let port = await firstPort(ports) else { fatalError("the server did not start") }

// MARK: 2. full store pull

do {
    let writer = try device(port, server, user: "_pull", automatic: false)
    try fillFullStore(writer)
    _ = try await writer.syncNow()
    var timings: [Double] = []
    for _ in 0..<5 {
        let fresh = try device(port, server, user: "_pull", automatic: false)
        let start = now()
        _ = try await fresh.syncNow()
        timings.append(Double(now() - start) / 1e9)
        guard fresh.values.count == 1024 else { fatalError("the new device pulled \(fresh.values.count) keys") }
    }
    print(String(format: "new device pulls 1,024 keys / 1 MB from kquery serve: median %.3f s over 5 devices (aim under 1 s)", percentile(timings, 0.5)))

    let container = try Container(containerIdentifier: "iCloud.com.example.bench")
    func inProcess() throws -> UbiquitousKeyValueStore {
        let path = temporaryDirectory("kvs-device")
        directories.withLock { $0.append(path) }
        var configuration = UbiquitousKeyValueStore.Configuration(
            storeIdentifier: "bench", deviceDirectory: path, transport: ContainerTransport(container: container, user: "_pull", storeIdentifier: "bench"))
        configuration.automaticallySyncs = false
        return try UbiquitousKeyValueStore(configuration: configuration)
    }
    let local = try inProcess()
    try fillFullStore(local)
    _ = try await local.syncNow()
    var localTimings: [Double] = []
    for _ in 0..<5 {
        let fresh = try inProcess()
        let start = now()
        _ = try await fresh.syncNow()
        localTimings.append(Double(now() - start) / 1e9)
    }
    print(String(format: "new device pulls 1,024 keys / 1 MB from a container in process: median %.3f s over 5 devices", percentile(localTimings, 0.5)))
}

// MARK: 3. set to another device's notification

do {
    let changes = environmentInt("BENCH_KVS_CHANGES", 1000)
    let writer = try device(port, server, user: "_latency", automatic: false)
    let listener = try device(port, server, user: "_latency", automatic: true)
    let notifications = listener.changes
    _ = try await writer.syncNow()
    _ = try await listener.syncNow()
    var iterator = notifications.makeAsyncIterator()
    var timings: [Double] = []
    for index in 0..<changes {
        let key = "k\(index % 50)"
        let start = now()
        try writer.set(Int64(index), forKey: key)
        _ = try await writer.syncNow()
        while let change = await iterator.next() {
            if change.changedKeys.contains(key), listener.longLong(forKey: key) == Int64(index) { break }
        }
        timings.append(Double(now() - start) / 1e6)
    }
    listener.close()
    print(String(format: "set on one device to another's notification via kquery serve: p50 %.2f ms, p99 %.2f ms over %d changes (aim p99 under 100 ms)",
                 percentile(timings, 0.5), percentile(timings, 0.99), changes))
}

serving.cancel()
for path in directories.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
exit(0)
