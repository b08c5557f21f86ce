import Foundation
import Testing

@testable import KQuery
@testable import KQueryStore

/// One inverse-problem vector: two points (degrees) and GeographicLib's distance (metres).
private struct GeodesicVector: Sendable, CustomStringConvertible {
    var lat1: Double
    var lon1: Double
    var lat2: Double
    var lon2: Double
    var s12: Double

    var description: String { "(\(lat1), \(lon1)) -> (\(lat2), \(lon2)), s12 = \(s12)" }

    var distance: Double {
        Geodesic.distance(latitude1: lat1, longitude1: lon1, latitude2: lat2, longitude2: lon2)
    }

    func isDistance(lessThan radius: Double) -> Bool {
        Geodesic.isDistance(latitude1: lat1, longitude1: lon1, latitude2: lat2, longitude2: lon2, lessThan: radius)
    }
}

/// Loads `Fixtures/<name>.csv` (header `lat1,lon1,lat2,lon2,s12_m`).
private func loadVectors(_ name: String) throws -> [GeodesicVector] {
    let url = try #require(Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: "csv"))
    let text = try String(contentsOf: url, encoding: .utf8)
    var vectors: [GeodesicVector] = []
    for (index, line) in text.split(whereSeparator: \.isNewline).enumerated() where index > 0 {
        let fields = line.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
        try #require(fields.count == 5, "bad row \(index) in \(name).csv: \(line)")
        vectors.append(GeodesicVector(lat1: fields[0], lon1: fields[1], lat2: fields[2], lon2: fields[3], s12: fields[4]))
    }
    return vectors
}

private let fixtureNames = ["geodesic", "geodesic-extra"]

@Suite("Geodesic (WGS84)")
struct GeodesicTests {
    @Test("distance matches GeographicLib within 1 mm", arguments: fixtureNames)
    func matchesGeographicLib(fixture: String) throws {
        let vectors = try loadVectors(fixture)
        #expect(vectors.count >= 500)
        var maxError = 0.0
        for v in vectors {
            let s = v.distance
            let error = abs(s - v.s12)
            maxError = max(maxError, error.isNaN ? .infinity : error)
            #expect(error <= 1e-3, "\(v): got \(s)")
            // Symmetric under swapping the endpoints.
            let swapped = Geodesic.distance(latitude1: v.lat2, longitude1: v.lon2, latitude2: v.lat1, longitude2: v.lon1)
            #expect(abs(swapped - v.s12) <= 1e-3, "swapped \(v): got \(swapped)")
        }
        #expect(maxError <= 1e-3, "max error \(maxError) m over \(vectors.count) vectors")
    }

    @Test("golden file holds the expected 1,907 GeographicLib pairs")
    func goldenFileSize() throws {
        #expect(try loadVectors("geodesic").count == 1_907)
    }

    @Test("isDistance agrees with distance < radius", arguments: fixtureNames)
    func isDistanceAgrees(fixture: String) throws {
        for v in try loadVectors(fixture) {
            let s = v.distance
            let radii = [
                s * (1 - 1e-9), s * (1 + 1e-9), s - 1, s + 1, s * 0.99, s * 1.01,
                s, s.nextUp, s.nextDown, v.s12 * 0.999, v.s12 * 1.001, 1e-6, 1, 1e7, 3e7,
            ]
            for radius in radii {
                #expect(v.isDistance(lessThan: radius) == (s < radius), "\(v), radius \(radius), distance \(s)")
            }
        }
    }

    @Test("boundingBox contains every point within the radius", arguments: fixtureNames)
    func boundingBoxContains(fixture: String) throws {
        for v in try loadVectors(fixture) {
            let radius = v.s12 * 1.0001 + 1
            let box = Geodesic.boundingBox(latitude: v.lat1, longitude: v.lon1, radius: radius)
            #expect(box.minLatitude <= v.lat2 && v.lat2 <= box.maxLatitude, "\(v): \(box)")
            #expect(-90 <= box.minLatitude && box.maxLatitude <= 90, "\(v): \(box)")
            #expect(-180 <= box.minLongitude && box.minLongitude <= 180, "\(v): \(box)")
            #expect(-180 <= box.maxLongitude && box.maxLongitude <= 180, "\(v): \(box)")
            let lon = v.lon2.remainder(dividingBy: 360)
            let inside = box.minLongitude <= box.maxLongitude
                ? (box.minLongitude <= lon && lon <= box.maxLongitude)
                : (lon >= box.minLongitude || lon <= box.maxLongitude)
            // ±180 denote the same meridian.
            let insideAlias = abs(lon) == 180 && (box.minLongitude > box.maxLongitude || box.minLongitude == -180 || box.maxLongitude == 180)
            #expect(inside || insideAlias, "\(v): \(box), lon2 \(lon)")
        }
    }

    @Test("boundingBox is tight enough to be useful")
    func boundingBoxShape() {
        // 10 km around Paris: about ±0.09° latitude, ±0.135° longitude.
        let box = Geodesic.boundingBox(latitude: 48.8566, longitude: 2.3522, radius: 10_000)
        #expect(box.maxLatitude - box.minLatitude < 0.2 && box.maxLatitude - box.minLatitude > 0.17)
        #expect(box.maxLongitude - box.minLongitude < 0.28 && box.maxLongitude - box.minLongitude > 0.25)
        // Crossing the antimeridian wraps.
        let fiji = Geodesic.boundingBox(latitude: -17, longitude: 179.9, radius: 50_000)
        #expect(fiji.minLongitude > fiji.maxLongitude)
        // Reaching a pole covers all longitudes and extends to the pole.
        let north = Geodesic.boundingBox(latitude: 89.5, longitude: 10, radius: 100_000)
        #expect(north.minLongitude == -180 && north.maxLongitude == 180 && north.maxLatitude == 90)
        // Half the meridian covers the whole globe.
        let all = Geodesic.boundingBox(latitude: 0, longitude: 0, radius: 20_004_000)
        #expect(all == (-90, 90, -180, 180))
        let zero = Geodesic.boundingBox(latitude: 12, longitude: -190, radius: 0)
        #expect(zero.minLatitude <= 12 && 12 <= zero.maxLatitude && zero.minLongitude <= 170 && 170 <= zero.maxLongitude)
    }

    @Test("special cases: coincident points, poles, equator, antipodes")
    func specialCases() {
        #expect(Geodesic.distance(latitude1: 12.5, longitude1: -45, latitude2: 12.5, longitude2: -45) == 0)
        #expect(Geodesic.distance(latitude1: 90, longitude1: -45, latitude2: 90, longitude2: 135) == 0)
        #expect(Geodesic.distance(latitude1: 10, longitude1: 180, latitude2: 10, longitude2: -180) == 0)
        // Quarter meridian and equator.
        #expect(abs(Geodesic.distance(latitude1: 0, longitude1: 0, latitude2: 90, longitude2: 0) - 10_001_965.729_312_7) < 1e-6)
        #expect(abs(Geodesic.distance(latitude1: 0, longitude1: 0, latitude2: 0, longitude2: 90) - 10_018_754.171_394_7) < 1e-6)
        // Pole to pole, and equatorial antipodes (the shortest path goes over a pole).
        #expect(abs(Geodesic.distance(latitude1: -90, longitude1: 0, latitude2: 90, longitude2: 0) - 20_003_931.458_625) < 1e-6)
        #expect(abs(Geodesic.distance(latitude1: 0, longitude1: 0, latitude2: 0, longitude2: 180) - 20_003_931.458_625) < 1e-6)
        // Longitudes are taken modulo 360.
        let d = Geodesic.distance(latitude1: 40, longitude1: 10, latitude2: -20, longitude2: 100)
        #expect(Geodesic.distance(latitude1: 40, longitude1: 370, latitude2: -20, longitude2: -260) == d)
    }

    @Test("non-finite and out-of-range inputs do not trap")
    func nonFinite() {
        let bad: [Double] = [.nan, .infinity, -.infinity, .signalingNaN, 90.5, -1e300]
        for x in bad {
            let rows: [(Double, Double, Double, Double)] = [(x, 0, 0, 0), (0, x, 0, 0), (0, 0, x, 0), (0, 0, 0, x)]
            for (lat1, lon1, lat2, lon2) in rows {
                let d = Geodesic.distance(latitude1: lat1, longitude1: lon1, latitude2: lat2, longitude2: lon2)
                let longitudeOnly = lon1 != 0 || lon2 != 0
                if longitudeOnly && x.isFinite {
                    #expect(d.isFinite)  // out-of-range longitudes are valid (reduced modulo 360)
                } else {
                    #expect(d.isNaN, "\((lat1, lon1, lat2, lon2))")
                    #expect(!Geodesic.isDistance(latitude1: lat1, longitude1: lon1, latitude2: lat2, longitude2: lon2, lessThan: 1e9))
                    #expect(!Geodesic.isDistance(latitude1: lat1, longitude1: lon1, latitude2: lat2, longitude2: lon2, lessThan: .infinity))
                }
            }
            let box = Geodesic.boundingBox(latitude: x, longitude: 0, radius: 1000)
            #expect(box.minLatitude.isNaN && box.maxLongitude.isNaN)
        }
        // Radius edge cases.
        #expect(!Geodesic.isDistance(latitude1: 0, longitude1: 0, latitude2: 0, longitude2: 0, lessThan: .nan))
        #expect(!Geodesic.isDistance(latitude1: 0, longitude1: 0, latitude2: 0, longitude2: 0, lessThan: 0))
        #expect(!Geodesic.isDistance(latitude1: 0, longitude1: 0, latitude2: 0, longitude2: 0, lessThan: -.infinity))
        #expect(Geodesic.isDistance(latitude1: 0, longitude1: 0, latitude2: 0, longitude2: 0, lessThan: .leastNonzeroMagnitude))
        #expect(Geodesic.isDistance(latitude1: -90, longitude1: 0, latitude2: 90, longitude2: 0, lessThan: .infinity))
        #expect(Geodesic.boundingBox(latitude: 0, longitude: 0, radius: .nan).minLatitude.isNaN)
        #expect(Geodesic.boundingBox(latitude: 0, longitude: 0, radius: .infinity) == (-90, 90, -180, 180))
        #expect(Geodesic.boundingBox(latitude: 0, longitude: .infinity, radius: 1).minLongitude.isNaN)
    }
}

/// SPEC §2.4: a predicate's distance is in kilometres, as CloudKit reads the NEAR radius. The golden
/// pairs, re-expressed in kilometres, through every path a distance takes: evaluation, the store's
/// spatial index, the subscription matcher's cells and the Web Services form. A margin of 1 cm either
/// side of GeographicLib's distance (which is right to 1 mm) decides each verdict.
@Suite("Distances in kilometres")
struct DistanceInKilometresTests {
    private static let vectors: [GeodesicVector] = (try? loadVectors("geodesic")) ?? []

    private static func predicate(_ v: GeodesicVector, _ op: String, _ kilometres: Double) -> String {
        "distanceToLocation:fromLocation:(loc, location(\(v.lat1), \(v.lon1))) \(op) \(kilometres)"
    }

    private static func record(_ v: GeodesicVector, _ index: Int) -> Record {
        Record(recordType: "Place", recordName: "p\(index)", fields: ["loc": .location(Location(latitude: v.lat2, longitude: v.lon2))])
    }

    @Test func evaluationReadsKilometres() throws {
        #expect(Self.vectors.count == 1_907)
        for (index, v) in Self.vectors.enumerated() where v.s12 > 0.02 {
            let inside = (v.s12 + 0.01) / 1000
            let outside = (v.s12 - 0.01) / 1000
            let record = Self.record(v, index)
            for op in ["<", "<="] {
                #expect(try matchingNames(Self.predicate(v, op, inside), in: [record]) == [record.recordID.recordName], "\(v) \(op) \(inside)")
                #expect(try matchingNames(Self.predicate(v, op, outside), in: [record]) == [], "\(v) \(op) \(outside)")
            }
            // The same number read as metres would be a thousand times too small.
            if v.s12 > 1 { #expect(try matchingNames(Self.predicate(v, "<", v.s12 * 1.01), in: [record]) == [record.recordID.recordName]) }
        }
    }

    /// The store answers from its spatial index, whose cells cover the radius in kilometres.
    @Test func spatialIndexReadsKilometres() throws {
        let database = Database(indexPolicy: .declared)
        try database.declareIndex(IndexDeclaration(recordType: "Place", field: .user(FieldKey("loc")), index: .queryable))
        let sample = Self.vectors.enumerated().filter { $0.offset % 7 == 0 && $0.element.s12 > 0.02 }
        try database.save(sample.map { RecordOperation(kind: .create, record: Self.record($0.element, $0.offset)) })
        for (index, v) in sample {
            let name = "p\(index)"
            for (kilometres, expected) in [((v.s12 + 0.01) / 1000, true), ((v.s12 - 0.01) / 1000, false)] {
                let query = KQuery.Query(recordType: "Place", predicate: try ValidatedPredicate(Self.predicate(v, "<", kilometres)))
                // Radii of thousands of kilometres are answered by a scan; smaller ones by the index.
                let plan = try database.plan(query, now: 0).description
                if v.s12 < 1_000_000 { #expect(plan.contains("spatial index"), "\(plan)") }
                var names: [String] = []
                var page = try database.perform(query, now: 0)
                names += page.records.map(\.recordID.recordName)
                while let cursor = page.cursor {
                    page = try database.perform(query, cursor: cursor, now: 0)
                    names += page.records.map(\.recordID.recordName)
                }
                #expect(names.contains(name) == expected, "\(v) < \(kilometres) km: \(plan)")
            }
        }
    }

    /// The matcher files a distance subscription under cells covering its radius in kilometres.
    @Test func subscriptionsReadKilometres() throws {
        for (index, v) in Self.vectors.enumerated() where index % 5 == 0 && v.s12 > 0.02 {
            var set = SubscriptionSet(database: .public)
            try set.save(.query("in", recordType: "Place", predicate: Self.predicate(v, "<", (v.s12 + 0.01) / 1000)))
            try set.save(.query("out", recordType: "Place", predicate: Self.predicate(v, "<=", (v.s12 - 0.01) / 1000)))
            let fired = set.firings(for: .created(Self.record(v, index)), now: 0).map(\.subscription.subscriptionID)
            #expect(fired == ["in"], "\(v)")
        }
    }

    /// Web Services' NEAR `distance` is the predicate's number as written, for `<` and `<=` alike.
    @Test func webServicesDistanceIsTheNumberAsWritten() throws {
        for op in ["<", "<="] {
            let filters = try ValidatedPredicate("distanceToLocation:fromLocation:(loc, location(1, 2)) \(op) 2.5").condition.webServicesFilters(now: 0)
            #expect(filters.first?["distance"] == .double(2.5))
            #expect(filters.first?["comparator"] == .string("NEAR"))
        }
    }
}
