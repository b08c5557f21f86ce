/// A subscription predicate as the matcher stores it: the commonest shapes flat, with no closures
/// and no condition tree, everything else as a condition with its compiled form.
///
/// At a million subscriptions the predicates are most of the memory: a `Condition` for
/// `artist == 'x' AND price < 5` is a few hundred bytes and its closures as many again, while
/// `.two(.compare, .compare)` is under 80 bytes inline. Packing is lossless: `condition` gives back
/// exactly the condition packed (checked when packing), so a subscription reads back unchanged.
/// The flat forms evaluate as `CompiledPredicate` does (Kleene logic, SPEC §2.4); the property test
/// "indexed matcher fires exactly what the naive loop fires" compares them with it.
enum PackedPredicate: Hashable, Sendable {
    case one(PackedTest)
    /// `.and([first, second])`.
    case two(PackedTest, PackedTest)
    case general(GeneralPredicate)

    /// What a free index entry holds (one shared instance; never evaluated).
    static let free = PackedPredicate.general(GeneralPredicate(.constant(false)))

    init(_ condition: Condition) {
        let packed: PackedPredicate? = switch condition {
        case .and(let parts) where parts.count == 2:
            PackedTest(parts[0]).flatMap { first in PackedTest(parts[1]).map { .two(first, $0) } }
        default:
            PackedTest(condition).map { .one($0) }
        }
        if let packed, packed.condition == condition {
            self = packed
        } else {
            self = .general(GeneralPredicate(condition))
        }
    }

    var condition: Condition {
        switch self {
        case .one(let test): test.condition
        case .two(let first, let second): .and([first.condition, second.condition])
        case .general(let general): general.condition
        }
    }

    /// Whether the record at `record` matches; `context` shares its token set across predicates.
    func matches(_ record: UnsafePointer<Record>, in context: inout EvaluationContext) -> Bool {
        switch self {
        case .one(let test):
            return test.evaluate(record, &context) == .yes
        case .two(let first, let second):
            let a = first.evaluate(record, &context)
            return a == .yes && second.evaluate(record, &context) == .yes
        case .general(let general):
            return general.compiled.matches(record, in: &context)
        }
    }

    /// Whether the verdict can depend on a field in `changes`: a field the predicate reads, or any
    /// string field for a token search.
    func reads(_ changes: FieldChanges) -> Bool {
        switch self {
        case .one(let test): test.reads(changes)
        case .two(let first, let second): first.reads(changes) || second.reads(changes)
        case .general(let general): general.condition.reads(changes)
        }
    }
}

/// A condition the flat forms do not cover, with its closures compiled once.
final class GeneralPredicate: Hashable, Sendable {
    let condition: Condition
    let compiled: CompiledPredicate

    init(_ condition: Condition) {
        self.condition = condition
        compiled = CompiledPredicate(condition)
    }

    static func == (lhs: GeneralPredicate, rhs: GeneralPredicate) -> Bool { lhs.condition == rhs.condition }
    func hash(into hasher: inout Hasher) { hasher.combine(condition) }
}

/// One comparison in flat form.
enum PackedTest: Hashable, Sendable {
    /// `field relation constant` on a user field, without string options.
    case compare(FieldKey, Relation, FieldValue)
    /// `field BETWEEN {low, high}` with INT64 bounds.
    case between(FieldKey, Int64, Int64)
    /// `distanceToLocation:fromLocation:(field, location(latitude, longitude)) < radius` (kilometres).
    case distance(FieldKey, latitude: Double, longitude: Double, radius: Double)
    /// `ALL`/`ANY tokenize(text) IN allTokens`, with the text's tokens.
    case tokens(TokenMatch, text: String, tokens: [String])

    init?(_ condition: Condition) {
        switch condition {
        case .field(.user(let key), .compare(let relation, .value(let value), [])):
            self = .compare(key, relation, value)
        case .field(.user(let key), .between(.value(.int64(let low)), .value(.int64(let high)))):
            self = .between(key, low, high)
        case .distance(.user(let key), let center, .lessThan, let radius):
            self = .distance(key, latitude: center.latitude, longitude: center.longitude, radius: radius)
        case .tokens(let match, let text):
            self = .tokens(match, text: text, tokens: Tokenizer.tokens(of: text))
        default:
            return nil
        }
    }

    var condition: Condition {
        switch self {
        case .compare(let key, let relation, let value): .field(.user(key), .compare(relation, .value(value), []))
        case .between(let key, let low, let high): .field(.user(key), .between(.value(.int64(low)), .value(.int64(high))))
        case .distance(let key, let latitude, let longitude, let radius):
            .distance(.user(key), center: Location(latitude: latitude, longitude: longitude), .lessThan, radius: radius)
        case .tokens(let match, let text, _): .tokens(match, text: text)
        }
    }

    /// The same three-valued verdict as the test `CompiledPredicate` compiles for `condition`.
    func evaluate(_ record: UnsafePointer<Record>, _ context: inout EvaluationContext) -> Truth {
        switch self {
        case .compare(let key, let relation, let constant):
            guard let value = record.pointee.fields[key] else { return .unknown }
            // The commonest kinds first, without the general comparison's enum pair switch.
            switch (value, constant) {
            case (.int64(let x), .int64(let c)): return Truth(relation.holds(x < c ? -1 : (x == c ? 0 : 1)))
            case (.string(let x), .string(let c)) where relation == .equal: return Truth(ValueOrder.equalBytes(x, c))
            default: return Truth(ValueOrder.holds(relation, value, constant))
            }
        case .between(let key, let low, let high):
            guard let value = record.pointee.fields[key] else { return .unknown }
            if case .int64(let x) = value { return Truth(low <= x && x <= high) }
            return min(Truth(ValueOrder.holds(.greaterThanOrEqual, value, .int64(low))),
                       Truth(ValueOrder.holds(.lessThanOrEqual, value, .int64(high))))
        case .distance(let key, let latitude, let longitude, let radius):
            guard case .location(let location)? = record.pointee.fields[key] else { return .unknown }
            return Truth(Geodesic.isDistance(
                latitude1: location.latitude, longitude1: location.longitude, latitude2: latitude, longitude2: longitude, lessThan: Condition.radiusInMetres(radius)))
        case .tokens(let match, _, let queryTokens):
            if queryTokens.isEmpty { return .no }
            let tokens = context.tokens(of: record)
            switch match {
            case .all: return Truth(queryTokens.allSatisfy(tokens.contains))
            case .any: return Truth(queryTokens.contains(where: tokens.contains))
            }
        }
    }

    func reads(_ changes: FieldChanges) -> Bool {
        switch self {
        case .compare(let key, _, _), .between(let key, _, _), .distance(let key, _, _, _): changes.contains(.user(key))
        case .tokens: changes.textChanged
        }
    }
}

/// What an update changed, for deciding which verdicts on the old record can be reused: user
/// fields whose values are not identical, system fields that differ, and whether a string field
/// (which token searches read) is among them.
struct FieldChanges: Sendable {
    private(set) var fields: Set<FieldReference> = []
    private(set) var stringFieldChanged = false
    /// Everything counts as changed (the record type changed, say).
    private(set) var all = false

    static let everything: FieldChanges = {
        var changes = FieldChanges()
        changes.all = true
        return changes
    }()

    init() {}

    init(from before: Record, to after: Record) {
        guard before.recordType == after.recordType else {
            self = .everything
            return
        }
        var old = before.fields.makeIterator()
        var new = after.fields.makeIterator()
        var a = old.next()
        var b = new.next()
        // Both field lists are sorted by key: walk them together.
        while a != nil || b != nil {
            if let x = a, let y = b, x.key == y.key {
                if !x.value.isIdentical(to: y.value) { note(x.key, x.value, y.value) }
                a = old.next()
                b = new.next()
            } else if let x = a, b == nil || x.key < (b?.key ?? x.key) {
                note(x.key, x.value, nil)
                a = old.next()
            } else if let y = b {
                note(y.key, nil, y.value)
                b = new.next()
            }
        }
        for (field, _, _) in FieldReference.systemFields {
            let x = before.value(of: field)
            let y = after.value(of: field)
            if let x, let y, x.isIdentical(to: y) { continue }
            if x == nil && y == nil { continue }
            fields.insert(field)
        }
    }

    private mutating func note(_ key: FieldKey, _ before: FieldValue?, _ after: FieldValue?) {
        fields.insert(.user(key))
        if before?.isSearchableText == true || after?.isSearchableText == true { stringFieldChanged = true }
    }

    func contains(_ field: FieldReference) -> Bool { all || fields.contains(field) }
    /// Whether a token search's verdict may change.
    var textChanged: Bool { all || stringFieldChanged }
    var isEmpty: Bool { !all && fields.isEmpty }
}

extension FieldValue {
    /// Identical for every evaluation: strings byte for byte (Swift's `==` uses canonical
    /// equivalence), doubles bit for bit.
    func isIdentical(to other: FieldValue) -> Bool {
        switch (self, other) {
        case (.string(let x), .string(let y)), (.assetID(let x), .assetID(let y)): return ValueOrder.equalBytes(x, y)
        case (.int64(let x), .int64(let y)), (.timestamp(let x), .timestamp(let y)): return x == y
        case (.double(let x), .double(let y)): return x.bitPattern == y.bitPattern
        case (.bytes(let x), .bytes(let y)): return x == y
        case (.location(let x), .location(let y)):
            return x.latitude.bitPattern == y.latitude.bitPattern && x.longitude.bitPattern == y.longitude.bitPattern && x == y
        case (.reference(let x), .reference(let y)):
            return ValueOrder.equalBytes(x.recordID.recordName, y.recordID.recordName)
                && ValueOrder.equalBytes(x.recordID.zoneID.zoneName, y.recordID.zoneID.zoneName)
                && ValueOrder.equalBytes(x.recordID.zoneID.ownerName, y.recordID.zoneID.ownerName) && x.action == y.action
        case (.list(let t, let xs), .list(let u, let ys)):
            return t == u && xs.count == ys.count && zip(xs, ys).allSatisfy { $0.isIdentical(to: $1) }
        default:
            return false
        }
    }

    /// Whether token searches read this value (SPEC §2.4: STRING and STRING_LIST fields).
    var isSearchableText: Bool {
        switch self {
        case .string, .list(.string, _): true
        default: false
        }
    }
}

extension Condition {
    /// Whether the condition reads a field in `changes` (token searches read every string field).
    func reads(_ changes: FieldChanges) -> Bool {
        switch self {
        case .constant: false
        case .and(let parts), .or(let parts): parts.contains { $0.reads(changes) }
        case .not(let inner): inner.reads(changes)
        case .field(let field, _), .distance(let field, _, _, _): changes.contains(field)
        case .tokens: changes.textChanged
        }
    }
}
