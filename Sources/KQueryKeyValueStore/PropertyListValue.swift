import Foundation

/// A property-list value, what `NSUbiquitousKeyValueStore` holds: string, integer, real, boolean,
/// date, data, array and dictionary with string keys, nested to any depth. Equal values are equal
/// here (a store skips writing a value equal to the one it holds, as Apple's does).
public enum PropertyListValue: Hashable, Sendable {
    case string(String)
    case integer(Int64)
    case real(Double)
    case bool(Bool)
    case date(Date)
    case data(Data)
    case array([PropertyListValue])
    case dictionary([String: PropertyListValue])

    /// The value `object(forKey:)` gives: String, NSNumber-bridgeable Int64/Double/Bool, Date,
    /// Data, [Any] and [String: Any].
    public var foundationValue: Any {
        switch self {
        case .string(let value): value
        case .integer(let value): value
        case .real(let value): value
        case .bool(let value): value
        case .date(let value): value
        case .data(let value): value
        case .array(let values): values.map(\.foundationValue)
        case .dictionary(let values): values.mapValues(\.foundationValue)
        }
    }

    /// The value of a Foundation or Swift object, or nil when it is not a property list (what
    /// `PropertyListSerialization.propertyList(_:isValidFor:)` refuses, and integers beyond Int64).
    public init?(_ object: Any) {
        switch object {
        case let value as PropertyListValue: self = value
        case let value as String: self = .string(value)
        case let value as Bool where type(of: object) == Bool.self: self = .bool(value)
        // Before the Swift number types: a decoded real such as 2.0 would cast to Int.
        case let value as NSNumber: self = Self.number(value)
        case let value as Int: self = .integer(Int64(value))
        case let value as Int64: self = .integer(value)
        case let value as Int32: self = .integer(Int64(value))
        case let value as Int16: self = .integer(Int64(value))
        case let value as Int8: self = .integer(Int64(value))
        case let value as UInt8: self = .integer(Int64(value))
        case let value as UInt16: self = .integer(Int64(value))
        case let value as UInt32: self = .integer(Int64(value))
        case let value as UInt:
            guard let exact = Int64(exactly: value) else { return nil }
            self = .integer(exact)
        case let value as UInt64:
            guard let exact = Int64(exactly: value) else { return nil }
            self = .integer(exact)
        case let value as Double: self = .real(value)
        case let value as Float: self = .real(Double(value))
        case let value as Date: self = .date(value)
        case let value as Data: self = .data(value)
        case let values as [Any]:
            var members: [PropertyListValue] = []
            members.reserveCapacity(values.count)
            for member in values {
                guard let value = PropertyListValue(member) else { return nil }
                members.append(value)
            }
            self = .array(members)
        case let values as [String: Any]:
            var members: [String: PropertyListValue] = [:]
            members.reserveCapacity(values.count)
            for (key, member) in values {
                guard let value = PropertyListValue(member) else { return nil }
                members[key] = value
            }
            self = .dictionary(members)
        case let values as NSDictionary:
            var members: [String: PropertyListValue] = [:]
            for (key, member) in values {
                guard let key = key as? String, let value = PropertyListValue(member) else { return nil }
                members[key] = value
            }
            self = .dictionary(members)
        case let values as NSArray:
            var members: [PropertyListValue] = []
            for member in values {
                guard let value = PropertyListValue(member) else { return nil }
                members.append(value)
            }
            self = .array(members)
        default: return nil
        }
    }

    /// An NSNumber as the property list type its encoding names: booleans, reals, integers.
    private static func number(_ number: NSNumber) -> PropertyListValue {
        let type = String(cString: number.objCType)
        switch type {
        case "d", "f": return .real(number.doubleValue)
        case "Q", "L":
            if let exact = Int64(exactly: number.uint64Value) { return .integer(exact) }
            return .real(number.doubleValue)
        default: return .integer(number.int64Value)
        }
    }

    /// The Swift type name Apple's messages use for the value's class.
    var className: String {
        switch self {
        case .string: "NSString"
        case .integer, .real, .bool: "NSNumber"
        case .date: "NSDate"
        case .data: "NSData"
        case .array: "NSArray"
        case .dictionary: "NSDictionary"
        }
    }
}

extension PropertyListValue {
    /// Decodes a binary property list with Foundation's `PropertyListSerialization`. Bytes that
    /// are not one (a `KVSRecord` holds binary property lists only: XML and the old text format
    /// are refused before Foundation's parsers see them), or hold a type a store never holds, are
    /// an error.
    public init(propertyListBytes bytes: Data) throws(KeyValueStoreError) {
        guard BinaryPropertyList.isWellFormed(bytes) else {
            throw KeyValueStoreError(.invalidServerAnswer, "the value is not a binary property list (\(bytes.count) bytes)")
        }
        let object: Any
        do { object = try PropertyListSerialization.propertyList(from: bytes, options: [], format: nil) } catch {
            throw KeyValueStoreError(.invalidServerAnswer, "the value is not a property list (\(bytes.count) bytes)")
        }
        guard let value = PropertyListValue(object) else {
            throw KeyValueStoreError(.invalidServerAnswer, "the property list holds a value of type \(type(of: object)), which a store does not hold")
        }
        self = value
    }
}
