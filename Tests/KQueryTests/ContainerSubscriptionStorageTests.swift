import KQuery
import Testing
@testable import KQueryContainer

/// Query subscriptions are stored with their predicate as text: every CloudKit predicate shape
/// must read back as the same condition, or saving it would be refused.
@Suite struct ContainerSubscriptionStorageTests {
    static let predicates = [
        "TRUEPREDICATE", "title == 'Sunset'", "price != 3", "price < 10 AND price >= 2.5", "10 > price", "price BETWEEN {1, 5}",
        "title BEGINSWITH 'Sun'", "NOT title BEGINSWITH 'Sun'", "genre IN {'a', 'b'}", "NOT genre IN {'a', 'b'}", "tags CONTAINS 'x'",
        "ANY {'a', 'b'} IN tags", "ALL {'a', 'b'} IN tags", "ANY tags BEGINSWITH 'x'", "NOT (price == 3)",
        "distanceToLocation:fromLocation:(location, location(37.78, -122.4)) < 5",
        "ALL tokenize('after session', 'cdl') IN allTokens", "allTokens TOKENMATCHES[cdl] 'sunset'", "SELF CONTAINS 'sun'",
        "modificationDate > now()", "creationDate < date(\"2024-05-01T12:00:00Z\")", "owner == reference(\"r1\")",
        "title == 'it\\'s \"quoted\"' AND price > 1e3", "recordID == reference(\"x\")",
    ]

    @Test func everyCloudKitPredicateShapeSurvivesStorage() throws {
        for (index, text) in Self.predicates.enumerated() {
            let subscription: Subscription
            do {
                subscription = try .query("s\(index)", recordType: "Artwork", predicate: text)
            } catch {
                Issue.record("\(text) is not a valid cloudkit predicate here: \(error)")
                continue
            }
            let stored = try subscription.storedJSON()
            #expect(try Subscription(storedJSON: JSON.parse(stored.serialized)) == subscription, "\(text)")
        }
    }
}
