import KQuery

/// A full scan's predicate compiled to loops over a table's columns.
///
/// Each conjunct a column can answer becomes a filter that narrows a selection of positions (a
/// selection vector), cheapest first; the conjuncts no column answers (system fields, OR, NOT,
/// lists, string options, a field whose records hold mixed kinds...) then test the surviving
/// records, made from the columns, one at a time with the record evaluator. A filter keeps exactly
/// the positions where the record evaluator answers yes (a missing value or one of another kind is never a yes, except for
/// `== nil`), so the matches are the evaluator's.
struct ColumnScan {
    private enum Filter {
        /// No record matches: the field is in no record, or no token of the text is.
        case nothing
        case present(column: Int, Bool)
        /// INT64 against INT64, TIMESTAMP against TIMESTAMP.
        case integers(column: Int, Relation, Int64)
        case integersAgainstDouble(column: Int, Relation, Double)
        case doubles(column: Int, Relation, Double)
        case doublesAgainstInteger(column: Int, Relation, Int64)
        /// BETWEEN in one pass (its two comparisons as separate filters would first select every
        /// value above the lower bound).
        case integerRange(column: Int, ClosedRange<Int64>)
        case doubleRange(column: Int, lower: Double, upper: Double)
        case strings(column: Int, Relation, [UInt8])
        case stringOperation(column: Int, StringOperation, [UInt8])
        case distance(column: Int, LocationBox?, @Sendable (Double, Double) -> Bool?)
        /// Token numbers, sorted.
        case tokens(TokenMatch, [UInt32])

        /// Rough cost per position, to run cheap filters over the whole table and dear ones over
        /// what is left.
        var cost: Int {
            switch self {
            case .nothing: 0
            case .present: 1
            case .integers, .integersAgainstDouble, .doubles, .doublesAgainstInteger, .integerRange, .doubleRange: 2
            case .strings: 3
            case .stringOperation: 4
            case .distance: 5
            case .tokens: 6
            }
        }
    }

    private let filters: [Filter]
    /// The conjuncts no column answers, or nil.
    private let rest: CompiledPredicate?

    /// Nil when no conjunct of `condition` is answered by a column: the record-at-a-time scan is
    /// then as good.
    init?(_ condition: Condition, columns: borrowing Columns) {
        var compiled: [(filter: Filter, order: Int)] = []
        var rest: [Condition] = []
        var answered = false
        for conjunct in Database.conjuncts(of: condition) {
            if let filters = Self.filters(for: conjunct, columns: columns) {
                answered = true
                let order = compiled.count
                compiled += filters.map { (filter: $0, order: order) }
            } else {
                rest.append(conjunct)
            }
        }
        guard answered else { return nil }
        filters = compiled.sorted { ($0.filter.cost, $0.order) < ($1.filter.cost, $1.order) }.map(\.filter)
        self.rest = rest.isEmpty ? nil : CompiledPredicate(rest.count == 1 ? rest[0] : .and(rest))
    }

    /// Calls `body` with the position of every matching record of `table` among `positions` (all
    /// of them when nil), in the order given (position order when nil).
    func forEachMatch(in table: borrowing RecordTable, among positions: [UInt32]? = nil, now: Int64, _ body: (Int) -> Void) {
        var selection = positions
        for filter in filters {
            apply(filter, to: &selection, in: table.columns)
            if selection?.isEmpty == true { return }
        }
        guard let rest else {
            if let selection {
                for position in selection { body(Int(position)) }
            } else {
                for position in 0..<table.count { body(position) }
            }
            return
        }
        TableFilter.test(rest, in: table, among: selection, now: now, body)
    }

    // MARK: Compilation

    /// The filters that answer `conjunct` together (none: every record passes), or nil when the
    /// columns cannot answer it.
    private static func filters(for conjunct: Condition, columns: Columns) -> [Filter]? {
        switch conjunct {
        case .constant(let value):
            return value ? [] : [.nothing]
        case .field(.user(let key), let test):
            guard let index = columns.index(of: key) else {
                // No record has the field: only `== nil` holds, for every record.
                if case .isNil = test { return [] }
                return [.nothing]
            }
            let kind = columns.columns[index].kind
            switch test {
            case .isNil: return [.present(column: index, false)]
            case .isNotNil: return [.present(column: index, true)]
            case .compare(let relation, .value(let constant), let options) where options.isEmpty:
                return compare(index, kind, relation, constant).map { [$0] }
            case .between(.value(let lower), .value(let upper)):
                if let range = range(index, kind, lower, upper) { return [range] }
                guard let atLeast = compare(index, kind, .greaterThanOrEqual, lower),
                      let atMost = compare(index, kind, .lessThanOrEqual, upper)
                else { return nil }
                return [atLeast, atMost]
            case .string(let operation, let pattern, let options) where options.isEmpty:
                switch (kind, operation) {
                case (.empty, _): return [.nothing]
                case (.string, .beginsWith), (.string, .endsWith), (.string, .contains):
                    return [.stringOperation(column: index, operation, Array(pattern.utf8))]
                default: return nil
                }
            default:
                return nil
            }
        case .distance(.user(let key), let center, let relation, let radius):
            guard let index = columns.index(of: key) else { return [.nothing] }
            switch columns.columns[index].kind {
            case .empty: return [.nothing]
            case .location:
                let box = relation == .lessThan || relation == .lessThanOrEqual
                    ? LocationBox(center: center, metres: Condition.radiusInMetres(radius)) : nil
                return [.distance(column: index, box, CompiledPredicate.distanceTest(center, relation, radius))]
            default: return nil
            }
        case .tokens(let match, let text):
            guard columns.tracksTokens else { return nil }
            let numbers = Tokenizer.tokens(of: text).map { columns.tokenNumbers[$0] }
            let known = numbers.compactMap { $0 }
            // A token no record has: ALL fails everywhere, ANY depends on the others.
            if known.isEmpty || (match == .all && known.count < numbers.count) { return [.nothing] }
            return [.tokens(match, Array(Set(known)).sorted())]
        default:
            return nil
        }
    }

    /// A comparison of a column with a constant, for the kinds the record evaluator compares
    /// directly; nil for the rest (which the records answer).
    private static func compare(_ index: Int, _ kind: Column.Kind, _ relation: Relation, _ constant: FieldValue) -> Filter? {
        switch (kind, constant) {
        case (.empty, _): .nothing
        case (.int64, .int64(let c)), (.timestamp, .timestamp(let c)): .integers(column: index, relation, c)
        case (.int64, .double(let c)): .integersAgainstDouble(column: index, relation, c)
        case (.double, .double(let c)): .doubles(column: index, relation, c)
        case (.double, .int64(let c)): .doublesAgainstInteger(column: index, relation, c)
        case (.string, .string(let c)): .strings(column: index, relation, Array(c.utf8))
        default: nil
        }
    }

    /// BETWEEN on an INT64 column with INT64 bounds, or on a DOUBLE column with bounds a double
    /// holds exactly, as one filter; nil otherwise.
    private static func range(_ index: Int, _ kind: Column.Kind, _ lower: FieldValue, _ upper: FieldValue) -> Filter? {
        switch (kind, lower, upper) {
        case (.int64, .int64(let low), .int64(let high)), (.timestamp, .timestamp(let low), .timestamp(let high)):
            return low <= high ? .integerRange(column: index, low...high) : .nothing
        case (.double, _, _):
            guard let low = exactDouble(lower), let high = exactDouble(upper) else { return nil }
            return .doubleRange(column: index, lower: low, upper: high)
        default:
            return nil
        }
    }

    /// A DOUBLE constant, or an INT64 one a double holds exactly (compared with doubles, it then
    /// orders as the exact integer comparison does).
    private static func exactDouble(_ value: FieldValue) -> Double? {
        switch value {
        case .double(let x): x.isNaN ? nil : x
        case .int64(let x): Int64(exactly: Double(x)) == x ? Double(x) : nil
        default: nil
        }
    }

    // MARK: Execution

    /// Keeps the selected positions (every position, when nothing is selected yet) that pass `keep`.
    @inline(__always)
    private static func narrow(_ selection: inout [UInt32]?, count: Int, _ keep: (Int) -> Bool) {
        guard var positions = selection else {
            var positions: [UInt32] = []
            for position in 0..<count where keep(position) { positions.append(UInt32(truncatingIfNeeded: position)) }
            selection = positions
            return
        }
        selection = nil
        var kept = 0
        positions.withUnsafeMutableBufferPointer { buffer in
            for index in buffer.indices where keep(Int(buffer[index])) {
                buffer[kept] = buffer[index]
                kept += 1
            }
        }
        positions.removeLast(positions.count - kept)
        selection = positions
    }

    /// Keeps the selected positions whose value in `values` (one of `column`'s fixed-width arrays)
    /// is present and passes `keep`.
    @inline(__always)
    private static func narrow<Value>(_ selection: inout [UInt32]?, _ column: Column, _ values: [Value], _ keep: (Value) -> Bool) {
        column.present.withUnsafeBufferPointer { bits in
            values.withUnsafeBufferPointer { values in
                narrow(&selection, count: column.count) { Column.isSet(bits, $0) && keep(values[$0]) }
            }
        }
    }

    /// Keeps the selected positions of a `.string` column whose value is present and passes
    /// `keep`. With a dictionary, each distinct value is tested once and the positions read their
    /// code's verdict (unless fewer positions than distinct values are left to test).
    @inline(__always)
    private static func narrowStrings(_ selection: inout [UInt32]?, _ column: Column, _ keep: (UnsafeBufferPointer<UInt8>) -> Bool) {
        column.present.withUnsafeBufferPointer { bits in
            column.withStrings { string in
                if let codes = string.codes, let dictionary = column.dictionary, selection?.count ?? column.count > dictionary.count {
                    let verdicts = (0..<dictionary.count).map { dictionary.values.withValues(at: $0, keep) }
                    verdicts.withUnsafeBufferPointer { verdicts in
                        narrow(&selection, count: column.count) { Column.isSet(bits, $0) && verdicts[Int(codes[$0])] }
                    }
                } else {
                    narrow(&selection, count: column.count) { Column.isSet(bits, $0) && keep(string($0)) }
                }
            }
        }
    }

    private func apply(_ filter: Filter, to selection: inout [UInt32]?, in columns: Columns) {
        let count = columns.count
        switch filter {
        case .nothing:
            selection = []
        case .present(let index, let wanted):
            columns.columns[index].present.withUnsafeBufferPointer { bits in
                Self.narrow(&selection, count: count) { Column.isSet(bits, $0) == wanted }
            }
        case .integers(let index, let relation, let c):
            let column = columns.columns[index]
            Self.narrow(&selection, column, column.integers) { x in relation.holds(x < c ? -1 : (x == c ? 0 : 1)) }
        case .integersAgainstDouble(let index, let relation, let c):
            let column = columns.columns[index]
            Self.narrow(&selection, column, column.integers) { Self.holds(relation, ValueOrder.compare($0, c)) }
        case .doubles(let index, let relation, let c):
            let column = columns.columns[index]
            Self.narrow(&selection, column, column.numbers) { Self.holds(relation, ValueOrder.compare($0, c)) }
        case .doublesAgainstInteger(let index, let relation, let c):
            let column = columns.columns[index]
            Self.narrow(&selection, column, column.numbers) { Self.holds(relation, ValueOrder.compare(c, $0).map { -$0 }) }
        case .integerRange(let index, let range):
            let column = columns.columns[index]
            Self.narrow(&selection, column, column.integers) { range.contains($0) }
        case .doubleRange(let index, let lower, let upper):
            let column = columns.columns[index]
            // NaN fails both comparisons, as it compares with nothing.
            Self.narrow(&selection, column, column.numbers) { $0 >= lower && $0 <= upper }
        case .strings(let index, let relation, let c):
            c.withUnsafeBufferPointer { constant in
                if relation == .equal {
                    Self.narrowStrings(&selection, columns.columns[index]) { $0.count == constant.count && ValueOrder.compareBytes($0, constant) == 0 }
                } else {
                    Self.narrowStrings(&selection, columns.columns[index]) { relation.holds(ValueOrder.compareBytes($0, constant)) }
                }
            }
        case .stringOperation(let index, let operation, let pattern):
            pattern.withUnsafeBufferPointer { pattern in
                Self.narrowStrings(&selection, columns.columns[index]) { bytes in
                    switch operation {
                    case .beginsWith: return ValueOrder.hasBytePrefix(bytes, pattern)
                    case .endsWith: return ValueOrder.hasByteSuffix(bytes, pattern)
                    case .contains: return ValueOrder.containsBytes(bytes, pattern)
                    case .like, .matches: return false
                    }
                }
            }
        case .distance(let index, let box, let test):
            let column = columns.columns[index]
            column.present.withUnsafeBufferPointer { bits in
                column.numbers.withUnsafeBufferPointer { latitudes in
                    column.longitudes.withUnsafeBufferPointer { longitudes in
                        Self.narrow(&selection, count: count) { position in
                            let (latitude, longitude) = (latitudes[position], longitudes[position])
                            guard Column.isSet(bits, position), box?.mayContain(latitude, longitude) ?? true else { return false }
                            return test(latitude, longitude) == true
                        }
                    }
                }
            }
        case .tokens(let match, let wanted):
            columns.tokens.withReader { span in
                wanted.withUnsafeBufferPointer { wanted in
                    Self.narrow(&selection, count: count) { position in
                        let tokens = span(position)
                        switch match {
                        case .all: return wanted.allSatisfy { Self.contains(tokens, $0) }
                        case .any: return wanted.contains { Self.contains(tokens, $0) }
                        }
                    }
                }
            }
        }
    }

    /// Whether `relation` holds for an order (nil: incomparable, never a yes). Unlike
    /// `order.map(relation.holds)`, which allocates the partially applied method on every call.
    @inline(__always)
    private static func holds(_ relation: Relation, _ order: Int?) -> Bool {
        guard let order else { return false }
        return relation.holds(order)
    }

    /// Whether sorted `tokens` hold `token` (a record has a few tokens: a linear pass).
    @inline(__always)
    private static func contains(_ tokens: UnsafeBufferPointer<UInt32>, _ token: UInt32) -> Bool {
        for candidate in tokens where candidate >= token { return candidate == token }
        return false
    }
}

/// A query's residual test over a table's records by position, for a plan's candidates: the columns
/// answer what they can (`ColumnScan`), and what they cannot is tested on records made from them.
struct TableFilter {
    private let zone: UInt32?
    private let now: Int64
    private let scan: ColumnScan?
    /// The record test when no column answers any conjunct; nil when every record passes.
    private let predicate: CompiledPredicate?

    /// With `zone`, only the records in the zone of that number pass.
    /// The filter keeps no copy of `table` (a copy retained every array and index of it): each
    /// call is given it.
    init(_ condition: Condition, in table: borrowing RecordTable, zone: UInt32?, now: Int64) {
        self.zone = zone
        self.now = now
        if condition == .constant(true) {
            (scan, predicate) = (nil, nil)
        } else if let scan = ColumnScan(condition, columns: table.columns) {
            (self.scan, predicate) = (scan, nil)
        } else {
            (scan, predicate) = (nil, CompiledPredicate(condition))
        }
    }

    /// Calls `body` with the position of each record of `table` (the filter's) among `positions`
    /// (every record when nil) that passes.
    func forEachMatch(in table: borrowing RecordTable, among positions: [UInt32]?, _ body: (Int) -> Void) {
        var selection = positions
        if let zone {
            let columns = table.columns
            selection = (selection ?? Array(0..<UInt32(truncatingIfNeeded: table.count))).filter { columns.zoneNumber(at: Int($0)) == zone }
        }
        if let scan {
            scan.forEachMatch(in: table, among: selection, now: now, body)
        } else if let predicate {
            Self.test(predicate, in: table, among: selection, now: now, body)
        } else if let selection {
            for position in selection { body(Int(position)) }
        } else {
            for position in 0..<table.count { body(position) }
        }
    }

    /// Tests the records at `positions` (all when nil), made from the columns, with `predicate`.
    static func test(_ predicate: CompiledPredicate, in table: borrowing RecordTable, among positions: [UInt32]?, now: Int64, _ body: (Int) -> Void) {
        table.columns.withReader { reader in
            func test(_ position: Int) {
                var context = EvaluationContext(now: now, searchableFields: table.searchableFields)
                if predicate.matches(reader.record(at: position, recordType: table.recordType), in: &context) { body(position) }
            }
            if let positions {
                for position in positions { test(Int(position)) }
            } else {
                for position in 0..<table.count { test(position) }
            }
        }
    }
}

/// The values of a `SpanArena` by position, through unsafe buffers for a scan's inner loop.
struct SpanReader<Element> {
    let starts: UnsafeBufferPointer<Int>
    let lengths: UnsafeBufferPointer<UInt32>
    let elements: UnsafeBufferPointer<Element>

    @inline(__always)
    func callAsFunction(_ position: Int) -> UnsafeBufferPointer<Element> {
        guard let base = elements.baseAddress else { return UnsafeBufferPointer(start: nil, count: 0) }
        return UnsafeBufferPointer(start: base + starts[position], count: Int(lengths[position]))
    }
}

/// A latitude/longitude box that holds every point within a radius of a centre (Geodesy's
/// conservative bound): points outside it are rejected without computing a distance.
struct LocationBox: Sendable {
    let minLatitude, maxLatitude, minLongitude, maxLongitude: Double

    init(center: Location, metres: Double) {
        let box = Geodesic.boundingBox(latitude: center.latitude, longitude: center.longitude, radius: metres)
        minLatitude = box.minLatitude
        maxLatitude = box.maxLatitude
        minLongitude = box.minLongitude
        maxLongitude = box.maxLongitude
    }

    /// False only when the point is surely outside the radius. NaN bounds (an invalid centre) and
    /// longitudes outside -180...180 (which the distance reads modulo 360) reject nothing.
    @inline(__always)
    func mayContain(_ latitude: Double, _ longitude: Double) -> Bool {
        if latitude < minLatitude || latitude > maxLatitude { return false }
        guard abs(longitude) <= 180 else { return true }
        if minLongitude <= maxLongitude { return !(longitude < minLongitude || longitude > maxLongitude) }
        return !(longitude < minLongitude && longitude > maxLongitude)
    }
}
