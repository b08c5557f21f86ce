import CKQuerySupport

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
///    names a second token the record must have, checked before the entry is looked at (a search
///    that is the whole predicate, on at most those two tokens, is then settled without evaluation);
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
        var subscribers = Subscribers()
        var recordType: UInt32
        /// Not optional: the matcher reads it in place, and an optional would be copied out to be
        /// unwrapped. A free entry has no subscribers and `PackedPredicate.free`.
        var predicate: PackedPredicate

        var isFree: Bool { subscribers.isEmpty }
    }

    /// Slot numbers, the first inline: most predicates have one subscriber.
    struct Subscribers: Sendable {
        private(set) var first = UInt32.max
        private var rest: [UInt32] = []

        var isEmpty: Bool { first == .max }

        var count: Int { first == .max ? 0 : 1 + rest.count }

        /// The only subscriber, or `UInt32.max` when there are none or several.
        var sole: UInt32 { rest.isEmpty ? first : .max }

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

    /// A match settled by an interval whose entry has one subscriber: the interval holds all the
    /// firing needs (the subscriber, and the predicate `key BETWEEN {low, high}` on record type
    /// `type`), so the entry is not read.
    struct SoleMatch: Sendable {
        var slot: UInt32
        var type: UInt32
        var key: FieldKey
        /// The bounds as the interval holds them: INT64s that doubles represent exactly (see
        /// `decidesByInterval`), converted back only when a firing is made.
        var low: Double
        var high: Double

        var predicate: PackedPredicate { .one(.between(key, Int64(low), Int64(high))) }
    }

    /// One record type's postings. A record is probed field by field: its fields and the indexed
    /// user fields are both sorted by key number, so they are matched in one merge, with no hashing.
    struct TypeIndex: Sendable {
        /// User fields some entry is anchored on, by key number, and their postings (same positions).
        var userKeys: [FieldKey] = []
        var userFields: [FieldPostings] = []
        /// System fields some entry is anchored on (few), and their postings.
        var systemKeys: [FieldReference] = []
        var systemFields: [FieldPostings] = []
        var tokens = TokenTable()
        var unanchored: Set<UInt32> = []
    }

    /// The entries anchored on one field: by equal value, by spatial cell, or by range.
    struct FieldPostings: Sendable {
        var equality: [EqualityKey: [UInt32]] = [:]
        var cells: [Int64: [UInt32]] = [:]
        var numbers = RangePostings()
        var timestamps = RangePostings()

        var isEmpty: Bool { equality.isEmpty && cells.isEmpty && numbers.isEmpty && timestamps.isEmpty }

        /// Calls `body` on the ranges of `kind`, in place.
        mutating func updateRanges(_ kind: RangeKind, _ body: (inout RangePostings) -> Void) {
            switch kind {
            case .number: body(&numbers)
            case .timestamp: body(&timestamps)
            }
        }
    }

    /// `K > c` and `K < c` as sorted bounds, `K BETWEEN {lo, hi}` as intervals.
    struct RangePostings: Sendable {
        var lowerBounds = SortedBounds()
        var upperBounds = SortedBounds()
        var intervals = IntervalIndex()

        var isEmpty: Bool { lowerBounds.isEmpty && upperBounds.isEmpty && intervals.isEmpty }
    }

    private(set) var entries: [Entry] = []
    private var freeEntries: [UInt32] = []
    private var entryTable = SlotHashTable()
    private var recordTypes: [String] = []
    private var recordTypeIDs: [String: UInt32] = [:]
    /// By record type number; mutated and read in place (never copied out of the array).
    private var types: [TypeIndex] = []

    // MARK: Adding and removing

    /// The number of a record type some entry has. Among a few types, compared in turn: each
    /// change asks, and hashing a string costs more than a few comparisons.
    func typeID(of recordType: String) -> UInt32? {
        guard recordTypes.count <= 8 else { return recordTypeIDs[recordType] }
        for (number, name) in recordTypes.enumerated() where name == recordType { return UInt32(number) }
        return nil
    }

    func recordType(of entry: UInt32) -> String { recordTypes[Int(entries[Int(entry)].recordType)] }

    func recordTypeName(_ type: UInt32) -> String { recordTypes[Int(type)] }

    /// The entry with this record type and predicate, if some subscription has it.
    func entry(for key: EntryKey) -> UInt32? {
        entryTable.first(hash: key.hash) { entry in
            let stored = entries[Int(entry)]
            // `==` on conditions compares strings by canonical equivalence ("é" == "e\u{301}"), but
            // predicates compare strings byte for byte: two such subscriptions must not share.
            return !stored.isFree && recordTypes[Int(stored.recordType)] == key.recordType && stored.predicate == key.predicate
                && stored.predicate.condition.description.utf8.elementsEqual(key.predicate.condition.description.utf8)
        }
    }

    /// Adds `slot` as a subscriber of the entry for `key` (created and filed if new); returns the entry.
    mutating func insert(_ slot: UInt32, key: EntryKey) -> UInt32 {
        if let existing = entry(for: key) {
            entries[Int(existing)].subscribers.append(slot)
            updateSole(of: existing)
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
        var entry = Entry(recordType: type, predicate: key.predicate)
        entry.subscribers.append(slot)
        let id: UInt32
        if let reused = freeEntries.popLast() {
            id = reused
            entries[Int(id)] = entry
        } else {
            id = UInt32(entries.count)
            entries.appendAdvisingHugePages(entry)
        }
        entryTable.insert(id, hash: key.hash)
        Self.file(id, under: Self.anchor(of: key.predicate.condition),
                  decides: Self.decidesByInterval(key.predicate) || Self.decidesByTokens(key.predicate), sole: slot,
                  in: &types[Int(type)])
        return id
    }

    /// Removes `slot` from `entry`'s subscribers, and the entry with its postings after the last.
    mutating func remove(_ slot: UInt32, entry id: UInt32) {
        guard Int(id) < entries.count, !entries[Int(id)].isFree else { return }
        let predicate = entries[Int(id)].predicate
        entries[Int(id)].subscribers.remove(slot)
        guard entries[Int(id)].subscribers.isEmpty else {
            updateSole(of: id)
            return
        }
        let type = entries[Int(id)].recordType
        entryTable.remove(id, hash: EntryKey(recordType: recordTypes[Int(type)], predicate: predicate).hash)
        Self.unfile(id, under: Self.anchor(of: predicate.condition), in: &types[Int(type)])
        entries[Int(id)].predicate = .free
        freeEntries.append(id)
    }

    /// Tells the interval deciding entry `id` (if one does) the entry's sole subscriber, after its
    /// subscribers changed.
    private mutating func updateSole(of id: UInt32) {
        let entry = entries[Int(id)]
        guard Self.decidesByInterval(entry.predicate), case .one(.between(let key, let low, let high)) = entry.predicate else { return }
        types[Int(entry.recordType)].updatePostings(of: .user(key)) {
            $0.numbers.intervals.setSole(Double(low), Double(high), id, entry.subscribers.sole)
        }
    }

    // MARK: Probing

    /// Adds to `found` the entries of record type `found.type` that `record` could match (those it
    /// is known to match marked `Found.decided`), and the known matches of entries with one
    /// subscriber that an interval describes whole. An entry may come more than once.
    func probe(_ record: Record, into found: inout Found) {
        // Read in place: a type index copied out of its array costs a retain per table.
        types.withUnsafeBufferPointer { types in
            guard let base = types.baseAddress, Int(found.type) < types.count else { return }
            TypeIndex.probe(base + Int(found.type), record: record, into: &found)
        }
    }

    /// What a probe finds (see `probe(_:into:)`).
    struct Found {
        /// The record type probed.
        var type: UInt32
        /// Entry numbers; with `decided` set, the record is known to match the entry (a range or
        /// token posting decided it), else the entry's predicate is to be evaluated.
        var candidates: [UInt32] = []
        var soleMatches: [SoleMatch] = []

        /// The flag of a decided entry: entry numbers stay below it (an entry takes tens of bytes,
        /// and `SubscriptionSet` holds fewer than 2^31 subscriptions).
        static let decided: UInt32 = 1 << 31

        init(type: UInt32) {
            self.type = type
            candidates.reserveCapacity(256)
        }
    }

    /// Whether probing the record of type `type` could find other entries once `changes` are made.
    func probeReads(type: UInt32, _ changes: FieldChanges) -> Bool {
        types[Int(type)].probeReads(changes)
    }

    /// Checks that every interval deciding an entry names the entry's sole subscriber (for tests).
    func _checkSoleSubscribers() -> [String] {
        var problems: [String] = []
        for (id, entry) in entries.enumerated() where !entry.isFree && Self.decidesByInterval(entry.predicate) {
            guard case .one(.between(let key, let low, let high)) = entry.predicate else { continue }
            let index = types[Int(entry.recordType)]
            let recorded = index.userKeys.firstIndex(of: key).flatMap { index.userFields[$0].numbers.intervals.sole(Double(low), Double(high), UInt32(id)) }
            if recorded != entry.subscribers.sole { problems.append("entry \(id): interval names \(recorded.map(String.init) ?? "nothing") as its sole subscriber") }
        }
        return problems
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
            let box = Geodesic.boundingBox(latitude: center.latitude, longitude: center.longitude, radius: Condition.radiusInMetres(radius))
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

    /// Files entry `id` under `anchor`. With `decides`, the anchor is the whole predicate (a lone
    /// INT64 BETWEEN, or a token search on at most the two tokens its postings check), and finding
    /// the entry through it settles the verdict. `sole` is the entry's one subscriber.
    private static func file(_ id: UInt32, under anchor: Anchor, decides: Bool, sole: UInt32, in index: inout TypeIndex) {
        switch anchor {
        case .equality(let field, let values):
            index.updatePostings(of: field) { postings in
                for value in Set(values.map(EqualityKey.init)) { postings.equality[value, default: []].append(id) }
            }
        case .tokens(let tokens, let requiring):
            let requires = requiring.map { index.tokens.retain($0) } ?? .max
            for token in Set(tokens) { index.tokens.add(TokenTable.Posting(entry: id, requires: requires, decides: decides), under: token) }
        case .cells(let field, let cells):
            index.updatePostings(of: field) { postings in
                for cell in cells { postings.cells[cell, default: []].append(id) }
            }
        case .lowerBound(let field, let kind, let bound):
            index.updatePostings(of: field) { $0.updateRanges(kind) { $0.lowerBounds.insert(bound, id) } }
        case .upperBound(let field, let kind, let bound):
            index.updatePostings(of: field) { $0.updateRanges(kind) { $0.upperBounds.insert(bound, id) } }
        case .interval(let field, let kind, let low, let high):
            index.updatePostings(of: field) { $0.updateRanges(kind) { $0.intervals.insert(low, high, id, decides: decides, sole: sole) } }
        case .none:
            index.unanchored.insert(id)
        }
    }

    private static func unfile(_ id: UInt32, under anchor: Anchor, in index: inout TypeIndex) {
        switch anchor {
        case .equality(let field, let values):
            index.updatePostings(of: field) { postings in
                for value in Set(values.map(EqualityKey.init)) {
                    postings.equality[value]?.removeAll { $0 == id }
                    if postings.equality[value]?.isEmpty ?? false { postings.equality[value] = nil }
                }
            }
        case .tokens(let tokens, let requiring):
            for token in Set(tokens) { index.tokens.remove(entry: id, under: token) }
            if let requiring { index.tokens.release(requiring) }
        case .cells(let field, let cells):
            index.updatePostings(of: field) { postings in
                for cell in cells {
                    postings.cells[cell]?.removeAll { $0 == id }
                    if postings.cells[cell]?.isEmpty ?? false { postings.cells[cell] = nil }
                }
            }
        case .lowerBound(let field, let kind, let bound):
            index.updatePostings(of: field) { $0.updateRanges(kind) { $0.lowerBounds.remove(bound, id) } }
        case .upperBound(let field, let kind, let bound):
            index.updatePostings(of: field) { $0.updateRanges(kind) { $0.upperBounds.remove(bound, id) } }
        case .interval(let field, let kind, let low, let high):
            index.updatePostings(of: field) { $0.updateRanges(kind) { $0.intervals.remove(low, high, id) } }
        case .none:
            index.unanchored.remove(id)
        }
    }

    /// Whether `predicate` is exactly `K BETWEEN {lo, hi}` with INT64 bounds that doubles represent
    /// exactly: its interval then holds every number that matches and no other, so a probe with
    /// an exact number needs no evaluation (an INT64 x matches iff lo <= x <= hi; a DOUBLE compares
    /// exactly with the bounds; NaN matches nothing and stabs nothing).
    static func decidesByInterval(_ predicate: PackedPredicate) -> Bool {
        guard case .one(.between(_, let low, let high)) = predicate else { return false }
        return low <= high && low.magnitude <= maximumExactInteger && high.magnitude <= maximumExactInteger
    }

    /// Whether `predicate` is exactly a token search whose postings check all its tokens: `ANY`
    /// (filed under every token), or `ALL` of at most two distinct tokens (filed under the longest,
    /// requiring the other). A record found through such a posting has the tokens, in the same
    /// folded bytes the evaluation's token set holds, so it matches without being evaluated.
    static func decidesByTokens(_ predicate: PackedPredicate) -> Bool {
        guard case .one(.tokens(let match, _, let tokens)) = predicate, !tokens.isEmpty else { return false }
        return match == .any || Set(tokens).count <= 2
    }

    /// 2^53: every integer up to it in magnitude is a double exactly.
    static let maximumExactInteger: UInt64 = 1 << 53

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
    typealias FieldPostings = QuerySubscriptionIndex.FieldPostings

    /// Calls `body` on the postings of `field` in place (made if absent), dropping them once empty.
    mutating func updatePostings(of field: FieldReference, _ body: (inout FieldPostings) -> Void) {
        if case .user(let key) = field {
            let position = Self.position(of: key, in: userKeys)
            if position == userKeys.count || userKeys[position] != key {
                userKeys.insert(key, at: position)
                userFields.insert(FieldPostings(), at: position)
            }
            body(&userFields[position])
            if userFields[position].isEmpty {
                userKeys.remove(at: position)
                userFields.remove(at: position)
            }
        } else {
            let position = systemKeys.firstIndex(of: field) ?? systemKeys.count
            if position == systemKeys.count {
                systemKeys.append(field)
                systemFields.append(FieldPostings())
            }
            body(&systemFields[position])
            if systemFields[position].isEmpty {
                systemKeys.remove(at: position)
                systemFields.remove(at: position)
            }
        }
    }

    /// The first position in `keys` (sorted) not below `key`.
    private static func position(of key: FieldKey, in keys: [FieldKey]) -> Int {
        var (low, high) = (0, keys.count)
        while low < high {
            let mid = (low + high) / 2
            if keys[mid] < key { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Adds to `found` the entries the record could match, and those it is known to match (found
    /// by a range that decides them). An entry may come more than once.
    /// The index is read through a pointer, the record's fields in place: copies would retain.
    static func probe(_ index: UnsafePointer<Self>, record: Record, into found: inout QuerySubscriptionIndex.Found) {
        if !index.pointee.unanchored.isEmpty { found.candidates.append(contentsOf: index.pointee.unanchored) }
        record.fields.withEntries { fields in
            index.pointee.userKeys.withUnsafeBufferPointer { keys in
                index.pointee.userFields.withUnsafeBufferPointer { postings in
                    guard let postings = postings.baseAddress else { return }
                    // Both sorted by key number: one merge.
                    var (i, j) = (0, 0)
                    while i < fields.count && j < keys.count {
                        let (a, b) = (fields[i].key.rawValue, keys[j].rawValue)
                        if a < b {
                            i += 1
                        } else if a > b {
                            j += 1
                        } else {
                            FieldPostings.probe(postings + j, fields[i].value, key: keys[j], into: &found)
                            i += 1
                            j += 1
                        }
                    }
                }
            }
        }
        if !index.pointee.systemKeys.isEmpty {
            index.pointee.systemFields.withUnsafeBufferPointer { postings in
                guard let postings = postings.baseAddress else { return }
                for (position, field) in index.pointee.systemKeys.enumerated() {
                    if let value = record.value(of: field) { FieldPostings.probe(postings + position, value, key: nil, into: &found) }
                }
            }
        }
        guard !index.pointee.tokens.isEmpty else { return }
        index.pointee.tokens.probe(record, into: &found.candidates)
    }

    /// Whether a field in `changes` is one probing reads, so the old record may find other entries.
    func probeReads(_ changes: FieldChanges) -> Bool {
        if changes.all { return true }
        if !tokens.isEmpty && changes.stringFieldChanged { return true }
        for field in changes.fields {
            if case .user(let key) = field {
                let position = Self.position(of: key, in: userKeys)
                if position < userKeys.count && userKeys[position] == key { return true }
            } else if systemKeys.contains(field) {
                return true
            }
        }
        return false
    }
}

extension QuerySubscriptionIndex.FieldPostings {
    /// Probes the postings at `postings` (read in place) with one value of their field, the user
    /// field `key` (nil for a system field).
    static func probe(_ postings: UnsafePointer<Self>, _ value: FieldValue, key: FieldKey?, into found: inout QuerySubscriptionIndex.Found) {
        if !postings.pointee.equality.isEmpty {
            if case .list(_, let members) = value {
                for member in members {
                    if let entries = postings.pointee.equality[EqualityKey(member)] { found.candidates.append(contentsOf: entries) }
                }
            } else if let entries = postings.pointee.equality[EqualityKey(value)] {
                found.candidates.append(contentsOf: entries)
            }
        }
        if !postings.pointee.cells.isEmpty, case .location(let location) = value,
           let entries = postings.pointee.cells[QuerySubscriptionIndex.cell(latitude: location.latitude, longitude: location.longitude)] {
            found.candidates.append(contentsOf: entries)
        }
        typealias RangePostings = QuerySubscriptionIndex.RangePostings
        switch value {
        case .int64(let i):
            RangePostings.probe(postings.pointer(to: \.numbers), Double(i), exact: i.magnitude <= QuerySubscriptionIndex.maximumExactInteger,
                                key: key, into: &found)
        case .double(let d): RangePostings.probe(postings.pointer(to: \.numbers), d, exact: d.isFinite, key: key, into: &found)
        case .timestamp(let t): RangePostings.probe(postings.pointer(to: \.timestamps), Double(t), exact: false, key: key, into: &found)
        default: break
        }
    }
}

extension QuerySubscriptionIndex.RangePostings {
    /// With `exact`, `x` is the probed value itself (not rounded), so intervals that decide their
    /// entries settle them: an entry whose interval holds `x` matches, any other does not. A
    /// settled entry with one subscriber on the user field `key` is a sole match.
    static func probe(_ ranges: UnsafePointer<Self>?, _ x: Double, exact: Bool, key: FieldKey?, into found: inout QuerySubscriptionIndex.Found) {
        guard let ranges, !ranges.pointee.isEmpty else { return }
        // Doubles round integers above 2^53: widen the probe so rounding never loses a candidate.
        let slack = max(1, abs(x) * 1e-15)
        if !ranges.pointee.lowerBounds.isEmpty { ranges.pointee.lowerBounds.forEach(boundAtMost: x + slack) { found.candidates.append($0) } }
        if !ranges.pointee.upperBounds.isEmpty { ranges.pointee.upperBounds.forEach(boundAtLeast: x - slack) { found.candidates.append($0) } }
        if !ranges.pointee.intervals.isEmpty {
            if key != nil && found.soleMatches.capacity == 0 { found.soleMatches.reserveCapacity(64) }
            ranges.pointee.intervals.stab(x, slack: slack, exact: exact, key: key, into: &found)
        }
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
/// Intervals are grouped by width class (the power of four at or above their width) and kept
/// sorted by lower bound within a class. An interval of class w that contains x has its lower
/// bound in [x - w, x], so a probe scans only that window of each class: the cost follows the
/// answer, not the number of intervals. The classes are an array, so a probe copies nothing.
///
/// Where a window starts is found from the class's *fences*, every eighth lower bound: a binary
/// search over them reads a few kilobytes that stay in cache, where one over all lower bounds
/// (hundreds of kilobytes at a million subscriptions) missed the cache at each of its last steps.
/// A probe first finds every class's fence and asks for the lines its window starts on, then
/// scans the windows, so the classes' cache misses overlap.
///
/// An interval may *decide* its entry (the entry's predicate is exactly "lo <= x <= hi"): a probe
/// with an exact value then reports whether the entry matches, and the entry is not evaluated.
/// While such an entry has one subscriber the interval names it too, so a match need not read
/// the entry at all (its cache lines were a third of a change's misses).
struct IntervalIndex: Sendable {
    private struct Tail: Sendable {
        var high: Double
        var id: UInt32
        /// For an interval that decides its entry: the entry's one subscriber, or `UInt32.max`.
        var sole: UInt32
        var decides: Bool
    }

    private struct WidthClass: Sendable {
        var key: Int
        var width: Double
        var lows: [Double] = []
        /// The upper bound and entry of the interval at the same position in `lows`.
        var tails: [Tail] = []
        /// `fences[k] == lows[k * fenceStride]`.
        var fences: [Double] = []

        /// Brings the fences up to date after `lows` changed at `position` and after.
        mutating func refreshFences(from position: Int) {
            let needed = (lows.count + IntervalIndex.fenceStride - 1) / IntervalIndex.fenceStride
            if fences.count > needed { fences.removeLast(fences.count - needed) }
            for fence in position / IntervalIndex.fenceStride..<needed {
                let low = lows[fence * IntervalIndex.fenceStride]
                if fence < fences.count { fences[fence] = low } else { fences.append(low) }
            }
        }
    }

    static let fenceStride = 8

    /// Ordered by key.
    private var classes: [WidthClass] = []

    var isEmpty: Bool { classes.isEmpty }

    /// The class of a width: the even exponent k with 2^k at or above it (a power of four), so
    /// a probe makes half as many searches as with powers of two, for windows up to four times
    /// the narrowest width they hold rather than twice.
    private static func widthClass(_ width: Double) -> Int {
        width <= 0 ? Int.min : (Int(width.exponent) + 2) / 2 * 2
    }

    /// The number of elements of `sorted` below `x`. Branch-free (the comparisons of a binary
    /// search are unpredictable, and a probe makes one per class).
    private static func count(_ sorted: UnsafeBufferPointer<Double>, below x: Double) -> Int {
        guard var base = sorted.baseAddress, !sorted.isEmpty else { return 0 }
        let start = base
        var count = sorted.count
        while count > 1 {
            let half = count / 2
            base = base[half] < x ? base + half : base
            count -= half
        }
        return base - start + (base.pointee < x ? 1 : 0)
    }

    /// Where the window for `x` can start: every lower bound before it is below `x`. `fencesBelow`
    /// is `count(fences, below: x)`.
    private static func windowStart(fencesBelow: Int) -> Int {
        fencesBelow == 0 ? 0 : (fencesBelow - 1) * fenceStride
    }

    private static func firstIndex(_ lows: UnsafeBufferPointer<Double>, _ fences: UnsafeBufferPointer<Double>, notBelow x: Double) -> Int {
        var position = windowStart(fencesBelow: count(fences, below: x))
        while position < lows.count && lows[position] < x { position += 1 }
        return position
    }

    private func firstIndex(inClass position: Int, notBelow x: Double) -> Int {
        classes[position].lows.withUnsafeBufferPointer { lows in
            classes[position].fences.withUnsafeBufferPointer { Self.firstIndex(lows, $0, notBelow: x) }
        }
    }

    mutating func insert(_ low: Double, _ high: Double, _ id: UInt32, decides: Bool = false, sole: UInt32 = .max) {
        let key = Self.widthClass(high - low)
        let position = classes.firstIndex { $0.key >= key } ?? classes.count
        if position == classes.count || classes[position].key != key {
            let width = key == Int.min ? 0 : Double(sign: .plus, exponent: key, significand: 1)
            classes.insert(WidthClass(key: key, width: width), at: position)
        }
        let at = firstIndex(inClass: position, notBelow: low)
        classes[position].lows.insert(low, at: at)
        classes[position].tails.insert(Tail(high: high, id: id, sole: decides ? sole : .max, decides: decides), at: at)
        classes[position].refreshFences(from: at)
    }

    mutating func remove(_ low: Double, _ high: Double, _ id: UInt32) {
        let key = Self.widthClass(high - low)
        guard let position = classes.firstIndex(where: { $0.key == key }) else { return }
        var at = firstIndex(inClass: position, notBelow: low)
        while at < classes[position].lows.count, classes[position].lows[at] == low {
            if classes[position].tails[at].id == id {
                classes[position].lows.remove(at: at)
                classes[position].tails.remove(at: at)
                if classes[position].lows.isEmpty {
                    classes.remove(at: position)
                } else {
                    classes[position].refreshFences(from: at)
                }
                return
            }
            at += 1
        }
    }

    /// Records `sole` as the one subscriber of entry `id`, whose interval decides it (`UInt32.max`
    /// for none or several).
    mutating func setSole(_ low: Double, _ high: Double, _ id: UInt32, _ sole: UInt32) {
        let key = Self.widthClass(high - low)
        guard let position = classes.firstIndex(where: { $0.key == key }) else { return }
        var at = firstIndex(inClass: position, notBelow: low)
        while at < classes[position].lows.count, classes[position].lows[at] == low {
            if classes[position].tails[at].id == id {
                if classes[position].tails[at].decides { classes[position].tails[at].sole = sole }
                return
            }
            at += 1
        }
    }

    /// The entry's one subscriber as an interval that decides it records it (for tests).
    func sole(_ low: Double, _ high: Double, _ id: UInt32) -> UInt32? {
        for widthClass in classes {
            for at in widthClass.lows.indices where widthClass.lows[at] == low && widthClass.tails[at].high == high && widthClass.tails[at].id == id {
                return widthClass.tails[at].sole
            }
        }
        return nil
    }

    /// Adds to `found` each interval containing x (widened by `slack` on both sides).
    ///
    /// With `exact` (x is the value probed, not a rounding of it), an interval that decides its
    /// entry is compared with x itself: if it holds x, the entry is known to match, and is added
    /// as a sole match when the interval names its one subscriber and the field is the user field
    /// `key`, else as a decided candidate; if not, the entry is known not to match and is left out.
    /// Every other interval that holds x adds its entry as a candidate.
    func stab(_ x: Double, slack: Double, exact: Bool, key: FieldKey?, into found: inout QuerySubscriptionIndex.Found) {
        let type = found.type
        let soleKey = key ?? FieldKey(rawValue: 0)
        let solesAllowed = key == nil ? 0 : 1
        let exactly = exact ? 1 : 0
        classes.withUnsafeBufferPointer { classes in
            guard let base = classes.baseAddress else { return }
            withUnsafeTemporaryAllocation(of: Int.self, capacity: classes.count) { starts in
                // First every class's window start, from its fences (in cache), asking for the
                // lines the windows start on...
                for widthClass in classes.indices {
                    let start = classes[widthClass].fences.withUnsafeBufferPointer {
                        Self.windowStart(fencesBelow: Self.count($0, below: x - classes[widthClass].width - slack))
                    }
                    starts[widthClass] = start
                    Self.prefetch(start, of: base + widthClass)
                }
                // ...then the windows. Whether an interval in a window holds x is a coin toss, so
                // a branch on it would be mispredicted half the time: each interval is written to
                // both outputs, as an entry and as a sole match, and the counts advance only for
                // what it is. The block is added after, outside the arrays' borrow (a call the
                // compiler cannot see into would need them retained).
                withUnsafeTemporaryAllocation(of: UInt32.self, capacity: Self.scanBlock) { entries in
                    withUnsafeTemporaryAllocation(of: QuerySubscriptionIndex.SoleMatch.self, capacity: Self.scanBlock) { soles in
                        guard let entries = entries.baseAddress, let soles = soles.baseAddress else { return }
                        for widthClass in classes.indices {
                            let low = x - classes[widthClass].width - slack
                            let end = x + slack
                            var position = starts[widthClass]
                            var more = true
                            while more {
                                var (entryCount, soleCount) = (0, 0)
                                classes[widthClass].lows.withUnsafeBufferPointer { lows in
                                    classes[widthClass].tails.withUnsafeBufferPointer { tails in
                                        while position < lows.count && lows[position] < low { position += 1 }
                                        let stop = min(lows.count, position + Self.scanBlock)
                                        while position < stop, lows[position] <= end {
                                            let tail = tails[position]
                                            let lowBound = lows[position]
                                            let decided = exactly & (tail.decides ? 1 : 0)
                                            let holdsExactly = (lowBound <= x ? 1 : 0) & (x <= tail.high ? 1 : 0)
                                            let holdsWidened = tail.high >= x - slack ? 1 : 0
                                            let holds = (decided & holdsExactly) | ((decided ^ 1) & holdsWidened)
                                            let sole = decided & holds & (tail.sole == .max ? 0 : 1) & solesAllowed
                                            entries[entryCount] = tail.id | UInt32(truncatingIfNeeded: decided) &* QuerySubscriptionIndex.Found.decided
                                            entryCount &+= holds & (sole ^ 1)
                                            soles[soleCount] = QuerySubscriptionIndex.SoleMatch(
                                                slot: tail.sole, type: type, key: soleKey, low: lowBound, high: tail.high)
                                            soleCount &+= sole
                                            position += 1
                                        }
                                        more = position < lows.count && lows[position] <= end
                                    }
                                }
                                if entryCount > 0 { found.candidates.append(contentsOf: UnsafeBufferPointer(start: entries, count: entryCount)) }
                                if soleCount > 0 { found.soleMatches.append(contentsOf: UnsafeBufferPointer(start: soles, count: soleCount)) }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Window positions scanned before their finds are added: 32 sole matches of 32 bytes, the
    /// most a temporary allocation holds on the stack here (past 1 KiB it is made on the heap).
    private static let scanBlock = 32

    /// Asks the CPU to start loading the lower bound and tail at `position` in the class at
    /// `widthClass`. The arrays' storage addresses are read as plain words (a retain would write
    /// to the storage and wait for it); elements start after the 32-byte array header, and a
    /// prefetch never faults, so a stale address costs nothing but time.
    private static func prefetch(_ position: Int, of widthClass: UnsafePointer<WidthClass>) {
        if let lows = widthClass.pointer(to: \.lows), let storage = UnsafeRawPointer(bitPattern: UnsafeRawPointer(lows).load(as: UInt.self)) {
            kquery_prefetch(storage + 32 + position * MemoryLayout<Double>.stride)
        }
        if let tails = widthClass.pointer(to: \.tails), let storage = UnsafeRawPointer(bitPattern: UnsafeRawPointer(tails).load(as: UInt.self)) {
            let first = storage + 32 + position * MemoryLayout<Tail>.stride
            kquery_prefetch(first)
            kquery_prefetch(first + 64)
        }
    }
}
