import KQuery
import KQueryContainer

/// Order-preserving keys of field values, as PostgreSQL stores and compares them.
///
/// A value's key is bytes whose order (memcmp, then length: PostgreSQL's order of `bytea`, and of
/// their lowercase hex under `COLLATE "C"`) is `SortOrder.compare`'s order, and whose equality is
/// its equality: numbers first (INT64 and DOUBLE in one exact numeric order, as `ValueOrder`
/// compares them), then timestamps, strings (UTF-8 bytes: code-point order, no normalization),
/// references (by record ID), bytes, asset IDs and locations. Lists and NaN have no place in the
/// order (`SortDescriptor.sortValue` sorts them with the missing values): they have no key.
///
/// Keys are stored as lowercase hex text `COLLATE "C"`: the hex of two byte strings compares as
/// the bytes do, and text binds as plain parameters and arrays.
package enum PostgresValueKey {
    /// The first byte of each kind's keys, in `SortOrder.rank` order.
    package enum Tag: UInt8 {
        case number = 0x10, timestamp = 0x20, string = 0x30, reference = 0x40, bytes = 0x50, assetID = 0x60, location = 0x70
    }

    /// The key of `value`, or nil for a list or a NaN.
    package static func bytes(_ value: FieldValue) -> [UInt8]? {
        var out: [UInt8] = []
        switch value {
        case .int64(let x):
            out.append(Tag.number.rawValue)
            // The nearest double (rounding is monotonic), then how far the integer lies from it:
            // at most 1024 either way, exact, so integers that share a double still order.
            let nearest = Double(x)
            let offset: Int64 = nearest >= 9_223_372_036_854_775_808.0 ? (x - Int64.max) - 1 : x - Int64(nearest)
            appendDouble(nearest, to: &out)
            appendOffset(offset, to: &out)
        case .double(let x):
            if x.isNaN { return nil }
            out.append(Tag.number.rawValue)
            appendDouble(x, to: &out)
            appendOffset(0, to: &out)
        case .timestamp(let t):
            out.append(Tag.timestamp.rawValue)
            appendInt(t, to: &out)
        case .string(let text):
            out.append(Tag.string.rawValue)
            out.append(contentsOf: text.utf8)
        case .reference(let reference):
            out.append(Tag.reference.rawValue)
            let id = reference.recordID
            appendEscaped(id.recordName.utf8, to: &out)
            appendEscaped(id.zoneID.zoneName.utf8, to: &out)
            appendEscaped(id.zoneID.ownerName.utf8, to: &out)
        case .bytes(let bytes):
            out.append(Tag.bytes.rawValue)
            out.append(contentsOf: bytes)
        case .assetID(let id):
            out.append(Tag.assetID.rawValue)
            out.append(contentsOf: id.utf8)
        case .location(let location):
            if location.latitude.isNaN || location.longitude.isNaN { return nil }
            out.append(Tag.location.rawValue)
            appendDouble(location.latitude, to: &out)
            appendDouble(location.longitude, to: &out)
        case .list:
            return nil
        }
        return out
    }

    /// The key as stored: lowercase hex.
    package static func key(_ value: FieldValue) -> String? {
        bytes(value).map(hex)
    }

    /// The keys of every kind `tag` begins: at least `lower(tag)` and below `upper(tag)`.
    package static func lower(_ tag: Tag) -> String { hex([tag.rawValue]) }
    package static func upper(_ tag: Tag) -> String { hex([tag.rawValue + 1]) }

    /// The least key above every key beginning with `prefix` (nil when there is none).
    package static func successor(ofPrefix prefix: [UInt8]) -> String? {
        var bytes = prefix
        while let last = bytes.last {
            if last < 0xFF {
                bytes[bytes.count - 1] = last + 1
                return hex(bytes)
            }
            bytes.removeLast()
        }
        return nil
    }

    package static func hex(_ bytes: [UInt8]) -> String { AssetSecrets.hex(bytes) }

    /// The most bytes of a key `record_values` indexes: a btree or GIN entry holds about 2,700
    /// bytes at most, and a string, bytes or token key is as long as its value (a 100 KB note).
    /// A longer key is stored as its first `indexedBytes` (`sort_key`, or the member) and the
    /// rest beside them (`sort_tail`, not indexed; members keep none). A key's head orders as the
    /// key does whenever the heads differ, so sorts order by the head, then the tail; a test
    /// against a constant whose key is shorter than `indexedBytes` is exact on the head, and one
    /// against a longer constant is widened to the heads (the evaluator, which tests every row
    /// SQL returns, has the last word: `PostgresQueryCompiler`).
    package static let indexedBytes = 1000

    /// `key` as stored: its indexed head, and the rest (nil: none).
    package static func stored(_ key: [UInt8]) -> (head: [UInt8], tail: [UInt8]?) {
        key.count <= indexedBytes ? (key, nil) : (Array(key[..<indexedBytes]), Array(key[indexedBytes...]))
    }

    /// A constant's hex key as tests compare it with stored heads: its head, and whether a test
    /// on the head is exact (a key shorter than `indexedBytes` is never a stored head's prefix
    /// that a longer stored key could share).
    package static func indexedHead(ofHex key: String) -> (head: String, exact: Bool) {
        (storedHex(key).head, key.utf8.count < 2 * indexedBytes)
    }

    /// A full hex key split as stored (`sort_key`, `sort_tail`).
    package static func storedHex(_ key: String) -> (head: String, tail: String?) {
        let limit = 2 * indexedBytes
        guard key.utf8.count > limit else { return (key, nil) }
        return (String(decoding: key.utf8.prefix(limit), as: UTF8.self), String(decoding: key.utf8.dropFirst(limit), as: UTF8.self))
    }

    /// The tag a constant's kind begins with, for range tests (nil for kinds with equality only).
    package static func orderedTag(_ value: FieldValue) -> Tag? {
        switch value {
        case .int64, .double: .number
        case .timestamp: .timestamp
        case .string: .string
        default: nil
        }
    }

    /// The latitude and longitude a location's key holds (hex, as stored), or nil when `key` is
    /// no location's.
    package static func location(ofKey key: String) -> (latitude: Double, longitude: Double)? {
        let bytes = Array(key.utf8)
        guard bytes.count == 34 else { return nil }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(17)
        var index = 0
        while index < bytes.count {
            guard let high = hexDigit(bytes[index]), let low = hexDigit(bytes[index + 1]) else { return nil }
            decoded.append(high << 4 | low)
            index += 2
        }
        guard decoded[0] == Tag.location.rawValue else { return nil }
        func double(at start: Int) -> Double {
            var ordered: UInt64 = 0
            for byte in decoded[start..<start + 8] { ordered = ordered << 8 | UInt64(byte) }
            return Double(bitPattern: ordered & (1 << 63) != 0 ? ordered & ~(1 << 63) : ~ordered)
        }
        return (double(at: 1), double(at: 9))
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    private static func appendDouble(_ x: Double, to out: inout [UInt8]) {
        // -0.0 equals 0.0; positive doubles order by their bits with the sign set, negative ones
        // by their bits inverted.
        let bits = (x == 0 ? 0.0 : x).bitPattern
        let ordered = bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
        appendBigEndian(ordered, to: &out)
    }

    private static func appendInt(_ x: Int64, to out: inout [UInt8]) {
        appendBigEndian(UInt64(bitPattern: x) ^ (1 << 63), to: &out)
    }

    private static func appendOffset(_ offset: Int64, to out: inout [UInt8]) {
        let biased = UInt16(truncatingIfNeeded: offset + 0x8000)
        out.append(UInt8(biased >> 8))
        out.append(UInt8(biased & 0xFF))
    }

    private static func appendBigEndian(_ x: UInt64, to out: inout [UInt8]) {
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: x >> UInt64(shift))) }
    }

    /// Bytes that may hold zeros, then a terminator that sorts before any byte: 0 becomes 0 1,
    /// the end 0 0, so a shorter name sorts first and the parts after it do not interfere.
    private static func appendEscaped(_ bytes: String.UTF8View, to out: inout [UInt8]) {
        for byte in bytes {
            out.append(byte)
            if byte == 0 { out.append(1) }
        }
        out.append(0)
        out.append(0)
    }
}
