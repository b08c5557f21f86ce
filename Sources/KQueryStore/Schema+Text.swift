import KQuery

/// The CloudKit Schema Language (the `.ckdb` text `cktool` reads and writes):
///
/// ```
/// DEFINE SCHEMA
///     RECORD TYPE Artwork (
///         "___createTime" TIMESTAMP QUERYABLE SORTABLE,
///         title           STRING QUERYABLE SEARCHABLE SORTABLE,
///         price           INT64 QUERYABLE SORTABLE,
///         tags            LIST<STRING> QUERYABLE,
///         location        LOCATION QUERYABLE,
///         GRANT READ TO "_world"
///     );
/// ```
///
/// Roles, grants and ENCRYPTED are read and ignored (they do not change what queries may do);
/// NUMBER [PREFERRED AS ...] is an INT64-or-DOUBLE field. Comments run from `//` or `--` to the end
/// of the line.
extension Schema {
    public init(text: String) throws(SchemaTextError) {
        var reader = SchemaTextReader(text)
        self = try reader.schema()
    }

    /// The schema in the Schema Language; `Schema(text:)` reads it back to an equal schema.
    public var text: String {
        var out = "DEFINE SCHEMA\n"
        for type in recordTypes {
            out += "\n    RECORD TYPE \(type.name) (\n"
            let lines = type.fields.map { field in
                let name = field.field.webServicesName
                var line = FieldKey.isValidName(name) ? name : "\"\(name)\""
                line += " \(field.type)"
                for (index, keyword) in FieldSchema.Indexes.keywords where field.indexes.contains(index) { line += " " + keyword }
                return "        " + line
            }
            out += lines.joined(separator: ",\n") + "\n    );\n"
        }
        return out
    }
}

/// A schema text that does not parse: what is wrong, and where.
public struct SchemaTextError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public var line: Int
    public var column: Int

    public var description: String { "\(line):\(column): \(message)" }
}

/// A small hand-written reader: tokens are words, quoted names, and single punctuation characters.
struct SchemaTextReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ text: String) { bytes = Array(text.utf8) }

    private enum Token: Equatable {
        case word(String)
        case quoted(String)
        case symbol(UInt8)
        case end
    }

    mutating func schema() throws(SchemaTextError) -> Schema {
        try expectWord("DEFINE")
        try expectWord("SCHEMA")
        var schema = Schema()
        while true {
            let start = offset
            switch try next() {
            case .end:
                return schema
            case .symbol(UInt8(ascii: ";")):
                continue
            case .word(let word) where word.uppercased() == "CREATE":
                try expectWord("ROLE")
                _ = try name("a role name")
            case .word(let word) where word.uppercased() == "RECORD":
                try expectWord("TYPE")
                let typeStart = offset
                let typeName = try name("a record type name")
                guard FieldKey.isValidName(typeName) else {
                    throw error("invalid record type name '\(typeName)' (expected [a-zA-Z][0-9a-zA-Z_]*)", at: typeStart)
                }
                if schema[typeName] != nil { throw error("record type '\(typeName)' is defined twice", at: typeStart) }
                schema[typeName] = try recordTypeBody(typeName)
            default:
                throw error("expected RECORD TYPE or CREATE ROLE", at: start)
            }
        }
    }

    private mutating func recordTypeBody(_ typeName: String) throws(SchemaTextError) -> RecordTypeSchema {
        try expectSymbol("(")
        var fields: [FieldSchema] = []
        while true {
            let start = offset
            let token = try next()
            if case .word(let word) = token, word.uppercased() == "GRANT" {
                try grant()
            } else if case .symbol(UInt8(ascii: ")")) = token, fields.isEmpty {
                break
            } else {
                offset = start
                let fieldName = try name("a field name")
                let field = FieldReference(webServicesName: fieldName)
                if case .user = field, !FieldKey.isValidName(fieldName), !fieldName.hasPrefix("___") {
                    throw error("invalid field name '\(fieldName)' (expected [a-zA-Z][0-9a-zA-Z_]*)", at: start)
                }
                if fields.contains(where: { $0.field == field }) { throw error("field '\(fieldName)' is defined twice", at: start) }
                let type = try valueType()
                var indexes: FieldSchema.Indexes = []
                while let keyword = peekWord(), let index = FieldSchema.Indexes.keywords.first(where: { $0.keyword == keyword.uppercased() }) {
                    _ = try next()
                    indexes.insert(index.index)
                }
                fields.append(FieldSchema(field, type, indexes))
            }
            let separator = offset
            switch try next() {
            case .symbol(UInt8(ascii: ",")): continue
            case .symbol(UInt8(ascii: ")")): return RecordTypeSchema(name: typeName, fields: fields)
            default: throw error("expected ',' or ')' after a field of '\(typeName)'", at: separator)
            }
        }
        return RecordTypeSchema(name: typeName, fields: fields)
    }

    /// `GRANT READ, WRITE TO role`: permissions are not modelled, so only the syntax is checked.
    private mutating func grant() throws(SchemaTextError) {
        while true {
            let start = offset
            guard case .word(let word) = try next(), ["READ", "CREATE", "WRITE"].contains(word.uppercased()) else {
                throw error("expected READ, CREATE or WRITE after GRANT", at: start)
            }
            if peekSymbol(",") { _ = try next(); continue }
            try expectWord("TO")
            _ = try name("a role name")
            return
        }
    }

    private mutating func valueType() throws(SchemaTextError) -> FieldSchema.ValueType {
        let start = offset
        guard case .word(var word) = try next() else { throw error("expected a field type", at: start) }
        word = word.uppercased()
        if word == "ENCRYPTED" { return try valueType() }
        if word == "LIST" {
            try expectSymbol("<")
            let member = try valueType()
            try expectSymbol(">")
            guard case .scalar(let type) = member else { throw error("a LIST holds a scalar type", at: start) }
            return .list(type)
        }
        if word == "NUMBER" {
            if let next = peekWord(), next.uppercased() == "PREFERRED" {
                _ = try self.next()
                try expectWord("AS")
                let preferredStart = offset
                guard case .word(let preferred) = try self.next(), ["INT64", "DOUBLE"].contains(preferred.uppercased()) else {
                    throw error("expected INT64 or DOUBLE after PREFERRED AS", at: preferredStart)
                }
            }
            return .number
        }
        guard let type = FieldType(schemaName: word) else {
            throw error("unknown field type '\(word)' (expected ASSET, BYTES, DOUBLE, INT64, LOCATION, NUMBER, REFERENCE, STRING, TIMESTAMP or LIST<...>)", at: start)
        }
        return .scalar(type)
    }

    // MARK: Tokens

    private mutating func name(_ what: String) throws(SchemaTextError) -> String {
        let start = offset
        switch try next() {
        case .word(let word), .quoted(let word): return word
        default: throw error("expected \(what)", at: start)
        }
    }

    private mutating func expectWord(_ keyword: String) throws(SchemaTextError) {
        let start = offset
        guard case .word(let word) = try next(), word.uppercased() == keyword else { throw error("expected \(keyword)", at: start) }
    }

    private mutating func expectSymbol(_ symbol: Unicode.Scalar) throws(SchemaTextError) {
        let start = offset
        guard try next() == .symbol(UInt8(ascii: symbol)) else { throw error("expected '\(symbol)'", at: start) }
    }

    private mutating func peekWord() -> String? {
        let start = offset
        defer { offset = start }
        if case .word(let word)? = try? next() { return word }
        return nil
    }

    private mutating func peekSymbol(_ symbol: Unicode.Scalar) -> Bool {
        let start = offset
        defer { offset = start }
        return (try? next()) == .symbol(UInt8(ascii: symbol))
    }

    private mutating func skipSpaceAndComments() {
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D {
                offset += 1
            } else if offset + 1 < bytes.count,
                      (byte == UInt8(ascii: "/") && bytes[offset + 1] == UInt8(ascii: "/")) || (byte == UInt8(ascii: "-") && bytes[offset + 1] == UInt8(ascii: "-")) {
                while offset < bytes.count, bytes[offset] != 0x0A { offset += 1 }
            } else {
                return
            }
        }
    }

    private mutating func next() throws(SchemaTextError) -> Token {
        skipSpaceAndComments()
        guard offset < bytes.count else { return .end }
        let start = offset
        let byte = bytes[offset]
        if byte.isASCIILetter || byte == UInt8(ascii: "_") {
            while offset < bytes.count, bytes[offset].isASCIILetter || bytes[offset].isASCIIDigit || bytes[offset] == UInt8(ascii: "_") { offset += 1 }
            return .word(String(decoding: bytes[start..<offset], as: UTF8.self))
        }
        if byte == UInt8(ascii: "\"") {
            offset += 1
            while offset < bytes.count, bytes[offset] != UInt8(ascii: "\""), bytes[offset] != 0x0A { offset += 1 }
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw error("unterminated quoted name", at: start) }
            offset += 1
            return .quoted(String(decoding: bytes[(start + 1)..<(offset - 1)], as: UTF8.self))
        }
        offset += 1
        return .symbol(byte)
    }

    /// An error at the first visible character from `position` on.
    private func error(_ message: String, at position: Int) -> SchemaTextError {
        var start = min(position, bytes.count)
        while start < bytes.count, bytes[start] == 0x20 || bytes[start] == 0x09 || bytes[start] == 0x0A || bytes[start] == 0x0D { start += 1 }
        let (line, column) = bytes.withUnsafeBufferPointer { SourceText.lineAndColumn(of: start, in: $0) }
        return SchemaTextError(message: message, line: line, column: column)
    }
}
