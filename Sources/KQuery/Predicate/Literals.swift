/// Literal functions: text forms for values NSPredicate cannot spell (SPEC §2.3), folded to
/// constants when parsed and printed back by `Literals.text(of:)`.
enum Literals {
    /// Returns the constant for a literal function call, nil when `name` is not a literal function.
    static func fold(name: String, arguments: [ExpressionSyntax], span: SourceSpan) throws(InvalidPredicateError) -> Constant? {
        switch name.lowercased() {
        case "date":
            let text = try string(arguments, at: 0, of: "date", count: 1, span: span)
            guard let milliseconds = Timestamp.parseISO8601(text) else {
                throw InvalidPredicateError("Invalid argument value: '\(text)' is not an ISO-8601 date", at: arguments[0].span)
            }
            return .value(.timestamp(milliseconds))
        case "cast":
            guard arguments.count == 2, case .constant(.value(.string(let type)), _) = arguments[1] else {
                throw InvalidPredicateError("CAST takes a value and a type name, as in CAST(726000000, \"NSDate\")", at: span)
            }
            guard type == "NSDate" else {
                throw InvalidPredicateError("Unsupported CAST type '\(type)' (only \"NSDate\")", at: arguments[1].span)
            }
            let seconds: Double
            switch arguments[0] {
            case .constant(.value(.int64(let i)), _): seconds = Double(i)
            case .constant(.value(.double(let d)), _): seconds = d
            case .constant(.value(.string(let s)), _):
                guard let parsed = Double(s) else {
                    throw InvalidPredicateError("Invalid argument value: CAST needs a number of seconds", at: arguments[0].span)
                }
                seconds = parsed
            default: throw InvalidPredicateError("Invalid argument value: CAST needs a number of seconds", at: arguments[0].span)
            }
            let milliseconds = ((seconds + Double(Timestamp.referenceDateOffset)) * 1000).rounded()
            guard milliseconds.magnitude < 9.0e15 else {
                throw InvalidPredicateError("Invalid argument value: date out of range", at: arguments[0].span)
            }
            return .value(.timestamp(Int64(milliseconds)))
        case "location":
            guard arguments.count == 2 else {
                throw InvalidPredicateError("location takes a latitude and a longitude, as in location(37.78, -122.4)", at: span)
            }
            let latitude = try number(arguments[0])
            let longitude = try number(arguments[1])
            guard (-90...90).contains(latitude) else {
                throw InvalidPredicateError("Invalid argument value: latitude \(latitude) is outside -90...90", at: arguments[0].span)
            }
            guard (-180...180).contains(longitude) else {
                throw InvalidPredicateError("Invalid argument value: longitude \(longitude) is outside -180...180", at: arguments[1].span)
            }
            return .value(.location(Location(latitude: latitude, longitude: longitude)))
        case "reference", "recordid":
            guard (1...3).contains(arguments.count) else {
                throw InvalidPredicateError("\(name) takes a record name and optionally a zone name and owner", at: span)
            }
            let recordName = try string(arguments, at: 0, of: name, count: arguments.count, span: span)
            guard !recordName.isEmpty else { throw InvalidPredicateError("Invalid argument value: empty record name", at: arguments[0].span) }
            var zone = ZoneID.default
            if arguments.count >= 2 { zone.zoneName = try string(arguments, at: 1, of: name, count: arguments.count, span: span) }
            if arguments.count == 3 { zone.ownerName = try string(arguments, at: 2, of: name, count: 3, span: span) }
            return .value(.reference(Reference(recordID: RecordID(recordName: recordName, zoneID: zone))))
        default:
            return nil
        }
    }

    private static func string(_ arguments: [ExpressionSyntax], at index: Int, of name: String, count: Int, span: SourceSpan) throws(InvalidPredicateError) -> String {
        guard arguments.count == count else {
            throw InvalidPredicateError("\(name) takes \(count) argument\(count == 1 ? "" : "s")", at: span)
        }
        guard case .constant(.value(.string(let text)), _) = arguments[index] else {
            throw InvalidPredicateError("\(name) needs a quoted string here", at: arguments[index].span)
        }
        return text
    }

    private static func number(_ argument: ExpressionSyntax) throws(InvalidPredicateError) -> Double {
        switch argument {
        case .constant(.value(.int64(let i)), _): return Double(i)
        case .constant(.value(.double(let d)), _): return d
        default: throw InvalidPredicateError("expected a number", at: argument.span)
        }
    }

    /// The canonical text of a constant: the inverse of parsing it.
    static func text(of constant: Constant) -> String {
        switch constant {
        case .null: return "nil"
        case .bool(let b): return b ? "TRUE" : "FALSE"
        case .value(let value): return text(of: value)
        }
    }

    static func text(of value: FieldValue) -> String {
        switch value {
        case .string(let s): return quoted(s)
        case .int64(let i): return String(i)
        case .double(let d): return d.description
        case .timestamp(let ms): return "date(\"\(Timestamp.iso8601(ms))\")"
        case .location(let l): return "location(\(l.latitude.description), \(l.longitude.description))"
        case .reference(let r):
            var arguments = [quoted(r.recordID.recordName)]
            if r.recordID.zoneID != .default {
                arguments.append(quoted(r.recordID.zoneID.zoneName))
                if r.recordID.zoneID.ownerName != ZoneID.defaultOwnerName { arguments.append(quoted(r.recordID.zoneID.ownerName)) }
            }
            return "reference(\(arguments.joined(separator: ", ")))"
        case .bytes, .assetID:
            return quoted(String(describing: value))
        case .list(_, let values):
            return "{" + values.map(text(of:)).joined(separator: ", ") + "}"
        }
    }

    /// A double-quoted string with `\"`, `\\`, `\n`, `\t`, `\r` and `\uXXXX` escapes.
    static func quoted(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// The functions a predicate may call, by canonical name.
enum Functions {
    static let distance = "distanceToLocation:fromLocation:"
    static let tokenize = "tokenize"
    static let now = "now"
    static let known = [distance, tokenize, now]

    /// The known spelling of a function name written in any case, or the name unchanged.
    static func canonicalName(_ name: String) -> String {
        known.first { $0.lowercased() == name.lowercased() } ?? name
    }
}
