import Foundation
import KQuery
import KQueryDocuments
import KQueryServer
import KQueryTestSupport

// iCloud Documents benchmarks (issue #37's aims), release build:
//   swift run -c release DocumentsBenchmarks
// 1. Chunking (FastCDC boundaries) on one core, and chunking with SHA-256 names (aim 1 GB/s).
// 2. First sync of BENCH_DOCS_FILES small files (1–10 KB, default 10,000) to an empty
//    `kquery serve` on loopback, and to a second device (aim under 15 s each).
// 3. An edit on one device until a watching metadata query on another lists it (batching interval
//    zero), BENCH_DOCS_EDITS times (default 100), in a container of 100 files (aim 200 ms p99).

func environmentInt(_ name: String, _ fallback: Int) -> Int { Int(ProcessInfo.processInfo.environment[name] ?? "") ?? fallback }
func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
/// This thread's CPU time: one core's throughput even while other work shares the machine.
func cpuNow() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

func temporaryDirectory(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "kquery-bench-\(name)-\(UUID().uuidString)"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

@inline(never) func sink<T>(_ value: T) { withExtendedLifetime(value) {} }

/// The process's CPU time, client and in-process server together: a figure the other work on a
/// shared machine moves less than the wall clock.
func processCPU() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

// MARK: 1. Chunking

do {
    let size = environmentInt("BENCH_DOCS_CHUNK_MB", 256) << 20
    let bytes = documentBytes(count: size, seed: 1)
    var best = 0.0
    var bestCPU = 0.0
    var chunks = 0
    for _ in 0..<5 {
        let (start, cpuStart) = (now(), cpuNow())
        let ranges = Chunker.boundaries(bytes)
        let (seconds, cpuSeconds) = (Double(now() - start) / 1e9, Double(cpuNow() - cpuStart) / 1e9)
        chunks = ranges.count
        sink(ranges)
        best = max(best, Double(size) / seconds / 1e9)
        bestCPU = max(bestCPU, Double(size) / cpuSeconds / 1e9)
    }
    print(String(format: "chunking (boundaries) on one core: %.2f GB/s of CPU time (%.2f GB/s wall), best of 5 over %d MB (%d chunks, mean %d KB) (aim 1 GB/s)",
                 bestCPU, best, size >> 20, chunks, size / max(chunks, 1) / 1024))
    let start = now()
    sink(Chunker.chunks(bytes))
    print(String(format: "chunking with SHA-256 names: %.2f GB/s", Double(size) / (Double(now() - start) / 1e9) / 1e9))
}

// MARK: 2. First sync of many small files

let files = environmentInt("BENCH_DOCS_FILES", 10_000)
let serverData = temporaryDirectory("docs-serve")
var configuration = ServerConfiguration(dataDirectory: serverData)
configuration.host = "127.0.0.1"
configuration.port = 0
configuration.logsRequests = false
let server = try CloudKitServer(configuration: configuration)
let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
let serving = Task { try await server.run { port in portContinuation.yield(port) } }
func firstPort(_ ports: AsyncStream<Int>) async -> Int? {
    var iterator = ports.makeAsyncIterator()
    return await iterator.next()
}
guard let port = await firstPort(ports) else { fatalError("the server did not start") }

func device(_ name: String, policy: UbiquityContainer.DownloadPolicy, container: String = "iCloud.com.example.bench") throws -> UbiquityContainer {
    let transport = WebServicesDocumentsTransport(server: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: container,
                                                  apiToken: "bench", webAuthToken: server.webAuthToken(user: "_bench"))
    return try UbiquityContainer(directory: temporaryDirectory("docs-\(name)") + "/folder", transport: transport, deviceName: name, downloadPolicy: policy)
}

do {
    let first = try device("first", policy: .all)
    for index in 0..<files {
        let folder = first.directory + "/Documents/folder\(index / 500)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let bytes = documentBytes(count: 1024 + (index * 7919) % 9216, seed: UInt64(index + 1))
        try Data(bytes).write(to: URL(fileURLWithPath: folder + "/file\(index).txt"))
    }
    var start = now()
    var cpu = processCPU()
    let uploaded = try await first.sync()
    print(String(format: "first sync of %d small files (1–10 KB) to an empty kquery serve: %.2f s, %.2f s of CPU (%d items, %d chunks, %.1f MB) (aim under 15 s)",
                 files, Double(now() - start) / 1e9, processCPU() - cpu, uploaded.itemsUploaded, uploaded.chunksUploaded, Double(uploaded.bytesUploaded) / 1e6))
    let second = try device("second", policy: .all)
    start = now()
    cpu = processCPU()
    let downloaded = try await second.sync()
    print(String(format: "first sync of the same files to a second device: %.2f s, %.2f s of CPU (%d items, %d chunks) (aim under 15 s)",
                 Double(now() - start) / 1e9, processCPU() - cpu, downloaded.itemsDownloaded, downloaded.chunksDownloaded))
    let third = try device("third", policy: .onDemand)
    start = now()
    _ = try await third.sync()
    print(String(format: "first sync to a third device, on demand (metadata only, placeholders): %.2f s", Double(now() - start) / 1e9))
}
// MARK: 3. Edit to metadata query on another device

do {
    let edits = environmentInt("BENCH_DOCS_EDITS", 100)
    let editor = try device("editor", policy: .all, container: "iCloud.com.example.latency")
    let watcher = try device("watcher", policy: .all, container: "iCloud.com.example.latency")
    for index in 0..<100 {
        try FileManager.default.createDirectory(atPath: editor.directory + "/Documents", withIntermediateDirectories: true)
        try Data(documentBytes(count: 2048, seed: UInt64(index + 1))).write(to: URL(fileURLWithPath: editor.directory + "/Documents/note\(index).txt"))
    }
    try await editor.sync()
    try await watcher.sync()
    let query = try MetadataQuery(predicate: "kMDItemFSName LIKE '*.txt'")
    query.notificationBatchingInterval = .zero
    // When the query listed each path as changed.
    let seen = Locked<[String: UInt64]>([:])
    let querying = Task { await query.run(on: watcher) { note in
        guard case .didUpdate(let added, let changed, _) = note else { return }
        let time = now()
        seen.withLock { for item in added + changed { $0[item.relativePath] = time } }
    } }
    let watching = Task { await watcher.watch() }
    try await Task.sleep(for: .seconds(2))
    var latencies: [Double] = []
    var missed = 0
    for edit in 0..<edits {
        let path = "Documents/note\(edit % 100).txt"
        seen.withLock { $0[path] = nil }
        try Data(documentBytes(count: 2048 + edit + 1, seed: UInt64(1000 + edit))).write(to: URL(fileURLWithPath: editor.directory + "/" + path))
        let start = now()
        try await editor.sync()
        var listed: UInt64?
        while listed == nil && now() - start < 5_000_000_000 {
            try await Task.sleep(for: .milliseconds(1))
            listed = seen.withLock { $0[path] }
        }
        if let listed { latencies.append(Double(listed - start) / 1e6) } else { missed += 1 }
    }
    watching.cancel()
    watcher.stopListening()
    querying.cancel()
    latencies.sort()
    func percentile(_ p: Double) -> Double { latencies.isEmpty ? .nan : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
    print(String(format: "edit to a watching metadata query on another device (100 files, batching 0): p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d edits, %d missed (aim 200 ms p99)",
                 percentile(0.5), percentile(0.99), latencies.last ?? .nan, latencies.count, missed))
}
serving.cancel()
