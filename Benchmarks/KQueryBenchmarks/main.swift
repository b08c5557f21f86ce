import Benchmark
import CKQuerySupport
import GRDB
import Foundation
import KQuery
import KQueryStore

#if canImport(Glibc)
import Glibc
#endif

// KQuery benchmarks, release build:  swift run -c release KQueryBenchmarks
// BENCH_RECORDS sets the data size (default 1,000,000). Figures are medians; SQLite runs on the
// same rows in the same process, so the ratio is what to read, not the absolute time.

let recordCount = Int(getenv("BENCH_RECORDS").flatMap { String(validatingCString: $0) } ?? "") ?? 1_000_000
/// BENCH_SUBSCRIPTIONS sets the subscription matcher's size (default 1,000,000; 0 skips it).
let subscriptionCount = Int(getenv("BENCH_SUBSCRIPTIONS").flatMap { String(validatingCString: $0) } ?? "") ?? 1_000_000

/// Keeps results alive so the optimizer cannot drop the measured work.
@inline(never) func consume<T>(_ value: T) { withExtendedLifetime(value) {} }

/// BENCH_OPEN=FILE only times opening that database file (its declared indexes built, or loaded from
/// the file's index snapshot once an open has written one), five times, and prints each time and
/// the median: for comparing builds on one file, run by turns (A B A B). BENCH_MAKE_FILE makes one.
/// BENCH_OPEN_RUNS sets the count.
if let path = getenv("BENCH_OPEN").flatMap({ String(validatingCString: $0) }) {
    let runs = Int(getenv("BENCH_OPEN_RUNS").flatMap { String(validatingCString: $0) } ?? "") ?? 5
    var times: [Double] = []
    var opened: KQueryStore.Database?
    for run in 0..<runs {
        let heap = heapBytes()
        let clock = ContinuousClock()
        let elapsed = try clock.measure { opened = try KQueryStore.Database(path: path) }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let records = opened?.recordCount ?? 0
        let snapshot = opened?.indexSnapshotTypes.isEmpty == false ? "indexes from the snapshot" : "indexes built"
        print(String(format: "open %@: %.3f s, %d records, heap %d bytes per record, %@", path, seconds, records, (heapBytes() - heap) / max(records, 1), snapshot))
        times.append(seconds)
        if run == runs - 1 { break }   // the last is not freed: a profile of the process is of opening
        opened = nil
    }
    print(String(format: "open median: %.3f s", times.sorted()[times.count / 2]))
    // BENCH_QUERY=PREDICATE then runs that query on the opened file (every page, as `allPages`
    // below), BENCH_QUERY_ROUNDS times (default 300), and prints the median: an indexed query
    // measured without building the million records in memory first (and quick to profile).
    if let text = getenv("BENCH_QUERY").flatMap({ String(validatingCString: $0) }), let opened {
        let rounds = Int(getenv("BENCH_QUERY_ROUNDS").flatMap { String(validatingCString: $0) } ?? "") ?? 300
        var query = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate(text))
        query.resultsLimit = KQueryStore.Database.maximumResultsLimit
        var durations: [Double] = []
        var results = 0
        for _ in 0..<rounds {
            let clock = ContinuousClock()
            let elapsed = try clock.measure {
                var cursor: QueryCursor?
                results = 0
                repeat {
                    let page = try opened.perform(query, cursor: cursor, now: 0)
                    results += page.records.count
                    consume(page)
                    cursor = page.cursor
                } while cursor != nil
            }
            durations.append(Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12)
        }
        print(String(format: "query %@: %d results, median %.1f us", text, results, durations.sorted()[durations.count / 2]))
    }
    exit(0)
}

/// Bytes allocated on the heap and not yet freed. Memory figures are differences of this across one
/// step: the resident set, used before, also moves when the allocator hands freed pages back to the
/// system (the subscription figure came out negative after the file benchmarks freed a million
/// records while the subscriptions were being built).
func heapBytes() -> Int { Int(kquery_heap_bytes()) }

// MARK: Data

let words = ["harbour", "sunset", "night", "portrait", "river", "garden", "storm", "city", "sea", "mountain", "bridge", "light"]
// Titles share no word with descriptions: SQLite's FTS5 table indexes descriptions only.
let titleWords = ["after", "before", "afterglow", "evening", "morning", "study", "view", "still"]
let titleColours = ["blue", "red", "green", "gold", "grey", "white"]
let heapBefore = heapBytes()
struct Lcg { var state: UInt64 = 0x2545F4914F6CDD1D
    mutating func next() -> UInt64 { state = state &* 6364136223846793005 &+ 1442695040888963407; return state >> 11 } }
var lcg = Lcg()
let records: [KQuery.Record] = (0..<recordCount).map { i in
    let price = Int64(lcg.next() % 100_001)
    let artist = "artist\(lcg.next() % 100)"
    // Six common words and one rare one (about 200 records each), for selective token searches.
    let description = (0..<6).map { _ in words[Int(lcg.next() % UInt64(words.count))] }.joined(separator: " ") + " w\(lcg.next() % 5_000)"
    let latitude = 48.0 + Double(lcg.next() % 2_000_000) / 1_000_000
    let longitude = 2.0 + Double(lcg.next() % 2_000_000) / 1_000_000
    let year = 1900 + Int64(lcg.next() % 125)
    let collector = "collector\(lcg.next() % 2_000)"
    let rating = Double(lcg.next() % 501) / 100
    let title = titleWords[Int(lcg.next() % UInt64(titleWords.count))] + " " + titleColours[Int(lcg.next() % UInt64(titleColours.count))]
    return Record(recordType: "Artwork", recordName: "art-\(i)", fields: [
        "price": .int64(price), "artist": .string(artist), "description": .string(description),
        "location": .location(Location(latitude: latitude, longitude: longitude)), "year": .int64(year),
        "collector": .string(collector), "rating": .double(rating), "title": .string(title),
    ])
}
let bytesPerRecord = Double(heapBytes() - heapBefore) / Double(recordCount)
print("records: \(recordCount), heap per record as values ([Record]): \(Int(bytesPerRecord)) bytes")

/// BENCH_MAKE_FILE=FILE writes the records to a database file with the store suite's four declared
/// indexes (equality, range, token, spatial) and stops: the file BENCH_OPEN times.
if let path = getenv("BENCH_MAKE_FILE").flatMap({ String(validatingCString: $0) }) {
    let file = try KQueryStore.Database(path: path)
    try file.importRecords(records)
    for (field, index) in [("collector", FieldSchema.Indexes.queryable), ("price", .sortable), ("description", .searchable), ("location", .queryable)] {
        try file.declareIndex(IndexDeclaration(recordType: "Artwork", field: .user(FieldKey(field)), index: index))
    }
    print("wrote \(path): \(file.recordCount) records, four declared indexes")
    exit(0)
}

let createTable = "CREATE TABLE artwork (recordName TEXT PRIMARY KEY, price INTEGER, artist TEXT, description TEXT, latitude REAL, longitude REAL, year INTEGER, collector TEXT, rating REAL, title TEXT)"
let database = try DatabaseQueue()
try database.write { db in
    try db.execute(sql: createTable)
    try insertRows(db)
}

/// The benchmark rows as SQL rows, as an application would store them.
func insertRows(_ db: GRDB.Database) throws {
    let insert = try db.makeStatement(sql: "INSERT INTO artwork VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    for record in records {
        guard case .int64(let price)? = record["price"], case .string(let artist)? = record["artist"],
              case .string(let description)? = record["description"], case .location(let location)? = record["location"],
              case .int64(let year)? = record["year"], case .string(let collector)? = record["collector"],
              case .double(let rating)? = record["rating"], case .string(let title)? = record["title"] else { continue }
        try insert.execute(arguments: [
            record.recordID.recordName, price, artist, description, location.latitude, location.longitude, year, collector, rating, title,
        ])
    }
}

// MARK: Benchmarks

let scanPredicate = CompiledPredicate(try ValidatedPredicate("price > 50000 AND artist == 'artist7'"))
let distancePredicate = CompiledPredicate(try ValidatedPredicate("distanceToLocation:fromLocation:(location, location(48.5, 2.5)) < 5"))
let tokenPredicate = CompiledPredicate(try ValidatedPredicate("ALL tokenize('sunset harbour', 'Cdl') IN allTokens"))
let typical = "price > 50000 AND artist == 'artist7' AND tags CONTAINS 'sea' AND year >= 1990"
let parsedTypical = try PredicateParser.parse(typical)

@inline(never) func count(_ predicate: CompiledPredicate, in records: [KQuery.Record]) -> Int {
    predicate.count(in: records, now: 0)
}

let expected = try database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM artwork WHERE price > 50000 AND artist = 'artist7'") } ?? -1
precondition(count(scanPredicate, in: records) == expected, "KQuery and SQLite disagree on the scan")
print("scan matches: \(expected) of \(recordCount)")

// The same rows in a KQuery database, with no index yet (they are declared for the store suite
// below): its queries are full scans over the table's columns.
nonisolated(unsafe) let store = KQueryStore.Database(indexPolicy: .declared)
let heapBeforeStore = heapBytes()
try store.importRecords(records)
let storeBytesPerRecord = Double(heapBytes() - heapBeforeStore) / Double(recordCount)
print("store: heap per record beyond the values (record array, columns, tokens, ID map): \(Int(storeBytesPerRecord)) bytes")

/// A full scan in the store (its columns) against SQLite's in-memory scan of the same rows.
struct ScanComparison {
    let name: String
    let query: KQuery.Query
    let sql: String
}
let scanComparisons = [
    ScanComparison(name: "price > 50000 AND artist == 'artist7'",
                   query: KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price > 50000 AND artist == 'artist7'")),
                   sql: "SELECT count(*) FROM artwork WHERE price > 50000 AND artist = 'artist7'"),
    ScanComparison(name: "price > 99900",
                   query: KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price > 99900")),
                   sql: "SELECT count(*) FROM artwork WHERE price > 99900"),
    // GLOB: SQLite's LIKE ignores case, BEGINSWITH does not.
    ScanComparison(name: "rating BETWEEN {1, 1.01} AND title BEGINSWITH 'after'",
                   query: KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("rating BETWEEN {1, 1.01} AND title BEGINSWITH 'after'")),
                   sql: "SELECT count(*) FROM artwork WHERE rating BETWEEN 1 AND 1.01 AND title GLOB 'after*'"),
]
let storeDistanceQuery = KQuery.Query(
    recordType: "Artwork", predicate: try ValidatedPredicate("distanceToLocation:fromLocation:(location, location(48.5, 2.5)) < 5"))
let storeTokenQuery = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("ALL tokenize('sunset harbour', 'Cdl') IN allTokens"))
@inline(never) func storeCount(_ query: KQuery.Query) throws -> Int { try store.count(query, now: 0) }
@inline(never) func sqliteCount(_ sql: String) throws -> Int { try database.read { try Int.fetchOne($0, sql: sql) } ?? -1 }
for comparison in scanComparisons {
    let (kquery, sqlite) = (try storeCount(comparison.query), try sqliteCount(comparison.sql))
    precondition(kquery == sqlite, "\(comparison.name): KQuery found \(kquery), SQLite \(sqlite)")
    print("scan \(comparison.name): \(kquery) matches")
}
let (storeDistanceMatches, storeTokenMatches) = (try storeCount(storeDistanceQuery), try storeCount(storeTokenQuery))
precondition(storeDistanceMatches == count(distancePredicate, in: records), "the column and record scans disagree on distance")
precondition(storeTokenMatches == count(tokenPredicate, in: records), "the column and record scans disagree on tokens")

let batch = 100
let suite = BenchmarkSuite(name: "KQuery") { suite in
    // Throughput: each measured iteration handles `batch` predicates, so the harness's own cost per
    // iteration (two clock reads, storing the sample) is not charged to the parser.
    suite.benchmark("parse+validate 80-byte predicate, \(batch) per iteration", settings: TimeUnit(.us)) {
        for _ in 0..<batch { consume(try ValidatedPredicate(typical)) }
    }
    suite.benchmark("parse only, same predicate, \(batch) per iteration", settings: TimeUnit(.us)) {
        for _ in 0..<batch { consume(try PredicateParser.parse(typical)) }
    }
    suite.benchmark("validate only, same predicate, \(batch) per iteration", settings: TimeUnit(.us)) {
        for _ in 0..<batch { consume(try PredicateValidator(profile: .cloudkit).validate(parsedTypical)) }
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
    for comparison in scanComparisons {
        suite.benchmark("columns: KQuery store \(comparison.name)") { consume(try storeCount(comparison.query)) }
        suite.benchmark("columns: SQLite \(comparison.name)") { consume(try sqliteCount(comparison.sql)) }
    }
    suite.benchmark("columns: KQuery store distance < 5 km") { consume(try storeCount(storeDistanceQuery)) }
    suite.benchmark("columns: KQuery store ALL tokenize('sunset harbour') IN allTokens") { consume(try storeCount(storeTokenQuery)) }
}

// BENCH_FILTER (a regular expression over benchmark names) runs a subset, e.g. under a profiler.
var settings: [any BenchmarkSetting] = [MinTime(seconds: 2), WarmupIterations(1), TimeUnit(.ms)]
if let filter = getenv("BENCH_FILTER").flatMap({ String(validatingCString: $0) }) { settings.append(Filter(filter)) }
// BENCH_ITERATIONS fixes the iterations (under callgrind, so instruction counts divide evenly).
if let iterations = getenv("BENCH_ITERATIONS").flatMap({ String(validatingCString: $0) }).flatMap({ Int($0) }) {
    settings.append(Iterations(iterations))
}
// The record suite runs first, before a million subscriptions take gigabytes of memory and
// disturb its caches; the subscription suite runs after they are built.
var results: [BenchmarkResult] = []
var recordRunner = BenchmarkRunner(suites: [suite], settings: settings)
try recordRunner.run()
results += recordRunner.results

/// Nanoseconds to run `body` once.
func nanoseconds(_ body: () throws -> Void) rethrows -> Double {
    let clock = ContinuousClock()
    let elapsed = try clock.measure(body)
    return Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
}
/// Runs KQuery and SQLite by turns (A B A B ...), so both see the same machine load, and returns the
/// median of each and the median of the per-pair ratios (SQLite's time over KQuery's).
func interleaved(_ comparison: ScanComparison, pairs: Int = 21) throws -> (kquery: Double, sqlite: Double, ratio: Double) {
    var (ours, theirs, ratios): ([Double], [Double], [Double]) = ([], [], [])
    for _ in 0..<pairs {
        let a = try nanoseconds { consume(try storeCount(comparison.query)) }
        let b = try nanoseconds { consume(try sqliteCount(comparison.sql)) }
        ours.append(a)
        theirs.append(b)
        ratios.append(b / a)
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    return (median(ours), median(theirs), median(ratios))
}
var interleavedScans: [(String, (kquery: Double, sqlite: Double, ratio: Double))] = []
if getenv("BENCH_FILTER") == nil {
    for comparison in scanComparisons { interleavedScans.append((comparison.name, try interleaved(comparison))) }
}

// MARK: Store

// The same rows in the KQuery database with its indexes declared, and in SQLite with the matching
// indexes (B-tree on collector and price, an FTS5 table on description). Both return the matches
// in the same order (by recordName, CloudKit's tie-break), as whole rows.
let indexStart = Date()
for (field, index) in [("collector", FieldSchema.Indexes.queryable), ("price", .sortable), ("description", .searchable), ("location", .queryable)] {
    try store.declareIndex(IndexDeclaration(recordType: "Artwork", field: .user(FieldKey(field)), index: index))
}
print("KQuery indexes (equality, range, token, spatial) built in \(String(format: "%.1f", Date().timeIntervalSince(indexStart))) s")
try database.write { db in
    try db.execute(sql: "CREATE INDEX artwork_collector ON artwork(collector)")
    try db.execute(sql: "CREATE INDEX artwork_price ON artwork(price)")
    try db.execute(sql: "CREATE VIRTUAL TABLE artwork_fts USING fts5(description)")
    try db.execute(sql: "INSERT INTO artwork_fts(rowid, description) SELECT rowid, description FROM artwork")
}

struct ArtworkRow { var recordName: String; var price: Int64; var artist: String; var description: String; var latitude: Double; var longitude: Double; var year: Int64; var collector: String }
/// Fetches whole rows, as `perform` returns whole records.
func sqliteRows(_ sql: String, _ arguments: StatementArguments) throws -> [ArtworkRow] {
    try database.read { db in
        var rows: [ArtworkRow] = []
        let cursor = try Row.fetchCursor(db, sql: sql, arguments: arguments)
        while let row = try cursor.next() {
            rows.append(ArtworkRow(recordName: row[0], price: row[1], artist: row[2], description: row[3], latitude: row[4], longitude: row[5], year: row[6], collector: row[7]))
        }
        return rows
    }
}
let columns = "a.recordName, a.price, a.artist, a.description, a.latitude, a.longitude, a.year, a.collector"

/// Every match of `query`, page by page with cursors (200 a page), as a CloudKit client reads them.
func allPages(_ query: KQuery.Query) throws -> [KQuery.Record] {
    var paged = query
    paged.resultsLimit = KQueryStore.Database.maximumResultsLimit
    var records: [KQuery.Record] = []
    var cursor: QueryCursor?
    repeat {
        let page = try store.perform(paged, cursor: cursor, now: 0)
        records += page.records
        cursor = page.cursor
    } while cursor != nil
    return records
}

let collectorQuery = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("collector == 'collector123'"))
let priceQuery = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("price BETWEEN {50000, 50049}"))
let tokenQuery = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("ALL tokenize('harbour w123', 'Cdl') IN allTokens"))
let radiusQuery = KQuery.Query(recordType: "Artwork", predicate: try ValidatedPredicate("distanceToLocation:fromLocation:(location, location(49.0, 3.0)) < 3.2"))
let radiusScan = CompiledPredicate(radiusQuery.predicate.condition)

// The two sides must agree before they are timed.
let checks: [(String, Int, Int)] = [
    ("equality", try allPages(collectorQuery).count, try sqliteRows("SELECT \(columns) FROM artwork a WHERE collector = ? ORDER BY a.recordName", ["collector123"]).count),
    ("range", try allPages(priceQuery).count, try sqliteRows("SELECT \(columns) FROM artwork a WHERE price BETWEEN ? AND ? ORDER BY a.recordName", [50000, 50049]).count),
    ("token", try allPages(tokenQuery).count, try sqliteRows("SELECT \(columns) FROM artwork_fts f JOIN artwork a ON a.rowid = f.rowid WHERE artwork_fts MATCH ? ORDER BY a.recordName", ["harbour AND w123"]).count),
    ("radius", try allPages(radiusQuery).count, count(radiusScan, in: records)),
]
for (name, kquery, other) in checks {
    precondition(kquery == other, "\(name): KQuery found \(kquery), the reference \(other)")
    print("\(name) query: \(kquery) results")
}
print(try store.plan(collectorQuery, now: 0))
print(try store.plan(tokenQuery, now: 0))
print(try store.plan(radiusQuery, now: 0))

nonisolated(unsafe) var saveCounter = 0
let storeSuite = BenchmarkSuite(name: "Store") { suite in
    suite.benchmark("equality: KQuery collector == 'collector123', all pages", settings: TimeUnit(.us)) {
        consume(try allPages(collectorQuery))
    }
    suite.benchmark("equality: SQLite indexed, same rows", settings: TimeUnit(.us)) {
        consume(try sqliteRows("SELECT \(columns) FROM artwork a WHERE collector = ? ORDER BY a.recordName", ["collector123"]))
    }
    suite.benchmark("range: KQuery price BETWEEN {50000, 50049}, all pages", settings: TimeUnit(.us)) {
        consume(try allPages(priceQuery))
    }
    suite.benchmark("range: SQLite indexed, same rows", settings: TimeUnit(.us)) {
        consume(try sqliteRows("SELECT \(columns) FROM artwork a WHERE price BETWEEN ? AND ? ORDER BY a.recordName", [50000, 50049]))
    }
    suite.benchmark("token: KQuery ALL tokenize('harbour w123'), all pages", settings: TimeUnit(.us)) {
        consume(try allPages(tokenQuery))
    }
    suite.benchmark("token: SQLite FTS5 'harbour AND w123', same rows", settings: TimeUnit(.us)) {
        consume(try sqliteRows("SELECT \(columns) FROM artwork_fts f JOIN artwork a ON a.rowid = f.rowid WHERE artwork_fts MATCH ? ORDER BY a.recordName", ["harbour AND w123"]))
    }
    suite.benchmark("radius: KQuery < 3.2 km with the spatial index, all pages", settings: TimeUnit(.us)) {
        consume(try allPages(radiusQuery))
    }
    suite.benchmark("radius: KQuery full scan, same predicate", settings: TimeUnit(.ms)) {
        consume(count(radiusScan, in: records))
    }
    suite.benchmark("save: delete one record and create it again, four indexes", settings: TimeUnit(.us)) {
        saveCounter += 1
        let record = records[saveCounter % records.count]
        try store.save(RecordOperation(kind: .forceDelete, record: record))
        try store.save(RecordOperation(kind: .create, record: record))
    }
    suite.benchmark("save: replace one record, four indexes kept up to date", settings: TimeUnit(.us)) {
        saveCounter += 1
        var record = records[saveCounter % records.count]
        record["price"] = .int64(Int64(saveCounter % 100_000))
        consume(try store.save(RecordOperation(kind: .forceReplace, record: record)))
    }
}

// The store suite runs after the scans: SQLite's indexes, built for it, would change the plan of
// the SQLite scan above (its planner picks the price index, which is slower than scanning).
var storeRunner = BenchmarkRunner(suites: [storeSuite], settings: settings)
try storeRunner.run()
results += storeRunner.results

// MARK: Import into a file

/// Seconds to run `body` once.
func timeOnce(_ body: () throws -> Void) rethrows -> Double {
    let start = Date()
    try body()
    return Date().timeIntervalSince(start)
}
let importDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-bench-\(getpid())")
try FileManager.default.createDirectory(at: importDirectory, withIntermediateDirectories: true)
let kqueryImportSeconds = try timeOnce {
    let file = try KQueryStore.Database(path: importDirectory.appendingPathComponent("kquery.db").path)
    try file.importRecords(records)
}
let kqueryOpenSeconds = try timeOnce {
    let file = try KQueryStore.Database(path: importDirectory.appendingPathComponent("kquery.db").path)
    precondition(file.recordCount == recordCount)
}
let sqliteImportSeconds = try timeOnce {
    var configuration = Configuration()
    configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
    let file = try DatabaseQueue(path: importDirectory.appendingPathComponent("sqlite.db").path, configuration: configuration)
    try file.write { db in
        try db.execute(sql: createTable)
        try insertRows(db)
    }
}
try? FileManager.default.removeItem(at: importDirectory)

// MARK: Subscriptions

/// A realistic mix: most subscriptions have an equality conjunct, some are range-only, some are
/// token searches and some are distance searches.
let vocabulary = (0..<5000).map { "w\($0)" }
func subscriptionPredicate(_ i: Int, _ lcg: inout Lcg) -> String {
    switch i % 100 {
    case 0..<80: return "artist == 'artist\(lcg.next() % 200_000)' AND price < \(lcg.next() % 1_000_000)"
    case 80..<88:
        let low = lcg.next() % 1_000_000
        return "price BETWEEN {\(low), \(low + lcg.next() % 1000)}"
    case 88..<95:
        return "ALL tokenize('\(vocabulary[Int(lcg.next() % 5000)]) \(vocabulary[Int(lcg.next() % 5000)])', 'Cdl') IN allTokens"
    default:
        let latitude = 40 + Double(lcg.next() % 15_000) / 1000
        let longitude = -5 + Double(lcg.next() % 25_000) / 1000
        // 1 to 10 km, as CloudKit reads the number.
        return "distanceToLocation:fromLocation:(location, location(\(latitude), \(longitude))) < \(Double(1000 + lcg.next() % 9000) / 1000)"
    }
}

func changeRecord(_ i: Int, _ lcg: inout Lcg) -> KQuery.Record {
    Record(recordType: "Artwork", recordName: "change-\(i)", fields: [
        "artist": .string("artist\(lcg.next() % 200_000)"), "price": .int64(Int64(lcg.next() % 1_000_000)),
        "description": .string((0..<6).map { _ in vocabulary[Int(lcg.next() % 5000)] }.joined(separator: " ")),
        "location": .location(Location(latitude: 40 + Double(lcg.next() % 15_000) / 1000, longitude: -5 + Double(lcg.next() % 25_000) / 1000)),
    ])
}

/// The set under test lives in a class: a method called on a global struct copies it first (a
/// retain and release of each of its tables, on every call).
final class SubscriptionBench {
    var set = SubscriptionSet(database: .public)
}
nonisolated(unsafe) let subscriptionBench = SubscriptionBench()
var subscriptionSetupSeconds = 0.0
var bytesPerSubscription = 0.0
var changes: [RecordChange] = []
if subscriptionCount > 0 {
    var lcg = Lcg(state: 42)
    let before = heapBytes()
    let clock = ContinuousClock()
    let start = clock.now
    for i in 0..<subscriptionCount {
        let text = subscriptionPredicate(i, &lcg)
        if let subscription = try? Subscription.query("s\(i)", recordType: "Artwork", predicate: text, owner: "_u\(i % 50_000)") {
            try? subscriptionBench.set.save(subscription)
        }
    }
    subscriptionSetupSeconds = Double((clock.now - start).components.attoseconds) / 1e18 + Double((clock.now - start).components.seconds)
    bytesPerSubscription = Double(heapBytes() - before) / Double(subscriptionCount)
    changes = (0..<1000).map { RecordChange.created(changeRecord($0, &lcg)) }
    print("subscriptions: \(subscriptionBench.set.count) saved in \(String(format: "%.1f", subscriptionSetupSeconds)) s, heap per subscription: \(Int(bytesPerSubscription)) bytes")
    var fired = 0
    // The naive loop costs about 2 s per change at a million subscriptions: check ten.
    for change in changes.prefix(10) {
        let indexed = subscriptionBench.set.firings(for: change, now: 0).map(\.subscription.subscriptionID)
        precondition(indexed == subscriptionBench.set.naiveFirings(for: change, now: 0).map(\.subscription.subscriptionID), "index and naive loop disagree")
        fired += indexed.count
    }
    print("index agrees with the naive loop on 10 changes (\(fired) firings)")
}

var changeIndex = 0
let subscriptionSuite = BenchmarkSuite(name: "Subscriptions") { suite in
    guard subscriptionCount > 0 else { return }
    suite.benchmark("match one change, indexed", settings: TimeUnit(.us)) {
        changeIndex = (changeIndex + 1) % changes.count
        consume(subscriptionBench.set.firings(for: changes[changeIndex], now: 0))
    }
    suite.benchmark("match one change, naive loop", settings: TimeUnit(.ms)) {
        changeIndex = (changeIndex + 1) % changes.count
        consume(subscriptionBench.set.naiveFirings(for: changes[changeIndex], now: 0))
    }
    suite.benchmark("add and remove one subscription", settings: TimeUnit(.us)) {
        changeIndex += 1
        let subscription = try Subscription.query("extra", recordType: "Artwork", predicate: "artist == 'extra\(changeIndex)'")
        try subscriptionBench.set.save(subscription)
        subscriptionBench.set.remove(id: "extra")
    }
}

var subscriptionRunner = BenchmarkRunner(suites: [subscriptionSuite], settings: settings)
try subscriptionRunner.run()
results += subscriptionRunner.results

@MainActor func median(_ name: String) -> Double {
    let values = (results.first { $0.benchmarkName.hasPrefix(name) }?.measurements ?? [.nan]).sorted()
    return values[values.count / 2]
}
/// A figure for the summary, or "-" when BENCH_FILTER skipped its benchmark.
func figure(_ value: Double, _ format: String = "%.1f") -> String { value.isFinite ? String(format: format, value) : "-" }
let parse = median("parse+validate") / Double(batch)
let kquery = median("scan: KQuery price")
let sqlite = median("scan: SQLite")
print("")
print("parse+validate: \(figure(1e9 / parse, "%.0f")) predicates/s (median \(figure(parse, "%.0f")) ns; parse \(figure(median("parse only") / Double(batch), "%.0f")) ns, validate \(figure(median("validate only") / Double(batch), "%.0f")) ns)")
print("scan \(recordCount) records: KQuery \(figure(kquery / 1e6)) ms, SQLite \(figure(sqlite / 1e6)) ms, KQuery is \(figure(sqlite / kquery, "%.2f"))x faster")
print("distance predicate: \(figure(median("scan: KQuery distance") / Double(recordCount))) ns/record")
print("token predicate: \(figure(median("scan: KQuery ALL") / Double(recordCount))) ns/record")
for (name, figures) in interleavedScans {
    print("column scan \(name), interleaved: KQuery \(figure(figures.kquery / 1e6, "%.2f")) ms, SQLite \(figure(figures.sqlite / 1e6)) ms, KQuery is \(figure(figures.ratio, "%.1f"))x faster (median of per-pair ratios)")
}
print("column scan distance < 5 km: \(figure(median("columns: KQuery store distance") / Double(recordCount), "%.2f")) ns/record; ALL tokenize IN allTokens: \(figure(median("columns: KQuery store ALL") / Double(recordCount), "%.2f")) ns/record")
print("heap per loaded record: \(Int(bytesPerRecord)) bytes as values, \(Int(storeBytesPerRecord)) more in the store: \(Int(bytesPerRecord + storeBytesPerRecord)) bytes")
for (name, kqueryName, sqliteName) in [
    ("equality (\(checks[0].1) results)", "equality: KQuery", "equality: SQLite"),
    ("range (\(checks[1].1) results)", "range: KQuery", "range: SQLite"),
    ("token (\(checks[2].1) results)", "token: KQuery", "token: SQLite"),
] {
    let ours = median(kqueryName)
    let theirs = median(sqliteName)
    print("\(name): KQuery \(figure(ours / 1000)) us, SQLite \(figure(theirs / 1000)) us, KQuery is \(figure(theirs / ours, "%.2f"))x faster")
}
let radiusIndexed = median("radius: KQuery < 3.2")
let radiusFull = median("radius: KQuery full scan")
print("radius (\(checks[3].1) results): spatial index \(figure(radiusIndexed / 1000)) us, full scan \(figure(radiusFull / 1e6)) ms, \(figure(radiusFull / radiusIndexed, "%.0f"))x faster")
print("save (replace) one record with four indexes: \(figure(median("save: replace") / 1000)) us; delete and create one: \(figure(median("save: delete") / 1000)) us")
print("open a file of \(recordCount) records (load them into memory): \(figure(kqueryOpenSeconds, "%.1f")) s")
print("import \(recordCount) records into a file: KQuery \(figure(Double(recordCount) / kqueryImportSeconds, "%.0f")) records/s (\(figure(kqueryImportSeconds, "%.1f")) s), SQLite bulk insert \(figure(Double(recordCount) / sqliteImportSeconds, "%.0f")) rows/s (\(figure(sqliteImportSeconds, "%.1f")) s)")

@MainActor func percentile(_ name: String, _ fraction: Double) -> Double {
    let values = (results.first { $0.benchmarkName.hasPrefix(name) }?.measurements ?? [.nan]).sorted()
    return values[min(values.count - 1, Int(Double(values.count) * fraction))]
}
if subscriptionCount > 0 {
    let indexed = median("match one change, indexed")
    let naive = median("match one change, naive loop")
    print("subscriptions \(subscriptionBench.set.count): match one change median \(figure(indexed / 1000)) us, p99 \(figure(percentile("match one change, indexed", 0.99) / 1000)) us; naive loop \(figure(naive / 1e6)) ms; index is \(figure(naive / indexed, "%.0f"))x faster")
    print("subscriptions: add+remove one \(figure(median("add and remove") / 1000)) us, heap per subscription \(Int(bytesPerSubscription)) bytes")
}
