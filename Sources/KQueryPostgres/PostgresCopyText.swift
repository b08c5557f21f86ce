import KQueryContainer
import NIOCore

/// Rows in the text format of `COPY ... FROM STDIN` (PostgreSQL's "Text Format" of COPY): columns
/// separated by a tab, rows ended by a newline, NULL as `\N`, and in a value a backslash, tab,
/// newline and carriage return escaped by a backslash. A `bytea` goes as `\\x` and its hex (the
/// backslash of its own escape, escaped), an array as a `{...}` literal, each element quoted and
/// escaped when it needs to be.
///
/// Why COPY: a `kquery migrate` page as `unnest` arrays made PostgreSQL parse every array and
/// upsert every row; COPY's text rows are parsed once, in a stream.
struct PostgresCopyText {
    private(set) var buffer: ByteBuffer
    /// Whether the row under way has a column yet (the next one is preceded by a tab).
    private var rowStarted = false

    init(capacity: Int = 1 << 16) {
        buffer = ByteBufferAllocator().buffer(capacity: capacity)
    }

    /// Text PostgreSQL cannot hold: a U+0000 (SQLSTATE 22021 for a statement, a broken COPY here).
    struct UnstorableText: Error {
        let text: String
    }

    mutating func text(_ value: String) throws(UnstorableText) {
        separate()
        // Most names need no escape: written in one piece.
        if value.utf8.withContiguousStorageIfAvailable(Self.needsNoEscape) ?? false {
            buffer.writeString(value)
            return
        }
        for byte in value.utf8 {
            guard byte != 0 else { throw UnstorableText(text: value) }
            escape(byte)
        }
    }

    private static func needsNoEscape(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        for byte in bytes where byte == 0 || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") {
            return false
        }
        return true
    }

    /// The columns written in `other` (leading columns many rows share, escaped once).
    mutating func columns(_ other: PostgresCopyText) {
        separate()
        buffer.writeBytes(other.buffer.readableBytesView)
    }

    mutating func int(_ value: Int64) {
        separate()
        // Digits written in place, last first (a String for each was a tenth of a copy's time).
        var magnitude = value.magnitude
        var digits = 1
        var rest = magnitude / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        let count = digits + (value < 0 ? 1 : 0)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { out in
            var index = count - 1
            repeat {
                out[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                index -= 1
            } while magnitude > 0
            if value < 0 { out[0] = UInt8(ascii: "-") }
            return count
        }
    }

    /// Bytes as lowercase hex text (a key of `PostgresValueKey`: nothing to escape).
    mutating func hex(_ bytes: [UInt8]) {
        separate()
        writeHex(bytes)
    }

    /// A `text[]` of byte strings as lowercase hex (the members of `PostgresRecordValues`: no
    /// element needs quoting, an empty one aside).
    mutating func hexArray(_ elements: [[UInt8]]) {
        separate()
        buffer.writeInteger(UInt8(ascii: "{"))
        for (index, element) in elements.enumerated() {
            if index > 0 { buffer.writeInteger(UInt8(ascii: ",")) }
            if element.isEmpty { buffer.writeStaticString("\"\"") } else { writeHex(element) }
        }
        buffer.writeInteger(UInt8(ascii: "}"))
    }

    private mutating func writeHex(_ bytes: [UInt8]) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: bytes.count * 2) { out in
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = Self.hexDigit(byte >> 4)
                out[2 * index + 1] = Self.hexDigit(byte & 0x0F)
            }
            return bytes.count * 2
        }
    }

    mutating func null() {
        separate()
        buffer.writeStaticString("\\N")
    }

    /// A `bytea` in hex: `\x` (its backslash escaped for COPY) and two digits a byte.
    mutating func bytea(_ bytes: [UInt8]) {
        separate()
        buffer.writeStaticString("\\\\x")
        writeHex(bytes)
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
    }

    /// A `text[]` literal. An element is quoted when the array syntax would read it otherwise
    /// (empty, `NULL`, or holding a brace, comma, quote, backslash or space), a quote or
    /// backslash in it escaped by a backslash, and the whole then escaped for COPY.
    mutating func textArray<Elements: Sequence>(_ elements: Elements) throws(UnstorableText) where Elements.Element: StringProtocol {
        separate()
        buffer.writeStaticString("{")
        var first = true
        for element in elements {
            if !first { buffer.writeStaticString(",") }
            first = false
            let utf8 = element.utf8
            let plain = !utf8.isEmpty && !(utf8.count == 4 && element.lowercased() == "null") && !utf8.contains {
                $0 == UInt8(ascii: "{") || $0 == UInt8(ascii: "}") || $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"")
                    || $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: " ") || ($0 >= 0x09 && $0 <= 0x0D) || $0 == 0
            }
            if plain {
                buffer.writeBytes(utf8)
                continue
            }
            if utf8.contains(0) { throw UnstorableText(text: String(element)) }
            buffer.writeStaticString("\"")
            for byte in utf8 {
                // The array's escape is a backslash, itself escaped for COPY: `\\`.
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { buffer.writeStaticString("\\\\") }
                escape(byte)
            }
            buffer.writeStaticString("\"")
        }
        buffer.writeStaticString("}")
    }

    /// Ends the row.
    mutating func endRow() {
        buffer.writeInteger(UInt8(ascii: "\n"))
        rowStarted = false
    }

    /// Hands over what was written, and starts again empty.
    mutating func take() -> ByteBuffer {
        let taken = buffer
        buffer = ByteBufferAllocator().buffer(capacity: taken.capacity)
        rowStarted = false
        return taken
    }

    private mutating func separate() {
        if rowStarted { buffer.writeInteger(UInt8(ascii: "\t")) }
        rowStarted = true
    }

    private mutating func escape(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
        case UInt8(ascii: "\t"): buffer.writeStaticString("\\t")
        case UInt8(ascii: "\n"): buffer.writeStaticString("\\n")
        case UInt8(ascii: "\r"): buffer.writeStaticString("\\r")
        default: buffer.writeInteger(byte)
        }
    }
}
