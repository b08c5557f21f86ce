/// Helpers for reporting positions in text that was read byte by byte.
package enum SourceText {
    /// 1-based line and column (in characters) of a UTF-8 byte offset.
    package static func lineAndColumn(of offset: Int, in bytes: UnsafeBufferPointer<UInt8>) -> (line: Int, column: Int) {
        var line = 1
        var lineStart = 0
        for i in 0..<min(offset, bytes.count) where bytes[i] == 0x0A {
            line += 1
            lineStart = i + 1
        }
        let prefix = UnsafeBufferPointer(rebasing: bytes[lineStart..<min(offset, bytes.count)])
        return (line, String(decoding: prefix, as: UTF8.self).count + 1)
    }

    static func lineAndColumn(of offset: Int, in text: String) -> (line: Int, column: Int) {
        var text = text
        return text.withUTF8 { lineAndColumn(of: offset, in: $0) }
    }

    /// The full line of `text` containing byte `offset`, and the column's character offset in it.
    static func line(containing offset: Int, in text: String) -> String {
        let bytes = Array(text.utf8)
        let clamped = min(max(offset, 0), bytes.count)
        var start = clamped
        while start > 0, bytes[start - 1] != 0x0A { start -= 1 }
        var end = clamped
        while end < bytes.count, bytes[end] != 0x0A { end += 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// A byte as it can be shown in a one-line message.
    static func printable(_ byte: UInt8) -> String {
        (0x21...0x7E).contains(byte) ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
    }
}
