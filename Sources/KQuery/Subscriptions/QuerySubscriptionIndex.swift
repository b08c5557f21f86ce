/// An index over query subscriptions' predicates, so a record change evaluates only the
/// predicates its record could satisfy.
///
/// Identical predicates (same record type, same `Condition`) are stored once as an *entry*, in an
/// array indexed by entry number, and fan out to their subscribers (slot numbers of the
/// `SubscriptionSet`). Each entry is filed under one *anchor*: a top-level conjunct that every
/// matching record must satisfy, chosen by expected selectivity:
///
/// 1. equality (`K == v`, `K IN {...}`, list membership): a hash from (field, value) to entries;
/// 2. `ALL tokenize(...)`: the entry's longest query token, in token postings; each posting also
///    names a second token the record must have, checked before the entry is looked at;
/// 3. `distanceToLocation < r`: the grid cells (0.1°) its circle's bounding box covers;
/// 4. `ANY tokenize(...)`: every query token;
/// 5. ranges: `K > c` and `K < c` as sorted bounds per field, probed by binary search, and
///    `K BETWEEN {lo, hi}` as intervals grouped by width class, probed by stabbing;
/// 6. otherwise the entry is *unanchored* and always a candidate.
///
/// Probing over-approximates (a candidate may fail its predicate; it is then evaluated and
/// dropped) and never under-approximates: the property tests check the indexed matcher fires
/// exactly what the naive loop fires. Adding and removing touch only the entry's own postings.
/// Postings hold 32-bit entry numbers, and entries hold only what evaluation needs.
struct QuerySubscriptionIndex: Sendable {
    struct Entry: Sendable {
        /// nil while the entry number is free.
        var predicate: PackedPredicate?
        var recordType: UInt32
        var subscribers = Subscribers()
    }

    /// Slot numbers, the first inline: most predicates have one subscriber.
    struct Subscribers: Sendable {
        private(set) var first = UInt32.max
        private var rest: [UInt32] = []

        var isEmpty: Bool { first == .max }

        mutating func append(_ slot: UInt32) {
            if first == .max { first = slot } else { rest.append(slot) }
        }

        mutating func remove(_ slot: UInt32) {
            if first == slot {
                first = rest.popLast() ?? .max
            } else if let position = rest.firstIndex(of: slot) {
                rest.swapAt(position, rest.count - 1)
                rest.removeLast()
            }
        }

        func forEach(_ body: (UInt32) -> Void) {
            guard first != .max else { return }
            body(first)
            for slot in rest { body(slot) }
        }
    }

    /// What identifies an entry: the record type and the packed predicate, with their hash.
    struct EntryKey: Sendable {
        var recordType: String
        var predicate: PackedPredicate
        var hash: Int

        init(recordType: String, predicate: PackedPredicate) {
            self.recordType = recordType
            self.predicate = predicate
            var hasher = Hasher()
            hasher.combine(recordType)
            hasher.combine(predicate)
            hash = hasher.finalize()
        }
    }

    enum Anchor: Hashable, Sendable {
        case equality(FieldReference, [FieldValue])
        /// Postings under each token; with `requiring`, the record must also have that token.
        case tokens([String], requiring: String?)
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
        var equality: [FieldReference: [EqualityKey: [UInt32]]] = [:]
        var tokens: [String: TokenPostings] = [:]
        var cells: [FieldReference: [Int64: [UInt32]]] = [:]
        var lowerBounds: [RangeKey: SortedBounds] = [:]
        var upperBounds: [RangeKey: SortedBounds] = [:]
        var intervals: [RangeKey: IntervalIndex] = [:]
        var unanchored: Set<UInt32> = []
        /// System fields some entry is anchored on (user fields are probed from the record itself).
        var systemFields: Set<FieldReference> = []
        var nextToken: UInt32 = 0
    }

    /// The entries filed under a token, and the token's number (for the second-token check).
    struct TokenPostings: Sendable {
        var id: UInt32
        /// Postings plus requirements naming this token: the token is dropped when none remain.
        var uses = 0
        var postings: [TokenPosting] = []
    }

    struct TokenPosting: Sendable {
        var entry: UInt32
        /// The number of a second token the record must have, or `UInt32.max`.
        var requires: UInt32
    }

    struct RangeKey: Hashable, Sendable {
        var field: FieldReference
        var kind: RangeKind
    }

    private(set) var entries: [Entry] = []
    private var freeEntries: [UInt32] = []
    private var entryTable = SlotHashTable()
    private var recordTypes: [String] = []
    private var recordTypeIDs: [String: UInt32] = [:]
    /// By record type number; mutated and read in place (never copied out of the array).
    private var types: [TypeIndex] = []

    // MARK: Adding and removing

    func typeID(of recordType: String) -> UInt32? { recordTypeIDs[recordType] }

    func recordType(of entry: UInt32) -> String { recordTypes[Int(entries[Int(entry)].recordType)] }

    /// The entry with this record type and predicate, if some subscription has it.
    func entry(for key: EntryKey) -> UInt32? {
        entryTable.first(hash: key.hash) { entry in
            let stored = entries[Int(entry)]
            // `==` on conditions compares strings by canonical equivalence ("é" == "e\u{301}"), but
            // predicates compare strings byte for byte: two such subscriptions must not share.
            return recordTypes[Int(stored.recordType)] == key.recordType && stored.predicate == key.predicate
                && stored.predicate?.condition.description.utf8.elementsEqual(key.predicate.condition.description.utf8) == true
        }
    }

    /// Adds `slot` as a subscriber of the entry for `key` (created and filed if new); returns the entry.
    mutating func insert(_ slot: UInt32, key: EntryKey) -> UInt32 {
        if let existing = entry(for: key) {
            entries[Int(existing)].subscribers.append(slot)
            return existing
        }
        let type: UInt32
        if let known = recordTypeIDs[key.recordType] {
            type = known
        } else {
            type = UInt32(recordTypes.count)
            recordTypes.append(key.recordType)
            recordTypeIDs[key.recordType] = type
            types.append(TypeIndex())
        }
        var entry = Entry(predicate: key.predicate, recordType: type)
        entry.subscribers.append(slot)
        let id: UInt32
        if let reused = freeEntries.popLast() {
            id = reused
            entries[Int(id)] = entry
        } else {
            id = UInt32(entries.count)
            entries.append(entry)
        }
        entryTable.insert(id, hash: key.hash)
        Self.file(id, under: Self.anchor(of: key.predicate.condition), in: &types[Int(type)])
        return id
    }

    /// Removes `slot` from `entry`'s subscribers, and the entry with its postings after the last.
    mutating func remove(_ slot: UInt32, entry id: UInt32) {
        guard Int(id) < entries.count, let predicate = entries[Int(id)].predicate else { return }
        entries[Int(id)].subscribers.remove(slot)
        guard entries[Int(id)].subscribers.isEmpty else { return }
        let type = entries[Int(id)].recordType
        entryTable.remove(id, hash: EntryKey(recordType: recordTypes[Int(type)], predicate: predicate).hash)
        Self.unfile(id, under: Self.anchor(of: predicate.condition), in: &types[Int(type)])
        entries[Int(id)].predicate = nil
        freeEntries.append(id)
    }

    // MARK: Probing

    /// Appends to `candidates` the entries of record type `type` that `record` could match (an
    /// entry may come more than once).
    func candidates(type: UInt32, record: Record, into candidates: inout [UInt32]) {
        types[Int(type)].candidates(record: record, into: &candidates)
    }

    /// Whether probing the record of type `type` could find other entries once `changes` are made.
    func probeReads(type: UInt32, _ changes: FieldChanges) -> Bool {
        types[Int(type)].probeReads(changes)
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
            let tokens = Tokenizer.tokens(of: text)
            guard let longest = tokens.max(by: { $0.utf8.count < $1.utf8.count }) else { return nil }
            let second = tokens.filter { $0 != longest }.max(by: { $0.utf8.count < $1.utf8.count })
            return (2, .tokens([longest], requiring: second))
        case .tokens(.any, let text):
            let tokens = Tokenizer.tokens(of: text)
            return tokens.isEmpty ? nil : (4, .tokens(tokens, requiring: nil))
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

    private static func file(_ id: UInt32, under anchor: Anchor, in index: inout TypeIndex) {
        switch anchor {
        case .equality(let field, let values):
            if case .user = field {} else { index.systemFields.insert(field) }
            for value in Set(values.map(EqualityKey.init)) { index.equality[field, default: [:]][value, default: []].append(id) }
        case .tokens(let tokens, let requiring):
            let requires = requiring.map { retainToken($0, in: &index) } ?? .max
            for token in Set(tokens) {
                _ = retainToken(token, in: &index)
                index.tokens[token]?.postings.append(TokenPosting(entry: id, requires: requires))
            }
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

    private static func unfile(_ id: UInt32, under anchor: Anchor, in index: inout TypeIndex) {
        switch anchor {
        case .equality(let field, let values):
            for value in Set(values.map(EqualityKey.init)) {
                index.equality[field]?[value]?.removeAll { $0 == id }
                if index.equality[field]?[value]?.isEmpty ?? false { index.equality[field]?[value] = nil }
                if index.equality[field]?.isEmpty ?? false { index.equality[field] = nil }
            }
        case .tokens(let tokens, let requiring):
            for token in Set(tokens) {
                index.tokens[token]?.postings.removeAll { $0.entry == id }
                releaseToken(token, in: &index)
            }
            if let requiring { releaseToken(requiring, in: &index) }
        case .cells(let field, let cells):
            for cell in cells {
                index.cells[field]?[cell]?.removeAll { $0 == id }
                if index.cells[field]?[cell]?.isEmpty ?? false { index.cells[field]?[cell] = nil }
            }
            if index.cells[field]?.isEmpty ?? false { index.cells[field] = nil }
        case .lowerBound(let field, let kind, let bound):
            let key = RangeKey(field: field, kind: kind)
            index.lowerBounds[key]?.remove(bound, id)
            if index.lowerBounds[key]?.isEmpty ?? false { index.lowerBounds[key] = nil }
        case .upperBound(let field, let kind, let bound):
            let key = RangeKey(field: field, kind: kind)
            index.upperBounds[key]?.remove(bound, id)
            if index.upperBounds[key]?.isEmpty ?? false { index.upperBounds[key] = nil }
        case .interval(let field, let kind, let low, let high):
            let key = RangeKey(field: field, kind: kind)
            index.intervals[key]?.remove(low, high, id)
            if index.intervals[key]?.isEmpty ?? false { index.intervals[key] = nil }
        case .none:
            index.unanchored.remove(id)
        }
    }

    /// The token's number, counting one more use (a posting or a requirement).
    private static func retainToken(_ token: String, in index: inout TypeIndex) -> UInt32 {
        if index.tokens[token] == nil {
            index.tokens[token] = TokenPostings(id: index.nextToken)
            index.nextToken &+= 1
        }
        index.tokens[token]?.uses += 1
        return index.tokens[token]?.id ?? .max
    }

    private static func releaseToken(_ token: String, in index: inout TypeIndex) {
        index.tokens[token]?.uses -= 1
        if index.tokens[token]?.uses ?? 1 <= 0 { index.tokens[token] = nil }
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

extension QuerySubscriptionIndex.TypeIndex {
    typealias RangeKey = QuerySubscriptionIndex.RangeKey

    func candidates(record: Record, into candidates: inout [UInt32]) {
        candidates.append(contentsOf: unanchored)
        for (key, value) in record.fields {
            probe(field: .user(key), value: value, into: &candidates)
        }
        for field in systemFields {
            if let value = record.value(of: field) { probe(field: field, value: value, into: &candidates) }
        }
        guard !tokens.isEmpty else { return }
        // The record's tokens are looked up as the tokenizer finds them, without building the
        // token set: evaluation builds it only if a token search survives the second-token check.
        var probe = TokenProbe(tokens: tokens)
        for (_, value) in record.fields {
            switch value {
            case .string(let text): Tokenizer.scan(text, into: &probe)
            case .list(.string, let members):
                for case .string(let text) in members { Tokenizer.scan(text, into: &probe) }
            default: break
            }
        }
        probe.present.sort()
        for posting in probe.postings where posting.requires == .max || Self.contains(probe.present, posting.requires) {
            candidates.append(posting.entry)
        }
    }

    /// Collects, for each record token with postings, its number and its postings (once each).
    private struct TokenProbe: Tokenizer.TokenSink {
        let tokens: [String: QuerySubscriptionIndex.TokenPostings]
        var present: [UInt32] = []
        var postings: [QuerySubscriptionIndex.TokenPosting] = []

        mutating func add(_ token: String, fingerprint: UInt64) {
            guard let entry = tokens[token], !present.contains(entry.id) else { return }
            present.append(entry.id)
            postings.append(contentsOf: entry.postings)
        }
    }

    private static func contains(_ sorted: [UInt32], _ value: UInt32) -> Bool {
        var (low, high) = (0, sorted.count)
        while low < high {
            let mid = (low + high) / 2
            if sorted[mid] < value { low = mid + 1 } else { high = mid }
        }
        return low < sorted.count && sorted[low] == value
    }

    private func probe(field: FieldReference, value: FieldValue, into candidates: inout [UInt32]) {
        if let byValue = equality[field] {
            if case .list(_, let members) = value {
                for member in members { if let postings = byValue[EqualityKey(member)] { candidates.append(contentsOf: postings) } }
            } else if let postings = byValue[EqualityKey(value)] {
                candidates.append(contentsOf: postings)
            }
        }
        if case .location(let location) = value, let byCell = cells[field],
           let postings = byCell[QuerySubscriptionIndex.cell(latitude: location.latitude, longitude: location.longitude)] {
            candidates.append(contentsOf: postings)
        }
        let (kind, x): (QuerySubscriptionIndex.RangeKind, Double)
        switch value {
        case .int64(let i): (kind, x) = (.number, Double(i))
        case .double(let d): (kind, x) = (.number, d)
        case .timestamp(let t): (kind, x) = (.timestamp, Double(t))
        default: return
        }
        // Doubles round integers above 2^53: widen the probe so rounding never loses a candidate.
        let slack = max(1, abs(x) * 1e-15)
        let key = RangeKey(field: field, kind: kind)
        if let lower = lowerBounds[key] { lower.forEach(boundAtMost: x + slack) { candidates.append($0) } }
        if let upper = upperBounds[key] { upper.forEach(boundAtLeast: x - slack) { candidates.append($0) } }
        if let intervals = intervals[key] { intervals.forEach(containing: x, slack: slack) { candidates.append($0) } }
    }

    /// Whether a field in `changes` is one probing reads, so the old record may find other entries.
    func probeReads(_ changes: FieldChanges) -> Bool {
        if changes.all { return true }
        if !tokens.isEmpty && changes.stringFieldChanged { return true }
        for field in changes.fields {
            if equality[field] != nil || cells[field] != nil { return true }
            for kind in [QuerySubscriptionIndex.RangeKind.number, .timestamp] {
                let key = RangeKey(field: field, kind: kind)
                if lowerBounds[key] != nil || upperBounds[key] != nil || intervals[key] != nil { return true }
            }
        }
        return false
    }
}

/// Range bounds kept sorted, for "every entry whose bound is at most (or at least) x".
struct SortedBounds: Sendable {
    private var bounds: [Double] = []
    private var ids: [UInt32] = []

    var isEmpty: Bool { bounds.isEmpty }

    mutating func insert(_ bound: Double, _ id: UInt32) {
        let position = firstIndex(notBelow: bound)
        bounds.insert(bound, at: position)
        ids.insert(id, at: position)
    }

    mutating func remove(_ bound: Double, _ id: UInt32) {
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

    func forEach(boundAtMost x: Double, _ body: (UInt32) -> Void) {
        let end = firstIndex(above: x)
        for position in 0..<end { body(ids[position]) }
    }

    func forEach(boundAtLeast x: Double, _ body: (UInt32) -> Void) {
        for position in firstIndex(notBelow: x)..<bounds.count { body(ids[position]) }
    }

    fileprivate func firstIndex(notBelow x: Double) -> Int {
        Self.firstIndex(in: bounds, notBelow: x)
    }

    private func firstIndex(above x: Double) -> Int {
        var (low, high) = (0, bounds.count)
        while low < high {
            let mid = (low + high) / 2
            if bounds[mid] <= x { low = mid + 1 } else { high = mid }
        }
        return low
    }

    fileprivate static func firstIndex(in bounds: [Double], notBelow x: Double) -> Int {
        var (low, high) = (0, bounds.count)
        while low < high {
            let mid = (low + high) / 2
            if bounds[mid] < x { low = mid + 1 } else { high = mid }
        }
        return low
    }
}

/// Closed intervals for stabbing queries ("which intervals contain x?").
///
/// Intervals are grouped by width class (the power of two at or above their width) and kept
/// sorted by lower bound within a class. An interval of class w that contains x has its lower
/// bound in [x - 2^w, x], so a probe scans only that window of each class: the cost follows the
/// answer, not the number of intervals. The lower bounds are an array of their own, dense for the
/// binary searches (a million subscriptions' bounds stay in cache), and the classes an array, so a
/// probe copies nothing.
struct IntervalIndex: Sendable {
    private struct Tail: Sendable {
        var high: Double
        var id: UInt32
    }

    private struct WidthClass: Sendable {
        var key: Int
        var width: Double
        var lows: [Double] = []
        /// The upper bound and entry of the interval at the same position in `lows`.
        var tails: [Tail] = []
    }

    /// Ordered by key.
    private var classes: [WidthClass] = []

    var isEmpty: Bool { classes.isEmpty }

    private static func widthClass(_ width: Double) -> Int {
        width <= 0 ? Int.min : Int(width.exponent) + 1
    }

    /// The first position whose lower bound is at least `x`. Branch-free (the comparisons of a
    /// binary search are unpredictable, and a probe makes one per class).
    private static func firstIndex(_ lows: UnsafeBufferPointer<Double>, notBelow x: Double) -> Int {
        guard var base = lows.baseAddress, !lows.isEmpty else { return 0 }
        let start = base
        var count = lows.count
        while count > 1 {
            let half = count / 2
            base = base[half] < x ? base + half : base
            count -= half
        }
        return base - start + (base.pointee < x ? 1 : 0)
    }

    mutating func insert(_ low: Double, _ high: Double, _ id: UInt32) {
        let key = Self.widthClass(high - low)
        let position = classes.firstIndex { $0.key >= key } ?? classes.count
        if position == classes.count || classes[position].key != key {
            let width = key == Int.min ? 0 : Double(sign: .plus, exponent: key, significand: 1)
            classes.insert(WidthClass(key: key, width: width), at: position)
        }
        let at = classes[position].lows.withUnsafeBufferPointer { Self.firstIndex($0, notBelow: low) }
        classes[position].lows.insert(low, at: at)
        classes[position].tails.insert(Tail(high: high, id: id), at: at)
    }

    mutating func remove(_ low: Double, _ high: Double, _ id: UInt32) {
        let key = Self.widthClass(high - low)
        guard let position = classes.firstIndex(where: { $0.key == key }) else { return }
        var at = classes[position].lows.withUnsafeBufferPointer { Self.firstIndex($0, notBelow: low) }
        while at < classes[position].lows.count, classes[position].lows[at] == low {
            if classes[position].tails[at].id == id {
                classes[position].lows.remove(at: at)
                classes[position].tails.remove(at: at)
                if classes[position].lows.isEmpty { classes.remove(at: position) }
                return
            }
            at += 1
        }
    }

    func forEach(containing x: Double, slack: Double, _ body: (UInt32) -> Void) {
        classes.withUnsafeBufferPointer { classes in
            for widthClass in classes.indices {
                let width = classes[widthClass].width
                classes[widthClass].lows.withUnsafeBufferPointer { lows in
                    classes[widthClass].tails.withUnsafeBufferPointer { tails in
                        var position = Self.firstIndex(lows, notBelow: x - width - slack)
                        let end = x + slack
                        while position < lows.count, lows[position] <= end {
                            if tails[position].high >= x - slack { body(tails[position].id) }
                            position += 1
                        }
                    }
                }
            }
        }
    }
}
