import Foundation
import KQuery
import PropertyBased
import Testing
import KQueryPostgres
import KQueryTestSupport
import KQueryWebServices
@testable import KQueryContainer

/// Writes batched into one transaction (`Container.batchingWrites`, what the server's committer
/// does with the modifies queued together) behave exactly as the same writes made one by one:
/// each applies whole or not at all, sees the ones before it, and nothing is visible or kept
/// unless the batch commits.
@Suite struct ContainerBatchTests {
    typealias F = ContainerFixture
    static let zones = ContainerModifyPropertyTests.zones
    static let names = ContainerModifyPropertyTests.names

    /// A write that changes the database, queues a push and then fails: a batch must keep none
    /// of it, nor take the push's outbox number.
    static func failingWrite(_ container: Container, _ database: ContainerDatabase) -> ContainerError? {
        containerError {
            _ = try container.write { state, tx throws(ContainerError) -> Int in
                let stored = try tx.existingOrNewDatabase(database.key)
                try tx.saveRecord(F.record("phantom", type: "Item", zone: F.zone, ["v": .int64(99)]), sequence: stored.sequence + 1, in: stored)
                try tx.setSequence(stored.sequence + 1, of: stored)
                _ = try tx.enqueue([OutboxNotification(
                    id: 0, database: database.key, subscriptionID: "phantom", owner: database.key.userRecordName,
                    payload: .object([("ck", .object([("nid", .string("phantom"))]))]), priority: 10, pushType: "alert", created: 0)])
                _ = try container.changeSubscriptionSet(database.key, &state, tx) { set throws(ContainerError) in
                    do throws(SubscriptionError) {
                        try set.save(Subscription(subscriptionID: "phantom", kind: .recordZone(zoneID: F.zone, recordType: nil)))
                    } catch {
                        throw ContainerError(.internalError, error.message)
                    }
                }
                throw ContainerError(.internalError, "injected failure")
            }
        }
    }

    /// What a client can observe of a database: its records by zone, each zone's change feed from
    /// the start (names, tags, deletions), and the pending pushes by subscription and record.
    static func observed(_ container: Container, _ database: ContainerDatabase) throws -> String {
        var lines: [String] = []
        for zone in zones {
            let records = try ContainerModifyPropertyTests.records(database, zone)
            for name in records.keys.sorted() {
                let record = records[name]!
                lines.append("\(zone.zoneName)/\(name) \(record.recordChangeTag ?? "-") \(record.fields)")
            }
            guard !zone.isDefaultZone else { continue }
            let changes = try database.zoneChanges(zone, since: nil)
            for change in changes.changes {
                switch change {
                case .changed(let record): lines.append("change \(zone.zoneName)/\(record.recordID.recordName) \(record.recordChangeTag ?? "-")")
                case .deleted(let id, let type): lines.append("delete \(zone.zoneName)/\(id.recordName) \(type)")
                }
            }
        }
        for push in try container.pendingNotifications(limit: 10_000) {
            lines.append("push \(push.id) \(push.subscriptionID) \(push.payload["ck"]?["qry"]?["rid"]?.stringValue ?? "-")")
        }
        return lines.joined(separator: "\n")
    }

    /// Random modifies, in random groups with failing writes among them: a file container
    /// committing each group as a batch ends where a memory container applying them one by one
    /// does, with the same result for every modify, and holds the same after reopening its file.
    @Test func batchedWritesEqualWritesOneByOne() async {
        await propertyCheck(count: 8, input: Gen.uint64()) { seed in
            let path = F.temporaryPath()
            defer { F.remove(path) }
            Self.checkBatches(seed: seed, prefetching: false, open: { () throws -> Container in try F.container(path: path) })
        }
    }

    /// The same on PostgreSQL, each batch reading its modifies' records ahead (`prefetching`, as the
    /// server's committer does), with records no write touches and the failing writes' among
    /// them: what a batch read ahead stays current through the writes that change it, the ones
    /// rolled back included.
    @Test func batchedWritesEqualWritesOneByOneOnPostgres() async throws {
        let location = try PostgresTestDatabase.shared()
        await propertyCheck(count: 6, input: Gen.uint64()) { seed in
            let identifier = "batch-\(seed)-\(UUID().uuidString)"
            Self.checkBatches(seed: seed, prefetching: true, open: { () throws -> Container in
                try Container(containerIdentifier: F.identifier, storage: try PostgresContainerStorage(location: location, containerIdentifier: identifier),
                          clock: { 1_700_000_000_000 })
            })
        }
    }

    static func checkBatches(seed: UInt64, prefetching: Bool, open: () throws -> Container) {
        var rng = SplitMix(seed: seed)
        do {
            let reference = try F.container(.memory)
            var batched = try open()
            var databases: [ContainerDatabase] = []
            for container in [reference, batched] {
                let database = try container.database(.private, user: "_u1")
                for zone in Self.zones where !zone.isDefaultZone { try database.createZone(zone) }
                try database.saveSubscription(Subscription(subscriptionID: "fives", kind: .query(
                    recordType: "Item", condition: try ValidatedPredicate("v == 5").condition, zoneID: nil), options: [.firesOnRecordCreation, .firesOnRecordUpdate]))
                try database.saveSubscription(Subscription(subscriptionID: "zoneA", kind: .recordZone(zoneID: Self.zones[0], recordType: nil)))
                databases.append(database)
            }
            for group in 0..<12 {
                var current: [ZoneID: [String: Record]] = [:]
                for zone in Self.zones { current[zone] = try ContainerModifyPropertyTests.records(databases[0], zone) }
                // A group: modifies (each from the state before the group: stale tags are part of the test) and failing writes.
                var items: [(operations: [RecordOperation], atomic: Bool)?] = []
                for _ in 0..<Int.random(in: 1...6, using: &rng) {
                    items.append(Int.random(in: 0..<5, using: &rng) == 0 ? nil
                        : (ContainerModifyPropertyTests.randomOperations(&rng, current, wide: false), Bool.random(using: &rng)))
                }
                var expected: [String] = []
                for case let item? in items {
                    let result = try databases[0].modify(item.operations, atomic: item.atomic)
                    expected.append("\(result.results) \(result.notifications.map(\.subscriptionID))")
                }
                var reads: [RecordID] = []
                if prefetching {
                    for case let item? in items { reads += item.operations.map(\.record.recordID) }
                    reads.append(RecordID(recordName: "phantom", zoneID: F.zone))
                    for zone in Self.zones { reads.append(RecordID(recordName: Self.names.randomElement(using: &rng) ?? "a", zoneID: zone)) }
                    reads.shuffle(using: &rng)
                }
                var got: [String] = []
                var failures: [ContainerError?] = []
                try batched.batchingWrites(prefetching: reads.isEmpty ? [:] : [databases[1].key: reads]) {
                    for item in items {
                        guard let item else {
                            failures.append(Self.failingWrite(batched, databases[1]))
                            continue
                        }
                        do {
                            let result = try databases[1].modify(item.operations, atomic: item.atomic, durably: false)
                            got.append("\(result.results) \(result.notifications.map(\.subscriptionID))")
                        } catch {
                            got.append("threw \(error)")
                        }
                    }
                }
                try batched.waitUntilDurable()
                #expect(failures.allSatisfy { $0?.reason == "injected failure" }, "seed \(seed) group \(group)")
                #expect(got == expected, "seed \(seed) group \(group)")
                #expect(try Self.observed(batched, databases[1]) == Self.observed(reference, databases[0]), "seed \(seed) group \(group)")
            }
            let expected = try Self.observed(reference, databases[0])
            batched = try open()
            #expect(try Self.observed(batched, try batched.database(.private, user: "_u1")) == expected, "seed \(seed): the reopened storage differs from the mirror")
        } catch {
            Issue.record("seed \(seed): \(error)")
        }
    }

    /// On PostgreSQL a write's statements are sent without waiting, its savepoint's release too,
    /// so a statement that fails (here PostgreSQL cannot index a record type of 10,000 random
    /// letters: a btree entry holds about 2,700 bytes) is found by a
    /// later write of the batch. That write must not roll back to the last savepoint, which would
    /// undo a write the batch already counted done: the whole batch fails, and keeps nothing.
    @Test func aSentStatementThatFailsFailsItsBatch() throws {
        let storage = try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "sent-\(UUID().uuidString)")
        let key = DatabaseKey(environment: .development, scope: .public, userRecordName: "")
        var outcomes: [String] = []
        let failed = containerError {
            try storage.batch { writer throws(ContainerError) in
                guard let writer else { throw ContainerError(.internalError, "PostgreSQL batches its writes") }
                try writer.write { tx throws(ContainerError) in
                    let database = try tx.existingOrNewDatabase(key)
                    try tx.saveRecord(F.record("kept"), sequence: database.sequence + 1, in: database)
                    try tx.setSequence(database.sequence + 1, of: database)
                }
                try writer.write { tx throws(ContainerError) in
                    let database = try tx.existingOrNewDatabase(key)
                    var generator = SystemRandomNumberGenerator()
                    let type = String((0..<10_000).map { _ in "abcdefghijklmnopqrstuvwxyz".randomElement(using: &generator) ?? "a" })
                    try tx.saveRecord(F.record("refused", type: type), sequence: database.sequence + 1, in: database)
                }
                outcomes.append("the refused save returned")
                do {
                    try writer.write { tx throws(ContainerError) in
                        _ = try tx.record(RecordID(recordName: "kept"), in: try tx.existingOrNewDatabase(key))
                    }
                    outcomes.append("the next write succeeded")
                } catch {
                    outcomes.append("the next write failed")
                }
                do {
                    try writer.write { tx throws(ContainerError) in
                        let database = try tx.existingOrNewDatabase(key)
                        try tx.saveRecord(F.record("later"), sequence: database.sequence + 1, in: database)
                    }
                    outcomes.append("a later write succeeded")
                } catch {
                    outcomes.append("a later write failed")
                }
            }
        }
        #expect(outcomes == ["the refused save returned", "the next write failed", "a later write failed"])
        #expect(failed != nil, "the batch committed")
        let kept = try storage.read { tx throws(ContainerError) -> [Record] in
            guard let database = try tx.database(key) else { return [] }
            return try tx.records(in: database)
        }
        #expect(kept.isEmpty, "the failed batch kept \(kept.map(\.recordID.recordName))")
    }

    /// On PostgreSQL a batch's writes hold their records and pushes back and send them together
    /// (`HeldWrites`), with no savepoint for a write that sends nothing. A write that reads what it
    /// held sends it first, after the earlier writes' and its own savepoint: when it then fails,
    /// rolling back to that savepoint undoes its records and keeps the earlier writes', and the
    /// writes after it apply as ever.
    @Test func aBatchedWriteThatReadsWhatItHeldThenFailsLeavesTheOthers() throws {
        let location = try PostgresTestDatabase.shared()
        let container = try Container(
            containerIdentifier: F.identifier,
            storage: try PostgresContainerStorage(location: location, containerIdentifier: "held-\(UUID().uuidString)"), clock: { 1_700_000_000_000 })
        let database = try F.privateDatabase(container)
        try database.saveSubscription(Subscription(subscriptionID: "zone", kind: .recordZone(zoneID: F.zone, recordType: nil)))
        var readBack: Record?
        var failed: ContainerError?
        try container.batchingWrites {
            _ = try? database.modify([F.operation(.create, F.record("before", zone: F.zone, ["v": .int64(1)]))], durably: false)
            _ = try? database.modify([F.operation(.create, F.record("also", zone: F.zone, ["v": .int64(2)]))], durably: false)
            failed = containerError {
                _ = try container.write { _, tx throws(ContainerError) -> Int in
                    let stored = try tx.existingOrNewDatabase(database.key)
                    let phantom = F.record("phantom", zone: F.zone, ["v": .int64(99)])
                    try tx.saveRecord(phantom, sequence: stored.sequence + 1, in: stored)
                    try tx.setSequence(stored.sequence + 1, of: stored)
                    readBack = try tx.record(phantom.recordID, in: stored)
                    throw ContainerError(.internalError, "injected failure")
                }
            }
            _ = try? database.modify([F.operation(.create, F.record("after", zone: F.zone, ["v": .int64(3)]))], durably: false)
        }
        #expect(failed?.reason == "injected failure")
        #expect(readBack?["v"] == .int64(99), "the write did not read back what it held")
        let records = try database.lookup(["before", "also", "phantom", "after"].map { RecordID(recordName: $0, zoneID: F.zone) }).map { $0.record?["v"] }
        #expect(records == [.int64(1), .int64(2), nil, .int64(3)])
        let changes = try database.zoneChanges(F.zone, since: nil).changes.map { change -> String in
            if case .changed(let record) = change { return record.recordID.recordName }
            return "deleted"
        }
        #expect(changes == ["before", "also", "after"])
        let pushes = try container.pendingNotifications()
        #expect(pushes.count == 3)
        #expect(pushes.map(\.id) == pushes.map(\.id).sorted() && Set(pushes.map(\.id)).count == 3)
    }

    /// A batch's writes are seen by the writes after them in the batch, and by readers only once
    /// the batch has committed.
    @Test func readersSeeABatchOnceItCommits() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        let container = try F.container(path: path)
        let database = try F.privateDatabase(container)
        let id = RecordID(recordName: "n1", zoneID: F.zone)
        var secondCreate: RecordResult?
        var seenInside: Record?? = nil
        try container.batchingWrites {
            _ = try? database.modify([F.operation(.create, F.record("n1", zone: F.zone, ["v": .int64(1)]))], durably: false)
            secondCreate = try? database.modify([F.operation(.create, F.record("n1", zone: F.zone, ["v": .int64(2)]))], durably: false).results.first
            seenInside = try? database.record(id)
        }
        #expect(secondCreate?.error?.code == .exists)
        #expect(seenInside == .some(nil), "a reader saw the batch before it committed")
        #expect(try database.record(id)?["v"] == .int64(1))
    }

    /// A batch that cannot commit leaves nothing: no record, no change, no push, no subscription
    /// saved in it, and the container goes on working.
    @Test func aBatchThatCannotCommitLeavesNothing() throws {
        let container = try Container(containerIdentifier: F.identifier, storage: FailingCommitStorage(try SQLiteContainerStorage(path: nil)),
                                      clock: { 1_700_000_000_000 })
        let database = try F.privateDatabase(container)
        try database.saveSubscription(Subscription(subscriptionID: "zone", kind: .recordZone(zoneID: F.zone, recordType: nil)))
        let failed = containerError {
            try container.batchingWrites {
                _ = try? database.saveSubscription(Subscription(subscriptionID: "other", kind: .recordZone(zoneID: F.otherZone, recordType: nil)))
                _ = try? database.modify([F.operation(.create, F.record("lost", zone: F.zone))], durably: false)
            }
        }
        #expect(failed?.reason == "injected commit failure")
        #expect(try database.record(RecordID(recordName: "lost", zoneID: F.zone)) == nil)
        #expect(try database.zoneChanges(F.zone, since: nil).changes.isEmpty)
        #expect(try container.pendingNotifications().isEmpty)
        #expect(try database.subscriptions().map(\.subscriptionID) == ["zone"])
        // The subscription set was read again: a save to the other zone notifies nobody.
        let result = try database.modify([F.operation(.create, F.record("kept", zone: F.otherZone))])
        #expect(result.notifications.isEmpty)
        let query = Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"), zoneID: F.otherZone)
        #expect(try database.query(query).records.map(\.recordID.recordName) == ["kept"])
    }
}

/// A storage that counts its transactions (each a commit: a disk sync on a file, a WAL flush on
/// PostgreSQL) and can fail its batches' commits.
private final class CountingStorage: ForwardingStorage, @unchecked Sendable {
    let inner: any ContainerStorage
    let commits = Locked(0)
    let failBatches = Locked(false)
    init(_ inner: SQLiteContainerStorage) { self.inner = inner }

    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        commits.withLock { $0 += 1 }
        return try inner.write(body)
    }
    func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T {
        commits.withLock { $0 += 1 }
        let fail = failBatches.withLock { $0 }
        return try inner.batch { writer throws(ContainerError) -> T in
            let result = try body(writer)
            if fail { throw ContainerError(.internalError, "injected commit failure") }
            return result
        }
    }
}

extension ContainerBatchTests {
    /// A `subscriptions/modify` request's operations share a transaction for each 200 (each was
    /// its own: a commit a subscription, 113 s for 100,000 on PostgreSQL), each still applied or
    /// refused alone; when a run's commit fails, every operation of that run answers the error
    /// and none of it is kept.
    @Test func aSubscriptionsRequestCommitsOnceForEachTwoHundred() throws {
        let storage = CountingStorage(try SQLiteContainerStorage(path: nil))
        let container = try Container(containerIdentifier: F.identifier, storage: storage, clock: { 1_700_000_000_000 })
        let database = try F.privateDatabase(container)
        try database.createZone(F.zone)
        let service = DatabaseService(database: database)
        func operation(_ n: Int, _ id: String? = nil, zone: String = "Notes") -> String {
            let name = id ?? "s\(n)"
            return #"{"operationType": "create", "subscription": {"subscriptionID": "\#(name)", "subscriptionType": "query", "zoneID": {"zoneName": "\#(zone)"}, "#
                + #""query": {"recordType": "Item", "filterBy": [{"comparator": "EQUALS", "fieldName": "price", "fieldValue": {"value": \#(n)}}]}, "firesOn": ["create"]}}"#
        }
        // 450 operations, the 7th in a zone that does not exist.
        let operations = (0..<450).map { $0 == 7 ? operation($0, zone: "Missing") : operation($0) }
        let before = storage.commits.withLock { $0 }
        let answer = try service.run("subscriptions/modify", try JSON.parse(#"{"operations": [\#(operations.joined(separator: ","))]}"#))
        #expect(storage.commits.withLock { $0 } - before == 3)
        guard case .array(let answers)? = answer.json["subscriptions"] else { Issue.record("no subscriptions in \(answer.json)"); return }
        #expect(answers.count == 450)
        #expect(answers[7]["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")
        #expect(answers.enumerated().allSatisfy { $0.offset == 7 || $0.element["serverErrorCode"] == nil })
        #expect(try database.subscriptions().count == 449)

        storage.failBatches.withLock { $0 = true }
        let failed = try service.run("subscriptions/modify", try JSON.parse(#"{"operations": [\#(operation(1000, "lost1")), \#(operation(1001, "lost2"))]}"#))
        storage.failBatches.withLock { $0 = false }
        guard case .array(let lost)? = failed.json["subscriptions"] else { Issue.record("no subscriptions in \(failed.json)"); return }
        #expect(lost.map { $0["subscriptionID"]?.stringValue } == ["lost1", "lost2"])
        #expect(lost.allSatisfy { $0["serverErrorCode"]?.stringValue == "INTERNAL_ERROR" })
        #expect(try database.subscription("lost1") == nil)
        #expect(try database.subscriptions().count == 449)
    }
}

/// A storage whose batches never commit (a disk that fails at the commit): the batch runs, then
/// its transaction is rolled back.
private struct FailingCommitStorage: ForwardingStorage {
    let inner: any ContainerStorage
    init(_ inner: SQLiteContainerStorage) { self.inner = inner }

    func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try inner.batch { writer throws(ContainerError) -> T in
            _ = try body(writer)
            throw ContainerError(.internalError, "injected commit failure")
        }
    }
}
