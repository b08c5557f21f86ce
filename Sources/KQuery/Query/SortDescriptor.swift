/// One sort key of a query (NSSortDescriptor / CKLocationSortDescriptor).
public struct SortDescriptor: Hashable, Sendable {
    public enum Key: Hashable, Sendable {
        case field(FieldReference)
        /// Distance of a LOCATION field from a point (Web Services `relativeLocation`).
        case distance(FieldReference, from: Location)
    }

    public var key: Key
    public var ascending: Bool

    public init(key: Key, ascending: Bool = true) {
        self.key = key
        self.ascending = ascending
    }

    public init(_ field: String, ascending: Bool = true) {
        self.key = .field(FieldReference(name: field))
        self.ascending = ascending
    }

    public init(distanceOf field: String, from location: Location, ascending: Bool = true) {
        self.key = .distance(FieldReference(name: field), from: location)
        self.ascending = ascending
    }

    /// The value this descriptor sorts `record` by; nil sorts last.
    package func sortValue(of record: Record) -> FieldValue? {
        sortValue { record.value(of: $0) }
    }

    /// The value this descriptor sorts a record by, given how to read the record's fields (a
    /// store reads them from its columns without making the record).
    package func sortValue(_ value: (FieldReference) -> FieldValue?) -> FieldValue? {
        switch key {
        case .field(let field):
            // Lists and NaN (a location with a NaN coordinate too) have no place in the order:
            // they sort with the missing values.
            switch value(field) {
            case .list?: return nil
            case .double(let x)? where x.isNaN: return nil
            case .location(let x)? where x.latitude.isNaN || x.longitude.isNaN: return nil
            case let value: return value
            }
        case .distance(let field, let center):
            guard case .location(let location)? = value(field) else { return nil }
            let distance = Geodesic.distance(
                latitude1: location.latitude, longitude1: location.longitude,
                latitude2: center.latitude, longitude2: center.longitude)
            return distance.isNaN ? nil : .double(distance)
        }
    }
}

/// A total order on field values for sorting: numbers, then timestamps, strings, references,
/// bytes, asset IDs and locations, each kind in its natural order (SPEC §2.4 for the comparable ones).
package enum SortOrder {
    package static func compare(_ a: FieldValue, _ b: FieldValue) -> Int {
        if let order = ValueOrder.compare(a, b) { return order }
        let (rankA, rankB) = (rank(a), rank(b))
        if rankA != rankB { return rankA < rankB ? -1 : 1 }
        switch (a, b) {
        case (.reference(let x), .reference(let y)): return x.recordID < y.recordID ? -1 : (x.recordID == y.recordID ? 0 : 1)
        case (.bytes(let x), .bytes(let y)): return x.lexicographicallyPrecedes(y) ? -1 : (x == y ? 0 : 1)
        case (.assetID(let x), .assetID(let y)): return ValueOrder.compareBytes(x, y)
        case (.location(let x), .location(let y)):
            return ValueOrder.compare(x.latitude, y.latitude).flatMap { $0 == 0 ? ValueOrder.compare(x.longitude, y.longitude) : $0 } ?? 0
        default: return 0
        }
    }

    package static func rank(_ value: FieldValue) -> Int {
        switch value {
        case .int64, .double: 0
        case .timestamp: 1
        case .string: 2
        case .reference: 3
        case .bytes: 4
        case .assetID: 5
        case .location: 6
        case .list: 7
        }
    }

    /// Compares two sort keys under `descriptors`: missing values last in either direction, then
    /// the record ID, so every order is total and deterministic.
    package static func compare(_ a: SortKey, _ b: SortKey, _ descriptors: [SortDescriptor]) -> Int {
        compare(a.values, a.recordID, b.values, b.recordID, descriptors)
    }

    /// `compare(_:_:_:)` on the parts of two keys, for callers that keep the record ID elsewhere.
    package static func compare(
        _ aValues: [FieldValue?], _ aID: RecordID, _ bValues: [FieldValue?], _ bID: RecordID, _ descriptors: [SortDescriptor]
    ) -> Int {
        let order = compareValues(aValues, bValues, descriptors)
        if order != 0 { return order }
        return aID < bID ? -1 : (aID == bID ? 0 : 1)
    }

    /// The sort values alone, missing values last in either direction; 0 leaves the tie to the
    /// record IDs.
    package static func compareValues(_ a: [FieldValue?], _ b: [FieldValue?], _ descriptors: [SortDescriptor]) -> Int {
        for index in descriptors.indices {
            switch (a[index], b[index]) {
            case (nil, nil): continue
            case (nil, _): return 1
            case (_, nil): return -1
            case (let x?, let y?):
                let order = compare(x, y)
                if order != 0 { return descriptors[index].ascending ? order : -order }
            }
        }
        return 0
    }
}

/// A record's position in a query's order.
package struct SortKey: Hashable, Sendable {
    package var values: [FieldValue?]
    package var recordID: RecordID

    package init(values: [FieldValue?], recordID: RecordID) {
        self.values = values
        self.recordID = recordID
    }

    package init(_ record: Record, _ descriptors: [SortDescriptor]) {
        values = descriptors.map { $0.sortValue(of: record) }
        recordID = record.recordID
    }
}
