import KQuery
import PostgresNIO

/// Compiles a query's predicate, sort and position into SQL over `records` (alias `r`) and
/// `record_values` (`PostgresRecordValues`), every value a bound parameter.
///
/// The filter is conservative: it keeps every record the predicate matches (often exactly those),
/// and the executor evaluates the predicate itself on each row it returns, so results are the
/// evaluator's whatever the SQL cannot say (NOT, case- and diacritic-insensitive comparisons,
/// LIKE, MATCHES, the last millimetre of a distance). Field sorts are exact in SQL: `sort_key`
/// orders as `SortOrder`; a distance sort reads points nearest first (`<->`, on the sphere) and
/// the executor puts them in the evaluator's order.
struct PostgresQueryCompiler {
    /// The statement's parameters, each cast to its type where the SQL names it (so the
    /// statement can be prepared once and run with others: `PostgresSession.prepared`).
    private(set) var parameters: [PostgresParameter] = []
    /// `$1`: the database's ID; `$2`: the record type.
    let database = "$1::bigint"
    let recordType = "$2::text"

    /// The record type, whose fields `record_values` knows by `PostgresRecordValues.fieldKey`.
    let type: String
    /// The most field tests (each a subquery on `record_values`) a filter holds: PostgreSQL's
    /// planning time grows faster than their number (200 took 6 s, 1,000 gigabytes), so a
    /// predicate of more leaves the rest to the evaluator (the filter stays a superset).
    static let maximumFieldTests = 32
    /// The most sort fields SQL orders by (a join each, planned as slowly); a query sorted by
    /// more reads its candidates and keeps the best page (`PostgresTransaction.scan`).
    static let maximumSortFields = 8
    private var fieldTests = 0
    /// Whether a radius is tested on each record read (a subquery per record, which PostgreSQL
    /// cannot turn into a join) rather than by a test it may run first, on the points' index,
    /// over every point within it (`PostgresTransaction.densePoints`).
    var distancesPerRecord = false

    init(databaseID: Int64, recordType: String) {
        type = recordType
        _ = bind(databaseID)
        _ = bind(recordType)
    }

    /// A parameter: the number of the record type's `field` (a row name) in `record_values`.
    mutating func bindField(_ field: String) -> String {
        bind(PostgresRecordValues.fieldKey(recordType: type, field: field))
    }

    mutating func bind(_ value: Int64) -> String { bind(.int64(value)) }

    mutating func bind(_ value: Double) -> String { bind(.double(value)) }

    mutating func bind(_ value: String) -> String { bind(.text(value)) }

    mutating func bind(_ value: [String]) -> String { bind(.textArray(value)) }

    private mutating func bind(_ parameter: PostgresParameter) -> String {
        parameters.append(parameter)
        return "$\(parameters.count)::\(parameter.cast)"
    }

    /// `sql` (written with this compiler's parameters) and the parameters it names, numbered
    /// anew: a parameter bound for a part the filter then dropped (an OR with a TRUE branch, a
    /// sort join not used) is no parameter of the statement, whose type PostgreSQL could not
    /// infer when preparing it.
    func statement(_ sql: String) -> (sql: String, parameters: [PostgresParameter]) {
        let bytes = Array(sql.utf8)
        var numbers: [Int: Int] = [:]
        var used: [PostgresParameter] = []
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            guard byte == UInt8(ascii: "$") else {
                output.append(byte)
                continue
            }
            var number = 0, digits = 0
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9"), digits < 9 {
                number = number * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                index += 1
                digits += 1
            }
            guard digits > 0, number >= 1, number <= parameters.count else {
                // No parameter of this compiler's: left as written.
                output.append(byte)
                output.append(contentsOf: bytes[start..<index])
                continue
            }
            let renumbered: Int
            if let known = numbers[number] {
                renumbered = known
            } else {
                used.append(parameters[number - 1])
                renumbered = used.count
                numbers[number] = renumbered
            }
            output.append(contentsOf: Array("$\(renumbered)".utf8))
        }
        return (String(decoding: output, as: UTF8.self), used)
    }

    // MARK: Filter

    /// A test on the record's row for `field` in `record_values` (`v`): true when one exists
    /// and `test` holds on it.
    mutating func row(_ field: FieldReference, _ test: String = "TRUE") -> String {
        let name = bindField(PostgresRecordValues.name(of: field))
        return row(named: name, test)
    }

    /// (A test on `v.sort_key` alone says the key is not NULL, as the sort index's condition
    /// does, so PostgreSQL sees that the index serves it; one that may hold on `v.members`, where
    /// lists have no key, does not.)
    mutating func row(named name: String, _ test: String) -> String {
        let keyed = test.contains("v.sort_key") && !test.contains("v.members") ? " AND v.sort_key IS NOT NULL" : ""
        return "EXISTS (SELECT 1 FROM record_values v WHERE v.database_id = \(database) AND v.field = \(name) AND v.record_id = r.id AND \(test)\(keyed))"
    }

    /// A condition true on every record `condition` matches.
    mutating func filter(_ condition: Condition, now: Int64) -> String {
        switch condition {
        case .field, .tokens, .distance:
            guard fieldTests < Self.maximumFieldTests else { return "TRUE" }
            fieldTests += 1
        default:
            break
        }
        switch condition {
        case .constant(let value):
            return value ? "TRUE" : "FALSE"
        case .and(let conditions):
            let parts = conditions.map { filter($0, now: now) }.filter { $0 != "TRUE" }
            return parts.isEmpty ? "TRUE" : "(" + parts.joined(separator: " AND ") + ")"
        case .or(let conditions):
            let parts = conditions.map { filter($0, now: now) }
            if parts.isEmpty { return "FALSE" }
            if parts.contains("TRUE") { return "TRUE" }
            return "(" + parts.joined(separator: " OR ") + ")"
        case .not:
            // NOT of a superset is no superset: the evaluator decides.
            return "TRUE"
        case .field(let field, .isNil):
            return "NOT " + row(field)
        case .field(let field, let test):
            guard let inner = valueTest(test, now: now) else { return row(field) }
            return inner == "FALSE" ? "FALSE" : row(field, inner)
        case .tokens(let match, let text):
            let tokens = Tokenizer.tokens(of: text)
            if tokens.isEmpty { return "FALSE" }
            let keys = bind(Array(Set(tokens.map { PostgresValueKey.hex(PostgresValueKey.stored(Array($0.utf8)).head) })).sorted())
            let name = bindField(PostgresRecordValues.tokensField)
            return row(named: name, "v.members \(match == .all ? "@>" : "&&") \(keys)")
        case .distance(let field, let center, let relation, let kilometres):
            return distance(field, center, relation, Condition.radiusInMetres(kilometres))
        }
    }

    /// How far PostGIS's geodesic distance (`ST_DWithin` on geography, GeographicLib's algorithm)
    /// may lie from the evaluator's: 1.1e-8 m measured (scale-out.md §3.5), so a radius widened
    /// (or narrowed) by this keeps every match.
    static func widened(_ metres: Double) -> Double { metres * (1 + 1e-9) + 1e-3 }
    static func narrowed(_ metres: Double) -> Double { metres * (1 - 1e-9) - 1e-3 }

    /// The centre as a geography parameter; nil when the evaluator measures no distance from it.
    mutating func point(_ center: Location) -> String? {
        PostgresRecordValues.point(latitude: center.latitude, longitude: center.longitude).map { "\(bind(PostgresValueKey.hex($0)))::geography" }
    }

    /// A distance test on the field's point (`record_values.location`, through its GiST index):
    /// only a point the evaluator can measure has one, and only such a point can match.
    private mutating func distance(_ field: FieldReference, _ center: Location, _ relation: Relation, _ metres: Double) -> String {
        guard let point = point(center), !metres.isNaN else { return "FALSE" }
        let present = "v.location IS NOT NULL"
        switch relation {
        case .lessThan, .lessThanOrEqual:
            if metres == .infinity { return row(field, present) }
            if metres < 0 { return "FALSE" }
            let within = "ST_DWithin(v.location, \(point), \(bind(Self.widened(metres))))"
            if distancesPerRecord {
                let name = bindField(PostgresRecordValues.name(of: field))
                return "COALESCE((SELECT \(within) FROM record_values v WHERE v.database_id = \(database) AND v.field = \(name) AND v.record_id = r.id AND \(present)), FALSE)"
            }
            return row(field, "\(present) AND \(within)")
        case .greaterThan, .greaterThanOrEqual:
            if metres == .infinity { return "FALSE" }
            let within = Self.narrowed(metres)
            if within <= 0 { return row(field, present) }
            return row(field, "\(present) AND NOT ST_DWithin(v.location, \(point), \(bind(within)))")
        case .equal, .notEqual:
            return row(field, present)
        }
    }

    /// A test that the record's point on `field` lies within `metres` of `center` (widened), as
    /// `filter` writes a radius.
    mutating func within(_ field: FieldReference, of center: Location, metres: Double) -> String {
        distance(field, center, .lessThanOrEqual, metres)
    }

    private mutating func keyIn(_ tag: PostgresValueKey.Tag) -> String {
        "v.sort_key >= \(bind(PostgresValueKey.lower(tag))) AND v.sort_key < \(bind(PostgresValueKey.upper(tag)))"
    }

    /// A test on a present value's row (`v`) true whenever `test` is; nil when only the row's
    /// presence can be asked.
    private mutating func valueTest(_ test: FieldTest, now: Int64) -> String? {
        switch test {
        case .isNil: return "FALSE"
        case .isNotNil: return nil
        case .compare(let relation, let operand, let options):
            guard options.isEmpty else { return nil }
            return compare(relation, operand, now: now)
        case .between(let lower, let upper):
            let parts = [compare(.greaterThanOrEqual, lower, now: now), compare(.lessThanOrEqual, upper, now: now)].compactMap { $0 }
            if parts.contains("FALSE") { return "FALSE" }
            return parts.isEmpty ? nil : parts.joined(separator: " AND ")
        case .oneOf(let operands, let options):
            guard options.isEmpty else { return nil }
            var keys: [String] = []
            for operand in operands {
                let value = constant(operand, now: now)
                if case .list = value { return nil }
                // A NaN equals nothing.
                if let key = PostgresValueKey.key(value) { keys.append(PostgresValueKey.indexedHead(ofHex: key).head) }
            }
            return keys.isEmpty ? "FALSE" : "v.sort_key = ANY(\(bind(keys)))"
        case .string(.beginsWith, let prefix, let options):
            guard options.isEmpty else { return nil }
            // (A prefix longer than a stored head: the values that begin with it have its head.)
            let bytes = Array(([PostgresValueKey.Tag.string.rawValue] + Array(prefix.utf8)).prefix(PostgresValueKey.indexedBytes))
            guard let end = PostgresValueKey.successor(ofPrefix: bytes) else { return nil }
            return "v.sort_key >= \(bind(PostgresValueKey.hex(bytes))) AND v.sort_key < \(bind(end))"
        case .string:
            return keyIn(.string)
        case .members(.any, .compare(.equal, let operand, let options)) where options.isEmpty:
            let value = constant(operand, now: now)
            guard let key = PostgresValueKey.key(value) else { return "FALSE" }
            return "v.members @> \(bind([PostgresValueKey.indexedHead(ofHex: key).head]))"
        case .members:
            return "v.members IS NOT NULL"
        case .containsAll(let operands):
            var keys: [String] = []
            for operand in operands {
                guard let key = PostgresValueKey.key(constant(operand, now: now)) else { return "FALSE" }
                keys.append(PostgresValueKey.indexedHead(ofHex: key).head)
            }
            return "v.members @> \(bind(keys))"
        case .contains(let operand, let options):
            guard options.isEmpty else { return nil }
            let value = constant(operand, now: now)
            let member = PostgresValueKey.key(value).map { key in "v.members @> \(bind([PostgresValueKey.indexedHead(ofHex: key).head]))" } ?? "FALSE"
            // A string holds a substring: any string may.
            if case .string = value { return "(\(member) OR (\(keyIn(.string))))" }
            return member
        }
    }

    private func constant(_ operand: Operand, now: Int64) -> FieldValue {
        switch operand {
        case .value(let value): value
        case .now: .timestamp(now)
        }
    }

    /// `relation` against a constant, on the row's key: exact for numbers, timestamps and plain
    /// strings (the key orders as `ValueOrder`), equality for the kinds that only have it. A
    /// constant whose key is longer than a stored head is compared on its head, widened: the
    /// values it can hold on are those whose heads equal it, or lie on that side of it.
    private mutating func compare(_ relation: Relation, _ operand: Operand, now: Int64) -> String? {
        let value = constant(operand, now: now)
        if case .list = value { return nil }
        guard let full = PostgresValueKey.key(value) else { return "FALSE" }
        let (key, exact) = PostgresValueKey.indexedHead(ofHex: full)
        guard let tag = PostgresValueKey.orderedTag(value) else {
            return relation == .equal ? "v.sort_key = \(bind(key))" : nil
        }
        if relation == .equal { return "v.sort_key = \(bind(key))" }
        if !exact && relation == .notEqual { return keyIn(tag) }
        let op = switch relation {
        case .equal: "="
        case .notEqual: "<>"
        case .lessThan: exact ? "<" : "<="
        case .lessThanOrEqual: "<="
        case .greaterThan: exact ? ">" : ">="
        case .greaterThanOrEqual: ">="
        }
        return "\(keyIn(tag)) AND v.sort_key \(op) \(bind(key))"
    }

    // MARK: Order

    /// The sort key columns of the field descriptors (`k0`, `k1`, ...), joined to `r`.
    /// With `firstKeyed`, the first is an inner join (the records with a value for it, read in the
    /// sort index's order).
    mutating func sortJoins(_ fields: [FieldReference], firstKeyed: Bool) -> String {
        fields.enumerated().map { index, field in
            let name = bindField(PostgresRecordValues.name(of: field))
            let keyed = firstKeyed && index == 0
            return """
                \(keyed ? "JOIN" : "LEFT JOIN") record_values k\(index) ON k\(index).database_id = \(database) \
                AND k\(index).record_id = r.id AND k\(index).field = \(name)
                """
        }.joined(separator: " ")
    }

    /// ORDER BY for the descriptors' keys (missing values last either way), then the record ID as
    /// `RecordID` orders (name bytes, zone name, owner name). A key is its head, then its tail
    /// (none first: `PostgresValueKey.indexedBytes`).
    /// `keyed`: the first key is never NULL (PostgreSQL reads the sort index in its order, and
    /// sorts only the records that share a key by their IDs).
    /// `walked`: the keys as a walk's subquery (`r`) names them (`PostgresTransaction.Walk`).
    static func orderBy(_ ascending: [Bool], keyed: Bool = false, walked: Bool = false) -> String {
        let keys = ascending.enumerated().map { index, up in
            let (key, tail) = keyColumns(index, walked: walked)
            let head = keyed && index == 0 ? "\(key) \(up ? "ASC" : "DESC")" : "\(key) \(up ? "ASC" : "DESC") NULLS LAST"
            return head + ", \(tail) \(up ? "ASC NULLS FIRST" : "DESC NULLS LAST")"
        }
        return (keys + [#"r.record_name COLLATE "C""#, #"r.zone_name COLLATE "C""#, #"r.owner_name COLLATE "C""#]).joined(separator: ", ")
    }

    /// The whole key of sort column `index` (its head and tail), as a row's position holds it.
    static func sortKey(_ index: Int, walked: Bool = false) -> String {
        let (key, tail) = keyColumns(index, walked: walked)
        return "\(key) || COALESCE(\(tail), '')"
    }

    /// Sort column `index`'s head and tail: joined as `k<index>`, or as a walk's subquery names them.
    private static func keyColumns(_ index: Int, walked: Bool) -> (key: String, tail: String) {
        walked ? ("r.k\(index)_key", "r.k\(index)_tail") : ("k\(index).sort_key", "k\(index).sort_tail")
    }

    /// Rows strictly after `position` (whole keys: `sortKey`) in that order.
    mutating func after(keys: [String?], ascending: [Bool], id: RecordID) -> String {
        let name = bind(id.recordName)
        let zone = bind(id.zoneID.zoneName)
        let owner = bind(id.zoneID.ownerName)
        var test = """
            (r.record_name COLLATE "C" > \(name) OR (r.record_name = \(name) AND (r.zone_name COLLATE "C" > \(zone) \
            OR (r.zone_name = \(zone) AND r.owner_name COLLATE "C" > \(owner)))))
            """
        for index in keys.indices.reversed() {
            let column = "k\(index).sort_key"
            if let key = keys[index] {
                let (head, tail) = PostgresValueKey.storedHex(key)
                let value = bind(head)
                let op = ascending[index] ? ">" : "<"
                // Within a head, by tail (none: ""), then what follows.
                let tailColumn = "COALESCE(k\(index).sort_tail, '')"
                let tailValue = bind(tail ?? "")
                let within = "(\(tailColumn) \(op) \(tailValue) OR (\(tailColumn) = \(tailValue) AND \(test)))"
                test = "(\(column) \(op) \(value) OR \(column) IS NULL OR (\(column) = \(value) AND \(within)))"
            } else {
                test = "(\(column) IS NULL AND \(test))"
            }
        }
        return test
    }
}
