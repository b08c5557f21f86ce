import KQuery
import KQueryContainer
import KQueryStore
import NIOCore
import PostgresNIO

extension PostgresTransaction {
    /// Rows read per statement while looking for a page's matches: the first statement asks for
    /// the page (and one more) and each later one for twice as many, up to this.
    static let largestBatch = 1000

    /// Runs `query` as SQL (`PostgresQueryCompiler`): one page of the query's matches in its
    /// order, and a cursor when more follow, as the in-memory store answers. Memory holds one
    /// batch of rows and one page at a time, however many records the database holds.
    ///
    /// SQL finds the candidates (every match, and sometimes more) in the query's order; each is
    /// decoded and the predicate evaluated on it, so the evaluator has the last word. A sort by
    /// distance cannot be ordered in SQL exactly as the evaluator measures: then every candidate
    /// is read, in batches, and the best page kept.
    func query(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> QueryResult? {
        try self.query(query, cursor: cursor, databaseID: database.id, now: now, oneStatement: false)
    }

    /// `oneStatement`: outside a transaction, where each statement sees a snapshot of its own, so
    /// a page read with two could hold a record twice (moved between them): nil when one
    /// statement does not answer (the caller asks again in a snapshot).
    func query(_ query: Query, cursor: QueryCursor?, databaseID: Int64, now: Int64, oneStatement: Bool) throws(ContainerError) -> QueryResult? {
        if let cursor, !query.accepts(cursor) { throw ContainerError(.badRequest, "the cursor belongs to a different query") }
        let limit = min(max(query.resultsLimit ?? Database.defaultResultsLimit, 1), Database.maximumResultsLimit)
        let descriptors = query.sortDescriptors
        let fields: [FieldReference]? = descriptors.allSatisfy { if case .field = $0.key { true } else { false } }
            ? descriptors.compactMap { if case .field(let field) = $0.key { field } else { nil } } : nil

        var matches: [(key: SortKey, record: Record)] = []
        var names = RecordCoding.FieldNames()
        // Where the next batch starts: the cursor's position, then the last row read.
        // (A distance sort reads every candidate, by record ID, and skips those up to the cursor itself.)
        var position: (keys: [String?], id: RecordID)? = fields == nil ? nil : cursor.map { cursor in
            (cursor.position.values.map { $0.flatMap(PostgresValueKey.key) }, cursor.position.recordID)
        }
        var batch = limit + 1
        let sortFields = fields ?? []
        // With a field sort, the records that have a key for the first sort field come first, read
        // in the order of the sort index (`keyed`); those without one after them.
        var keyed = !sortFields.isEmpty
        if let position, let first = position.keys.first, first == nil { keyed = false }
        var statements = 0
        while true {
            if oneStatement && statements == 1 { return nil }
            statements += 1
            var compiler = PostgresQueryCompiler(databaseID: databaseID, recordType: query.recordType)
            let ascending = fields == nil ? [] : descriptors.map(\.ascending)
            let joins = compiler.sortJoins(sortFields, firstKeyed: keyed)
            var conditions = ["r.database_id = \(compiler.database)", "r.record_type = \(compiler.recordType)"]
            if !sortFields.isEmpty {
                if keyed {
                    conditions.append("k0.sort_key IS NOT NULL")
                    // A bound the sort index seeks to (the exact test is `after`).
                    if let first = position?.keys.first, let key = first {
                        conditions.append("k0.sort_key \(ascending[0] ? ">=" : "<=") \(compiler.bind(key))")
                    }
                } else {
                    conditions.append("k0.sort_key IS NULL")
                }
            }
            if let zoneID = query.zoneID {
                conditions.append("r.zone_name = \(compiler.bind(zoneID.zoneName))")
                conditions.append("r.owner_name = \(compiler.bind(zoneID.ownerName))")
            }
            let filter = compiler.filter(query.predicate.condition, now: now)
            if filter == "FALSE" { return QueryResult(records: [], cursor: nil) }
            if filter != "TRUE" { conditions.append(filter) }
            if let position { conditions.append(compiler.after(keys: position.keys, ascending: ascending, id: position.id)) }
            let columns = (0..<sortFields.count).map { ", k\($0).sort_key" }.joined()
            let size = compiler.bind(Int64(batch))
            let sql = """
                SELECT r.zone_name, r.owner_name, r.record_name, r.body\(columns) FROM records r \(joins)
                WHERE \(conditions.joined(separator: " AND ")) ORDER BY \(PostgresQueryCompiler.orderBy(ascending, keyed: keyed)) LIMIT \(size)
                """
            let statement = compiler.statement(sql)
            let rows = try session.prepared(statement.sql, statement.parameters)
            for cells in rows {
                let zoneName = try session.decode(cells[0], String.self)
                let ownerName = try session.decode(cells[1], String.self)
                let recordName = try session.decode(cells[2], String.self)
                let body = try session.decode(cells[3], ByteBuffer.self)
                var keys: [String?] = []
                for index in sortFields.indices { keys.append(try session.decode(cells[4 + index], String?.self)) }
                position = (keys, RecordID(recordName: recordName, zoneID: ZoneID(zoneName: zoneName, ownerName: ownerName)))
                let record = try decode(body, recordName, names: &names)
                guard query.isInScope(record), query.predicate.matches(record, now: now) else { continue }
                let key = SortKey(record, descriptors)
                if fields != nil {
                    // In order already: the page is the first matches.
                    matches.append((key, record))
                    if matches.count > limit { return page(&matches, query, limit: limit) }
                } else {
                    if let cursor, SortOrder.compare(key, cursor.position, descriptors) <= 0 { continue }
                    Self.insert((key, record), into: &matches, keeping: limit + 1, descriptors)
                }
            }
            if rows.count < batch {
                if keyed {
                    keyed = false
                    continue
                }
                return page(&matches, query, limit: limit)
            }
            batch = min(batch * 2, Self.largestBatch)
        }
    }

    func recordCounts(in database: StoredDatabase) throws(ContainerError) -> [String: Int]? {
        var counts: [String: Int] = [:]
        for row in try session.rows("SELECT record_type, count(*) FROM records WHERE database_id = \(database.id) GROUP BY record_type") {
            let (type, count) = try session.decode(row, (String, Int64).self)
            counts[type] = Int(count)
        }
        return counts
    }

    /// Inserts a match in sorted place, keeping the best `count`.
    private static func insert(_ match: (key: SortKey, record: Record), into matches: inout [(key: SortKey, record: Record)], keeping count: Int, _ descriptors: [SortDescriptor]) {
        var (low, high) = (0, matches.count)
        while low < high {
            let mid = (low + high) / 2
            if SortOrder.compare(matches[mid].key, match.key, descriptors) < 0 { low = mid + 1 } else { high = mid }
        }
        if low >= count { return }
        matches.insert(match, at: low)
        if matches.count > count { matches.removeLast() }
    }

    private func page(_ matches: inout [(key: SortKey, record: Record)], _ query: Query, limit: Int) -> QueryResult {
        var cursor: QueryCursor?
        if matches.count > limit {
            matches.removeSubrange(limit...)
            cursor = QueryCursor(fingerprint: query.fingerprint, position: matches[limit - 1].key)
        }
        var records = matches.map(\.record)
        query.applyDesiredKeys(to: &records)
        return QueryResult(records: records, cursor: cursor)
    }
}
