import KQuery
import Testing
@testable import KQueryContainer

private typealias F = ContainerFixture

@Suite struct ContainerConcurrencyTests {
    /// Writers save pairs of records in one modify each, with a subscription firing for every
    /// record; readers, at the same time, never see half a pair, through change fetches or queries.
    @Test func readersNeverSeeHalfAModify() async throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        let container = try F.container(path: path)
        let database = try F.privateDatabase(container)
        try database.saveSubscription(try .query("pairs", recordType: "Pair", predicate: "TRUEPREDICATE", options: .firesOnRecordCreation))
        let writers = 3, modifies = 20
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for index in 0..<modifies {
                        let result = try database.modify([
                            F.operation(.create, F.record("w\(writer)-\(index)-a", type: "Pair", zone: F.zone)),
                            F.operation(.create, F.record("w\(writer)-\(index)-b", type: "Pair", zone: F.zone,
                                                          ["a": F.reference("w\(writer)-\(index)-a", .validate)])),
                        ])
                        #expect(result.results.allSatisfy { $0.record != nil })
                        #expect(result.notifications.count == 2)
                    }
                }
            }
            for _ in 0..<3 {
                group.addTask {
                    let query = Query(recordType: "Pair", predicate: try ValidatedPredicate("TRUEPREDICATE"), resultsLimit: 200)
                    for _ in 0..<30 {
                        let names = Set(try database.zoneChanges(F.zone, since: nil).changedRecords.map(\.recordID.recordName))
                        #expect(names.allSatisfy { names.contains(String($0.dropLast()) + ($0.hasSuffix("a") ? "b" : "a")) })
                        #expect(try database.query(query).records.count % 2 == 0)
                        #expect(try container.pendingNotifications(limit: 1_000).count % 2 == 0)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try database.zoneChanges(F.zone, since: nil).changes.count == writers * modifies * 2)
        let pending = try container.pendingNotifications(limit: 1_000)
        #expect(pending.count == writers * modifies * 2)
        #expect(pending.map(\.id) == pending.map(\.id).sorted())
    }

    /// A query's records read their fields from the query store's columns when first read, after
    /// the query has returned, while writers keep changing the same records (each write sets two
    /// fields to one value): every record read shows one write whole, through the writers'
    /// changes, which first make the fields of the records given out.
    @Test func recordsReadAfterTheQueryKeepTheirFields() async throws {
        let container = try F.container()
        let database = try F.privateDatabase(container)
        let names = (0..<40).map { "r\($0)" }
        func version(_ name: String, _ value: Int64) -> RecordOperation {
            F.operation(.forceReplace, F.record(name, zone: F.zone, ["a": .int64(value), "b": .string("v\(value)"), "c": .int64(value)]))
        }
        _ = try database.modify(names.map { version($0, 0) })
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<2 {
                group.addTask {
                    for round in 1...40 {
                        _ = try database.modify(names.filter { $0.hashValue % 2 == writer % 2 || round % 3 == 0 }.map { version($0, Int64(round * 2 + writer)) })
                    }
                }
            }
            for _ in 0..<3 {
                group.addTask {
                    let query = Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"), resultsLimit: 200)
                    for _ in 0..<40 {
                        let records = try database.query(query).records
                        #expect(records.count == names.count)
                        for record in records {
                            guard case .int64(let a)? = record["a"] else {
                                Issue.record("\(record.recordID): no a")
                                continue
                            }
                            #expect(record["b"] == .string("v\(a)") && record["c"] == .int64(a), "\(record.recordID)")
                            #expect(record.fields.count == 3)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}
