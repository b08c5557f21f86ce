import PropertyBased
import Testing
@testable import KQuery

@Suite("Subscriptions")
struct SubscriptionTests {
    static let zone = ZoneID(zoneName: "Gallery", ownerName: "_owner")

    static func artwork(_ name: String, _ fields: [String: FieldValue], zone: ZoneID = .default, type: String = "Artwork") -> Record {
        Record(recordType: type, recordID: RecordID(recordName: name, zoneID: zone), fields: Fields(fields.map { ($0, $1) }))
    }

    func ids(_ firings: some Collection<SubscriptionFiring>) -> [String] { firings.map(\.subscription.subscriptionID) }

    @Test func firingRulesForCreateUpdateDelete() throws {
        var set = SubscriptionSet(database: .public)
        try set.save(.query("cheap", recordType: "Artwork", predicate: "price < 100"))
        try set.save(.query("creates", recordType: "Artwork", predicate: "price < 100", options: .firesOnRecordCreation))
        try set.save(.query("deletes", recordType: "Artwork", predicate: "price < 100", options: .firesOnRecordDeletion))
        let cheap = Self.artwork("a", ["price": .int64(50)])
        let dear = Self.artwork("a", ["price": .int64(500)])
        #expect(ids(set.firings(for: .created(cheap), now: 0)) == ["cheap", "creates"])
        #expect(set.firings(for: .created(cheap), now: 0).map(\.reason) == [.recordCreated, .recordCreated])
        #expect(ids(set.firings(for: .created(dear), now: 0)) == [])
        // Update fires when the record matches after the change.
        #expect(ids(set.firings(for: .updated(before: dear, after: cheap), now: 0)) == ["cheap"])
        #expect(ids(set.firings(for: .updated(before: cheap, after: dear), now: 0)) == [])
        // Delete fires when the record matched before.
        #expect(ids(set.firings(for: .deleted(cheap), now: 0)) == ["cheap", "deletes"])
        #expect(set.firings(for: .deleted(cheap), now: 0).first?.reason == .recordDeleted)
        #expect(ids(set.firings(for: .deleted(dear), now: 0)) == [])
        // Another record type never fires.
        #expect(ids(set.firings(for: .created(Self.artwork("b", ["price": .int64(1)], type: "Artist")), now: 0)) == [])
    }

    @Test func leavingTheResultsIsAnOptIn() throws {
        var set = SubscriptionSet(database: .public, reportsRecordsLeavingResults: true)
        try set.save(.query("cheap", recordType: "Artwork", predicate: "price < 100"))
        let leaving = RecordChange.updated(before: Self.artwork("a", ["price": .int64(50)]), after: Self.artwork("a", ["price": .int64(500)]))
        #expect(ids(set.firings(for: leaving, now: 0)) == ["cheap"])
        set.reportsRecordsLeavingResults = false
        #expect(ids(set.firings(for: leaving, now: 0)) == [])
    }

    @Test func firesOnceRemovesTheSubscriptionAfterItsFirstPush() throws {
        var set = SubscriptionSet(database: .public)
        try set.save(.query("once", recordType: "Artwork", predicate: "price < 100", options: [.firesOnRecordCreation, .firesOnce]))
        #expect(ids(set.apply(.created(Self.artwork("a", ["price": .int64(1)])), now: 0)) == ["once"])
        #expect(set["once"] == nil)
        #expect(ids(set.apply(.created(Self.artwork("b", ["price": .int64(1)])), now: 0)) == [])
    }

    @Test func savingRules() throws {
        var set = SubscriptionSet(database: .public)
        try set.save(.query("a", recordType: "Artwork", predicate: "price < 100"))
        #expect(throws: SubscriptionError("subscription is duplicate of 'a'")) {
            try set.save(.query("b", recordType: "Artwork", predicate: "100 > price"))
        }
        // Different options are not a duplicate; the same ID replaces.
        try set.save(.query("c", recordType: "Artwork", predicate: "price < 100", options: .firesOnRecordCreation))
        try set.save(.query("a", recordType: "Artwork", predicate: "price < 5"))
        #expect(set.count == 2)
        #expect(throws: SubscriptionError.self) {
            try set.save(.query("d", recordType: "Artwork", predicate: "price < 1", options: .firesOnce))
        }
        #expect(throws: InvalidPredicateError.self) { try Subscription.query("e", recordType: "Artwork", predicate: "a == 1 OR b == 2") }
        // Which database allows which kind (SPEC §4).
        let zoneSubscription = Subscription(subscriptionID: "z", kind: .recordZone(zoneID: Self.zone, recordType: nil))
        let databaseSubscription = Subscription(subscriptionID: "d", kind: .database(recordType: nil))
        #expect(throws: SubscriptionError.self) { try set.save(zoneSubscription) }
        #expect(throws: SubscriptionError.self) { try set.save(databaseSubscription) }
        var shared = SubscriptionSet(database: .shared)
        try shared.save(databaseSubscription)
        #expect(throws: SubscriptionError.self) { try shared.save(.query("q", recordType: "Artwork", predicate: "price < 1")) }
        var privateSet = SubscriptionSet(database: .private)
        try privateSet.save(zoneSubscription)
        try privateSet.save(databaseSubscription)
        try privateSet.save(.query("q", recordType: "Artwork", predicate: "price < 1"))
        #expect(privateSet.count == 3)
        let removed = privateSet.remove(id: "q")
        let removedAgain = privateSet.remove(id: "q")
        #expect(removed && !removedAgain)
        #expect(privateSet.count == 2)
    }

    @Test func zoneAndDatabaseScoping() throws {
        var set = SubscriptionSet(database: .private)
        try set.save(Subscription(subscriptionID: "zone", kind: .recordZone(zoneID: Self.zone, recordType: nil)))
        try set.save(Subscription(subscriptionID: "zone-artists", kind: .recordZone(zoneID: Self.zone, recordType: "Artist")))
        try set.save(Subscription(subscriptionID: "database", kind: .database(recordType: nil)))
        try set.save(.query("zoned-query", recordType: "Artwork", predicate: "TRUEPREDICATE", zoneID: Self.zone))
        let inZone = Self.artwork("a", [:], zone: Self.zone)
        let inDefault = Self.artwork("a", [:])
        let otherZone = Self.artwork("a", [:], zone: ZoneID(zoneName: "Other", ownerName: "_owner"))
        #expect(ids(set.firings(for: .created(inZone), now: 0)) == ["zone", "database", "zoned-query"])
        #expect(ids(set.firings(for: .deleted(inDefault), now: 0)) == [])
        #expect(ids(set.firings(for: .updated(before: otherZone, after: otherZone), now: 0)) == ["database"])
        #expect(ids(set.firings(for: .created(Self.artwork("b", [:], zone: Self.zone, type: "Artist")), now: 0)) == ["zone", "zone-artists", "database"])
    }

    @Test func identicalPredicatesFanOut() throws {
        var set = SubscriptionSet(database: .public)
        for user in 0..<50 {
            try set.save(.query(
                "user-\(user)", recordType: "Artwork", predicate: "artist == reference('mei')",
                options: user.isMultiple(of: 2) ? .default : .firesOnRecordCreation, owner: "_user\(user)"))
        }
        // The same subscription twice for one user is a duplicate.
        #expect(throws: SubscriptionError("subscription is duplicate of 'user-0'")) {
            try set.save(.query("again", recordType: "Artwork", predicate: "artist == reference('mei')", owner: "_user0"))
        }
        let record = Self.artwork("a", ["artist": .reference(Reference(recordID: RecordID(recordName: "mei")))])
        let firings = set.firings(for: .created(record), now: 0)
        #expect(firings.count == 50)
        #expect(firings[3].payload(context: PushContext(containerIdentifier: "c")).json["ck"]?["ckuserid"] == .string("_user3"))
        #expect(set.firings(for: .updated(before: record, after: record), now: 0).count == 25)
    }

    /// A batch holds each distinct notification info once (past eight, found through a table);
    /// every firing still carries its own subscription's, also after its record is replaced.
    @Test func firingsKeepTheirNotificationInfos() throws {
        var set = SubscriptionSet(database: .public)
        for number in 0..<30 {
            try set.save(.query("s\(number)", recordType: "Artwork", predicate: "price < \(100 + number)",
                                notificationInfo: NotificationInfo(alertBody: "info \(number % 12)"), owner: "_user\(number)"))
        }
        let record = Self.artwork("a", ["price": .int64(5)])
        let firings = set.firings(for: .created(record), now: 0)
        #expect(firings.map(\.subscription.notificationInfo.alertBody) == (0..<30).map { "info \($0 % 12)" })
        #expect(firings.map(\.subscription) == set.naiveFirings(for: .created(record), now: 0).map(\.subscription))
        var replaced = firings[17]
        replaced.record = Self.artwork("b", ["price": .int64(6)])
        #expect(replaced.subscription.notificationInfo.alertBody == "info 5" && replaced.record.recordID.recordName == "b")
        #expect(replaced.subscription == firings[17].subscription && firings[17].record.recordID.recordName == "a")
        #expect(firings[18].subscription.notificationInfo.alertBody == "info 6" && firings[18].record.recordID.recordName == "a")
    }

    /// Firings are put in save order by ranking sequences below 2^31 (up to 64 of them) and by a
    /// comparison sort otherwise: both give the sequences' sorted order with each sequence once
    /// (one subscription found twice fires once), at the edges of the range too.
    @Test(arguments: [0, 1, 2, 3, 17, 45, 63, 64, 65, 200])
    func savingOrder(count: Int) {
        var rng = SplitMix(seed: UInt64(count))
        let largest = UInt32(Int32.max)
        var sequences: [UInt32] = count >= 2 ? [0, largest] : []
        while sequences.count < count {
            // Sequences near each other, far apart, and repeated.
            switch rng.next() % 3 {
            case 0: sequences.append(UInt32(rng.next() % UInt64(largest)))
            case 1: sequences.append(UInt32(rng.next() % 100))
            default: sequences.append(sequences.isEmpty ? 7 : sequences[Int(rng.next() % UInt64(sequences.count))])
            }
        }
        // A source stands for its subscription, so equal sequences have equal sources.
        func source(_ sequence: UInt32) -> UInt32 { sequence ^ 0x5555_5555 }
        let sources = sequences.map(source)
        let expected = Set(sequences).sorted().map(source)
        var ordered = [UInt32](repeating: 0, count: count + 1)
        let sorted = ordered.withUnsafeMutableBufferPointer { ordered in
            SaveOrder.sort(sources, count: count, into: ordered.baseAddress!) { UInt64($0 ^ 0x5555_5555) }
        }
        #expect(Array(ordered.prefix(sorted)) == expected)
        guard count <= SaveOrder.rankLimit else { return }
        ordered = [UInt32](repeating: 0, count: count + 1)
        let ranked = ordered.withUnsafeMutableBufferPointer { ordered in
            SaveOrder.rank(sources, by: sequences, count: count, into: ordered.baseAddress!)
        }
        #expect(Array(ordered.prefix(ranked)) == expected)
    }

    /// Past 4 MiB an array grows into storage advised to use huge pages: every element, plain or
    /// holding a reference, comes through each such growth unchanged.
    @Test func growingIntoHugePagesKeepsEveryElement() {
        var numbers: [UInt64] = []
        var names: [String] = []
        let count = 700_000  // 5.6 MB of numbers and 11.2 MB of strings: both cross the threshold
        for number in 0..<count {
            numbers.appendAdvisingHugePages(UInt64(number) &* 0x9E37_79B9_7F4A_7C15)
            names.appendAdvisingHugePages(number.isMultiple(of: 1000) ? "a name long enough to be stored apart \(number)" : "n\(number)")
        }
        #expect(numbers.count * MemoryLayout<UInt64>.stride > hugePageThreshold)
        #expect(numbers == (0..<count).map { UInt64($0) &* 0x9E37_79B9_7F4A_7C15 })
        #expect(names.enumerated().allSatisfy { $1 == ($0.isMultiple(of: 1000) ? "a name long enough to be stored apart \($0)" : "n\($0)") })
    }

    /// A slot is 48 bytes (a slot read at random then spans one cache line half the time), and
    /// its kind is read from its entry field: every kind survives saving, replacing and removing.
    @Test func slotsAreSmall() throws {
        #expect(MemoryLayout<SubscriptionSet.Slot>.stride == 48)
        var set = SubscriptionSet(database: .private)
        try set.save(.query("q", recordType: "Artwork", predicate: "price < 10"))
        try set.save(Subscription(subscriptionID: "z", kind: .recordZone(zoneID: ZoneID(zoneName: "Z", ownerName: "_o"), recordType: nil)))
        try set.save(Subscription(subscriptionID: "d", kind: .database(recordType: nil)))
        #expect(set["q"]?.kind == .query(recordType: "Artwork", condition: try ValidatedPredicate("price < 10").condition, zoneID: nil))
        #expect(set["z"]?.kind == .recordZone(zoneID: ZoneID(zoneName: "Z", ownerName: "_o"), recordType: nil))
        #expect(set["d"]?.kind == .database(recordType: nil))
        set.remove(id: "z")
        try set.save(.query("z", recordType: "Artwork", predicate: "price > 10"))
        #expect(set._checkInvariants() == [] && set.count == 3 && set["z"]?.subscriptionID == "z")
    }

    /// A batch's shared values are kept once each, in order of first use, and found again by
    /// key: after the last one, among a few by a linear search, and past eight through a table.
    @Test func sharedValuesAreKeptOnceInFirstUseOrder() {
        var builder = SharedValuesBuilder<String>()
        #expect(builder.values == nil)
        let keys: [UInt64] = [7, 7, 3, 7, 3, 3, 1 << 63] + (10..<30).map { $0 * 1000 } + [7, 25_000, 3, 1 << 63]
        var positions: [UInt64: UInt32] = [:]
        for key in keys {
            let position = builder.position(of: key) ?? builder.add(key, "value \(key)")
            // A key keeps its first position; a new key takes the next one.
            #expect(position == positions[key, default: UInt32(positions.count)])
            positions[key] = position
        }
        let values = builder.values
        for (key, position) in positions { #expect(values?[position] == "value \(key)") }
        #expect(positions.count == 23 && positions[7] == 0 && positions[3] == 1 && positions[1 << 63] == 2)
    }

    /// The firings of a change are one value: empty when nothing fires, equal when the same
    /// subscriptions fire for the same record, and each firing reads its own subscription.
    @Test func firingsAreACollection() throws {
        var set = SubscriptionSet(database: .public)
        try set.save(.query("cheap", recordType: "Artwork", predicate: "price < 10"))
        try set.save(.query("any", recordType: "Artwork", predicate: "price > 0"))
        let cheap = Self.artwork("a", ["price": .int64(5)])
        let none = set.firings(for: .created(Self.artwork("b", ["price": .int64(10)], type: "Artist")), now: 0)
        #expect(none.isEmpty && none.count == 0 && none.startIndex == none.endIndex)
        let firings = set.firings(for: .deleted(cheap), now: 0)
        #expect(firings.count == 2 && firings.reason == .recordDeleted)
        #expect(firings == set.firings(for: .deleted(cheap), now: 0))
        #expect(firings.hashValue == set.firings(for: .deleted(cheap), now: 0).hashValue)
        #expect(firings != set.firings(for: .created(cheap), now: 0))
        #expect(Array(firings) == set.naiveFirings(for: .deleted(cheap), now: 0))
        #expect(firings.reversed().map(\.subscription.subscriptionID) == ["any", "cheap"])
    }

    /// Stabbing finds exactly the intervals that contain a point, whatever their widths. With an
    /// exact point, an interval that decides its entry settles it: as a sole match naming the
    /// entry's one subscriber (on a user field), or as a decided candidate (on a system field).
    @Test(arguments: [true, false])
    func intervalIndexStabbing(onUserField: Bool) {
        var rng = SplitMix(seed: 7)
        var index = IntervalIndex()
        var intervals: [UInt32: (Double, Double)] = [:]
        for id in UInt32(0)..<2000 {
            let low = Double.random(in: -1000...1000, using: &rng).rounded()
            let width: Double = [0, 1, 3, 40, 700].randomElement(using: &rng) ?? 1
            intervals[id] = (low, low + width)
            // Every other interval decides its entry, with the entry's number + 5000 as its one subscriber.
            index.insert(low, low + width, id, decides: id.isMultiple(of: 2), sole: id + 5000)
        }
        for id in stride(from: UInt32(0), to: 2000, by: 3) {
            if let (low, high) = intervals.removeValue(forKey: id) { index.remove(low, high, id) }
        }
        let key = FieldKey("price")
        // Windows of the widest class hold over a hundred intervals: several scan blocks.
        for probe in 0..<300 {
            let x = probe.isMultiple(of: 5) ? Double(Int.random(in: -1100...1100, using: &rng)) : Double.random(in: -1100...1100, using: &rng)
            let exact = probe.isMultiple(of: 2)
            var found = QuerySubscriptionIndex.Found(type: 3)
            index.stab(x, slack: 0, exact: exact, key: onUserField ? key : nil, into: &found)
            let decided = found.candidates.filter { $0 & QuerySubscriptionIndex.Found.decided != 0 }.map { $0 & ~QuerySubscriptionIndex.Found.decided }
            let undecided = found.candidates.filter { $0 & QuerySubscriptionIndex.Found.decided == 0 }
            #expect(undecided.allSatisfy { !exact || !$0.isMultiple(of: 2) })
            #expect(decided.allSatisfy { exact && $0.isMultiple(of: 2) } && (onUserField ? decided.isEmpty : found.soleMatches.isEmpty))
            for match in found.soleMatches {
                let entry = match.slot &- 5000
                #expect(exact && entry.isMultiple(of: 2) && match.type == 3 && match.key == key)
                #expect(intervals[entry].map { $0 == (match.low, match.high) } == true)
            }
            let all = undecided + decided + found.soleMatches.map { $0.slot &- 5000 }
            #expect(all.count == Set(all).count)
            #expect(Set(all) == Set(intervals.filter { $0.value.0 <= x && x <= $0.value.1 }.keys))
        }
    }

    @Test func anchorsPreferTheMostSelectiveConjunct() throws {
        func anchor(_ text: String) throws -> QuerySubscriptionIndex.Anchor {
            QuerySubscriptionIndex.anchor(of: try ValidatedPredicate(text).condition)
        }
        #expect(try anchor("price > 5 AND artist == 'mei'") == .equality(.user(FieldKey("artist")), [.string("mei")]))
        #expect(try anchor("tags CONTAINS 'sea'") == .equality(.user(FieldKey("tags")), [.string("sea")]))
        #expect(try anchor("price > 5 AND ALL tokenize('harbour at dusk', 'Cdl') IN allTokens") == .tokens(["harbour"], requiring: "dusk"))
        #expect(try anchor("price BETWEEN {5, 10}") == .interval(.user(FieldKey("price")), .number, 5, 10))
        #expect(try anchor("price < 5") == .upperBound(.user(FieldKey("price")), .number, 5))
        #expect(try anchor("price != 5") == .none)
        if case .cells(_, let cells) = try anchor("distanceToLocation:fromLocation:(location, location(48.85, 2.35)) < 2") {
            #expect(!cells.isEmpty && cells.count < 20)
        } else {
            Issue.record("distance not anchored on cells")
        }
        #expect(try anchor("distanceToLocation:fromLocation:(location, location(0, 0)) < 20000") == .none)
    }

    /// With `reportsRecordsLeavingResults`, an update evaluates a candidate on the old record only
    /// if the predicate reads a field the update changed, and probes the index with the old record
    /// only if a probed field changed; the firings are those of the naive loop either way.
    @Test func updatesReuseVerdictsOnUntouchedFields() throws {
        var set = SubscriptionSet(database: .public, reportsRecordsLeavingResults: true)
        try set.save(.query("cheap", recordType: "Artwork", predicate: "price < 100"))
        try set.save(.query("mei", recordType: "Artwork", predicate: "artist == 'mei' AND price < 100"))
        // Three tokens: more than its postings check, so it is evaluated (see the next test).
        try set.save(.query("sunset", recordType: "Artwork", predicate: "ALL tokenize('sunset over harbour', 'Cdl') IN allTokens"))
        try set.save(.query("near", recordType: "Artwork", predicate: "distanceToLocation:fromLocation:(location, location(48.85, 2.35)) < 5"))
        try set.save(.query("ranked", recordType: "Artwork", predicate: "rank BETWEEN {1, 10}"))
        let base: [String: FieldValue] = [
            "price": .int64(500), "artist": .string("mei"), "title": .string("sunset over the harbour"),
            "location": .location(Location(latitude: 48.86, longitude: 2.35)), "rank": .int64(50), "likes": .int64(1),
        ]
        func update(_ changes: [String: FieldValue]) -> RecordChange {
            .updated(before: Self.artwork("a", base), after: Self.artwork("a", base.merging(changes) { $1 }))
        }
        func check(_ change: RecordChange, _ expected: [String]) -> SubscriptionSet.MatchStatistics {
            var statistics = SubscriptionSet.MatchStatistics()
            let indexed = ids(set.firings(for: change, now: 0, statistics: &statistics))
            #expect(indexed == expected)
            #expect(indexed == ids(set.naiveFirings(for: change, now: 0)))
            return statistics
        }
        // Only `likes` changed: no predicate reads it, no probe reads it.
        let untouched = check(update(["likes": .int64(2)]), ["sunset", "near"])
        #expect(untouched.probes == 1)
        #expect(untouched.oldEvaluations == 0)
        #expect(untouched.reusedVerdicts == 1)
        // The price left the results of "cheap" and "mei" (leaving fires them): both read it and
        // are evaluated on the old record; the token and distance searches match the new one.
        let cheaper = check(.updated(before: Self.artwork("a", base.merging(["price": .int64(50)]) { $1 }), after: Self.artwork("a", base)),
                            ["cheap", "mei", "sunset", "near"])
        #expect(cheaper.oldEvaluations == 2)
        // A changed artist is probed: the old record finds "mei" under its old value.
        let renamed = check(.updated(before: Self.artwork("a", base.merging(["price": .int64(50)]) { $1 }),
                                     after: Self.artwork("a", base.merging(["artist": .string("ann")]) { $1 })),
                            ["cheap", "mei", "sunset", "near"])
        #expect(renamed.probes == 2)
        // A string field changed: the token search is evaluated on the old record (it left the
        // results), the verdict of "mei" is reused.
        let retitled = check(update(["title": .string("night")]), ["sunset", "near"])
        #expect(retitled.oldEvaluations == 1)
        #expect(retitled.reusedVerdicts == 1)
        #expect(retitled.probes == 2)
        // Without the extension, the old record is never looked at.
        set.reportsRecordsLeavingResults = false
        let plain = check(update(["title": .string("night")]), ["near"])
        #expect(plain.oldEvaluations == 0 && plain.reusedVerdicts == 0 && plain.probes == 1)
    }

    /// A lone INT64 BETWEEN is settled by its interval, without evaluation. The firings are the
    /// naive loop's at the bounds, just inside and outside them, for doubles, NaN, infinities,
    /// integers beyond 2^53, lists, other types and a missing field.
    @Test func betweenVerdictsFromIntervals() throws {
        let bounds: [(Int64, Int64)] = [
            (5, 10), (10, 10), (-3, 4), (11, 5), (0, 0), (1, 1 << 40), (-9_007_199_254_740_992, 9_007_199_254_740_992),
            (9_007_199_254_740_992, 9_007_199_254_740_994), (9_007_199_254_740_993, 9_007_199_254_740_993),
            (-9_223_372_036_854_775_807, .max), (.max - 1, .max),
        ]
        var set = SubscriptionSet(database: .public)
        for (number, (low, high)) in bounds.enumerated() {
            try set.save(.query("b\(number)", recordType: "Artwork", predicate: "price BETWEEN {\(low), \(high)}"))
        }
        // Evaluated: these two (not a lone INT64 BETWEEN), {11, 5} (filed as "price >= 11") and the
        // two with bounds beyond 2^53 (which doubles round).
        try set.save(.query("double", recordType: "Artwork", predicate: "price BETWEEN {4.5, 10}"))
        try set.save(.query("and", recordType: "Artwork", predicate: "price BETWEEN {5, 10} AND year > 1990"))
        var values: [FieldValue?] = [
            nil, .string("7"), .timestamp(7), .double(.nan), .double(.infinity), .double(-.infinity), .double(-0.0),
            .list(.int64, [.int64(5)]), .list(.int64, [.int64(2), .int64(7)]), .list(.double, [.double(7.5)]),
        ]
        for (low, high) in bounds {
            for x in [low, high] {
                values += [.int64(x), .int64(x &- 1), .int64(x &+ 1), .double(Double(x)), .double(Double(x) - 0.5), .double(Double(x) + 0.5)]
            }
        }
        for value in values {
            var fields: [String: FieldValue] = ["year": .int64(2000)]
            fields["price"] = value
            let record = Self.artwork("a", fields)
            let exact = switch value {
            case .int64(let x)?: x.magnitude <= 1 << 53
            case .double(let x)?: x.isFinite
            default: false
            }
            for change in [RecordChange.created(record), .deleted(record), .updated(before: Self.artwork("a", [:]), after: record)] {
                var statistics = SubscriptionSet.MatchStatistics()
                let indexed = ids(set.firings(for: change, now: 0, statistics: &statistics))
                #expect(indexed == ids(set.naiveFirings(for: change, now: 0)), "price \(value.map { "\($0)" } ?? "missing")")
                if exact { #expect(statistics.evaluations <= 5, "price \(value.map { "\($0)" } ?? "missing")") }
            }
        }
    }

    /// A token search whose postings check all its tokens (ANY, or ALL of at most two) fires
    /// without being evaluated; one on more tokens, or with another conjunct, is evaluated. Either
    /// way the firings are the naive loop's.
    @Test func tokenPostingsDecideWholeTokenSearches() throws {
        var set = SubscriptionSet(database: .public)
        try set.save(.query("two", recordType: "Artwork", predicate: "ALL tokenize('Sunset harbour', 'Cdl') IN allTokens"))
        try set.save(.query("one", recordType: "Artwork", predicate: "ALL tokenize('harbour harbour', 'Cdl') IN allTokens"))
        try set.save(.query("any", recordType: "Artwork", predicate: "ANY tokenize('dusk harbour', 'Cdl') IN allTokens"))
        try set.save(.query("three", recordType: "Artwork", predicate: "ALL tokenize('sunset harbour dusk', 'Cdl') IN allTokens"))
        try set.save(.query("priced", recordType: "Artwork", predicate: "price > 5 AND ALL tokenize('sunset harbour', 'Cdl') IN allTokens"))
        func check(_ fields: [String: FieldValue], fires expected: [String], evaluations: Int) {
            let change = RecordChange.created(Self.artwork("a", fields))
            var statistics = SubscriptionSet.MatchStatistics()
            let fired = ids(set.firings(for: change, now: 0, statistics: &statistics))
            #expect(fired == expected, "\(fields)")
            #expect(fired == ids(set.naiveFirings(for: change, now: 0)), "\(fields)")
            #expect(statistics.evaluations == evaluations, "\(fields)")
        }
        check(["title": .string("SUNSET over the Harbour"), "price": .int64(10)], fires: ["two", "one", "any", "priced"], evaluations: 2)
        check(["title": .string("harbour"), "price": .int64(1)], fires: ["one", "any"], evaluations: 0)
        check(["title": .string("sunsets"), "tags": .list(.string, [.string("dusk")])], fires: ["any"], evaluations: 0)
        check(["title": .string("sunset, harbour at dusk")], fires: ["two", "one", "any", "three"], evaluations: 2)
    }

    /// A lone INT64 BETWEEN with one subscriber fires from its interval alone (the entry unread):
    /// the firings, whole subscriptions included, are the naive loop's as subscribers of a shared
    /// predicate come and go, at the bounds and beside them, with zones, options and an update.
    @Test func soleSubscribersFireFromIntervals() throws {
        var set = SubscriptionSet(database: .private, reportsRecordsLeavingResults: true)
        let zone = ZoneID(zoneName: "Z", ownerName: "_o")
        let bounds: [(Int64, Int64)] = [(5, 10), (10, 10), (-3, 4), (0, 1 << 53), (-(1 << 53), 0), (7, 7)]
        for (number, (low, high)) in bounds.enumerated() {
            try set.save(.query("b\(number)", recordType: "Artwork", predicate: "price BETWEEN {\(low), \(high)}",
                                options: number % 2 == 0 ? .default : .firesOnRecordCreation, zoneID: number == 2 ? zone : nil))
        }
        try set.save(.query("other type", recordType: "Print", predicate: "price BETWEEN {5, 10}"))
        func check(_ step: String) {
            #expect(set._checkInvariants().isEmpty, "\(step): \(set._checkInvariants())")
            for x: Int64 in [-(1 << 53) - 1, -(1 << 53), -4, -3, 0, 4, 5, 6, 7, 9, 10, 11, 1 << 53, (1 << 53) + 1] {
                for zoneID in [ZoneID.default, zone] {
                    for type in ["Artwork", "Print"] {
                        var record = Record(recordType: type, recordName: "r", fields: ["price": .int64(x)])
                        record.recordID.zoneID = zoneID
                        var old = Record(recordType: type, recordName: "r", fields: ["price": .int64(x + 3)])
                        old.recordID.zoneID = zoneID
                        for change in [RecordChange.created(record), .deleted(record), .updated(before: old, after: record)] {
                            let indexed = set.firings(for: change, now: 0).map(\.subscription)
                            let naive = set.naiveFirings(for: change, now: 0).map(\.subscription)
                            #expect(indexed == naive, "\(step): price \(x) in \(zoneID.zoneName) \(type)")
                        }
                    }
                }
            }
        }
        check("one subscriber each")
        var statistics = SubscriptionSet.MatchStatistics()
        _ = set.firings(for: .created(Record(recordType: "Artwork", recordName: "r", fields: ["price": .int64(7)])), now: 0, statistics: &statistics)
        #expect(statistics.soleMatches == 3 && statistics.evaluations == 0)
        // A second subscriber (another owner) shares the entry: no longer sole.
        var shared = try Subscription.query("shared", recordType: "Artwork", predicate: "price BETWEEN {5, 10}")
        shared.owner = "_other"
        try set.save(shared)
        check("shared")
        // The first subscriber goes: the one left is sole again.
        set.remove(id: "b0")
        check("first removed")
        try set.save(.query("b0", recordType: "Artwork", predicate: "price BETWEEN {5, 10}", options: .firesOnRecordDeletion))
        check("first back")
        set.remove(id: "shared")
        set.remove(id: "b0")
        check("all of one entry removed")
        // Saving again under the same ID replaces the subscription (a new slot).
        try set.save(.query("b1", recordType: "Artwork", predicate: "price BETWEEN {10, 10}", options: .default))
        check("replaced")
    }

    /// Probing finds a record's tokens whatever their case, ASCII (looked up by their bytes) or
    /// not (folded first), in strings and string lists, and only whole tokens.
    @Test func tokenProbesFoldTheRecordsText() {
        var table = TokenTable()
        let dusk = table.retain("dusk")
        table.add(TokenTable.Posting(entry: 1, requires: dusk), under: "sunset")
        table.add(TokenTable.Posting(entry: 2, requires: .max), under: "elegant")
        table.add(TokenTable.Posting(entry: 3, requires: .max), under: "harbour")
        func probe(_ fields: [String: FieldValue]) -> [UInt32] {
            var found: [UInt32] = []
            table.probe(Record(recordType: "Artwork", recordName: "a", fields: fields), into: &found)
            #expect(found.allSatisfy { $0 & QuerySubscriptionIndex.Found.decided == 0 })
            return found.sorted()
        }
        #expect(probe(["title": .string("SUNSET at Dusk")]) == [1])
        #expect(probe(["title": .string("Sunset"), "tags": .list(.string, [.string("x"), .string("DUSK")])]) == [1])
        #expect(probe(["title": .string("Sunsets at dusk, harbours")]) == [])
        #expect(probe(["title": .string("ÉLÉGANT HarBour")]) == [2, 3])
        #expect(probe(["title": .string("dusk"), "price": .int64(5)]) == [])
    }

    /// Token numbers are reused after their last posting goes, and lookups find only live tokens.
    @Test func tokenTableReusesNumbers() {
        var table = TokenTable()
        func number(_ token: String) -> UInt32? { table.number(of: token, fingerprint: Tokenizer.fingerprint(token.utf8)) }
        table.add(TokenTable.Posting(entry: 1, requires: .max), under: "harbour")
        let dusk = table.retain("dusk")
        table.add(TokenTable.Posting(entry: 2, requires: dusk), under: "sunset")
        #expect(number("dusk") == dusk && number("harbour") != nil && number("night") == nil)
        var postings: [UInt32] = []
        if let sunset = number("sunset") { table.forEachPosting(of: sunset) { postings.append($0.entry) } }
        #expect(postings == [2])
        table.remove(entry: 1, under: "harbour")
        #expect(number("harbour") == nil)
        let night = table.retain("night")
        #expect(number("night") == night && number("dusk") == dusk)
        table.remove(entry: 2, under: "sunset")
        table.release("dusk")
        table.release("night")
        #expect(table.isEmpty)
    }

    /// Packed predicates give back the condition they were made from, and fire as compiled ones do.
    @Test func packedPredicatesRoundTrip() throws {
        for text in [
            "price < 100", "artist == 'mei' AND price < 100", "price BETWEEN {5, 10}", "price BETWEEN {5.5, 10}",
            "ALL tokenize('sunset harbour', 'Cdl') IN allTokens", "distanceToLocation:fromLocation:(location, location(48.85, 2.35)) < 5",
            "artist == 'mei' AND price < 100 AND year > 1990", "title BEGINSWITH 'Sun'", "TRUEPREDICATE",
        ] {
            let condition = try ValidatedPredicate(text).condition
            #expect(PackedPredicate(condition).condition == condition, "\(text)")
        }
        if case .general = PackedPredicate(try ValidatedPredicate("artist == 'mei' AND price < 100").condition) {
            Issue.record("the commonest shape should be packed")
        }
    }
}

/// The indexed matcher fires exactly what the naive loop over every subscription fires.
@Suite("Subscription matcher properties")
struct SubscriptionMatcherPropertyTests {
    static func randomSubscriptions(_ rng: inout SplitMix, count: Int) -> SubscriptionSet {
        var set = SubscriptionSet(database: .private, reportsRecordsLeavingResults: Bool.random(using: &rng))
        let zones = [ZoneID.default, ZoneID(zoneName: "Z", ownerName: "_o")]
        for index in 0..<count {
            let predicate = Int.random(in: 0..<6, using: &rng) == 0 ? "TRUEPREDICATE" : RandomData.cloudKitPredicate(&rng)
            let options = [SubscriptionOptions.default, .firesOnRecordCreation, .firesOnRecordUpdate, .firesOnRecordDeletion, [.firesOnRecordUpdate, .firesOnce]]
                .randomElement(using: &rng) ?? .default
            let kind = Int.random(in: 0..<20, using: &rng)
            let subscription: Subscription?
            switch kind {
            case 0: subscription = Subscription(subscriptionID: "s\(index)", kind: .recordZone(zoneID: zones[1], recordType: Bool.random(using: &rng) ? "T" : nil))
            case 1: subscription = Subscription(subscriptionID: "s\(index)", kind: .database(recordType: Bool.random(using: &rng) ? "T" : nil))
            default:
                subscription = try? .query("s\(index)", recordType: Int.random(in: 0..<8, using: &rng) == 0 ? "U" : "T", predicate: predicate,
                                           options: options, zoneID: Bool.random(using: &rng) ? nil : zones.randomElement(using: &rng))
            }
            if let subscription { try? set.save(subscription) }
        }
        return set
    }

    @Test func indexedMatcherEqualsNaiveLoop() async {
        await propertyCheck(count: 60, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            var set = Self.randomSubscriptions(&rng, count: 150)
            for step in 0..<40 {
                var record = RandomData.record(&rng, index: step % 7)
                if Bool.random(using: &rng) { record.recordID.zoneID = ZoneID(zoneName: "Z", ownerName: "_o") }
                if Int.random(in: 0..<10, using: &rng) == 0 { record.recordType = "U" }
                let other = RandomData.record(&rng, index: step % 7)
                let change: RecordChange = switch Int.random(in: 0..<3, using: &rng) {
                case 0: .created(record)
                case 1: .updated(before: Record(recordType: record.recordType, recordID: record.recordID, fields: other.fields), after: record)
                default: .deleted(record)
                }
                let indexed = set.firings(for: change, now: 2_000).map(\.subscription.subscriptionID)
                let naive = set.naiveFirings(for: change, now: 2_000).map(\.subscription.subscriptionID)
                #expect(indexed == naive, "seed \(seed) step \(step)")
                if indexed != naive { return }
                // Exercise removal and firesOnce between changes.
                _ = set.apply(change, now: 2_000)
                if step % 10 == 9, let victim = set.subscriptions.randomElement(using: &rng) { set.remove(id: victim.subscriptionID) }
                // Saving an existing ID again moves it last (into a reused slot, after removals).
                if step % 10 == 4, let again = set.subscriptions.randomElement(using: &rng) { try? set.save(again) }
                let problems = set._checkInvariants()
                #expect(problems.isEmpty, "seed \(seed) step \(step): \(problems)")
                if !problems.isEmpty { return }
            }
        }
    }

    @Test func canonicallyEquivalentConstantsAreDifferentPredicates() throws {
        var set = SubscriptionSet(database: .public)
        try set.save(.query("composed", recordType: "T", predicate: "name == 'caf\\u00e9'"))
        try set.save(.query("decomposed", recordType: "T", predicate: "name == 'cafe\\u0301'"))
        let change = RecordChange.created(Record(recordType: "T", recordName: "r", fields: ["name": .string("cafe\u{301}")]))
        #expect(set.firings(for: change, now: 0).map(\.subscription.subscriptionID) == ["decomposed"])
        #expect(set.naiveFirings(for: change, now: 0).map(\.subscription.subscriptionID) == ["decomposed"])
    }
}
