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

func device(_ name: String, policy: UbiquityContainer.DownloadPolicy) throws -> UbiquityContainer {
    let transport = WebServicesDocumentsTransport(server: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: "iCloud.com.example.bench",
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
    let uploaded = try await first.sync()
    print(String(format: "first sync of %d small files (1–10 KB) to an empty kquery serve: %.2f s (%d items, %d chunks, %.1f MB) (aim under 15 s)",
                 files, Double(now() - start) / 1e9, uploaded.itemsUploaded, uploaded.chunksUploaded, Double(uploaded.bytesUploaded) / 1e6))
    let second = try device("second", policy: .all)
    start = now()
    let downloaded = try await second.sync()
    print(String(format: "first sync of the same files to a second device: %.2f s (%d items, %d chunks) (aim under 15 s)",
                 Double(now() - start) / 1e9, downloaded.itemsDownloaded, downloaded.chunksDownloaded))
    let third = try device("third", policy: .onDemand)
    start = now()
    _ = try await third.sync()
    print(String(format: "first sync to a third device, on demand (metadata only, placeholders): %.2f s", Double(now() - start) / 1e9))
}
serving.cancel()
