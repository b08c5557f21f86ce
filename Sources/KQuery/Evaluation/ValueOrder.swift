#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How field values compare (SPEC §2.4).
///
/// - Strings by Unicode code point (UTF-8 byte order), without normalization: Swift's own `==` and
///   `<` on `String` use canonical equivalence, which CloudKit does not, so they are not used here.
/// - INT64 and DOUBLE numerically and exactly: no conversion that rounds a large integer.
/// - TIMESTAMP with TIMESTAMP; references and record IDs by record name and zone (equality only);
///   bytes and asset IDs by equality only. Anything else is incomparable (`nil`).
public enum ValueOrder {
    /// The sign of `a` compared with `b` (-1, 0, 1), or nil when they cannot be compared.
    @inlinable
    public static func compare(_ a: FieldValue, _ b: FieldValue) -> Int? {
        switch (a, b) {
        case (.string(let x), .string(let y)): return compareBytes(x, y)
        case (.int64(let x), .int64(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        case (.double(let x), .double(let y)): return compare(x, y)
        case (.int64(let x), .double(let y)): return compare(x, y)
        case (.double(let x), .int64(let y)): return compare(y, x).map { -$0 }
        case (.timestamp(let x), .timestamp(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        default: return nil
        }
    }

    /// Whether `a` equals `b` under the same rules; nil when they cannot be compared.
    @inlinable
    public static func equal(_ a: FieldValue, _ b: FieldValue) -> Bool? {
        switch (a, b) {
        case (.reference(let x), .reference(let y)): return x.recordID == y.recordID
        case (.bytes(let x), .bytes(let y)): return x == y
        case (.assetID(let x), .assetID(let y)): return compareBytes(x, y) == 0
        case (.location(let x), .location(let y)): return x.latitude == y.latitude && x.longitude == y.longitude
        case (.list, _), (_, .list): return nil
        default: return compare(a, b).map { $0 == 0 }
        }
    }

    /// Whether `relation` holds between `a` and `b`; nil when incomparable (or, for values with
    /// equality only, for an ordering relation).
    @inlinable
    public static func holds(_ relation: Relation, _ a: FieldValue, _ b: FieldValue) -> Bool? {
        if let order = compare(a, b) { return relation.holds(order) }
        switch relation {
        case .equal: return equal(a, b)
        case .notEqual: return equal(a, b).map { !$0 }
        default: return nil
        }
    }

    @inlinable
    public static func compare(_ x: Double, _ y: Double) -> Int? {
        if x < y { return -1 }
        if x > y { return 1 }
        return x == y ? 0 : nil
    }

    /// Exact comparison of an integer with a double, with no rounding of either.
    @inlinable
    public static func compare(_ x: Int64, _ y: Double) -> Int? {
        if y.isNaN { return nil }
        if y >= 9_223_372_036_854_775_808.0 { return -1 }
        if y < -9_223_372_036_854_775_808.0 { return 1 }
        let whole = y.rounded(.towardZero)
        let integer = Int64(whole)
        if x < integer { return -1 }
        if x > integer { return 1 }
        let fraction = y - whole
        return fraction > 0 ? -1 : (fraction < 0 ? 1 : 0)
    }

    /// Code-point order of two strings, by their UTF-8 bytes.
    @inlinable
    public static func compareBytes(_ x: String, _ y: String) -> Int {
        var x = x
        var y = y
        return x.withUTF8 { a in y.withUTF8 { b in compareBytes(a, b) } }
    }

    /// Code-point order of two UTF-8 byte sequences (strings as the store's columns hold them).
    @inlinable
    public static func compareBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
        let common = Swift.min(a.count, b.count)
        if common > 0, let pa = a.baseAddress, let pb = b.baseAddress {
            let result = memcmp(pa, pb, common)
            if result != 0 { return result < 0 ? -1 : 1 }
        }
        return a.count < b.count ? -1 : (a.count == b.count ? 0 : 1)
    }

    /// Byte equality (not Swift's `==`, which uses canonical equivalence). Strings of different
    /// UTF-8 lengths are rejected without reading their bytes.
    @inlinable
    public static func equalBytes(_ x: String, _ y: String) -> Bool {
        guard x.utf8.count == y.utf8.count else { return false }
        return compareBytes(x, y) == 0
    }

    /// Whether the UTF-8 bytes of `x` start with those of `prefix`.
    @inlinable
    public static func hasBytePrefix(_ x: String, _ prefix: String) -> Bool {
        var x = x
        var prefix = prefix
        return x.withUTF8 { a in prefix.withUTF8 { p in hasBytePrefix(a, p) } }
    }

    @inlinable
    public static func hasBytePrefix(_ a: UnsafeBufferPointer<UInt8>, _ p: UnsafeBufferPointer<UInt8>) -> Bool {
        guard p.count <= a.count else { return false }
        guard p.count > 0, let pa = a.baseAddress, let pp = p.baseAddress else { return true }
        return memcmp(pa, pp, p.count) == 0
    }

    @inlinable
    public static func hasByteSuffix(_ x: String, _ suffix: String) -> Bool {
        var x = x
        var suffix = suffix
        return x.withUTF8 { a in suffix.withUTF8 { s in hasByteSuffix(a, s) } }
    }

    @inlinable
    public static func hasByteSuffix(_ a: UnsafeBufferPointer<UInt8>, _ s: UnsafeBufferPointer<UInt8>) -> Bool {
        guard s.count <= a.count else { return false }
        guard s.count > 0, let pa = a.baseAddress, let ps = s.baseAddress else { return true }
        return memcmp(pa + (a.count - s.count), ps, s.count) == 0
    }

    /// Whether the UTF-8 bytes of `needle` occur in those of `x`.
    @inlinable
    public static func containsBytes(_ x: String, _ needle: String) -> Bool {
        var x = x
        var needle = needle
        return x.withUTF8 { a in needle.withUTF8 { n in containsBytes(a, n) } }
    }

    @inlinable
    public static func containsBytes(_ a: UnsafeBufferPointer<UInt8>, _ n: UnsafeBufferPointer<UInt8>) -> Bool {
        guard n.count > 0 else { return true }
        guard n.count <= a.count, let pa = a.baseAddress, let pn = n.baseAddress else { return false }
        // First-byte scan with memchr, then memcmp: glibc's memmem is not exported to Swift.
        let first = Int32(pn[0])
        var offset = 0
        let last = a.count - n.count
        while offset <= last {
            guard let hit = memchr(pa + offset, first, last - offset + 1) else { return false }
            let index = UnsafeRawPointer(hit) - UnsafeRawPointer(pa)
            if memcmp(pa + index, pn, n.count) == 0 { return true }
            offset = index + 1
        }
        return false
    }
}
