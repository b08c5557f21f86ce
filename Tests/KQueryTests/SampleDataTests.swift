import Foundation
import Testing
@testable import KQuery

/// The bundled sample catalogue loads, and the example predicates of Samples/README.md return the
/// counts an independent Python evaluation of the same data found (scripts/make-sample.py's check).
@Suite("Sample data")
struct SampleDataTests {
    static let records: [Record] = (try? RecordFile.load(path: Fixtures.repositoryRoot.appendingPathComponent("Samples/gallery.ndjson").path)) ?? []

    @Test func loads() {
        #expect(Self.records.count == 360)
        #expect(Self.records.filter { $0.recordType == "Artwork" }.count == 300)
        #expect(Self.records.filter { $0.recordType == "Artist" }.count == 60)
    }

    @Test(arguments: [
        ("price > 50000 AND medium == 'oil'", 12), ("tags CONTAINS 'sea'", 43),
        ("ALL tokenize('sunset harbour', 'Cdl') IN allTokens", 15),
        ("distanceToLocation:fromLocation:(location, location(48.8606, 2.3376)) < 5", 62),
        ("artist == reference(\"artist-07\")", 14), ("acquired > date(\"2020-01-01T00:00:00Z\")", 149),
        ("price > 50000", 19), ("price >= 50000", 21),
    ])
    func readmeExamples(predicate: String, count: Int) throws {
        let query = Query(recordType: "Artwork", predicate: try ValidatedPredicate(predicate))
        #expect(try query.perform(on: Self.records, now: 0).records.count == count)
    }
}
