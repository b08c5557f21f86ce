import PropertyBased
import Testing
@testable import KQuery

/// Printing then parsing gives the same AST, and printing is a fixpoint.
@Suite("Printer round trip")
struct RoundTripTests {
    @Test func printThenParseIsIdentity() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let predicate = RandomAST.predicate(&rng, depth: 3)
            let text = predicate.canonicalText
            do {
                let reparsed = try PredicateParser.parse(text)
                #expect(reparsed == predicate, "\(text)")
                #expect(reparsed.canonicalText == text)
            } catch {
                Issue.record("canonical text does not parse: \(text)\n\((error as? InvalidPredicateError)?.rendered(in: text) ?? "\(error)")")
            }
        }
    }

    /// Real-world predicates: canonical text is a fixpoint and keeps the meaning.
    @Test(arguments: [
        "seats>25&&cuisine='french'", "NOT(tags CONTAINS 'wine')", "a =< 1 || b => 2 AND c <> 3",
        "ANY {'a','b'} IN tags", "%K BEGINSWITH %@", "x == %2$@", "opened < CAST(726000000.5, \"NSDate\")",
        "distanceToLocation:fromLocation:(location, location(48.8566, 2.3522)) < 2000",
        "ALL tokenize('wine terrace', 'Cdl') IN allTokens", "#in == 1 AND #contains == 2", "#2000 >= 1", "_x == 1",
        // Found by PredicateFuzz: dates past year 9999 or before year 0 must print in a form that parses.
        "od < CAST(7260000000000, \"NSDate\")", "od < CAST(-70000000000, \"NSDate\")", "od > date(\"+10000-01-01\")",
    ])
    func canonicalFixpoint(text: String) throws {
        let once = try PredicateParser.parse(text)
        let printed = once.canonicalText
        let twice = try PredicateParser.parse(printed)
        #expect(twice == once)
        #expect(twice.canonicalText == printed)
    }
}
