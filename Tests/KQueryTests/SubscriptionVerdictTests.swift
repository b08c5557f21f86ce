import Testing
@testable import KQuery

/// `SubscriptionSet.verdict(of:for:now:reportsRecordsLeavingResults:)`: fired, or the first rule
/// that refused (the console's explanation), and always in agreement with `naiveFirings`.
@Suite struct SubscriptionVerdictTests {
    static let gallery = ZoneID(zoneName: "Gallery", ownerName: "_owner")

    static func artwork(_ price: Int64, color: String = "red", zone: ZoneID = .default, type: String = "Artwork") -> Record {
        Record(recordType: type, recordID: RecordID(recordName: "a", zoneID: zone), fields: Fields([("price", .int64(price)), ("color", .string(color))]))
    }

    static func query(_ predicate: String, options: SubscriptionOptions = .default, zone: ZoneID? = nil) throws -> Subscription {
        try .query("s", recordType: "Artwork", predicate: predicate, options: options, zoneID: zone)
    }

    static let cases: [(String, @Sendable () throws -> Subscription, RecordChange, SubscriptionVerdict)] = [
        ("fires", { try query("price < 100") }, .created(artwork(50)), .fired(.recordCreated)),
        ("first false clause", { try query("price < 100 AND color == 'blue' AND price > 60") }, .created(artwork(50)), .clauseFalse(#"color == "blue""#)),
        ("a predicate of one clause", { try query("price > 100") }, .created(artwork(50)), .clauseFalse("price > 100")),
        ("another type", { try query("price < 100") }, .created(artwork(50, type: "Artist")), .wrongRecordType(expected: "Artwork")),
        ("another zone", { try query("price < 100", zone: gallery) }, .created(artwork(50)), .wrongZone(expected: gallery)),
        ("not on creation", { try query("price < 100", options: .firesOnRecordUpdate) }, .created(artwork(50)), .notFiringOn(.recordCreated)),
        ("update matching after", { try query("price < 100") }, .updated(before: artwork(500), after: artwork(50)), .fired(.recordUpdated)),
        ("update no longer matching", { try query("price < 100") }, .updated(before: artwork(50), after: artwork(500)), .clauseFalse("price < 100")),
        ("deletion of a match", { try query("price < 100") }, .deleted(artwork(50)), .fired(.recordDeleted)),
        ("zone subscription, other zone", { Subscription(subscriptionID: "s", kind: .recordZone(zoneID: gallery, recordType: nil)) },
         .created(artwork(50)), .wrongZone(expected: gallery)),
        ("zone subscription, other type", { Subscription(subscriptionID: "s", kind: .recordZone(zoneID: gallery, recordType: "Artist")) },
         .created(artwork(50, zone: gallery)), .wrongRecordType(expected: "Artist")),
        ("database subscription, default zone", { Subscription(subscriptionID: "s", kind: .database(recordType: nil)) },
         .created(artwork(50)), .defaultZone),
        ("database subscription, custom zone", { Subscription(subscriptionID: "s", kind: .database(recordType: nil)) },
         .created(artwork(50, zone: gallery)), .fired(.recordCreated)),
    ]

    @Test(arguments: cases.indices)
    func verdict(_ index: Int) throws {
        let (name, make, change, expected) = Self.cases[index]
        let subscription = try make()
        let verdict = SubscriptionSet.verdict(of: subscription, for: change, now: 0, reportsRecordsLeavingResults: false)
        #expect(verdict == expected, "\(name)")
        // Fired exactly when the reference matcher fires it.
        var set = SubscriptionSet(database: .private)
        try set.save(subscription)
        let fired = !set.naiveFirings(for: change, now: 0).isEmpty
        #expect(fired == (expected == .fired(.recordCreated) || expected == .fired(.recordUpdated) || expected == .fired(.recordDeleted)), "\(name)")
    }
}
