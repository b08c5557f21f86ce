/// The type of a record field, with CloudKit Web Services names (`STRING`, `INT64`, ...).
public enum FieldType: String, Hashable, Sendable, CaseIterable {
    case string = "STRING"
    case int64 = "INT64"
    case double = "DOUBLE"
    case timestamp = "TIMESTAMP"
    case bytes = "BYTES"
    case location = "LOCATION"
    case reference = "REFERENCE"
    case assetID = "ASSETID"
}

/// A record field value: a scalar of one `FieldType`, or a homogeneous list of one.
///
/// Timestamps are milliseconds since 1970-01-01T00:00:00Z, as in CloudKit Web Services JSON.
public enum FieldValue: Hashable, Sendable {
    case string(String)
    case int64(Int64)
    case double(Double)
    case timestamp(Int64)
    case bytes([UInt8])
    indirect case location(Location)
    indirect case reference(Reference)
    case assetID(String)
    /// A list whose members all have `FieldType`; the type is kept so that an empty list still has one.
    case list(FieldType, [FieldValue])

    /// The scalar type of the value, or of the list's members.
    public var type: FieldType {
        switch self {
        case .string: .string
        case .int64: .int64
        case .double: .double
        case .timestamp: .timestamp
        case .bytes: .bytes
        case .location: .location
        case .reference: .reference
        case .assetID: .assetID
        case .list(let type, _): type
        }
    }

    public var isList: Bool {
        if case .list = self { return true }
        return false
    }

    /// The Web Services type name: `STRING`, or `STRING_LIST` for a list.
    public var typeName: String {
        isList ? type.rawValue + "_LIST" : type.rawValue
    }
}

/// A geographic location, as CLLocation carries it. Only latitude and longitude take part in queries.
///
/// The parts queries never read (altitude, accuracies, course, speed, timestamp) are kept in a box
/// that exists only when one of them is set: a location is 24 bytes, not 105, and the box a record's
/// field keeps it in 40 (a million records held in memory carry a million of them).
public struct Location: Hashable, Sendable {
    public var latitude: Double
    public var longitude: Double
    private var box: DetailsBox?

    /// The optional parts, as one value.
    struct Details: Hashable, Sendable {
        var altitude: Double?
        var horizontalAccuracy: Double?
        var verticalAccuracy: Double?
        var course: Double?
        var speed: Double?
        var timestamp: Int64?

        var isEmpty: Bool { self == Details() }
    }

    /// Immutable once made, so a record store may keep a location's box and share it with every
    /// copy it gives back (`detailsBox`, `init(latitude:longitude:detailsBox:)`).
    package final class DetailsBox: Sendable {
        let details: Details
        init(_ details: Details) { self.details = details }
    }

    /// The box of the optional parts, nil when none is set.
    package var detailsBox: DetailsBox? { box }

    /// The location with `latitude`, `longitude` and the optional parts of `detailsBox` (taken from
    /// another location's `detailsBox`).
    package init(latitude: Double, longitude: Double, detailsBox: DetailsBox?) {
        self.latitude = latitude
        self.longitude = longitude
        box = detailsBox
    }

    public init(
        latitude: Double, longitude: Double, altitude: Double? = nil, horizontalAccuracy: Double? = nil,
        verticalAccuracy: Double? = nil, course: Double? = nil, speed: Double? = nil, timestamp: Int64? = nil
    ) {
        self.latitude = latitude
        self.longitude = longitude
        let details = Details(altitude: altitude, horizontalAccuracy: horizontalAccuracy, verticalAccuracy: verticalAccuracy,
                              course: course, speed: speed, timestamp: timestamp)
        box = details.isEmpty ? nil : DetailsBox(details)
    }

    /// One optional part, read from the box or set through a new one (locations are values).
    private subscript<Part>(_ part: WritableKeyPath<Details, Part>) -> Part {
        get { (box?.details ?? Details())[keyPath: part] }
        set {
            var details = box?.details ?? Details()
            details[keyPath: part] = newValue
            box = details.isEmpty ? nil : DetailsBox(details)
        }
    }

    public var altitude: Double? { get { self[\.altitude] } set { self[\.altitude] = newValue } }
    public var horizontalAccuracy: Double? { get { self[\.horizontalAccuracy] } set { self[\.horizontalAccuracy] = newValue } }
    public var verticalAccuracy: Double? { get { self[\.verticalAccuracy] } set { self[\.verticalAccuracy] = newValue } }
    public var course: Double? { get { self[\.course] } set { self[\.course] = newValue } }
    public var speed: Double? { get { self[\.speed] } set { self[\.speed] = newValue } }
    /// Milliseconds since 1970.
    public var timestamp: Int64? { get { self[\.timestamp] } set { self[\.timestamp] = newValue } }

    public static func == (a: Location, b: Location) -> Bool {
        a.latitude == b.latitude && a.longitude == b.longitude && (a.box === b.box || a.box?.details == b.box?.details)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(latitude)
        hasher.combine(longitude)
        if let box { hasher.combine(box.details) }
    }
}

/// A reference to another record (CKRecord.Reference).
public struct Reference: Hashable, Sendable {
    public enum Action: String, Hashable, Sendable {
        case none = "NONE"
        case deleteSelf = "DELETE_SELF"
        case validate = "VALIDATE"
    }

    public var recordID: RecordID
    public var action: Action

    public init(recordID: RecordID, action: Action = .none) {
        self.recordID = recordID
        self.action = action
    }

    /// References are equal when they point at the same record; the action does not take part.
    public static func == (lhs: Reference, rhs: Reference) -> Bool { lhs.recordID == rhs.recordID }
    public func hash(into hasher: inout Hasher) { hasher.combine(recordID) }
}
