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
        buffer.writeString(String(value))
    }

    mutating func null() {
        separate()
        buffer.writeStaticString("\\N")
    }

    /// A `bytea` in hex: `\x` (its backslash escaped for COPY) and two digits a byte.
    mutating func bytea(_ bytes: [UInt8]) {
        separate()
        buffer.writeStaticString("\\\\x")
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: bytes.count * 2) { out in
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = Self.hexDigit(byte >> 4)
                out[2 * index + 1] = Self.hexDigit(byte & 0x0F)
            }
            return bytes.count * 2
        }
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

    /// A `text[]` of the elements of a comma-separated list (`string_to_array(list, ',')`):
    /// written as it is when it is lowercase hex between single commas, as the keys of
    /// `PostgresRecordValues` are (no element then needs quoting: none is empty or `NULL`).
    mutating func textArray(commaSeparated list: String) throws(UnstorableText) {
        guard !list.isEmpty else { return try textArray([String]()) }
        if list.utf8.withContiguousStorageIfAvailable(Self.isPlainList) ?? false {
            separate()
            buffer.writeInteger(UInt8(ascii: "{"))
            buffer.writeString(list)
            buffer.writeInteger(UInt8(ascii: "}"))
            return
        }
        try textArray(list.split(separator: ",", omittingEmptySubsequences: false))
    }

    private static func isPlainList(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var previous = UInt8(ascii: ",")
        for byte in bytes {
            if byte == UInt8(ascii: ",") {
                if previous == byte { return false }
            } else if !(byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) && !(byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f")) {
                return false
            }
            previous = byte
        }
        return previous != UInt8(ascii: ",")
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
