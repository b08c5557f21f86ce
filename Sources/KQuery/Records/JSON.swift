/// A JSON document as KQuery reads and writes it.
///
/// KQuery has its own reader rather than Foundation's `JSONSerialization` for three reasons:
/// integers stay exact `Int64` (CloudKit INT64 values above 2^53 must not round), `1` and `1.0` stay
/// distinguishable (the shorthand record form infers INT64 vs DOUBLE from them), and errors carry the
/// line and column of the problem.
public enum JSON: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    /// Members in document order.
    case object([(String, JSON)])

    public static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.double(let a), .double(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let b): hasher.combine(b)
        case .int(let i): hasher.combine(i)
        case .double(let d): hasher.combine(d)
        case .string(let s): hasher.combine(s)
        case .array(let a): hasher.combine(a)
        case .object(let members):
            for (key, value) in members {
                hasher.combine(key)
                hasher.combine(value)
            }
        }
    }

    public subscript(key: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }

    /// The element at `index` of an array; nil for anything else or an index out of range.
    public subscript(index: Int) -> JSON? {
        guard case .array(let elements) = self, elements.indices.contains(index) else { return nil }
        return elements[index]
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The value as a number, whether it was written as an integer or not.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): Double(i)
        case .double(let d): d
        default: nil
        }
    }

    public var int64Value: Int64? {
        switch self {
        case .int(let i): i
        case .double(let d) where d.rounded() == d && abs(d) < 9.2e18: Int64(d)
        default: nil
        }
    }

    /// A short name of the value's kind, for error messages.
    public var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .int, .double: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// A JSON syntax error with its position (1-based line and column, counted in characters).
public struct JSONError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public var line: Int
    public var column: Int
    public var description: String { "\(line):\(column): \(message)" }
}

extension JSON {
    /// The deepest nesting the reader accepts; deeper input is an error, never a stack overflow.
    public static let maximumDepth = 256

    /// Parses one JSON document; trailing non-space characters are an error.
    public static func parse(_ text: String) throws(JSONError) -> JSON {
        var text = text
        return try text.withUTF8 { bytes in Result { () throws(JSONError) in try parse(bytes: bytes) } }.get()
    }

    /// Parses a document from bytes.
    public static func parse(bytes: UnsafeBufferPointer<UInt8>) throws(JSONError) -> JSON {
        var reader = _JSONReader(bytes: bytes)
        return try reader.readDocument()
    }
}

struct _JSONReader {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    mutating func readDocument() throws(JSONError) -> JSON {
        skipSpace()
        let value = try readValue()
        skipSpace()
        if position < bytes.count { throw error("unexpected characters after the JSON value") }
        return value
    }

    func error(_ message: String, at offset: Int? = nil) -> JSONError {
        let (line, column) = SourceText.lineAndColumn(of: min(offset ?? position, bytes.count), in: bytes)
        return JSONError(message: message, line: line, column: column)
    }

    mutating func skipSpace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    mutating func readValue() throws(JSONError) -> JSON {
        guard position < bytes.count else { throw error("unexpected end of input: expected a value") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try readObject()
        case UInt8(ascii: "["): return try readArray()
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"): return try readLiteral("true", .bool(true))
        case UInt8(ascii: "f"): return try readLiteral("false", .bool(false))
        case UInt8(ascii: "n"): return try readLiteral("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try readNumber()
        default: throw error("unexpected character '\(SourceText.printable(bytes[position]))': expected a value")
        }
    }

    mutating func readLiteral(_ word: StaticString, _ value: JSON) throws(JSONError) -> JSON {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count,
              (0..<count).allSatisfy({ bytes[position + $0] == word.utf8Start[$0] })
        else { throw error("invalid literal: expected \(word)") }
        position += count
        return value
    }

    mutating func enter() throws(JSONError) {
        depth += 1
        if depth > JSON.maximumDepth { throw error("nesting deeper than \(JSON.maximumDepth) levels") }
    }

    mutating func readObject() throws(JSONError) -> JSON {
        try enter()
        defer { depth -= 1 }
        position += 1
        var members: [(String, JSON)] = []
        skipSpace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        while true {
            skipSpace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else {
                throw error("expected a member name in double quotes")
            }
            let key = try readString()
            skipSpace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw error("expected ':' after member name") }
            position += 1
            skipSpace()
            members.append((key, try readValue()))
            skipSpace()
            guard position < bytes.count else { throw error("unexpected end of input: unterminated object") }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                continue
            }
            if bytes[position] == UInt8(ascii: "}") {
                position += 1
                return .object(members)
            }
            throw error("expected ',' or '}' in object")
        }
    }

    mutating func readArray() throws(JSONError) -> JSON {
        try enter()
        defer { depth -= 1 }
        position += 1
        var elements: [JSON] = []
        skipSpace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array(elements)
        }
        while true {
            skipSpace()
            elements.append(try readValue())
            skipSpace()
            guard position < bytes.count else { throw error("unexpected end of input: unterminated array") }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                continue
            }
            if bytes[position] == UInt8(ascii: "]") {
                position += 1
                return .array(elements)
            }
            throw error("expected ',' or ']' in array")
        }
    }

    mutating func readString() throws(JSONError) -> String {
        let start = position
        position += 1
        let contentStart = position
        // Fast path: no escapes.
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[contentStart..<position])
                position += 1
                return try validated(slice, start: contentStart)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("control character in string") }
            position += 1
        }
        var scalars = Array(UnsafeBufferPointer(rebasing: bytes[contentStart..<position]))
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return try scalars.withUnsafeBufferPointer { buffer throws(JSONError) in try validated(buffer, start: contentStart) }
            case UInt8(ascii: "\\"):
                position += 1
                guard position < bytes.count else { break }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append(0x22)
                case UInt8(ascii: "\\"): scalars.append(0x5C)
                case UInt8(ascii: "/"): scalars.append(0x2F)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    let scalar = try readUnicodeEscape()
                    scalars.append(contentsOf: String(Character(scalar)).utf8)
                default: throw error("invalid escape '\\\(SourceText.printable(escape))' in string", at: position - 2)
                }
            default:
                if byte < 0x20 { throw error("control character in string") }
                scalars.append(byte)
                position += 1
            }
        }
        throw error("unterminated string", at: start)
    }

    mutating func readHex4() throws(JSONError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw error("incomplete \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = SourceText.hexValue(bytes[position]) else { throw error("invalid hex digit in \\u escape") }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    mutating func readUnicodeEscape() throws(JSONError) -> Unicode.Scalar {
        let first = try readHex4()
        if (0xD800...0xDBFF).contains(first) {
            guard position + 2 <= bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                throw error("unpaired surrogate in \\u escape")
            }
            position += 2
            let second = try readHex4()
            guard (0xDC00...0xDFFF).contains(second) else { throw error("unpaired surrogate in \\u escape") }
            let combined = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            guard let scalar = Unicode.Scalar(combined) else { throw error("invalid \\u escape") }
            return scalar
        }
        guard let scalar = Unicode.Scalar(first) else { throw error("unpaired surrogate in \\u escape") }
        return scalar
    }

    func validated(_ slice: UnsafeBufferPointer<UInt8>, start: Int) throws(JSONError) -> String {
        guard let string = String(validating: slice, as: UTF8.self) else { throw error("invalid UTF-8 in string", at: start) }
        return string
    }

    mutating func readNumber() throws(JSONError) -> JSON {
        let start = position
        var isInteger = true
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        let digitsStart = position
        while position < bytes.count, bytes[position].isASCIIDigit { position += 1 }
        if position == digitsStart { throw error("invalid number", at: start) }
        if bytes[digitsStart] == UInt8(ascii: "0"), position - digitsStart > 1 { throw error("leading zero in number", at: start) }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            let fractionStart = position
            while position < bytes.count, bytes[position].isASCIIDigit { position += 1 }
            if position == fractionStart { throw error("invalid number: digits expected after '.'", at: start) }
        }
        if position < bytes.count, bytes[position] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            let exponentStart = position
            while position < bytes.count, bytes[position].isASCIIDigit { position += 1 }
            if position == exponentStart { throw error("invalid number: digits expected in exponent", at: start) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        if isInteger, let integer = Int64(text) { return .int(integer) }
        guard let double = Double(text), double.isFinite else { throw error("number out of range", at: start) }
        return .double(double)
    }
}

extension JSON {
    /// Compact serialization (no spaces), members in their stored order.
    public var serialized: String { String(decoding: serializedBytes, as: UTF8.self) }

    /// Appends `serialized` to `out`.
    public func write(to out: inout String) { out += serialized }

    /// The shortest text that reads back as the same double; integral values keep a `.0`.
    static func format(_ d: Double) -> String {
        guard d.isFinite else { return "null" }
        return d.description
    }

    /// `serialized` as UTF-8 bytes, written straight into an array (what a server sends): no
    /// string growth on the way.
    public var serializedBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(to: &out)
        return out
    }

    /// Appends `serialized`'s UTF-8 bytes to `out`.
    public func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): JSON.writeInteger(i, to: &out)
        case .double(let d): out.append(contentsOf: JSON.format(d).utf8)
        case .string(let s): JSON.writeString(s, to: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (i, element) in elements.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                element.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSON.writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeInteger(_ value: Int64, to out: inout [UInt8]) {
        guard value != .min else { out.append(contentsOf: String(value).utf8); return }
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // room for 24 digits, written back to front
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[23 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            out.append(contentsOf: buffer[(24 - count)...])
        }
    }

    static func writeString(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { writeString(bytes: $0, to: &out) }
    }

    /// A string's UTF-8 as a JSON string. Read through `withUTF8`, its bytes are scanned and copied
    /// as one buffer (its `utf8` view went byte by byte: 6% of a server's query time).
    static func writeString(bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: appended whole.
        guard bytes.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }) else {
            out.append(contentsOf: bytes)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case UInt8(ascii: "\n"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case UInt8(ascii: "\r"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case UInt8(ascii: "\t"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case _ where byte < 0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The number of UTF-8 bytes `serialized` has, counted without writing it.
    public var serializedSize: Int {
        switch self {
        case .null: 4
        case .bool(let b): b ? 4 : 5
        case .int(let i): String(i).utf8.count
        case .double(let d): JSON.format(d).utf8.count
        case .string(let s): JSON.stringSize(s)
        // Brackets, and a comma between elements; a member adds its key and a colon.
        case .array(let elements): elements.reduce(2 + max(elements.count - 1, 0)) { $0 + $1.serializedSize }
        case .object(let members): members.reduce(2 + max(members.count - 1, 0)) { $0 + JSON.stringSize($1.0) + 1 + $1.1.serializedSize }
        }
    }

    /// At least `serializedSize`, found without reading text (a string's byte count is stored) or
    /// formatting numbers: a value this bound shows to fit needs no exact measure.
    var serializedSizeBound: Int {
        switch self {
        case .null, .bool: return 5
        // An Int64 in decimal takes at most 20 bytes; a Double's shortest text at most 24.
        case .int: return 20
        case .double: return 24
        // Quotes, and at most six bytes (`\u001f`) for each byte of the text.
        case .string(let s): return 2 + 6 * s.utf8.count
        case .array(let elements):
            var size = 2 + max(elements.count - 1, 0)
            for index in elements.indices { size += elements[index].serializedSizeBound }
            return size
        case .object(let members):
            var size = 2 + max(members.count - 1, 0)
            for index in members.indices { size += 3 + 6 * members[index].0.utf8.count + members[index].1.serializedSizeBound }
            return size
        }
    }

    /// The bytes `writeString` writes for `s`, quotes included.
    static func stringSize(_ s: String) -> Int {
        var size = 2
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): size += 2
            case _ where byte < 0x20: size += 6
            default: size += 1
            }
        }
        return size
    }
}
