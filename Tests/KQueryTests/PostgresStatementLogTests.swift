import Foundation
import KQuery
import KQueryContainer
import KQueryPostgres
import KQueryTestSupport
import Testing

/// Citus-ready (SPEC §16): a container's whole round of work — zones, modifies with references,
/// deletes, queries, change fetches, subscriptions and their pushes, assets, collection, a zone
/// deleted — is run on a database of its own, then every statement PostgreSQL logged for that
/// database is read back: each that reads, changes or deletes rows of a distributed table must
/// filter on the table's distribution column. (Citus is not in Debian: this stands in for it.)
@Suite struct PostgresStatementLogTests {
    /// The distributed tables and their distribution columns (README's `create_distributed_table` calls).
    static let distributed: [String: String] = [
        "zones": "database_id", "zone_tombstones": "database_id", "records": "database_id", "record_tombstones": "database_id",
        "record_references": "database_id", "subscriptions": "database_id", "record_values": "database_id",
        "outbox": "container_id", "asset_uploads": "container_id", "asset_receipts": "container_id", "asset_blobs": "container_id",
        "asset_chunks": "container_id", "asset_blob_chunks": "container_id", "asset_references": "container_id",
    ]

    @Test func everyStatementOnADistributedTableFiltersOnItsKey() throws {
        let cluster = try PostgresCluster.start()
        let url = try cluster.createDatabase()
        let name = try #require(url.split(separator: "/").last.map(String.init))
        let location = try #require(PostgresLocation(url: url))
        // (Three points make a radius dense here: a few records take the ways a wide one is read.)
        let containers = try PostgresContainers(location: location, connections: 2, densePoints: 3)
        defer { containers.close() }

        let container = try containers.openContainer("iCloud.log")
        let database = try container.database(.private, user: "_u1")
        let zone = ZoneID(zoneName: "Notes", ownerName: "_u1")
        try database.createZone(zone)
        _ = try database.saveSubscription(Subscription(subscriptionID: "all", kind: .database(recordType: nil), options: [.firesOnRecordCreation]))
        let parent = Record(recordType: "Note", recordID: RecordID(recordName: "parent", zoneID: zone))
        var child = Record(recordType: "Note", recordID: RecordID(recordName: "child", zoneID: zone))
        child.fields["parent"] = .reference(Reference(recordID: parent.recordID, action: .deleteSelf))
        _ = try database.modify([RecordOperation(kind: .create, record: parent), RecordOperation(kind: .create, record: child)])
        _ = try database.query(Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"), zoneID: zone))
        // Nearest first: the points (more than one statement reads: the records without one follow).
        var located = Record(recordType: "Note", recordID: RecordID(recordName: "located", zoneID: zone))
        located.fields["place"] = .location(Location(latitude: 48.85, longitude: 2.35))
        _ = try database.modify([RecordOperation(kind: .create, record: located)])
        let center = Location(latitude: 48.8, longitude: 2.3)
        let nearest = try database.query(Query(
            recordType: "Note", condition: .distance(.user(FieldKey("place")), center: center, .lessThan, radius: 100),
            sortDescriptors: [KQuery.SortDescriptor(distanceOf: "place", from: center)], zoneID: zone))
        #expect(nearest.records.map(\.recordID.recordName) == ["located"])
        _ = try database.query(Query(recordType: "Note", condition: .constant(true), sortDescriptors: [KQuery.SortDescriptor(distanceOf: "place", from: center)], zoneID: zone))
        // A dense radius sorted by a field: 36 points 100 m apart, behind 150 records far away in
        // the sort's order, so the records read in order (at most so many) find no page and the
        // radius's points are read through their index; then every plan, as --explain shows them.
        var grid: [RecordOperation] = []
        for row in 0..<6 {
            for column in 0..<6 {
                var spot = Record(recordType: "Spot", recordID: RecordID(recordName: "g\(row)-\(column)", zoneID: zone))
                spot.fields["n"] = .int64(Int64(1000 + row * 6 + column))
                spot.fields["place"] = .location(Location(latitude: 10 + Double(row) * 0.0009, longitude: 10 + Double(column) * 0.0009))
                grid.append(RecordOperation(kind: .create, record: spot))
            }
        }
        let far = (0..<150).map { (index: Int) -> RecordOperation in
            var spot = Record(recordType: "Spot", recordID: RecordID(recordName: "f\(index)", zoneID: zone))
            spot.fields["n"] = .int64(Int64(index))
            spot.fields["place"] = .location(Location(latitude: -40, longitude: Double(index) / 100))
            return RecordOperation(kind: .create, record: spot)
        }
        _ = try database.modify(grid + far[..<100])
        _ = try database.modify(Array(far[100...]))
        let dense = Query(
            recordType: "Spot", condition: .distance(.user(FieldKey("place")), center: Location(latitude: 10.00225, longitude: 10.00225), .lessThan, radius: 0.33),
            sortDescriptors: [KQuery.SortDescriptor("n")], resultsLimit: 4, zoneID: zone)
        // (The grid's corners lie 351 m from its centre: beyond the radius.)
        #expect(try database.query(dense).records.map(\.recordID.recordName) == ["g0-1", "g0-2", "g0-3", "g0-4"])
        let plans = try database.explanation(dense)
        #expect(plans.contains("at most") && plans.contains("records in the query's order") && plans.contains("points within the radius"), "\(plans)")
        _ = try database.zoneChanges(zone, since: nil)
        _ = try database.databaseChanges(since: nil)
        _ = try database.modify([RecordOperation(kind: .forceDelete, record: parent)])
        let pending = try container.pendingNotifications(limit: 10)
        try container.acknowledge(pending.map(\.id))
        let file = TemporaryFiles.path("kquery-log-asset", suffix: ".txt")
        try "bytes".write(toFile: file, atomically: true, encoding: .utf8)
        _ = try database.uploadFile(file, recordName: "withFile", fieldName: "file", recordType: "Note", in: zone)
        _ = try container.collectAssets()
        try database.compactChangeHistory(keepingLast: 0)
        _ = try database.deleteZone(zone)

        // Log entries of this database: a line led by "@name@", and the tab-led lines that continue it.
        var statements: [String] = []
        for line in try cluster.log().split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("@\(name)@") {
                let entry = line.dropFirst(name.count + 2)
                // Statements as sent ("statement: ") and prepared ones, named or not, as run ("execute NAME: ").
                if let range = entry.range(of: "LOG:  statement: ") {
                    statements.append(String(entry[range.upperBound...]))
                } else if let range = entry.range(of: "LOG:  execute "), let name = entry[range.upperBound...].range(of: ": ") {
                    statements.append(String(entry[name.upperBound...]))
                }
            } else if line.hasPrefix("\t"), !statements.isEmpty, !line.contains("DETAIL:") {
                statements[statements.count - 1] += " " + line.trimmingCharacters(in: .whitespaces)
            }
        }
        #expect(statements.count > 50)
        #expect(statements.contains { $0.hasPrefix("DECLARE kquery_nearest") })
        // The dense radius's ways: records in order (at most so many), the points through their index.
        #expect(statements.contains { $0.contains(") r WHERE COALESCE((SELECT ST_DWithin(") })
        #expect(statements.contains { $0.contains("count(*) OVER () AS points") })
        var touched: Set<String> = []
        for statement in statements {
            let words = statement.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "(" || $0 == "," }).map(String.init)
            for (index, word) in words.enumerated() where ["FROM", "UPDATE", "JOIN", "INTO"].contains(word.uppercased()) && index + 1 < words.count {
                let table = words[index + 1]
                guard let key = Self.distributed[table] else { continue }
                touched.insert(table)
                // An INSERT names the key among its columns; anything else filters on it.
                let filters = word.uppercased() == "INTO" ? statement.contains(key) : statement.contains("\(key) = ")
                #expect(filters, "\(table) without \(key): \(statement)")
            }
        }
        #expect(touched.isSuperset(of: ["zones", "records", "record_values", "record_tombstones", "record_references", "subscriptions", "outbox", "asset_uploads", "asset_chunks"]))
    }
}
