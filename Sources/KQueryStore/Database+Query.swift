import KQuery

extension Database {
    /// Records per page when a query sets no `resultsLimit`.
    public static let defaultResultsLimit = 100
    /// The most records one page holds, as CloudKit's server: a larger `resultsLimit` is cut to it.
    public static let maximumResultsLimit = 200

    /// Checks a query against the schema (without one, every query is allowed).
    public func check(_ query: Query) throws(DatabaseError) {
        guard let schema else { return }
        do {
            try schema.check(query.predicate.condition, sortDescriptors: query.sortDescriptors, recordType: query.recordType)
        } catch {
            throw DatabaseError(.invalidQuery, error.message)
        }
    }

    /// Runs `query` and returns one page: `resultsLimit` records (100 when unset, at most 200) in
    /// the query's order, and a cursor when more follow. Resuming from the cursor returns the
    /// records after that position, so saves between pages never duplicate or skip a record that
    /// matches throughout.
    public func perform(_ query: Query, cursor: QueryCursor? = nil, now: Int64) throws(DatabaseError) -> QueryResult {
        try check(query)
        if let cursor, !query.accepts(cursor) { throw DatabaseError(.invalidQuery, "the cursor belongs to a different query") }
        var paged = query
        paged.resultsLimit = min(max(query.resultsLimit ?? Self.defaultResultsLimit, 1), Self.maximumResultsLimit)
        // The query's fingerprint is needed only with a cursor, given or made (it spells the query
        // out: its cost was an eighth of a served query's).
        if let cursor, let cache = pageCache, cache.fingerprint == paged.fingerprint, cache.now == now, cache.generation == generation,
           let next = withTable(paged.recordType, { table in
               // The next page of the query just run: a binary search in its sorted matches.
               var (low, high) = (0, cache.hits.count)
               while low < high {
                   let mid = (low + high) / 2
                   let hit = cache.hits[mid]
                   let order = SortOrder.compare(hit.values, table.columns.recordID(at: hit.position), cursor.position.values, cursor.position.recordID, paged.sortDescriptors)
                   if order <= 0 { low = mid + 1 } else { high = mid }
               }
               var hits = Array(cache.hits[low...])
               return page(of: &hits, paged, in: table, fingerprint: cache.fingerprint)
           }) {
            return next
        }
        // Planning may build an index: read the table after it.
        let plan = makePlan(paged, now: now)
        return withTable(paged.recordType) { table in
            var hits = execute(plan, paged, in: table, cursor: cursor, now: now)
            sort(&hits, paged.sortDescriptors, in: table)
            let more = hits.count > paged.resultsLimit ?? Self.defaultResultsLimit
            let fingerprint = more ? paged.fingerprint : nil
            if more, case .sortedWalk = plan.access {
                // A walk stops after one page: its matches are not all there is.
            } else if let fingerprint {
                pageCache = PageCache(fingerprint: fingerprint, now: now, generation: generation, hits: hits)
            }
            return page(of: &hits, paged, in: table, fingerprint: fingerprint)
        } ?? QueryResult(records: [], cursor: nil)
    }

    /// Calls `body` with the table of `type` where it lies in `tables`, through the dictionary's
    /// modify accessor: `tables[type]` copied the table (every array and index retained and
    /// released) for each query. `body` must not touch `tables`.
    func withTable<T>(_ type: String, _ body: (borrowing RecordTable) -> T) -> T? {
        guard let index = tables.index(forKey: type) else { return nil }
        func inPlace(_ table: inout RecordTable) -> T { body(table) }
        return inPlace(&tables.values[index])
    }

    /// The sorted matches of the last query that filled more than one page, so the pages after the
    /// first cost a binary search rather than a new evaluation. Any save makes it stale.
    struct PageCache {
        var fingerprint: UInt64
        var now: Int64
        var generation: Int
        var hits: [Hit]
    }

    /// A match: its sort values and where its record is in the table. Records are copied only for
    /// the page returned.
    struct Hit {
        var values: [FieldValue?]
        var position: Int
    }

    /// Sorts in the query's order. Record IDs are compared in place, in the table's columns.
    /// The sort moves plain indexes, not the hits (moving a hit retains and releases its values).
    private func sort(_ hits: inout [Hit], _ descriptors: [SortDescriptor], in table: borrowing RecordTable) {
        var order = Array(0..<hits.count)
        // The table is read only through `ids`: a closure reading `table` copied it (every array
        // and index retained and released) for each sort.
        table.columns.withRecordIDs { ids in
            hits.withUnsafeBufferPointer { hits in
                order.sort { a, b in
                    if !descriptors.isEmpty {
                        let byValues = SortOrder.compareValues(hits[a].values, hits[b].values, descriptors)
                        if byValues != 0 { return byValues < 0 }
                    }
                    return ids.precedes(hits[a].position, hits[b].position)
                }
            }
        }
        hits = order.map { hits[$0] }
    }

    /// The most records a page makes whole at once; a larger page's records read their fields
    /// when first asked (`ColumnsSnapshot`). A snapshot (its lock, its place among the kept
    /// snapshots, a second reader of the columns) costs about what making some ten records' fields
    /// does, and a page that small (a server's: 10 records in `kquery serve`'s benchmark) is read
    /// whole. Made at once, a served query takes 0.89× the instructions of the lazy page.
    static let largestWholePage = 16

    /// Cuts the page from sorted matches and copies out its records.
    /// `fingerprint` is the query's when known (made here when a cursor needs it).
    private func page(of hits: inout [Hit], _ query: Query, in table: borrowing RecordTable, fingerprint: UInt64?) -> QueryResult {
        let limit = query.resultsLimit ?? Self.defaultResultsLimit
        var cursor: QueryCursor?
        if hits.count > limit {
            hits.removeSubrange(limit...)
            let last = hits[limit - 1]
            cursor = QueryCursor(fingerprint: fingerprint ?? query.fingerprint, position: SortKey(values: last.values, recordID: table.columns.recordID(at: last.position)))
        }
        let positions = hits.map(\.position)
        var records: [Record]
        if positions.count <= Self.largestWholePage {
            records = table.columns.records(at: positions, recordType: table.recordType)
        } else {
            let snapshot = ColumnsSnapshot(table.columns, positions: positions)
            keep(snapshot)
            records = snapshot.records(recordType: table.recordType)
        }
        query.applyDesiredKeys(to: &records)
        return QueryResult(records: records, cursor: cursor)
    }

    /// How many records match `query` (all of them, not one page), using the same plans as `perform`.
    public func count(_ query: Query, now: Int64) throws(DatabaseError) -> Int {
        try check(query)
        var unsorted = query
        unsorted.sortDescriptors = []
        let plan = makePlan(unsorted, now: now)
        guard let table = tables[query.recordType] else { return 0 }
        var matches = 0
        _ = execute(plan, unsorted, in: table, cursor: nil, now: now) { _ in matches += 1 }
        return matches
    }

    /// The plan `perform` would use, without running it (it may build an index, under automatic
    /// indexing).
    public func plan(_ query: Query, now: Int64) throws(DatabaseError) -> QueryPlan {
        try check(query)
        var paged = query
        paged.resultsLimit = min(max(query.resultsLimit ?? Self.defaultResultsLimit, 1), Self.maximumResultsLimit)
        return makePlan(paged, now: now)
    }

    /// Every match of `query` in order, by a full scan with no index: what every plan must agree
    /// with (the property tests compare the two).
    public func performByScan(_ query: Query, now: Int64) -> [Record] {
        guard let table = tables[query.recordType] else { return [] }
        var hits: [(key: SortKey, record: Record)] = []
        for record in table.records where query.isInScope(record) {
            var context = EvaluationContext(now: now, searchableFields: table.searchableFields)
            if query.predicate.matches(record, in: &context) { hits.append((SortKey(record, query.sortDescriptors), record)) }
        }
        var unlimited = query
        unlimited.resultsLimit = nil
        return unlimited.page(of: &hits).records
    }

    // MARK: Planning

    func makePlan(_ query: Query, now: Int64) -> QueryPlan {
        let type = query.recordType
        guard tables[type] != nil else {
            return QueryPlan(recordType: type, access: .empty, residual: query.predicate.condition, tableSize: 0, builtIndexes: [])
        }
        var conjuncts = Self.conjuncts(of: query.predicate.condition)
        if conjuncts.contains(.constant(false)) {
            return QueryPlan(recordType: type, access: .empty, residual: .constant(false), tableSize: tables[type]?.count ?? 0, builtIndexes: [])
        }
        conjuncts.removeAll { $0 == .constant(true) }
        var built: [String] = []
        var probes: [(probe: Probe, conjunct: Int)] = []
        for (index, conjunct) in conjuncts.enumerated() {
            if let probe = probe(for: conjunct, type: type, now: now, built: &built) { probes.append((probe, index)) }
        }
        probes.sort { $0.probe.estimate < $1.probe.estimate }
        let size = tables[type]?.count ?? 0
        let pageSize = (query.resultsLimit ?? Self.defaultResultsLimit) + 1

        func residual(without answered: [Int]) -> Condition {
            let rest = conjuncts.indices.filter { !answered.contains($0) }.map { conjuncts[$0] }
            return rest.isEmpty ? .constant(true) : rest.count == 1 ? rest[0] : .and(rest)
        }
        func plan(_ access: QueryPlan.Access, answered: [Int] = []) -> QueryPlan {
            QueryPlan(recordType: type, access: access, residual: residual(without: answered), tableSize: size, builtIndexes: built)
        }

        if let best = probes.first, best.probe.isExact, best.probe.estimate == 0 { return plan(.empty, answered: [best.conjunct]) }
        /// The first sort key's field, if its range index exists (or may be built now).
        func walkField() -> FieldReference? {
            guard case .field(let field)? = query.sortDescriptors.first?.key else { return nil }
            return ensureOrderedIndex(on: field, type: type, built: &built) ? field : nil
        }
        if let best = probes.first, best.probe.estimate * 3 <= size {
            // A sorted walk reads about pageSize × size / estimate records; the probe reads estimate.
            if best.probe.estimate * best.probe.estimate > pageSize * size, let field = walkField() {
                return plan(.sortedWalk(field))
            }
            var chosen = [best]
            for next in probes.dropFirst() where next.probe.isExact && next.probe.estimate <= best.probe.estimate * 8 {
                if case .spatial = next.probe.lookup { continue }
                chosen.append(next)
            }
            return plan(.probes(chosen.map(\.probe)), answered: chosen.filter(\.probe.isExact).map(\.conjunct))
        }
        if let field = walkField() { return plan(.sortedWalk(field)) }
        if conjuncts.contains(where: { if case .tokens = $0 { true } else { false } }), tables[type]?.columns.tracksTokens == false,
           var table = tables.removeValue(forKey: type) {
            // The first token scan tokenizes the table once, and its saves keep the tokens after.
            detachSnapshots()
            table.trackTokens()
            tables[type] = table
        }
        return plan(.scan)
    }

    /// The top-level AND's operands (nested ANDs flattened), or the condition itself.
    static func conjuncts(of condition: Condition) -> [Condition] {
        guard case .and(let operands) = condition else { return [condition] }
        return operands.flatMap(conjuncts(of:))
    }

    private func probe(for conjunct: Condition, type: String, now: Int64, built: inout [String]) -> Probe? {
        func resolve(_ operand: Operand) -> FieldValue {
            switch operand {
            case .value(let value): value
            case .now: .timestamp(now)
            }
        }
        func keys(_ operands: [Operand]) -> [IndexKey]? {
            var keys: [IndexKey] = []
            for operand in operands {
                guard let key = IndexKey(resolve(operand)) else { return nil }
                keys.append(key)
            }
            return keys
        }
        func hashProbe(_ field: FieldReference, _ keys: [IndexKey], members: Bool, all: Bool = false) -> Probe? {
            guard ensureHashIndex(on: field, type: type, built: &built), let index = withTable(type, { $0.hashIndexes[field] }) ?? nil else { return nil }
            let counts = keys.map { index.count(equalTo: $0, members: members) }
            let estimate = all ? (counts.min() ?? 0) : counts.reduce(0, +)
            let lookup: Probe.Lookup = all ? .hashAll(field, keys: keys) : .hash(field, keys: keys, members: members)
            return Probe(lookup: lookup, condition: conjunct, estimate: estimate, isExact: true)
        }
        func rangeProbe(_ field: FieldReference, lower: RangeBound?, upper: RangeBound?, members: Bool) -> Probe? {
            for bound in [lower, upper].compactMap({ $0 }) where !Self.isRangeComparable(bound.value) { return nil }
            if let lower, let upper, SortOrder.rank(lower.value) != SortOrder.rank(upper.value) { return nil }
            guard ensureOrderedIndex(on: field, type: type, built: &built), let index = withTable(type, { $0.orderedIndexes[field] }) ?? nil else { return nil }
            let entries = members ? index.members : index.scalars
            let (from, to) = Self.range(in: entries, lower: lower, upper: upper)
            return Probe(lookup: .range(field, lower: lower, upper: upper, members: members), condition: conjunct,
                         estimate: entries.distance(from: from, to: to), isExact: true)
        }
        func prefixProbe(_ field: FieldReference, _ prefix: String, members: Bool) -> Probe? {
            guard ensureOrderedIndex(on: field, type: type, built: &built), let index = withTable(type, { $0.orderedIndexes[field] }) ?? nil else { return nil }
            let entries = members ? index.members : index.scalars
            let (from, to) = Self.prefixRange(in: entries, prefix)
            return Probe(lookup: .prefix(field, prefix, members: members), condition: conjunct,
                         estimate: entries.distance(from: from, to: to), isExact: true)
        }
        func bounds(_ relation: Relation, _ value: FieldValue) -> (RangeBound?, RangeBound?)? {
            switch relation {
            case .lessThan: (nil, RangeBound(value: value, inclusive: false))
            case .lessThanOrEqual: (nil, RangeBound(value: value, inclusive: true))
            case .greaterThan: (RangeBound(value: value, inclusive: false), nil)
            case .greaterThanOrEqual: (RangeBound(value: value, inclusive: true), nil)
            case .equal, .notEqual: nil
            }
        }

        switch conjunct {
        case .field(.recordID, .compare(.equal, .value(.reference(let reference)), let options)) where options.isEmpty:
            return recordIDProbe([reference.recordID], conjunct, type: type)
        case .field(.recordID, .oneOf(let operands, let options)) where options.isEmpty:
            var ids: [RecordID] = []
            for operand in operands {
                guard case .value(.reference(let reference)) = operand else { return nil }
                ids.append(reference.recordID)
            }
            return recordIDProbe(ids, conjunct, type: type)
        case .field(let field, .compare(.equal, let operand, let options)) where options.isEmpty:
            guard let key = IndexKey(resolve(operand)) else { return nil }
            return hashProbe(field, [key], members: false)
        case .field(let field, .oneOf(let operands, let options)) where options.isEmpty:
            guard let keys = keys(operands) else { return nil }
            return hashProbe(field, keys, members: false)
        case .field(let field, .members(.any, .compare(.equal, let operand, let options))) where options.isEmpty:
            guard let key = IndexKey(resolve(operand)) else { return nil }
            return hashProbe(field, [key], members: true)
        case .field(let field, .members(.any, .oneOf(let operands, let options))) where options.isEmpty:
            guard let keys = keys(operands) else { return nil }
            return hashProbe(field, keys, members: true)
        case .field(let field, .containsAll(let operands)) where !operands.isEmpty:
            guard let keys = keys(operands) else { return nil }
            return hashProbe(field, keys, members: true, all: true)
        case .field(let field, .compare(let relation, let operand, let options)) where options.isEmpty:
            guard let (lower, upper) = bounds(relation, resolve(operand)) else { return nil }
            return rangeProbe(field, lower: lower, upper: upper, members: false)
        case .field(let field, .members(.any, .compare(let relation, let operand, let options))) where options.isEmpty:
            guard let (lower, upper) = bounds(relation, resolve(operand)) else { return nil }
            return rangeProbe(field, lower: lower, upper: upper, members: true)
        case .field(let field, .between(let lower, let upper)):
            return rangeProbe(field, lower: RangeBound(value: resolve(lower), inclusive: true), upper: RangeBound(value: resolve(upper), inclusive: true), members: false)
        case .field(let field, .members(.any, .between(let lower, let upper))):
            return rangeProbe(field, lower: RangeBound(value: resolve(lower), inclusive: true), upper: RangeBound(value: resolve(upper), inclusive: true), members: true)
        case .field(let field, .string(.beginsWith, let prefix, let options)) where options.isEmpty:
            return prefixProbe(field, prefix, members: false)
        case .field(let field, .members(.any, .string(.beginsWith, let prefix, let options))) where options.isEmpty:
            return prefixProbe(field, prefix, members: true)
        case .tokens(let match, let text):
            let tokens = Tokenizer.tokens(of: text)
            if tokens.isEmpty { return Probe(lookup: .tokens(match, []), condition: conjunct, estimate: 0, isExact: true) }
            guard ensureTokenIndex(type: type, built: &built), let index = withTable(type, { $0.tokenIndex }) ?? nil else { return nil }
            let counts = tokens.map(index.count)
            let estimate = match == .all ? (counts.min() ?? 0) : counts.reduce(0, +)
            return Probe(lookup: .tokens(match, tokens), condition: conjunct, estimate: estimate, isExact: true)
        case .distance(let field, let center, let relation, let radius) where relation == .lessThan || relation == .lessThanOrEqual:
            guard let (level, cells) = SpatialIndex.cells(center: center, radius: Condition.radiusInMetres(radius)),
                  ensureSpatialIndex(on: field, type: type, built: &built), let index = withTable(type, { $0.spatialIndexes[field] }) ?? nil
            else { return nil }
            return Probe(lookup: .spatial(field, level: level, cells: cells), condition: conjunct,
                         estimate: index.count(level: level, cells: cells), isExact: false)
        default:
            return nil
        }
    }

    private func recordIDProbe(_ ids: [RecordID], _ conjunct: Condition, type: String) -> Probe {
        let found = ids.filter { tables[type]?.contains($0) == true }
        return Probe(lookup: .recordIDs(ids), condition: conjunct, estimate: Set(found).count, isExact: true)
    }

    /// Numbers, timestamps and strings: the kinds `<` and `>` compare (SPEC §2.4).
    private static func isRangeComparable(_ value: FieldValue) -> Bool {
        switch value {
        case .int64, .timestamp, .string: true
        case .double(let x): !x.isNaN
        default: false
        }
    }

    /// The positions `[from, to)` of the entries between the bounds, within the bounds' kind.
    static func range(in entries: SortedEntries, lower: RangeBound?, upper: RangeBound?) -> (SortedEntries.Position, SortedEntries.Position) {
        let kind = SortOrder.rank((lower ?? upper)?.value ?? .int64(0))
        let from = entries.firstPosition { entry in
            guard let lower else { return SortOrder.rank(entry.value) >= kind }
            let order = SortOrder.compare(entry.value, lower.value)
            return lower.inclusive ? order >= 0 : order > 0
        }
        let to = entries.firstPosition { entry in
            guard let upper else { return SortOrder.rank(entry.value) > kind }
            let order = SortOrder.compare(entry.value, upper.value)
            return upper.inclusive ? order > 0 : order >= 0
        }
        return (from, to)
    }

    /// The positions of the strings that begin with `prefix` (UTF-8 bytes, as BEGINSWITH compares).
    static func prefixRange(in entries: SortedEntries, _ prefix: String) -> (SortedEntries.Position, SortedEntries.Position) {
        let start = FieldValue.string(prefix)
        let from = entries.firstPosition { SortOrder.compare($0.value, start) >= 0 }
        let to = entries.firstPosition { entry in
            guard case .string(let text) = entry.value else { return SortOrder.rank(entry.value) > SortOrder.rank(start) }
            return !text.utf8.starts(with: prefix.utf8) && SortOrder.compare(entry.value, start) > 0
        }
        return (from, to)
    }

    // MARK: Indexes on demand

    private func buildsOnDemand(_ type: String) -> Bool {
        indexPolicy == .automatic && schema == nil && (tables[type]?.count ?? 0) >= automaticIndexThreshold
    }

    /// Whether the index `exists` looks for is there, building it first when automatic indexing
    /// allows (and noting `name` in `built`, for the plan's explanation).
    private func ensureIndex(
        _ name: String, type: String, built: inout [String], exists: (RecordTable) -> Bool, build: (inout RecordTable) -> Void
    ) -> Bool {
        guard let found = tables[type].map(exists) else { return false }
        if found { return true }
        guard buildsOnDemand(type), var table = tables.removeValue(forKey: type) else { return false }
        // Taken out of the dictionary, the table is uniquely referenced: building does not copy it.
        build(&table)
        tables[type] = table
        built.append(name)
        return true
    }

    private func ensureHashIndex(on field: FieldReference, type: String, built: inout [String]) -> Bool {
        ensureIndex("the equality index on \(field.name)", type: type, built: &built,
                    exists: { $0.hashIndexes[field] != nil }, build: { $0.buildHashIndex(on: field) })
    }

    func ensureOrderedIndex(on field: FieldReference, type: String, built: inout [String]) -> Bool {
        ensureIndex("the range index on \(field.name)", type: type, built: &built,
                    exists: { $0.orderedIndexes[field] != nil }, build: { $0.buildOrderedIndex(on: field) })
    }

    private func ensureSpatialIndex(on field: FieldReference, type: String, built: inout [String]) -> Bool {
        ensureIndex("the spatial index on \(field.name)", type: type, built: &built,
                    exists: { $0.spatialIndexes[field] != nil }, build: { $0.buildSpatialIndex(on: field) })
    }

    private func ensureTokenIndex(type: String, built: inout [String]) -> Bool {
        ensureIndex("the token index", type: type, built: &built, exists: { $0.tokenIndex != nil }, build: { $0.buildTokenIndex() })
    }

    // MARK: Execution

    /// Runs a plan, collecting every match after the cursor with its sort key; with `counting`, hands
    /// each match's position to it instead and collects nothing.
    private func execute(
        _ plan: QueryPlan, _ query: Query, in table: borrowing RecordTable, cursor: QueryCursor?, now: Int64,
        counting: ((Int) -> Void)? = nil
    ) -> [Hit] {
        let descriptors = query.sortDescriptors
        var zone: UInt32?
        if let zoneID = query.zoneID {
            // No record of the table is in a zone it has never seen.
            guard let number = table.columns.zoneNumber(of: zoneID) else { return [] }
            zone = number
        }
        let filter = TableFilter(plan.residual, in: table, zone: zone, now: now)
        var hits: [Hit] = []

        /// Adds the match at `position` if it lies after the cursor.
        @discardableResult
        func accept(_ position: Int) -> Bool {
            if let counting {
                counting(position)
                return true
            }
            let values = descriptors.isEmpty ? [] : descriptors.map { descriptor in
                descriptor.sortValue { table.columns.value(of: $0, at: position) }
            }
            if let cursor, SortOrder.compare(values, table.columns.recordID(at: position), cursor.position.values, cursor.position.recordID, descriptors) <= 0 {
                return false
            }
            hits.append(Hit(values: values, position: position))
            return true
        }

        switch plan.access {
        case .empty:
            break
        case .scan:
            filter.forEachMatch(in: table, among: nil) { accept($0) }
        case .probes(let probes):
            var rows = self.rows(of: probes[0], in: table)
            for probe in probes.dropFirst() { rows = Postings.intersection(rows, self.rows(of: probe, in: table)) }
            let positions = rows.compactMap { table.isLive($0) ? UInt32(truncatingIfNeeded: table.position(of: $0)) : nil }
            filter.forEachMatch(in: table, among: positions) { accept($0) }
        case .sortedWalk(let field):
            walk(table, field: field, ascending: descriptors.first?.ascending ?? true, cursor: cursor,
                 pageSize: (query.resultsLimit ?? Self.defaultResultsLimit) + 1, filter: filter, accept: accept)
        }
        return hits
    }

    /// Reads the range index of the first sort key in order, one group of equal values at a time,
    /// until the page (plus one record, to know a next page exists) is full; then, if needed, the
    /// records that sort last because they lack a value.
    private func walk(
        _ table: borrowing RecordTable, field: FieldReference, ascending: Bool, cursor: QueryCursor?, pageSize: Int,
        filter: TableFilter, accept: (Int) -> Bool
    ) {
        guard let entries = table.orderedIndexes[field]?.scalars else { return }
        let resumeValue: FieldValue?? = cursor.map { $0.position.values[0] }
        var group: [UInt32] = []
        var groupValue: FieldValue?
        var added = 0
        var full = false
        func flush() {
            filter.forEachMatch(in: table, among: group) { if accept($0) { added += 1 } }
            group.removeAll(keepingCapacity: true)
            full = added >= pageSize
        }
        func visit(_ entry: SortedEntries.Entry) -> Bool {
            if let value = groupValue, SortOrder.compare(value, entry.value) != 0 {
                flush()
                if full { return false }
            }
            groupValue = entry.value
            if table.isLive(entry.row) { group.append(UInt32(truncatingIfNeeded: table.position(of: entry.row))) }
            return true
        }
        if case .some(.none) = resumeValue {
            // The cursor is already among the records without a value.
        } else {
            let resume = resumeValue ?? nil
            if ascending {
                let start = resume.map { value in entries.firstPosition { SortOrder.compare($0.value, value) >= 0 } } ?? entries.startPosition
                entries.forEach(from: start, to: entries.endPosition, visit)
            } else {
                let start = resume.map { value in entries.firstPosition { SortOrder.compare($0.value, value) > 0 } } ?? entries.endPosition
                entries.forEachReversed(before: start, visit)
            }
            if !full { flush() }
            if full { return }
        }
        let descriptor = SortDescriptor(key: .field(field))
        let unvalued = (0..<table.count).filter { position in descriptor.sortValue { table.columns.value(of: $0, at: position) } == nil }
        filter.forEachMatch(in: table, among: unvalued.map { UInt32(truncatingIfNeeded: $0) }) { _ = accept($0) }
    }

    /// The rows a probe returns, sorted and without repeats.
    private func rows(of probe: Probe, in table: borrowing RecordTable) -> [RowID] {
        switch probe.lookup {
        case .recordIDs(let ids):
            return Postings.sortedUnique(ids.compactMap { table.row(of: $0) })
        case .hash(let field, let keys, let members):
            guard let index = table.hashIndexes[field] else { return [] }
            return Postings.union(keys.map { index.rows(equalTo: $0, members: members) })
        case .hashAll(let field, let keys):
            guard let index = table.hashIndexes[field], let first = keys.first else { return [] }
            return keys.dropFirst().reduce(index.rows(equalTo: first, members: true)) { Postings.intersection($0, index.rows(equalTo: $1, members: true)) }
        case .range(let field, let lower, let upper, let members):
            guard let index = table.orderedIndexes[field] else { return [] }
            let entries = members ? index.members : index.scalars
            let (from, to) = Self.range(in: entries, lower: lower, upper: upper)
            return Self.collect(entries, from: from, to: to)
        case .prefix(let field, let prefix, let members):
            guard let index = table.orderedIndexes[field] else { return [] }
            let entries = members ? index.members : index.scalars
            let (from, to) = Self.prefixRange(in: entries, prefix)
            return Self.collect(entries, from: from, to: to)
        case .tokens(let match, let tokens):
            guard let index = table.tokenIndex, let first = tokens.first else { return [] }
            switch match {
            case .all: return tokens.dropFirst().reduce(index.rows(first)) { Postings.intersection($0, index.rows($1)) }
            case .any: return Postings.union(tokens.map(index.rows))
            }
        case .spatial(let field, let level, let cells):
            return table.spatialIndexes[field]?.rows(level: level, cells: cells) ?? []
        }
    }

    private static func collect(_ entries: SortedEntries, from: SortedEntries.Position, to: SortedEntries.Position) -> [RowID] {
        var rows: [RowID] = []
        rows.reserveCapacity(entries.distance(from: from, to: to))
        entries.forEach(from: from, to: to) { rows.append($0.row); return true }
        return Postings.sortedUnique(rows)
    }
}
