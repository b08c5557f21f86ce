import Foundation
import KQuery
import KQueryStore
import Testing
@testable import KQueryContainer

private typealias F = ContainerFixture

@Suite struct ContainerZoneTests {
    @Test(arguments: ContainerFixture.Storage.allCases) func customZonesOnlyInPrivateDatabases(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        for scope in [DatabaseScope.public, .shared] {
            let database = try container.database(scope, user: "_u1")
            let error = containerError { try database.createZone(F.zone) }
            #expect(error?.code == .badRequest)
            #expect(error?.reason.contains("only in private databases") == true, "\(String(describing: error))")
            // The shared database shows only zones other users shared (none here), never a default zone.
            #expect(try database.zones() == (scope == .shared ? [] : [.default]))
        }
        let database = try container.database(.private, user: "_u1")
        try database.createZone(F.zone)
        try database.createZone(F.zone)  // saving an existing zone changes nothing
        #expect(try database.zones() == [.default, F.zone])
        #expect(try database.zone(F.zone) == F.zone)
        #expect(try database.zone(F.otherZone) == nil)
        #expect(try container.database(.private, user: "_u2").zones() == [.default])
        #expect(try container.database(.private, environment: .production, user: "_u1").zones() == [.default])
        try database.deleteZone(F.zone)
        #expect(try database.zones() == [.default])
        #expect(containerError { try database.deleteZone(F.zone) }?.code == .zoneNotFound)
        #expect(containerError { try database.deleteZone(.default) }?.code == .badRequest)
    }

    /// A query store is built from the database's records in change order, by each record's last
    /// change and across zones, on either storage (a store that saw the saves files them so).
    @Test(arguments: ContainerFixture.Storage.allCases) func queryStoresAreBuiltInChangeOrder(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try container.database(.private, user: "_u1")
        try database.createZone(F.zone)
        try database.createZone(F.otherZone)
        _ = try database.modify([RecordOperation(kind: .create, record: F.record("b", zone: F.zone))])
        _ = try database.modify([RecordOperation(kind: .create, record: F.record("a", zone: F.otherZone)),
                                 RecordOperation(kind: .create, record: F.record("d"))])
        _ = try database.modify([RecordOperation(kind: .create, record: F.record("c", zone: F.zone))])
        _ = try database.modify([RecordOperation(kind: .forceReplace, record: F.record("b", zone: F.zone, ["v": .int64(2)]))])
        let names = try container.storage.read { tx throws(ContainerError) in
            try tx.database(database.key).map { stored throws(ContainerError) in try tx.records(in: stored).map(\.recordID.recordName) } ?? []
        }
        #expect(names == ["a", "d", "c", "b"])
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func zoneNamesAreValidated(storage: ContainerFixture.Storage) throws {
        let database = try F.container(storage).database(.private, user: "_u1")
        for name in ["", "_mine", "has space", "semi;colon", String(repeating: "z", count: 256)] {
            let error = containerError { try database.createZone(ZoneID(zoneName: name)) }
            #expect(error?.code == .badRequest)
            #expect(error?.reason.contains("invalid zone name '\(name)'") == true, "\(String(describing: error))")
        }
        try database.createZone(ZoneID(zoneName: "com.apple.coredata.cloudkit.zone"))
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func theDefaultOwnerOfAPrivateZoneIsTheUser(storage: ContainerFixture.Storage) throws {
        let database = try F.container(storage).database(.private, user: "_u1")
        let spelledDefault = ZoneID(zoneName: "Notes")
        try database.createZone(spelledDefault)
        #expect(try database.zones() == [.default, F.zone])
        let result = try database.modify([F.operation(.create, F.record("n1", zone: spelledDefault, ["up": F.reference("n1", zone: spelledDefault, .validate)]))])
        #expect(result.results[0].record?.recordID == RecordID(recordName: "n1", zoneID: F.zone))
        #expect(try database.record(RecordID(recordName: "n1", zoneID: spelledDefault)) != nil)
        #expect(try database.zoneChanges(spelledDefault, since: nil).changedRecords.count == 1)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func privateAndSharedDatabasesNeedAUser(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        #expect(containerError { _ = try container.database(.private) }?.code == .badRequest)
        #expect(containerError { _ = try container.database(.shared, user: "") }?.code == .badRequest)
        _ = try container.database(.public)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func savingIntoAMissingZoneFails(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try container.database(.private, user: "_u1")
        let result = try database.modify([F.operation(.create, F.record("n1", zone: F.zone)), F.operation(.create, F.record("d1"))])
        #expect(result.results[0].error?.code == .zoneNotFound)
        #expect(result.results[0].error?.reason == "zone 'Notes' does not exist")
        #expect(result.results[1].record != nil)
        let publicResult = try container.database(.public).modify([F.operation(.create, F.record("n1", zone: F.zone))])
        #expect(publicResult.results[0].error?.code == .zoneNotFound)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func deletingAZoneDeletesItsRecords(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try F.privateDatabase(container)
        _ = try database.modify([F.operation(.create, F.record("n1", zone: F.zone)), F.operation(.create, F.record("a1", zone: F.otherZone))])
        let query = Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"))
        #expect(try database.query(query).records.count == 2)
        let before = try database.databaseChanges(since: nil)
        try database.deleteZone(F.zone)
        #expect(try database.record(RecordID(recordName: "n1", zoneID: F.zone)) == nil)
        #expect(try database.query(query).records.map(\.recordID.recordName) == ["a1"])
        try database.saveSubscription(Subscription(subscriptionID: "db", kind: .database(recordType: nil), options: [.firesOnRecordCreation, .firesOnce]))
        let pushes = try database.deleteZone(F.otherZone)
        #expect(pushes.map(\.subscriptionID) == ["db"])
        #expect(pushes.first?.payload["ck"]?["met"]?["zid"] == .string("Archive"))
        #expect(try database.subscriptions().isEmpty)
        let changes = try database.databaseChanges(since: before.syncToken)
        #expect(changes.deletedZones == [F.zone, F.otherZone])
        #expect(changes.changedZones.isEmpty)
        try database.createZone(F.zone)
        #expect(try database.zoneChanges(F.zone, since: nil).changes.isEmpty)
    }
}

@Suite struct ContainerModifyTests {
    @Test(arguments: ContainerFixture.Storage.allCases) func createStampsAndRefusesDuplicates(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let result = try database.modify([F.operation(.create, F.record("n1", zone: F.zone, ["title": .string("Hello")]))])
        let saved = try #require(result.results[0].record)
        #expect(saved.recordChangeTag != nil)
        #expect(saved.creationDate == 1_700_000_000_000 && saved.modificationDate == 1_700_000_000_000)
        #expect(saved.creatorUserRecordName == "_u1" && saved.lastModifiedUserRecordName == "_u1")
        #expect(saved["title"] == .string("Hello"))
        let again = try database.modify([F.operation(.create, F.record("n1", zone: F.zone))])
        #expect(again.results[0].error == ContainerError(.exists, "record 'n1' already exists"))
    }

    /// A change tag is the change's sequence in base 36, as `String(_:radix:)` writes it.
    @Test(arguments: [Int64(0), 1, 9, 10, 35, 36, 1_295, 1_296, 46_655, 2_176_782_335, 2_176_782_336, 78_364_164_095, 78_364_164_096,
                      Int64.max - 1, .max, -1, -36, .min])
    func changeTagsAreTheSequenceInBase36(sequence: Int64) {
        #expect(ContainerDatabase.changeTag(sequence) == String(sequence, radix: 36))
    }

    /// Each change takes the next sequence in request order, across zones, and a saved record's
    /// tag is its change's sequence: operations alternating between two zones are staged zone by
    /// zone, then tagged again in request order.
    @Test(arguments: ContainerFixture.Storage.allCases) func changeTagsFollowRequestOrderAcrossZones(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let names = ["a", "b", "c", "d", "e"]
        let result = try database.modify(names.enumerated().map { index, name in
            F.operation(.create, F.record(name, zone: index.isMultiple(of: 2) ? F.zone : F.otherZone))
        })
        let tags = result.results.map { $0.record?.recordChangeTag ?? "" }
        let sequences = tags.compactMap { Int64($0, radix: 36) }
        #expect(sequences.count == names.count)
        #expect(sequences == Array(sequences[0]..<sequences[0] + Int64(names.count)))
        // The stored records carry the tags the results gave.
        for saved in result.results { #expect(try database.record(saved.recordID)?.recordChangeTag == saved.record?.recordChangeTag) }
        let next = try database.modify([F.operation(.forceReplace, F.record("a", zone: F.zone))]).results[0].record?.recordChangeTag
        #expect(next.flatMap { Int64($0, radix: 36) } == sequences[0] + Int64(names.count))
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func updatesCheckChangeTags(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let created = try #require(try database.modify([F.operation(.create, F.record("n", ["a": .int64(1), "b": .int64(2)]))]).results[0].record)
        let tag = created.recordChangeTag

        let stale = try database.modify([F.operation(.update, F.record("n", ["a": .int64(9)], tag: "nope"))])
        #expect(stale.results[0].error?.code == .conflict)
        #expect(containerError { throw stale.results[0].error! }?.reason.contains("'nope'") == true)
        #expect(try database.modify([F.operation(.update, F.record("n", ["a": .int64(9)]))]).results[0].error?.code == .badRequest)
        #expect(try database.modify([F.operation(.update, F.record("missing", tag: "1"))]).results[0].error?.code == .notFound)
        #expect(try database.modify([F.operation(.update, F.record("n", type: "Other", tag: tag))]).results[0].error?.code == .badRequest)

        let updated = try #require(try database.modify([F.operation(.update, F.record("n", ["a": .int64(3)], tag: tag))]).results[0].record)
        #expect(updated["a"] == .int64(3) && updated["b"] == .int64(2))
        #expect(updated.recordChangeTag != tag)
        #expect(updated.creationDate == created.creationDate)

        let replaced = try #require(try database.modify([F.operation(.replace, F.record("n", ["c": .int64(4)], tag: updated.recordChangeTag))]).results[0].record)
        #expect(replaced.fields.sortedNames == ["c"])
        #expect(try database.modify([F.operation(.replace, F.record("n", tag: updated.recordChangeTag))]).results[0].error?.code == .conflict)

        let forced = try #require(try database.modify([F.operation(.forceUpdate, F.record("n", ["d": .int64(5)], tag: "stale"))]).results[0].record)
        #expect(forced.fields.sortedNames == ["c", "d"])
        let forceReplaced = try #require(try database.modify([F.operation(.forceReplace, F.record("n", ["e": .int64(6)]))]).results[0].record)
        #expect(forceReplaced.fields.sortedNames == ["e"])
        #expect(try database.modify([F.operation(.forceUpdate, F.record("new1"))]).results[0].record != nil)
        #expect(try database.modify([F.operation(.forceReplace, F.record("new2"))]).results[0].record != nil)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func deletesCheckChangeTags(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let created = try #require(try database.modify([F.operation(.create, F.record("n")), F.operation(.create, F.record("m"))]).results[0].record)
        #expect(try database.modify([F.operation(.delete, F.record("n", tag: "stale"))]).results[0].error?.code == .conflict)
        #expect(try database.modify([F.operation(.delete, F.record("n", tag: created.recordChangeTag))]).results[0] == .deleted(RecordID(recordName: "n"), recordType: "Note"))
        #expect(try database.modify([F.operation(.delete, F.record("n", tag: created.recordChangeTag))]).results[0].error?.code == .notFound)
        #expect(try database.modify([F.operation(.forceDelete, F.record("m", tag: "whatever"))]).results[0] == .deleted(RecordID(recordName: "m"), recordType: "Note"))
        #expect(try database.modify([F.operation(.forceDelete, F.record("m"))]).results[0].error?.code == .notFound)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func lookupAndQueryReadCommittedRecords(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        _ = try database.modify([F.operation(.create, F.record("n1", zone: F.zone, ["v": .int64(1)])), F.operation(.create, F.record("n2", ["v": .int64(2)]))])
        let results = try database.lookup([RecordID(recordName: "n1", zoneID: F.zone), RecordID(recordName: "n1"), RecordID(recordName: "n2")])
        #expect(results[0].record?["v"] == .int64(1))
        #expect(results[1].error == ContainerError(.notFound, "record 'n1' does not exist"))
        #expect(results[2].record?["v"] == .int64(2))
        let query = Query(recordType: "Note", predicate: try ValidatedPredicate("v > 1"))
        #expect(try database.query(query).records.map(\.recordID.recordName) == ["n2"])
        let badQuery = Query(recordType: "Note", predicate: try ValidatedPredicate("v > 1"), zoneID: F.zone)
        #expect(try database.query(badQuery).records.isEmpty)
        #expect(try database.container.database(.private, user: "_u2").query(query).records.isEmpty)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func wholeRequestErrors(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let many = (0...200).map { F.operation(.create, F.record("r\($0)")) }
        #expect(containerError { _ = try database.modify(many) }?.code == .limitExceeded)
        #expect(try database.modify(Array(many.prefix(200))).results.allSatisfy { $0.record != nil })
        let twice = [F.operation(.forceUpdate, F.record("x")), F.operation(.forceDelete, F.record("x"))]
        #expect(containerError { _ = try database.modify(twice) }?.code == .badRequest)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func atomicZoneFailureLeavesThatZoneUntouched(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let setup = try database.modify([F.operation(.create, F.record("a2", zone: F.zone, ["v": .int64(1)])), F.operation(.create, F.record("d0"))])
        let operations = [
            F.operation(.create, F.record("a1", zone: F.zone)),
            F.operation(.create, F.record("b1", zone: F.otherZone)),
            F.operation(.update, F.record("a2", zone: F.zone, ["v": .int64(2)], tag: "stale")),
            F.operation(.create, F.record("d1")),
            F.operation(.create, F.record("d0")),
        ]
        let result = try database.modify(operations)
        #expect(result.results[0].error?.code == .atomicError)
        #expect(result.results[1].record != nil)
        #expect(result.results[2].error?.code == .conflict)
        #expect(result.results[3].record != nil)
        #expect(result.results[4].error?.code == .exists)
        #expect(try database.record(RecordID(recordName: "a1", zoneID: F.zone)) == nil)
        #expect(try database.record(RecordID(recordName: "a2", zoneID: F.zone)) == setup.results[0].record)

        let relaxed = try database.modify([F.operation(.create, F.record("a1", zone: F.zone)), F.operation(.create, F.record("a2", zone: F.zone))], atomic: false)
        #expect(relaxed.results[0].record != nil)
        #expect(relaxed.results[1].error?.code == .exists)
    }
}

@Suite struct ContainerReferenceTests {
    private func names(_ database: ContainerDatabase) throws -> [String] {
        try database.zoneChanges(F.zone, since: nil).changedRecords.map(\.recordID.recordName).sorted()
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func deleteSelfCascadesThroughChainsCyclesAndDiamonds(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let z = F.zone
        _ = try database.modify([
            F.operation(.create, F.record("a", zone: z)),
            F.operation(.create, F.record("b", zone: z, ["owner": F.reference("a", .deleteSelf)])),
            F.operation(.create, F.record("c", zone: z, ["owner": F.reference("b", .deleteSelf)])),
            F.operation(.create, F.record("x", zone: z, ["owner": F.reference("y", .deleteSelf)])),
            F.operation(.create, F.record("y", zone: z, ["owner": F.reference("x", .deleteSelf)])),
            F.operation(.create, F.record("top", zone: z)),
            F.operation(.create, F.record("left", zone: z, ["owner": F.reference("top", .deleteSelf)])),
            F.operation(.create, F.record("right", zone: z, ["owner": F.reference("top", .deleteSelf)])),
            F.operation(.create, F.record("bottom", zone: z, ["owners": .list(.reference, [F.reference("left", .deleteSelf), F.reference("right", .deleteSelf)])])),
            F.operation(.create, F.record("p", zone: z)),
            F.operation(.create, F.record("q", zone: z)),
            F.operation(.create, F.record("pq", zone: z, ["p": F.reference("p", .deleteSelf), "q": F.reference("q", .deleteSelf)])),
            F.operation(.create, F.record("loose", zone: z, ["weak": F.reference("a", .none)])),
        ])
        let token = try database.zoneChanges(F.zone, since: nil).syncToken
        let result = try database.modify([
            F.operation(.forceDelete, F.record("a", zone: z)), F.operation(.forceDelete, F.record("x", zone: z)),
            F.operation(.forceDelete, F.record("top", zone: z)), F.operation(.forceDelete, F.record("q", zone: z)),
        ])
        #expect(result.results.map(\.recordID.recordName) == ["a", "x", "top", "q"])
        #expect(try names(database) == ["loose", "p"])
        let deleted = try database.zoneChanges(F.zone, since: token).deletedRecordIDs.map(\.recordName)
        #expect(deleted.sorted() == ["a", "b", "bottom", "c", "left", "pq", "q", "right", "top", "x", "y"])
        #expect(Set(deleted).count == deleted.count)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func aRecordCascadedAwayCanBeCreatedAgainAsAnotherType(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let query = Query(recordType: "Task", predicate: try ValidatedPredicate("TRUEPREDICATE"))
        _ = try database.query(query)  // builds the query store, which the modifies then update
        _ = try database.modify([F.operation(.create, F.record("list", zone: F.zone)),
                                 F.operation(.create, F.record("item", zone: F.zone, ["list": F.reference("list", .deleteSelf)]))])
        let result = try database.modify([F.operation(.forceDelete, F.record("list", zone: F.zone)),
                                          F.operation(.create, F.record("item", type: "Task", zone: F.zone))])
        #expect(result.results[1].record?.recordType == "Task")
        #expect(try database.query(query).records.map(\.recordID.recordName) == ["item"])
        #expect(try database.query(Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"))).records.isEmpty)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func owningReferenceLimitIs750(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        _ = try database.modify([F.operation(.create, F.record("target", zone: F.zone))])
        for batch in 0..<4 {
            let operations = (0..<(batch < 3 ? 200 : 150)).map { index in
                F.operation(.create, F.record("owned\(batch)-\(index)", zone: F.zone, ["owner": F.reference("target", .deleteSelf)]))
            }
            #expect(try database.modify(operations).results.allSatisfy { $0.record != nil })
        }
        let result = try database.modify([
            F.operation(.create, F.record("one-too-many", zone: F.zone, ["owner": F.reference("target", .deleteSelf)])),
            F.operation(.create, F.record("unrelated", zone: F.otherZone)),
        ])
        let error = try #require(result.results[0].error)
        #expect(error.code == .limitExceeded)
        #expect(error.reason.hasPrefix("Limit exceeded for number of owning references to single record"))
        #expect(result.results[1].record != nil)
        let cascade = try database.modify([F.operation(.forceDelete, F.record("target", zone: F.zone))])
        #expect(cascade.results[0] == .deleted(RecordID(recordName: "target", zoneID: F.zone), recordType: "Note"))
        #expect(try names(database).isEmpty)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func validatingReferencesBothWays(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let z = F.zone
        let missing = try database.modify([F.operation(.create, F.record("child", zone: z, ["parent": F.reference("nobody", .validate)]))])
        #expect(missing.results[0].error?.code == .validatingReferenceError)
        // The target may be saved later in the same modify.
        let together = try database.modify([
            F.operation(.create, F.record("child", zone: z, ["parent": F.reference("parent", .validate)])),
            F.operation(.create, F.record("parent", zone: z)),
        ])
        #expect(together.results.allSatisfy { $0.record != nil })
        let refused = try database.modify([F.operation(.forceDelete, F.record("parent", zone: z))])
        #expect(refused.results[0].error?.code == .validatingReferenceError)
        #expect(refused.results[0].error?.reason.hasPrefix("Record delete would violate validating reference") == true)
        #expect(try database.record(RecordID(recordName: "parent", zoneID: z)) != nil)
        let both = try database.modify([F.operation(.forceDelete, F.record("parent", zone: z)), F.operation(.forceDelete, F.record("child", zone: z))])
        #expect(both.results.allSatisfy { if case .deleted = $0 { true } else { false } })
        // Default zone (not atomic): the violating delete alone fails.
        _ = try database.modify([F.operation(.create, F.record("p")), F.operation(.create, F.record("c", ["p": F.reference("p", zone: .default, .validate)]))])
        let partial = try database.modify([F.operation(.forceDelete, F.record("p")), F.operation(.create, F.record("other"))])
        #expect(partial.results[0].error?.code == .validatingReferenceError)
        #expect(partial.results[1].record != nil)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func referencesMustStayInTheirZone(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let result = try database.modify([F.operation(.create, F.record("c", zone: F.zone, ["p": F.reference("p", zone: F.otherZone, .deleteSelf)]))])
        #expect(result.results[0].error?.code == .badRequest)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func cascadedDeletesFireDeleteSubscriptions(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try F.privateDatabase(container)
        try database.saveSubscription(try .query("gone", recordType: "Comment", predicate: "TRUEPREDICATE", options: .firesOnRecordDeletion,
                                                 notificationInfo: NotificationInfo(alertBody: "gone")))
        _ = try database.modify([
            F.operation(.create, F.record("post", type: "Post", zone: F.zone)),
            F.operation(.create, F.record("comment", type: "Comment", zone: F.zone, ["post": F.reference("post", .deleteSelf)])),
        ])
        let result = try database.modify([F.operation(.forceDelete, F.record("post", type: "Post", zone: F.zone))])
        #expect(result.notifications.count == 1)
        let push = try #require(result.notifications.first)
        #expect(push.subscriptionID == "gone" && push.owner == "_u1")
        #expect(push.payload["ck"]?["qry"]?["rid"] == .string("comment"))
        #expect(push.payload["ck"]?["qry"]?["fo"] == .int(3))
        #expect(try container.pendingNotifications().map(\.id) == [push.id])
    }
}

@Suite struct ContainerSubscriptionTests {
    @Test(arguments: ContainerFixture.Storage.allCases) func subscriptionsFollowTheDatabaseRules(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let privateDatabase = try F.privateDatabase(container)
        let publicDatabase = try container.database(.public, user: "_u1")
        let sharedDatabase = try container.database(.shared, user: "_u1")
        let zoneSubscription = Subscription(subscriptionID: "zone", kind: .recordZone(zoneID: F.zone, recordType: nil))
        let databaseSubscription = Subscription(subscriptionID: "db", kind: .database(recordType: nil))
        let query = try Subscription.query("q", recordType: "Note", predicate: "title BEGINSWITH 'A'")

        #expect(containerError { try publicDatabase.saveSubscription(zoneSubscription) }?.code == .badRequest)
        #expect(containerError { try publicDatabase.saveSubscription(databaseSubscription) }?.code == .badRequest)
        #expect(containerError { try sharedDatabase.saveSubscription(query) }?.code == .badRequest)
        #expect(containerError { try privateDatabase.saveSubscription(Subscription(subscriptionID: "z", kind: .recordZone(zoneID: ZoneID(zoneName: "Nope"), recordType: nil))) }?.code == .zoneNotFound)
        // The refused save was undone in memory too: nothing fires for it.
        #expect(container.writer.withLock { $0.subscriptionSet(privateDatabase.key)?["z"] } == nil)
        try sharedDatabase.saveSubscription(databaseSubscription)
        try publicDatabase.saveSubscription(query)
        for subscription in [zoneSubscription, databaseSubscription, query] { try privateDatabase.saveSubscription(subscription) }

        let duplicate = containerError { try privateDatabase.saveSubscription(try .query("q2", recordType: "Note", predicate: "title BEGINSWITH 'A'")) }
        #expect(duplicate?.code == .badRequest)
        #expect(duplicate?.reason == "subscription is duplicate of 'q'")
        #expect(try privateDatabase.subscriptions().map(\.subscriptionID) == ["zone", "db", "q"])
        #expect(try privateDatabase.subscription("q")?.owner == "_u1")
        #expect(try container.database(.public, user: "_u2").subscriptions().isEmpty)
        #expect(containerError { try container.database(.public, user: "_u2").deleteSubscription("q") }?.code == .notFound)
        try privateDatabase.deleteSubscription("zone")
        #expect(containerError { try privateDatabase.deleteSubscription("zone") }?.code == .notFound)
        #expect(try privateDatabase.subscriptions().map(\.subscriptionID) == ["db", "q"])
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func notificationsCarryTheirContextAndFiresOnceGoes(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try F.privateDatabase(container)
        try database.saveSubscription(try .query("once", recordType: "Note", predicate: "TRUEPREDICATE", options: [.firesOnRecordCreation, .firesOnce],
                                                 notificationInfo: NotificationInfo(shouldSendContentAvailable: true)))
        try database.saveSubscription(Subscription(subscriptionID: "zone", kind: .recordZone(zoneID: F.zone, recordType: nil)))
        try database.saveSubscription(Subscription(subscriptionID: "db", kind: .database(recordType: nil)))
        let result = try database.modify([F.operation(.create, F.record("n1", zone: F.zone)), F.operation(.create, F.record("n2", zone: F.zone)),
                                          F.operation(.create, F.record("d1"))])
        // once fires for n1 only; zone and database subscriptions once for the zone; nothing for the default zone but `once`'s first.
        #expect(result.notifications.map(\.subscriptionID) == ["once", "zone", "db"])
        let ck = try #require(result.notifications.first?.payload["ck"])
        #expect(ck["cid"] == .string(F.identifier))
        #expect(ck["ce"] == .int(2))
        #expect(ck["ckuserid"] == .string("_u1"))
        #expect(ck["qry"]?["dbs"] == .int(2))
        #expect(result.notifications[0].pushType == "background" && result.notifications[0].priority == 5)
        #expect(Set(result.notifications.map { $0.payload["ck"]?["nid"] }).count == 1)
        #expect(try database.subscriptions().map(\.subscriptionID) == ["zone", "db"])
        let pending = try container.pendingNotifications(limit: 2)
        #expect(pending.map(\.id) == result.notifications.prefix(2).map(\.id))
        try container.acknowledge(pending.map(\.id))
        #expect(try container.pendingNotifications().map(\.subscriptionID) == ["db"])
    }
}

@Suite struct ContainerSyncTokenTests {
    @Test(arguments: ContainerFixture.Storage.allCases) func foreignAlteredAndGarbageTokensAreRefused(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let database = try F.privateDatabase(container)
        let other = try F.privateDatabase(container, user: "_u2")
        _ = try database.modify([F.operation(.create, F.record("n1", zone: F.zone))])
        let zoneToken = try database.zoneChanges(F.zone, since: nil).syncToken
        let databaseToken = try database.databaseChanges(since: nil).syncToken
        var altered = Array(zoneToken.text)
        altered[5] = altered[5] == "A" ? "B" : "A"
        let refused: [() throws -> Void] = [
            { _ = try database.zoneChanges(F.otherZone, since: zoneToken) },
            { _ = try other.zoneChanges(F.zone, since: zoneToken) },
            { _ = try container.database(.private, environment: .production, user: "_u1").databaseChanges(since: databaseToken) },
            { _ = try database.zoneChanges(F.zone, since: databaseToken) },
            { _ = try database.databaseChanges(since: zoneToken) },
            { _ = try database.zoneChanges(F.zone, since: SyncToken(text: String(altered))) },
            { _ = try database.zoneChanges(F.zone, since: SyncToken(text: "garbage!")) },
            { _ = try database.databaseChanges(since: SyncToken(text: "")) },
        ]
        for (index, attempt) in refused.enumerated() {
            #expect(containerError(attempt) == ContainerError(.badRequest, "invalid sync token"), "attempt \(index)")
        }
        #expect(try database.zoneChanges(F.zone, since: zoneToken).changes.isEmpty)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func tokensExpireAfterCompactionAndZoneRecreation(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        _ = try database.modify((0..<5).map { F.operation(.create, F.record("n\($0)", zone: F.zone)) })
        let early = try database.zoneChanges(F.zone, since: nil).syncToken
        let earlyDatabase = try database.databaseChanges(since: nil).syncToken
        _ = try database.modify((0..<3).map { F.operation(.forceDelete, F.record("n\($0)", zone: F.zone)) })
        let late = try database.zoneChanges(F.zone, since: nil).syncToken
        try database.compactChangeHistory(keepingLast: 1)
        let expired = ContainerError(.changeTokenExpired, "client knowledge differs from server knowledge")
        #expect(containerError { _ = try database.zoneChanges(F.zone, since: early) } == expired)
        #expect(containerError { _ = try database.databaseChanges(since: earlyDatabase) } == expired)
        #expect(try database.zoneChanges(F.zone, since: late).changes.isEmpty)
        #expect(try database.zoneChanges(F.zone, since: nil).changedRecords.map(\.recordID.recordName) == ["n3", "n4"])
        try database.deleteZone(F.zone)
        try database.createZone(F.zone)
        #expect(containerError { _ = try database.zoneChanges(F.zone, since: late) } == expired)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func batchesFollowTheLimit(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        _ = try database.modify((0..<5).map { F.operation(.create, F.record("n\($0)", zone: F.zone)) })
        var token: SyncToken?
        var seen: [String] = []
        var batches = 0
        repeat {
            let batch = try database.zoneChanges(F.zone, since: token, resultsLimit: 2)
            seen += batch.changedRecords.map(\.recordID.recordName)
            token = batch.syncToken
            batches += 1
            if !batch.moreComing { break }
        } while true
        #expect(seen == ["n0", "n1", "n2", "n3", "n4"])
        #expect(batches == 3)
        #expect(containerError { _ = try database.zoneChanges(.default, since: nil) }?.code == .badRequest)
        #expect(containerError { _ = try database.zoneChanges(ZoneID(zoneName: "Nope"), since: nil) }?.code == .zoneNotFound)
        #expect(containerError { _ = try database.container.database(.public).databaseChanges(since: nil) }?.code == .badRequest)
    }
}

@Suite struct ContainerRestartTests {
    @Test func everythingSurvivesReopening() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        let zoneToken: SyncToken
        let databaseToken: SyncToken
        do {
            let container = try F.container(path: path)
            let database = try F.privateDatabase(container)
            try database.saveSubscription(try .query("notes", recordType: "Note", predicate: "priority > 2", zoneID: F.zone,
                                                     notificationInfo: NotificationInfo(alertBody: "Urgent", desiredKeys: ["title"])))
            try database.saveSubscription(try .query("once", recordType: "Note", predicate: "TRUEPREDICATE", options: [.firesOnRecordDeletion, .firesOnce]))
            _ = try database.modify([
                F.operation(.create, F.record("n1", zone: F.zone, ["priority": .int64(5), "title": .string("A")])),
                F.operation(.create, F.record("n2", zone: F.zone, ["priority": .int64(1)])),
            ])
            zoneToken = try database.zoneChanges(F.zone, since: nil).syncToken
            databaseToken = try database.databaseChanges(since: nil).syncToken
            let deletion = try database.modify([F.operation(.forceDelete, F.record("n2", zone: F.zone))])
            #expect(deletion.notifications.map(\.subscriptionID) == ["once"])
            #expect(try container.pendingNotifications().count == 2)
        }
        let container = try F.container(path: path)
        #expect(container.writer.withLock { $0.subscribedDatabases.map(\.description) } == ["development/private/_u1"])
        let database = try container.database(.private, user: "_u1")
        #expect(try database.subscriptions().map(\.subscriptionID) == ["notes"])
        #expect(try container.pendingNotifications().map(\.subscriptionID) == ["notes", "once"])
        let changes = try database.zoneChanges(F.zone, since: zoneToken)
        #expect(changes.changes == [.deleted(RecordID(recordName: "n2", zoneID: F.zone), recordType: "Note")])
        #expect(try database.databaseChanges(since: databaseToken).changedZones == [F.zone])
        let result = try database.modify([F.operation(.create, F.record("n3", zone: F.zone, ["priority": .int64(3)]))])
        #expect(result.notifications.map(\.subscriptionID) == ["notes"])
        #expect(try database.query(Query(recordType: "Note", predicate: try ValidatedPredicate("priority >= 3"))).records.map(\.recordID.recordName) == ["n1", "n3"])
    }

    @Test func otherFilesAreRefused() throws {
        let path = F.temporaryPath()
        defer { F.remove(path) }
        _ = try KQueryStore.Database(path: path)
        let error = containerError { _ = try F.container(path: path) }
        #expect(error?.code == .internalError)
        #expect(error?.reason.hasSuffix("not a KQuery container file (it has other tables)") == true, "\(String(describing: error))")
    }

    @Test func errorCodesMapToWebServicesStatuses() {
        let statuses = Dictionary(uniqueKeysWithValues: ContainerError.Code.allCases.map { ($0.rawValue, $0.httpStatus) })
        #expect(statuses == ["BAD_REQUEST": 400, "CONFLICT": 409, "EXISTS": 409, "NOT_FOUND": 404, "ZONE_NOT_FOUND": 404, "ATOMIC_ERROR": 400,
                             "VALIDATING_REFERENCE_ERROR": 412, "LIMIT_EXCEEDED": 400, "CHANGE_TOKEN_EXPIRED": 400, "QUOTA_EXCEEDED": 413, "ACCESS_DENIED": 403, "INTERNAL_ERROR": 500])
    }
}

/// The storage boundary itself: what a write leaves when it throws, on each storage.
@Suite struct ContainerStorageTests {
    @Test(arguments: ContainerFixture.Storage.allCases) func aWriteThatThrowsLeavesNothing(storage: ContainerFixture.Storage) throws {
        let store = try storage.make()
        let key = DatabaseKey(environment: .development, scope: .private, userRecordName: "_u1")
        let push = PushPayload.database(subscriptionID: "s", zoneID: F.zone, notificationInfo: NotificationInfo(shouldSendContentAvailable: true),
                                        context: PushContext(containerIdentifier: F.identifier, environment: .development, database: .private, userRecordName: "_u1"))
        let kept = try store.write { tx throws(ContainerError) in
            let database = try tx.createDatabase(key)
            try tx.saveZone(StoredZone(zoneID: F.zone, createdSequence: 1, changedSequence: 1), in: database)
            try tx.saveRecord(F.record("kept", zone: F.zone, ["a": F.reference("target", .validate)]), sequence: 2, in: database)
            try tx.setSequence(2, of: database)
            return database
        }
        let failure = ContainerError(.internalError, "the write fails")
        let subscription = try Subscription.query("s", recordType: "Note", predicate: "TRUEPREDICATE")
        let error = containerError {
            _ = try store.write { tx throws(ContainerError) in
                guard let database = try tx.database(key) else { throw ContainerError(.internalError, "no database") }
                try tx.deleteRecord(F.record("kept", zone: F.zone), sequence: 3, in: database)
                try tx.saveRecord(F.record("new", zone: F.zone, ["a": F.reference("target", .validate)]), sequence: 4, in: database)
                try tx.saveZone(StoredZone(zoneID: F.otherZone, createdSequence: 5, changedSequence: 5), in: database)
                try tx.deleteZone(F.zone, sequence: 6, in: database)
                try tx.setSequence(6, of: database)
                _ = try tx.createDatabase(DatabaseKey(environment: .production, scope: .public, userRecordName: ""))
                try tx.saveSubscription(subscription, in: database)
                _ = try tx.enqueue([OutboxNotification(database: key, subscriptionID: "s", owner: "_u1",
                                                    payload: push, created: 0)])
                _ = try tx.compactHistory(of: database, keepingLast: 0)
                throw failure
            }
        }
        #expect(error == failure)
        try store.read { tx throws(ContainerError) in
            #expect(try tx.database(key) == kept.with(sequence: 2))
            #expect(try tx.database(DatabaseKey(environment: .production, scope: .public, userRecordName: "")) == nil)
            #expect(try tx.zones(in: kept).map(\.zoneID) == [F.zone])
            #expect(try tx.records(in: kept).map(\.recordID.recordName) == ["kept"])
            #expect(try tx.referrers(to: RecordID(recordName: "target", zoneID: F.zone), action: .validate, in: kept) == ["kept"])
            #expect(try tx.recordChanges(in: F.zone, of: kept, after: 0, includingDeletions: true, limit: 10).map(\.sequence) == [2])
            #expect(try tx.zoneChanges(of: kept, after: 0, limit: 10).map(\.sequence) == [1])
            #expect(try tx.subscriptions(in: kept).isEmpty)
            #expect(try tx.pendingNotifications(for: .all, limit: 10).isEmpty)
        }
        // The outbox numbers on from the last commit, not from the failed write.
        let queued = try store.write { tx throws(ContainerError) in
            try tx.enqueue([OutboxNotification(database: key, subscriptionID: "s", owner: "_u1",
                                            payload: push, created: 0)])
        }
        #expect(queued.map(\.id) == [1])
    }

    /// A database and zone a failed write made and reached (which the memory storage remembers
    /// as the last ones found) are gone, and the next write's own copies keep what it saves.
    @Test(arguments: ContainerFixture.Storage.allCases) func whatAFailedWriteCreatedIsGone(storage: ContainerFixture.Storage) throws {
        let store = try storage.make()
        let key = DatabaseKey(environment: .production, scope: .private, userRecordName: "_u2")
        let other = DatabaseKey(environment: .production, scope: .public, userRecordName: "")
        let failure = ContainerError(.internalError, "the write fails")
        let error = containerError {
            _ = try store.write { tx throws(ContainerError) in
                let database = try tx.createDatabase(key)
                try tx.saveRecord(F.record("lost", zone: F.zone), sequence: 1, in: database)
                #expect(try tx.database(key) == database)
                #expect(try tx.record(RecordID(recordName: "lost", zoneID: F.zone), in: database) != nil)
                throw failure
            }
        }
        #expect(error == failure)
        let created = try store.write { tx throws(ContainerError) in
            #expect(try tx.database(key) == nil)
            let database = try tx.createDatabase(key)
            #expect(try tx.record(RecordID(recordName: "lost", zoneID: F.zone), in: database) == nil)
            try tx.saveRecord(F.record("kept", zone: F.zone), sequence: 1, in: database)
            try tx.setSequence(1, of: database)
            _ = try tx.createDatabase(other)
            return database
        }
        try store.read { tx throws(ContainerError) in
            // Another database reached in between: the first is found again, whole.
            #expect(try tx.database(other) != nil)
            #expect(try tx.database(key) == created.with(sequence: 1))
            #expect(try tx.records(in: created).map(\.recordID.recordName) == ["kept"])
            #expect(try tx.recordChanges(in: F.zone, of: created, after: 0, includingDeletions: true, limit: 10).map(\.sequence) == [1])
        }
    }
}

private extension StoredDatabase {
    func with(sequence: Int64) -> StoredDatabase { StoredDatabase(id: id, sequence: sequence, horizon: horizon) }
}
