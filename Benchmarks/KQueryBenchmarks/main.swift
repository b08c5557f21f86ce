import Benchmark
import GRDB
import Foundation
import KQuery

#if canImport(Glibc)
import Glibc
#endif

// KQuery benchmarks, release build:  swift run -c release KQueryBenchmarks
// BENCH_RECORDS sets the data size (default 1,000,000). Figures are medians; SQLite runs on the
// same rows in the same process, so the ratio is what to read, not the absolute time.

let recordCount = Int(getenv("BENCH_RECORDS").flatMap { String(validatingCString: $0) } ?? "") ?? 1_000_000

/// Keeps results alive so the optimizer cannot drop the measured work.
@inline(never) func consume<T>(_ value: T) { withExtendedLifetime(value) {} }

/// Resident memory in bytes, from /proc/self/statm (glibc's mallinfo2 is not visible to Swift).
func heapInUse() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
}

// MARK: Data

let words = ["harbour", "sunset", "night", "portrait", "river", "garden", "storm", "city", "sea", "mountain", "bridge", "light"]
let heapBefore = heapInUse()
struct Lcg { var state: UInt64 = 0x2545F4914F6CDD1D
    mutating func next() -> UInt64 { state = state &* 6364136223846793005 &+ 1442695040888963407; return state >> 11 } }
var lcg = Lcg()
let records: [KQuery.Record] = (0..<recordCount).map { i in
    let price = Int64(lcg.next() % 100_001)
    let artist = "artist\(lcg.next() % 100)"
    let description = (0..<6).map { _ in words[Int(lcg.next() % UInt64(words.count))] }.joined(separator: " ")
    let latitude = 48.0 + Double(lcg.next() % 2_000_000) / 1_000_000
    let longitude = 2.0 + Double(lcg.next() % 2_000_000) / 1_000_000
    return Record(recordType: "Artwork", recordName: "art-\(i)", fields: [
        "price": .int64(price), "artist": .string(artist), "description": .string(description),
        "location": .location(Location(latitude: latitude, longitude: longitude)), "year": .int64(1900 + Int64(lcg.next() % 125)),
    ])
}
let bytesPerRecord = Double(heapInUse() - heapBefore) / Double(recordCount)
print("records: \(recordCount), memory (RSS) per loaded record: \(Int(bytesPerRecord)) bytes")

let database = try DatabaseQueue()
try database.write { db in
    try db.execute(sql: "CREATE TABLE artwork (recordName TEXT PRIMARY KEY, price INTEGER, artist TEXT, description TEXT, latitude REAL, longitude REAL, year INTEGER)")
    let insert = try db.makeStatement(sql: "INSERT INTO artwork VALUES (?, ?, ?, ?, ?, ?, ?)")
    for record in records {
        guard case .int64(let price)? = record["price"], case .string(let artist)? = record["artist"],
              case .string(let description)? = record["description"], case .location(let location)? = record["location"],
              case .int64(let year)? = record["year"] else { continue }
        try insert.execute(arguments: [record.recordID.recordName, price, artist, description, location.latitude, location.longitude, year])
    }
}

// MARK: Benchmarks

let scanPredicate = CompiledPredicate(try ValidatedPredicate("price > 50000 AND artist == 'artist7'"))
let distancePredicate = CompiledPredicate(try ValidatedPredicate("distanceToLocation:fromLocation:(location, location(48.5, 2.5)) < 5000"))
let tokenPredicate = CompiledPredicate(try ValidatedPredicate("ALL tokenize('sunset harbour', 'Cdl') IN allTokens"))
let typical = "price > 50000 AND artist == 'artist7' AND tags CONTAINS 'sea' AND year >= 1990"
let parsedTypical = try PredicateParser.parse(typical)

@inline(never) func count(_ predicate: CompiledPredicate, in records: [KQuery.Record]) -> Int {
    predicate.count(in: records, now: 0)
}

let expected = try database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM artwork WHERE price > 50000 AND artist = 'artist7'") } ?? -1
precondition(count(scanPredicate, in: records) == expected, "KQuery and SQLite disagree on the scan")
print("scan matches: \(expected) of \(recordCount)")

let suite = BenchmarkSuite(name: "KQuery") { suite in
    suite.benchmark("parse+validate 80-byte predicate") {
        consume(try ValidatedPredicate(typical))
    }
    suite.benchmark("parse only, same predicate") {
        consume(try PredicateParser.parse(typical))
    }
    suite.benchmark("validate only, same predicate") {
        consume(try PredicateValidator(profile: .cloudkit).validate(parsedTypical))
    }
    suite.benchmark("scan: KQuery price > 50000 AND artist == 'artist7'") {
        consume(count(scanPredicate, in: records))
    }
    suite.benchmark("scan: SQLite in-memory, same query") {
        consume(try database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM artwork WHERE price > 50000 AND artist = 'artist7'") })
    }
    suite.benchmark("scan: KQuery distance < 5 km") {
        consume(count(distancePredicate, in: records))
    }
    suite.benchmark("scan: KQuery ALL tokenize('sunset harbour') IN allTokens") {
        consume(count(tokenPredicate, in: records))
    }
}

// BENCH_FILTER (a regular expression over benchmark names) runs a subset, e.g. under a profiler.
var settings: [any BenchmarkSetting] = [MinTime(seconds: 2), WarmupIterations(1), TimeUnit(.ms)]
if let filter = getenv("BENCH_FILTER").flatMap({ String(validatingCString: $0) }) { settings.append(Filter(filter)) }
var runner = BenchmarkRunner(suites: [suite], settings: settings)
try runner.run()

@MainActor func median(_ name: String) -> Double {
    let values = (runner.results.first { $0.benchmarkName.hasPrefix(name) }?.measurements ?? [.nan]).sorted()
    return values[values.count / 2]
}
/// A figure for the summary, or "-" when BENCH_FILTER skipped its benchmark.
func figure(_ value: Double, _ format: String = "%.1f") -> String { value.isFinite ? String(format: format, value) : "-" }
let parse = median("parse+validate")
let kquery = median("scan: KQuery price")
let sqlite = median("scan: SQLite")
print("")
print("parse+validate: \(figure(1e9 / parse, "%.0f")) predicates/s (median \(figure(parse, "%.0f")) ns; parse \(figure(median("parse only"), "%.0f")) ns, validate \(figure(median("validate only"), "%.0f")) ns)")
print("scan \(recordCount) records: KQuery \(figure(kquery / 1e6)) ms, SQLite \(figure(sqlite / 1e6)) ms, KQuery is \(figure(sqlite / kquery, "%.2f"))x faster")
print("distance predicate: \(figure(median("scan: KQuery distance") / Double(recordCount))) ns/record")
print("token predicate: \(figure(median("scan: KQuery ALL") / Double(recordCount))) ns/record")
print("memory (RSS) per loaded record: \(Int(bytesPerRecord)) bytes")
