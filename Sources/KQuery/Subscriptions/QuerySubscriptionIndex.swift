/// An index over query subscriptions' predicates, so a record change evaluates only the
/// predicates its record could satisfy.
///
/// Identical predicates (same record type, same `Condition`) are stored once as an *entry* and fan
/// out to their subscriptions. Each entry is filed under one *anchor*: a top-level conjunct that
/// every matching record must satisfy, chosen by expected selectivity:
///
/// 1. equality (`K == v`, `K IN {...}`, list membership): a hash from (field, value) to entries;
/// 2. `ALL tokenize(...)`: the entry's longest query token, in token postings;
/// 3. `distanceToLocation < r`: the grid cells (0.1°) its circle's bounding box covers;
/// 4. `ANY tokenize(...)`: every query token;
/// 5. ranges: `K > c` and `K < c` as sorted bounds per field, probed by binary search, and
///    `K BETWEEN {lo, hi}` as intervals grouped by width class, probed by stabbing;
/// 6. otherwise the entry is *unanchored* and always a candidate.
///
/// Probing over-approximates (a candidate may fail its predicate; it is then evaluated and
/// dropped) and never under-approximates: the property tests check the indexed matcher fires
/// exactly what the naive loop fires. Adding and removing touch only the entry's own postings.
struct QuerySubscriptionIndex: Sendable {
    struct Entry: Sendable {
        var recordType: String
        var condition: Condition
        var compiled: CompiledPredicate
        var subscriptionIDs: [String]
        var anchor: Anchor
    }

    enum Anchor: Hashable, Sendable {
        case equality(FieldReference, [FieldValue])
        case tokens([String])
        case cells(FieldReference, [Int64])
        case lowerBound(FieldReference, RangeKind, Double)
        case upperBound(FieldReference, RangeKind, Double)
        case interval(FieldReference, RangeKind, Double, Double)
        case none
    }

    enum RangeKind: Hashable, Sendable {
        case number, timestamp
    }

    struct TypeIndex: Sendable {
        var entries: [Int: Entry] = [:]
        var entryByCondition: [Condition: Int] = [:]
        var entryBySubscription: [String: Int] = [:]
        var equality: [FieldReference: [EqualityKey: [Int]]] = [:]
        var tokens: [String: [Int]] = [:]
        var cells: [FieldReference: [Int64: [Int]]] = [:]
        var lowerBounds: [RangeKey: SortedBounds] = [:]
        var upperBounds: [RangeKey: SortedBounds] = [:]
        var intervals: [RangeKey: IntervalIndex] = [:]
        var unanchored: Set<Int> = []
        /// System fields some entry is anchored on (user fields are probed from the record itself).
        var systemFields: Set<FieldReference> = []
        var nextEntry = 0
    }

    struct RangeKey: Hashable, Sendable {
        var field: FieldReference
        var kind: RangeKind
    }

    private var types: [String: TypeIndex] = [:]

    // MARK: Adding and removing

    // The per-type index is mutated in place through the dictionary: a copy taken out and written
    // back would duplicate every table on each insert (copy-on-write), making setup quadratic.

    mutating func insert(_ subscriptionID: String, recordType: String, condition: Condition) {
        Self.insert(subscriptionID, condition: condition, recordType: recordType, into: &types[recordType, default: TypeIndex()])
    }

    private static func insert(_ subscriptionID: String, condition: Condition, recordType: String, into index: inout TypeIndex) {
        if let id = index.entryByCondition[condition] {
            index.entries[id]?.subscriptionIDs.append(subscriptionID)
            index.entryBySubscription[subscriptionID] = id
            return
        }
        let id = index.nextEntry
        index.nextEntry += 1
        let anchor = anchor(of: condition)
        index.entries[id] = Entry(recordType: recordType, condition: condition, compiled: CompiledPredicate(condition), subscriptionIDs: [subscriptionID], anchor: anchor)
        index.entryByCondition[condition] = id
        index.entryBySubscription[subscriptionID] = id
        file(id, under: anchor, in: &index)
    }

    mutating func remove(_ subscriptionID: String, recordType: String, condition: Condition) {
        guard types[recordType] != nil else { return }
        Self.remove(subscriptionID, from: &types[recordType, default: TypeIndex()])
        if types[recordType]?.entries.isEmpty ?? false { types[recordType] = nil }
    }

    private static func remove(_ subscriptionID: String, from index: inout TypeIndex) {
        guard let id = index.entryBySubscription.removeValue(forKey: subscriptionID), index.entries[id] != nil else { return }
        index.entries[id]?.subscriptionIDs.removeAll { $0 == subscriptionID }
        guard let entry = index.entries[id], entry.subscriptionIDs.isEmpty else { return }
        index.entries[id] = nil
        index.entryByCondition[entry.condition] = nil
        unfile(id, under: entry.anchor, in: &index)
    }

    func compiled(_ subscriptionID: String, recordType: String) -> CompiledPredicate? {
        guard let index = types[recordType], let id = index.entryBySubscription[subscriptionID] else { return nil }
        return index.entries[id]?.compiled
    }

    /// The entries `record` could match, each once. The record's token set, when probing needs
    /// it, is left in `context` for the evaluations that follow.
    func candidates(recordType: String, record: Record, context: inout EvaluationContext) -> [Entry] {
        guard let index = types[recordType] else { return [] }
        var ids = index.unanchored
        for (key, value) in record.fields {
            probe(index, field: .user(key), value: value, into: &ids)
        }
        for field in index.systemFields {
            if let value = record.value(of: field) { probe(index, field: field, value: value, into: &ids) }
        }
        if !index.tokens.isEmpty {
            let tokens = record.searchTokens
            context = EvaluationContext(now: context.now, tokens: tokens)
            for token in tokens {
                if let postings = index.tokens[token] { ids.formUnion(postings) }
            }
        }
        return ids.compactMap { index.entries[$0] }
    }

    private func probe(_ index: TypeIndex, field: FieldReference, value: FieldValue, into ids: inout Set<Int>) {
        if let byValue = index.equality[field] {
            if case .list(_, let members) = value {
                for member in members { if let postings = byValue[EqualityKey(member)] { ids.formUnion(postings) } }
            } else if let postings = byValue[EqualityKey(value)] {
                ids.formUnion(postings)
            }
        }
        if case .location(let location) = value, let byCell = index.cells[field],
           let postings = byCell[Self.cell(latitude: location.latitude, longitude: location.longitude)] {
            ids.formUnion(postings)
        }
        let (kind, x): (RangeKind, Double)
        switch value {
        case .int64(let i): (kind, x) = (.number, Double(i))
        case .double(let d): (kind, x) = (.number, d)
        case .timestamp(let t): (kind, x) = (.timestamp, Double(t))
        default: return
        }
        // Doubles round integers above 2^53: widen the probe so rounding never loses a candidate.
        let slack = max(1, abs(x) * 1e-15)
        let key = RangeKey(field: field, kind: kind)
        if let lower = index.lowerBounds[key] { lower.forEach(boundAtMost: x + slack) { ids.insert($0) } }
        if let upper = index.upperBounds[key] { upper.forEach(boundAtLeast: x - slack) { ids.insert($0) } }
        if let intervals = index.intervals[key] { intervals.forEach(containing: x, slack: slack) { ids.insert($0) } }
    }

    // MARK: Anchors

    static func anchor(of condition: Condition) -> Anchor {
        let conjuncts: [Condition] = if case .and(let parts) = condition { parts } else { [condition] }
        var best: (rank: Int, anchor: Anchor) = (Int.max, .none)
        for conjunct in conjuncts {
            if let candidate = anchor(ofConjunct: conjunct), candidate.rank < best.rank { best = candidate }
        }
        return best.anchor
    }

    private static func anchor(ofConjunct conjunct: Condition) -> (rank: Int, anchor: Anchor)? {
        switch conjunct {
        case .field(let field, let test):
            switch test {
            // Locations compare by latitude and longitude only, but hash with altitude and more.
            case .compare(.equal, .value(let value), []) where value.type != .location: return (1, .equality(field, [value]))
            case .oneOf(let operands, []) where !operands.isEmpty:
                let values = operands.compactMap { if case .value(let v) = $0, v.type != .location { v } else { nil } }
                return values.count == operands.count ? (1, .equality(field, values)) : nil
            case .members(.any, .compare(.equal, .value(let value), [])) where value.type != .location:
                return (1, .equality(field, [value]))
            case .members(.any, .oneOf(let operands, [])) where !operands.isEmpty:
                let values = operands.compactMap { if case .value(let v) = $0, v.type != .location { v } else { nil } }
                return values.count == operands.count ? (1, .equality(field, values)) : nil
            case .containsAll(let operands):
                guard case .value(let first)? = operands.first, first.type != .location else { return nil }
                return (1, .equality(field, [first]))
            case .compare(let relation, .value(let value), []):
                guard let (kind, bound) = rangeBound(value) else { return nil }
                switch relation {
                case .greaterThan, .greaterThanOrEqual: return (5, .lowerBound(field, kind, bound))
                case .lessThan, .lessThanOrEqual: return (5, .upperBound(field, kind, bound))
                default: return nil
                }
            case .between(.value(let lower), .value(let upper)):
                guard let (kind, low) = rangeBound(lower) else { return nil }
                guard let (upperKind, high) = rangeBound(upper), upperKind == kind, high >= low else { return (5, .lowerBound(field, kind, low)) }
                return (5, .interval(field, kind, low, high))
            default:
                return nil
            }
        case .tokens(.all, let text):
            guard let longest = Tokenizer.tokens(of: text).max(by: { $0.utf8.count < $1.utf8.count }) else { return nil }
            return (2, .tokens([longest]))
        case .tokens(.any, let text):
            let tokens = Tokenizer.tokens(of: text)
            return tokens.isEmpty ? nil : (4, .tokens(tokens))
        case .distance(let field, let center, let relation, let radius) where relation == .lessThan || relation == .lessThanOrEqual:
            let box = Geodesic.boundingBox(latitude: center.latitude, longitude: center.longitude, radius: radius)
            guard let cells = cells(covering: box) else { return nil }
            return (3, .cells(field, cells))
        default:
            return nil
        }
    }

    private static func rangeBound(_ value: FieldValue) -> (RangeKind, Double)? {
        switch value {
        case .int64(let i): (.number, Double(i))
        case .double(let d): d.isFinite ? (.number, d) : nil
        case .timestamp(let t): (.timestamp, Double(t))
        default: nil
        }
    }

    private static func file(_ id: Int, under anchor: Anchor, in index: inout TypeIndex) {
        switch anchor {
        case .equality(let field, let values):
            if case .user = field {} else { index.systemFields.insert(field) }
            for value in Set(values.map(EqualityKey.init)) { index.equality[field, default: [:]][value, default: []].append(id) }
        case .tokens(let tokens):
            for token in Set(tokens) { index.tokens[token, default: []].append(id) }
        case .cells(let field, let cells):
            if case .user = field {} else { index.systemFields.insert(field) }
            for cell in cells { index.cells[field, default: [:]][cell, default: []].append(id) }
        case .lowerBound(let field, let kind, let bound):
            if case .user = field {} else { index.systemFields.insert(field) }
            index.lowerBounds[RangeKey(field: field, kind: kind), default: SortedBounds()].insert(bound, id)
        case .upperBound(let field, let kind, let bound):
            if case .user = field {} else { index.systemFields.insert(field) }
            index.upperBounds[RangeKey(field: field, kind: kind), default: SortedBounds()].insert(bound, id)
        case .interval(let field, let kind, let low, let high):
            if case .user = field {} else { index.systemFields.insert(field) }
            index.intervals[RangeKey(field: field, kind: kind), default: IntervalIndex()].insert(low, high, id)
        case .none:
            index.unanchored.insert(id)
        }
    }

    private static func unfile(_ id: Int, under anchor: Anchor, in index: inout TypeIndex) {
        switch anchor {
        case .equality(let field, let values):
            for value in Set(values.map(EqualityKey.init)) {
                index.equality[field]?[value]?.removeAll { $0 == id }
                if index.equality[field]?[value]?.isEmpty ?? false { index.equality[field]?[value] = nil }
            }
        case .tokens(let tokens):
            for token in Set(tokens) {
                index.tokens[token]?.removeAll { $0 == id }
                if index.tokens[token]?.isEmpty ?? false { index.tokens[token] = nil }
            }
        case .cells(let field, let cells):
            for cell in cells {
                index.cells[field]?[cell]?.removeAll { $0 == id }
                if index.cells[field]?[cell]?.isEmpty ?? false { index.cells[field]?[cell] = nil }
            }
        case .lowerBound(let field, let kind, let bound):
            index.lowerBounds[RangeKey(field: field, kind: kind)]?.remove(bound, id)
        case .upperBound(let field, let kind, let bound):
            index.upperBounds[RangeKey(field: field, kind: kind)]?.remove(bound, id)
        case .interval(let field, let kind, let low, let high):
            index.intervals[RangeKey(field: field, kind: kind)]?.remove(low, high, id)
        case .none:
            index.unanchored.remove(id)
        }
    }

    // MARK: Spatial cells

    /// Cells are 0.1° of latitude by 0.1° of longitude; a circle covering more than this many is
    /// left unanchored rather than filed everywhere.
    static let cellSize = 0.1
    static let maximumCells = 4096

    static func cell(latitude: Double, longitude: Double) -> Int64 {
        let row = Int64((min(max(latitude, -90), 90) + 90) / cellSize)
        let column = Int64((min(max(longitude, -180), 180) + 180) / cellSize)
        return row << 32 | column
    }

    private static func cells(covering box: (minLatitude: Double, maxLatitude: Double, minLongitude: Double, maxLongitude: Double)) -> [Int64]? {
        guard box.minLatitude.isFinite, box.maxLatitude.isFinite, box.minLongitude.isFinite, box.maxLongitude.isFinite else { return nil }
        let firstRow = Int64((max(box.minLatitude, -90) + 90) / cellSize)
        let lastRow = Int64((min(box.maxLatitude, 90) + 90) / cellSize)
        // A box crossing the antimeridian has minLongitude > maxLongitude: two column ranges.
        var columnRanges: [ClosedRange<Int64>] = []
        let firstColumn = Int64((max(box.minLongitude, -180) + 180) / cellSize)
        let lastColumn = Int64((min(box.maxLongitude, 180) + 180) / cellSize)
        if box.minLongitude <= box.maxLongitude {
            columnRanges = [firstColumn...lastColumn]
        } else {
            columnRanges = [firstColumn...Int64(360 / cellSize), 0...lastColumn]
        }
        let columns = columnRanges.reduce(0) { $0 + $1.count }
        guard lastRow >= firstRow, Int64(columns) * (lastRow - firstRow + 1) <= maximumCells else { return nil }
        var cells: [Int64] = []
        for row in firstRow...lastRow {
            for range in columnRanges {
                for column in range { cells.append(row << 32 | column) }
            }
        }
        return cells
    }
}

/// A field value as a hash key for equality: numbers that are equal hash equal whether they are
/// INT64 or DOUBLE (an INT64 that a DOUBLE represents exactly is keyed as that DOUBLE).
struct EqualityKey: Hashable, Sendable {
    let value: FieldValue

    init(_ value: FieldValue) {
        if case .int64(let i) = value, let d = Double(exactly: i) {
            self.value = .double(d)
        } else {
            self.value = value
        }
    }
}

/// Range bounds kept sorted, for "every entry whose bound is at most (or at least) x".
struct SortedBounds: Sendable {
    private var bounds: [Double] = []
    private var ids: [Int] = []

    mutating func insert(_ bound: Double, _ id: Int) {
        let position = firstIndex(notBelow: bound)
        bounds.insert(bound, at: position)
        ids.insert(id, at: position)
    }

    mutating func remove(_ bound: Double, _ id: Int) {
        var position = firstIndex(notBelow: bound)
        while position < bounds.count, bounds[position] == bound {
            if ids[position] == id {
                bounds.remove(at: position)
                ids.remove(at: position)
                return
            }
            position += 1
        }
    }

    func forEach(boundAtMost x: Double, _ body: (Int) -> Void) {
        let end = firstIndex(above: x)
        for position in 0..<end { body(ids[position]) }
    }

    func forEach(boundFrom low: Double, through high: Double, _ body: (Int) -> Void) {
        let end = firstIndex(above: high)
        var position = firstIndex(notBelow: low)
        while position < end {
            body(ids[position])
            position += 1
        }
    }

    func forEach(boundAtLeast x: Double, _ body: (Int) -> Void) {
        for position in firstIndex(notBelow: x)..<bounds.count { body(ids[position]) }
    }

    private func firstIndex(notBelow x: Double) -> Int {
        var (low, high) = (0, bounds.count)
        while low < high {
            let mid = (low + high) / 2
            if bounds[mid] < x { low = mid + 1 } else { high = mid }
        }
        return low
    }

    private func firstIndex(above x: Double) -> Int {
        var (low, high) = (0, bounds.count)
        while low < high {
            let mid = (low + high) / 2
            if bounds[mid] <= x { low = mid + 1 } else { high = mid }
        }
        return low
    }
}

/// Closed intervals for stabbing queries ("which intervals contain x?").
///
/// Intervals are grouped by width class (the power of two at or above their width) and kept
/// sorted by lower bound within a class. An interval of class w that contains x has its lower
/// bound in [x - 2^w, x], so a probe scans only that window of each class: the cost follows the
/// answer, not the number of intervals.
struct IntervalIndex: Sendable {
    private var classes: [Int: (lows: SortedBounds, highs: [Int: Double])] = [:]

    private static func widthClass(_ width: Double) -> Int {
        width <= 0 ? Int.min : Int(width.exponent) + 1
    }

    // Mutated in place through the dictionary (see QuerySubscriptionIndex.insert).
    mutating func insert(_ low: Double, _ high: Double, _ id: Int) {
        let key = Self.widthClass(high - low)
        classes[key, default: (SortedBounds(), [:])].lows.insert(low, id)
        classes[key, default: (SortedBounds(), [:])].highs[id] = high
    }

    mutating func remove(_ low: Double, _ high: Double, _ id: Int) {
        let key = Self.widthClass(high - low)
        guard classes[key] != nil else { return }
        classes[key, default: (SortedBounds(), [:])].lows.remove(low, id)
        classes[key, default: (SortedBounds(), [:])].highs[id] = nil
        if classes[key]?.highs.isEmpty ?? false { classes[key] = nil }
    }

    func forEach(containing x: Double, slack: Double, _ body: (Int) -> Void) {
        for (key, entry) in classes {
            let width = key == Int.min ? 0 : Double(sign: .plus, exponent: key, significand: 1)
            entry.lows.forEach(boundFrom: x - width - slack, through: x + slack) { id in
                if let high = entry.highs[id], high >= x - slack { body(id) }
            }
        }
    }
}
