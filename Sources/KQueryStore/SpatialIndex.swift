import KQuery

/// A spatial index over one LOCATION field: a grid of latitude/longitude cells at three
/// resolutions (0.05°, 0.8° and 12.8°), each cell listing its rows.
///
/// A radius query takes the circle's bounding box (`Geodesic.boundingBox`, which handles the poles
/// and the antimeridian), picks the finest level at which the box spans at most `maximumCells`
/// cells, and returns the rows of those cells: a superset of the answer that the exact geodesic
/// test then filters. Three levels keep both a 1 km and a 1,000 km circle to a few dozen cells.
struct SpatialIndex: Sendable {
    static let cellSizes: [Double] = [0.05, 0.8, 12.8]
    static let maximumCells = 64

    private(set) var levels: [[UInt64: Postings]] = Array(repeating: [:], count: cellSizes.count)

    init() {}

    /// An index read back from a snapshot (`IndexSnapshot`): one map per level of `cellSizes`.
    init(levels: [[UInt64: Postings]]) { self.levels = levels }

    mutating func insert(_ value: FieldValue, row: RowID) {
        guard case .location(let location) = value, let point = Self.point(location) else { return }
        for level in levels.indices { levels[level][Self.cell(point, level: level), default: Postings()].insert(row) }
    }

    /// The cells to read for a circle: its level and cell keys; nil when the circle covers too much
    /// of the globe for any level (a scan is then as good).
    static func cells(center: Location, radius: Double) -> (level: Int, cells: [UInt64])? {
        let box = Geodesic.boundingBox(latitude: center.latitude, longitude: center.longitude, radius: radius)
        guard box.minLatitude.isFinite, box.maxLatitude.isFinite, box.minLongitude.isFinite, box.maxLongitude.isFinite else { return nil }
        for level in cellSizes.indices {
            let size = cellSizes[level]
            let firstRow = row(box.minLatitude, size)
            let lastRow = row(box.maxLatitude, size)
            let columnRanges: [ClosedRange<UInt64>]
            if box.minLongitude <= box.maxLongitude {
                columnRanges = [column(box.minLongitude, size)...column(box.maxLongitude, size)]
            } else {
                // Across the antimeridian: two column ranges.
                columnRanges = [column(box.minLongitude, size)...column(180, size), 0...column(box.maxLongitude, size)]
            }
            let columns = columnRanges.reduce(0) { $0 + $1.count }
            guard columns * Int(lastRow - firstRow + 1) <= maximumCells else { continue }
            var cells: [UInt64] = []
            for row in firstRow...lastRow {
                for range in columnRanges {
                    for column in range { cells.append(row << 32 | column) }
                }
            }
            return (level, cells)
        }
        return nil
    }

    func rows(level: Int, cells: [UInt64]) -> [RowID] {
        Postings.union(cells.compactMap { levels[level][$0]?.rows })
    }

    func count(level: Int, cells: [UInt64]) -> Int {
        cells.reduce(0) { $0 + (levels[level][$1]?.count ?? 0) }
    }

    private static func point(_ location: Location) -> (latitude: Double, longitude: Double)? {
        guard location.latitude.isFinite, location.longitude.isFinite, abs(location.latitude) <= 90 else { return nil }
        return (location.latitude, location.longitude.remainder(dividingBy: 360))
    }

    private static func cell(_ point: (latitude: Double, longitude: Double), level: Int) -> UInt64 {
        let size = cellSizes[level]
        return row(point.latitude, size) << 32 | column(point.longitude, size)
    }

    private static func row(_ latitude: Double, _ size: Double) -> UInt64 {
        UInt64((min(max(latitude, -90), 90) + 90) / size)
    }

    private static func column(_ longitude: Double, _ size: Double) -> UInt64 {
        UInt64((min(max(longitude, -180), 180) + 180) / size)
    }
}
