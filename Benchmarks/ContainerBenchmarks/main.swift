import Foundation
import KQuery
import KQueryContainer
import KQueryStore

// Container benchmarks (issue "The CloudKit container"), release build:
//   swift run -c release ContainerBenchmarks
// BENCH_MODIFY_ROUNDS sets the modify benchmark's rounds (3,000; more for profiling it).
// BENCH_OPEN_RECORDS and BENCH_OPEN_SUBSCRIPTIONS size the open benchmark (default 1,000,000 and
// 100,000; 0 records skips it). BENCH_SERVED_RECORDS and BENCH_SERVED_ROUNDS size the served-query
// benchmark (default 1,000,000 and 20,000). Figures are medians; the modify-versus-save ratio is the median of ratios
// of interleaved runs (A B A B), which holds on a noisy machine where single timings do not.

func environmentInt(_ name: String, _ fallback: Int) -> Int {
    Int(ProcessInfo.processInfo.environment[name] ?? "") ?? fallback
}

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
}

func microseconds(_ value: Double) -> String { String(format: "%.1f µs", value * 1e6) }
func milliseconds(_ value: Double) -> String { String(format: "%.2f ms", value * 1e3) }

func temporaryPath(_ name: String) -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-bench-\(name)-\(UUID().uuidString).sqlite").path
    return path
}

func removeFile(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

var generator = SystemRandomNumberGenerator()
let artists = (0..<100).map { "artist\($0)" }
let words = ["harbour", "sunset", "night", "portrait", "river", "garden", "storm", "city", "sea", "mountain"]

func item(_ index: Int, zone: ZoneID = .default) -> Record {
    var record = Record(recordType: "Item", recordName: "item-\(index)", fields: [
        "price": .int64(Int64(index % 100_000)), "artist": .string(artists[index % artists.count]),
        "title": .string("\(words[index % words.count]) \(words[(index / 10) % words.count]) \(index)"),
        "location": .location(Location(latitude: 48 + Double(index % 1000) / 1000, longitude: 2 + Double(index % 777) / 777)),
    ])
    record.recordID.zoneID = zone
    return record
}

/// The four indexed queries: one per index the save and the modify keep up to date.
let indexedQueries: [KQuery.Query] = [
    "price > 99000", "artist == 'artist7'", "ALL tokenize('harbour sunset', 'cdl') IN allTokens",
    "distanceToLocation:fromLocation:(location, location(48.5, 2.5)) < 1",
].map { KQuery.Query(recordType: "Item", predicate: try! ValidatedPredicate($0)) }

// MARK: 1. One-record modify versus a plain save, in memory

func modifyVersusSave() throws {
    let count = 10_000
    let records = (0..<count).map { item($0) }
    let store = Database(indexPolicy: .declared)
    for (field, index) in [("price", FieldSchema.Indexes.sortable), ("artist", .queryable), ("title", .searchable), ("location", .queryable)] {
        try store.declareIndex(IndexDeclaration(recordType: "Item", field: FieldReference(name: field), index: index))
    }
    try store.importRecords(records)
    // The save's side of the subscription: the same subscription in the matcher, asked for each change.
    var matcher = SubscriptionSet(database: .public)
    try matcher.save(try .query("cheap", recordType: "Item", predicate: "price < 100"))

    let container = try Container(containerIdentifier: "iCloud.bench", path: nil)   // in memory
    let database = try container.database(.public)
    _ = try database.importRecords(records)
    for query in indexedQueries { _ = try database.query(query) }   // the query store builds its four indexes
    try database.saveSubscription(try .query("cheap", recordType: "Item", predicate: "price < 100"))
    _ = try container.pendingNotifications()

    var ratios: [Double] = []
    var saves: [Double] = []
    var modifies: [Double] = []
    for round in 0..<environmentInt("BENCH_MODIFY_ROUNDS", 3_000) {
        // Each change matches the subscription (price < 100) and moves four indexed values.
        var changed = item(round % count)
        changed["price"] = .int64(Int64(round % 100))
        changed["title"] = .string("storm bridge \(round)")
        var fired = 0
        let save = try seconds {
            let change = try store.save(RecordOperation(kind: .forceReplace, record: changed))
            fired += matcher.firings(for: change, now: 0).count
        }
        precondition(fired == 1, "the save's change matched \(fired) subscriptions")
        let modify = try seconds { _ = try database.modify([RecordOperation(kind: .forceReplace, record: changed)]) }
        if round >= 100 {
            saves.append(save)
            modifies.append(modify)
            ratios.append(modify / save)
        }
    }
    let queued = try container.pendingNotifications(limit: 10_000).count
    print("modify vs save + match (in memory, 10,000 records, 4 indexes, 1 matching subscription, outbox): "
          + "save \(microseconds(median(saves))), modify \(microseconds(median(modifies))), median ratio \(String(format: "%.2f", median(ratios)))× "
          + "(aim at most 1.3×; \(queued) pushes queued)")
}

// MARK: 2. File-backed modify of 200 records

func fileModify() throws {
    let path = temporaryPath("modify")
    defer { removeFile(path) }
    let container = try Container(containerIdentifier: "iCloud.bench", path: path)
    let database = try container.database(.private, user: "_bench")
    let zone = ZoneID(zoneName: "Items")
    try database.createZone(zone)
    try database.saveSubscription(Subscription(subscriptionID: "zone", kind: .recordZone(zoneID: zone, recordType: nil),
                                               notificationInfo: NotificationInfo(shouldSendContentAvailable: true)))
    var rates: [Double] = []
    for round in 0..<30 {
        let operations = (0..<200).map { RecordOperation(kind: .create, record: item(round * 200 + $0, zone: zone)) }
        let time = try seconds { _ = try database.modify(operations) }
        rates.append(200 / time)
    }
    print("file-backed modify of 200 records (one transaction and its log sync, zone subscription): median \(Int(median(rates))) records/s (aim 50,000)")
}

/// A file-backed one-record modify, as `kquery serve` commits them: committed without waiting
/// for the disk (the server's syncer waits for many at once), one matching query subscription, the
/// push queued. BENCH_FILE_ONE_ROUNDS sets the rounds (2,000).
func fileModifyOne() throws {
    let path = temporaryPath("modify-one")
    defer { removeFile(path) }
    let container = try Container(containerIdentifier: "iCloud.bench", path: path)
    let database = try container.database(.public)
    _ = try database.importRecords((0..<10_000).map { item($0) })
    try database.saveSubscription(try .query("cheap", recordType: "Item", predicate: "price < 100"))
    var times: [Double] = []
    for round in 0..<environmentInt("BENCH_FILE_ONE_ROUNDS", 2_000) {
        var changed = item(round % 10_000)
        changed["price"] = .int64(Int64(round % 100))
        times.append(try seconds { _ = try database.modify([RecordOperation(kind: .forceReplace, record: changed)], durably: false) })
    }
    try container.waitUntilDurable()
    print("file-backed one-record modify, committed without its sync (as the server commits): median \(microseconds(median(times)))")
}

// MARK: 3. Zone changes and database changes

func changeFetches() throws {
    let path = temporaryPath("changes")
    defer { removeFile(path) }
    let container = try Container(containerIdentifier: "iCloud.bench", path: path)
    let database = try container.database(.private, user: "_bench")
    let zone = ZoneID(zoneName: "Items")
    try database.createZone(zone)
    for round in 0..<50 {
        _ = try database.modify((0..<200).map { RecordOperation(kind: .create, record: item(round * 200 + $0, zone: zone)) })
    }
    var times: [Double] = []
    for _ in 0..<7 {
        var fetched = 0
        times.append(try seconds {
            var token: SyncToken?
            repeat {
                let batch = try database.zoneChanges(zone, since: token)
                fetched += batch.changes.count
                token = batch.syncToken
                if !batch.moreComing { break }
            } while true
        })
        precondition(fetched == 10_000, "fetched \(fetched)")
    }
    print("fetching 10,000 zone changes (file, 50 batches of 200): median \(milliseconds(median(times))) (aim under 20 ms)")

    // Database changes, in memory and in a file (whose 10,000 zone creations take a disk sync each).
    for inFile in [false, true] {
        let zonesPath = temporaryPath("zones")
        defer { removeFile(zonesPath) }
        let zonesContainer = try Container(containerIdentifier: "iCloud.bench", path: inFile ? zonesPath : nil)
        let zonesDatabase = try zonesContainer.database(.private, user: "_bench")
        for index in 0..<10_000 { try zonesDatabase.createZone(ZoneID(zoneName: "Zone\(index)")) }
        times = []
        for _ in 0..<7 {
            var fetched = 0
            times.append(try seconds {
                var token: SyncToken?
                repeat {
                    let batch = try zonesDatabase.databaseChanges(since: token)
                    fetched += batch.changedZones.count
                    token = batch.syncToken
                    if !batch.moreComing { break }
                } while true
            })
            precondition(fetched == 10_000, "fetched \(fetched)")
        }
        print("fetching database changes over 10,000 zones (\(inFile ? "file" : "in memory"), 50 batches of 200): median \(milliseconds(median(times))) (aim under 20 ms)")
    }
}

// MARK: 4. Opening a large container file

func openLargeFile() throws {
    let recordCount = environmentInt("BENCH_OPEN_RECORDS", 1_000_000)
    let subscriptionCount = environmentInt("BENCH_OPEN_SUBSCRIPTIONS", 100_000)
    guard recordCount > 0 else { return }
    let path = temporaryPath("open")
    defer { removeFile(path) }
    var subscribing = 0.0
    let build = try seconds {
        let container = try Container(containerIdentifier: "iCloud.bench", path: path)
        let database = try container.database(.public)
        subscribing = try seconds {
            for index in 0..<subscriptionCount {
                // On another record type: loaded and indexed at open, but the import queues no pushes.
                try database.saveSubscription(try .query("s\(index)", recordType: "Watched", predicate: "artist == 'artist\(index % 100)' AND price > \(index)"))
            }
        }
        var start = 0
        while start < recordCount {
            let end = min(start + 200, recordCount)
            _ = try database.modify((start..<end).map { RecordOperation(kind: .forceReplace, record: item($0)) }, atomic: false)
            start = end
        }
    }
    let open = try seconds {
        let container = try Container(containerIdentifier: "iCloud.bench", path: path)
        let database = try container.database(.public)
        _ = try database.query(KQuery.Query(recordType: "Item", predicate: try ValidatedPredicate("price == 5"), resultsLimit: 1))
        _ = try database.modify([RecordOperation(kind: .forceReplace, record: item(0))])
    }
    print("opening a container file of \(recordCount) records and \(subscriptionCount) subscriptions (open, first query, first modify): \(String(format: "%.2f", open)) s (built in \(String(format: "%.0f", build)) s, "
          + "of which saving the subscriptions one by one \(String(format: "%.1f", subscribing)) s)")
}

// MARK: 5. A query as `kquery serve` answers it

/// One `records/query` as the server answers it, without HTTP: the query, then every result
/// written to JSON. Kept out of line, so that a profiler can count one (callgrind's toggle).
@inline(never)
func servedQuery(_ database: ContainerDatabase, _ query: KQuery.Query, into out: inout [UInt8]) throws -> Int {
    let result = try database.query(query)
    out.removeAll(keepingCapacity: true)
    for record in result.records { record.writeJSON(desiredKeys: query.desiredKeys, to: &out) }
    return result.records.count
}

/// `price == k` with ten results a query over a million records (the serve benchmark's query), each
/// result written to JSON: what the store's query benchmark leaves out (reading the results'
/// fields and system fields).
func servedQueries() throws {
    let recordCount = environmentInt("BENCH_SERVED_RECORDS", 1_000_000)
    guard recordCount > 0 else { return }
    let container = try Container(containerIdentifier: "iCloud.bench", path: nil)   // in memory
    let database = try container.database(.public)
    var start = 0
    while start < recordCount {
        let end = min(start + 10_000, recordCount)
        _ = try database.importRecords((start..<end).map { item($0) })
        start = end
    }
    var lcg: UInt64 = 0x2545F4914F6CDD1D
    var out: [UInt8] = []
    var times: [Double] = []
    var results = 0
    for round in 0..<environmentInt("BENCH_SERVED_ROUNDS", 20_000) {
        lcg = lcg &* 6364136223846793005 &+ 1442695040888963407
        let query = KQuery.Query(recordType: "Item", predicate: try ValidatedPredicate("price == \((lcg >> 33) % 100_000)"), resultsLimit: 10)
        let time = try seconds { results += try servedQuery(database, query, into: &out) }
        if round > 0 { times.append(time) }   // the first builds the query store
    }
    print("served query (price == k, 10 results written to JSON, \(recordCount) records in memory): median \(microseconds(median(times))) (\(results) results)")
}

// MARK: 7. A query through the shared database against the same query in the owner's private one

/// `price == k` (10 results, written to JSON) over 100,000 records an owner shared: asked in the
/// owner's private database and in a participant's shared database, by turns (SPEC §13's aim: the
/// shared one within 1.5×). Once with the records under one shared root (each result's parent chain
/// is checked), once with the zone shared whole.
func sharedQueries() throws {
    let recordCount = environmentInt("BENCH_SHARED_RECORDS", 100_000)
    guard recordCount > 0 else { return }
    for zoneWide in [false, true] {
        let container = try Container(containerIdentifier: "iCloud.bench", path: nil)
        let owner = try container.database(.private, user: "_owner")
        let zone = ZoneID(zoneName: "Lists", ownerName: "_owner")
        try owner.createZone(zone)
        let root = Record(recordType: "List", recordID: RecordID(recordName: "root", zoneID: zone), fields: Fields())
        _ = try owner.modify([RecordOperation(kind: .create, record: root)])
        var start = 0
        while start < recordCount {
            let end = min(start + 10_000, recordCount)
            _ = try owner.importRecords((start..<end).map { index in
                var record = item(index, zone: zone)
                if !zoneWide { record.parent = Reference(recordID: root.recordID) }
                return record
            })
            start = end
        }
        var share = Record(recordType: SharingKeys.shareRecordType, recordID: RecordID(recordName: zoneWide ? SharingKeys.zoneShareName : "share", zoneID: zone), fields: Fields())
        if !zoneWide { share.fields[SharingKeys.forRecord.1] = .string("root") }
        share.fields[SharingKeys.participants.1] = .string(#"[{"type": "USER", "permission": "READ_ONLY", "acceptanceStatus": "ACCEPTED", "userIdentity": {"userRecordName": "_guest"}}]"#)
        guard case .saved? = try owner.modify([RecordOperation(kind: .create, record: share)]).results.first else { throw ContainerError(.internalError, "share not saved") }
        let guest = try container.database(.shared, user: "_guest")
        var lcg: UInt64 = 0x2545F4914F6CDD1D
        var out: [UInt8] = []
        var privateTimes: [Double] = [], sharedTimes: [Double] = [], ratios: [Double] = []
        var results = (0, 0)
        for round in 0..<environmentInt("BENCH_SHARED_ROUNDS", 5_000) {
            lcg = lcg &* 6364136223846793005 &+ 1442695040888963407
            let query = KQuery.Query(recordType: "Item", predicate: try ValidatedPredicate("price == \((lcg >> 33) % UInt64(recordCount))"), resultsLimit: 10, zoneID: zone)
            let privateTime = try seconds { results.0 += try servedQuery(owner, query, into: &out) }
            let sharedTime = try seconds { results.1 += try servedQuery(guest, query, into: &out) }
            guard round > 0 else { continue }   // the first builds the query store
            privateTimes.append(privateTime)
            sharedTimes.append(sharedTime)
            ratios.append(sharedTime / privateTime)
        }
        print("shared query (\(zoneWide ? "zone shared whole" : "records under one shared root"), price == k, \(recordCount) records): private median \(microseconds(median(privateTimes))), shared median \(microseconds(median(sharedTimes))), median of ratios \(String(format: "%.2f", median(ratios)))x (\(results.0) and \(results.1) results)")
    }
}

let only = ProcessInfo.processInfo.environment["BENCH_ONLY"]
if only == nil || only == "modify" { try modifyVersusSave() }
if only == nil || only == "file" { try fileModify() }
if only == nil || only == "file-one" { try fileModifyOne() }
if only == nil || only == "changes" { try changeFetches() }
if only == nil || only == "open" { try openLargeFile() }
if only == nil || only == "served" { try servedQueries() }
if only == nil || only == "shared" { try sharedQueries() }
