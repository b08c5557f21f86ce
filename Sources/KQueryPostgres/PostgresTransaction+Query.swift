import KQuery
import KQueryContainer
import KQueryStore
import NIOCore
import PostgresNIO

extension PostgresTransaction {
    /// Rows read per statement while looking for a page's matches: the first statement asks for
    /// the page (and one more) and each later one for twice as many, up to this.
    static let largestBatch = 1000

    /// How a query that stops at a full page (no sort, or a field sort) with a radius
    /// (`distanceToLocation:fromLocation:(field, centre) < r`) finds its records: the points
    /// within the radius through the field's GiST index, each joined to its record and the
    /// page sorted out of them; or the records in the query's own order, each one's point
    /// measured as it goes, until the page is full. PostgreSQL cannot choose: PostGIS estimated
    /// 4 points within a radius that held 531,063 of a million, whose page then took 3.7 s
    /// through the index, 5.6 ms in order. On 1,000,000 points around Paris a point read through
    /// the index cost about 3 µs, and a page in order 12-40 ms for radii holding 14,000 points
    /// or more but 216 ms for one holding 3,011 (its records lie far apart in the record order).
    ///
    /// `radiusPlan` reads the `densePoints`-th nearest point through the index (nearest first):
    /// beyond the radius, the radius holds fewer and the index finds them. Within it, the points
    /// the radius holds are estimated from how far out that one lies (as many again in each
    /// equal area: on the Paris points, 3.0, 4.2, 6.2, 7.8 and 13.8 thousand estimated where
    /// 3,011, 4,199, 6,164, 7,791 and 13,864 were). A radius estimated to hold
    /// `indexedPointsFactor` times `densePoints` (8,000) or more is read in order; any other
    /// through the index, at most twice that many of its points: one that holds more (the
    /// estimate was far too low) is then read in order, the look costing about 3 µs a point read.
    ///
    /// Read in order, a page lies as far down the order as the records within the radius are
    /// rare there: about the page over the radius's share of the records when the order says
    /// nothing about where a record lies, but much further when it does (prices rising with
    /// position: 100 within 6 km of Paris by price lie past the 203,000th record, 1.2 s). So a
    /// statement reads at most as many records in order as would cost what reading the radius's
    /// estimated points through the index does (`Walk`, `walkPerPoint`), and a page that is not
    /// full by then is read through the index instead: at most about twice the better way's
    /// time when the estimate holds.
    static let densePoints = 2000
    static let indexedPointsFactor = 4
    /// Records read in order for the cost of a point read through the index and joined to its
    /// record and sort key: 6.5 against 6.9 µs within 6 km of Paris (13,864 points), 10.7 against
    /// 5.5 µs within 20 km (145,672).
    static let walkPerPoint = 1.5
    /// The most points a walk is budgeted for (estimates from a few close points can be huge).
    static let largestWalk = 1_000_000.0

    /// Runs `query` as SQL (`PostgresQueryCompiler`): one page of the query's matches in its
    /// order, and a cursor when more follow, as the in-memory store answers. Memory holds one
    /// batch of rows and one page at a time, however many records the database holds.
    ///
    /// SQL finds the candidates (every match, and sometimes more) in the query's order; each is
    /// decoded and the predicate evaluated on it, so the evaluator has the last word. A sort
    /// nearest first reads points in order of distance on the sphere (`nearest`); other sorts
    /// SQL cannot order as the evaluator does (farthest first, a distance after another key)
    /// read every candidate, in batches, and keep the best page.
    func query(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> QueryResult? {
        try self.query(query, cursor: cursor, databaseID: database.id, now: now, oneStatement: false)
    }

    /// `oneStatement`: outside a transaction, where each statement sees a snapshot of its own, so
    /// a page read with two could hold a record twice (moved between them): nil when one
    /// statement does not answer (the caller asks again in a snapshot).
    func query(_ query: Query, cursor: QueryCursor?, databaseID: Int64, now: Int64, oneStatement: Bool) throws(ContainerError) -> QueryResult? {
        if let cursor, !query.accepts(cursor) { throw ContainerError(.badRequest, "the cursor belongs to a different query") }
        let limit = min(max(query.resultsLimit ?? Database.defaultResultsLimit, 1), Database.maximumResultsLimit)
        var matches: [(key: SortKey, record: Record)] = []
        // (No record type holds a U+0000: PostgreSQL text cannot.)
        if query.recordType.utf8.contains(0) { return page(&matches, query, limit: limit) }
        if let first = query.sortDescriptors.first, first.ascending, case .distance(let field, let center) = first.key,
           let point = PostgresRecordValues.point(latitude: center.latitude, longitude: center.longitude) {
            return try nearest(query, field: field, center: center, point: point, cursor: cursor, limit: limit, databaseID: databaseID, now: now, oneStatement: oneStatement)
        }
        return try scan(query, cursor: cursor, limit: limit, databaseID: databaseID, now: now, oneStatement: oneStatement, matches: &matches)
    }

    /// How far apart PostGIS's distance on the sphere (`<->`) and the geodesic on the WGS84
    /// ellipsoid may be, as a ratio: measured from 0.9944 to 1.0045 on 400,000 pairs of points
    /// (the poles, the equator, antipodes), so 1.01 with a metre to spare.
    static let sphereSlack = 1.01

    /// A query sorted nearest first (its first sort descriptor a distance, ascending): the field's
    /// points are read through their GiST index in order of distance on the sphere (`<->`), each
    /// match put in place by the evaluator's geodesic distance, until no point still unread can
    /// come before the page's last (`sphereSlack`). If the points run out first, the records
    /// without one follow (`scan`). A cursor starts the points at its distance.
    private func nearest(
        _ query: Query, field: FieldReference, center: Location, point: [UInt8], cursor: QueryCursor?, limit: Int, databaseID: Int64, now: Int64,
        oneStatement: Bool
    ) throws(ContainerError) -> QueryResult? {
        let descriptors = query.sortDescriptors
        var matches: [(key: SortKey, record: Record)] = []
        // Where the points to read begin, in metres on the sphere (nil: the cursor is past every point).
        var start: Double? = 0
        if let cursor {
            if case .double(let metres)? = cursor.position.values.first { start = max(0, metres / Self.sphereSlack - 1) } else { start = nil }
        }
        if let start {
            var compiler = PostgresQueryCompiler(databaseID: databaseID, recordType: query.recordType)
            let origin = compiler.bind(PostgresValueKey.hex(point)) + "::geography"
            let fieldKey = compiler.bindField(PostgresRecordValues.name(of: field))
            var conditions = [
                "p.database_id = \(compiler.database)", "p.field = \(fieldKey)", "p.location IS NOT NULL", "r.record_type = \(compiler.recordType)",
            ]
            if let zoneID = query.zoneID {
                conditions.append("r.zone_name = \(compiler.bind(zoneID.zoneName))")
                conditions.append("r.owner_name = \(compiler.bind(zoneID.ownerName))")
            }
            // A radius around the same centre, ANDed with the rest: the points are read nearest first
            // until they lie beyond it, not found by it first (PostgreSQL, which plans a prepared
            // statement without its values, sorted every point within it: seconds for a wide one).
            let (radius, rest) = Self.radius(of: query.predicate.condition, field: field, center: center)
            let filter = compiler.filter(rest, now: now)
            if filter == "FALSE" { return QueryResult(records: [], cursor: nil) }
            if filter != "TRUE" { conditions.append(filter) }
            if start > 0 { conditions.append("(p.location <-> \(origin)) >= \(compiler.bind(start))") }
            let select = """
                SELECT r.zone_name, r.owner_name, r.record_name, r.body, p.location <-> \(origin)
                FROM record_values p JOIN records r ON r.database_id = \(compiler.database) AND r.id = p.record_id
                WHERE \(conditions.joined(separator: " AND ")) ORDER BY p.location <-> \(origin)
                """
            var names = RecordCoding.FieldNames()
            // True when no point from `rows` on can come before the page's last.
            func take(_ rows: [[PostgresCell]]) throws(ContainerError) -> Bool {
                for cells in rows {
                    let sphere = try session.decode(cells[4], Double.self)
                    // Beyond the radius (on the sphere, with the slack): no match here or after.
                    if let radius, sphere > radius * Self.sphereSlack + 1 { return true }
                    if matches.count > limit, case .double(let last)? = matches[limit].key.values.first, last < sphere / Self.sphereSlack - 1 {
                        return true
                    }
                    let recordName = try session.decode(cells[2], String.self)
                    guard let match = try candidate(recordName, try session.decode(cells[3], ByteBuffer.self), query, after: cursor, now: now, names: &names)
                    else { continue }
                    Self.insert(match, into: &matches, keeping: limit + 1, descriptors)
                }
                return false
            }
            let batch = 2 * (limit + 1)
            if oneStatement {
                let size = compiler.bind(Int64(batch))
                let statement = compiler.statement(select + " LIMIT \(size)")
                let rows = try session.prepared(statement.sql, statement.parameters)
                // The page is whole when the points settle it, or ran out with more matches than it holds.
                if try take(rows) || (rows.count < batch && (matches.count > limit || radius != nil)) { return page(&matches, query, limit: limit) }
                return nil
            }
            // In a transaction: one statement read a batch at a time, however many points lie
            // nearer than the page's last match.
            let purpose = radius == nil
                ? "the points nearest first (on the sphere), until no point unread can come before the page's last"
                : "the points nearest first (on the sphere), until the page is full or they lie beyond the radius"
            let settled = try readThroughCursor("kquery_nearest", compiler.statement(select), batch: batch, purpose: purpose, take)
            if settled || matches.count > limit || radius != nil { return page(&matches, query, limit: limit) }
        }
        // (A record without a point matches no radius.)
        if Self.radius(of: query.predicate.condition, field: field, center: center).metres != nil { return page(&matches, query, limit: limit) }
        return try scan(query, cursor: cursor, limit: limit, databaseID: databaseID, now: now, oneStatement: oneStatement, withoutPoint: field, matches: &matches)
    }

    /// The least radius in metres that `condition` (or one of the conditions it ANDs) puts
    /// around `center` on `field` (`< r` or `<= r`), and the condition without those.
    static func radius(of condition: Condition, field: FieldReference, center: Location) -> (metres: Double?, rest: Condition) {
        let parts: [Condition]
        if case .and(let conjuncts) = condition { parts = conjuncts } else { parts = [condition] }
        var metres: Double?
        var rest: [Condition] = []
        for part in parts {
            if case .distance(field, let around, let relation, let kilometres) = part, relation == .lessThan || relation == .lessThanOrEqual,
               around.latitude == center.latitude, around.longitude == center.longitude, !kilometres.isNaN {
                metres = min(metres ?? .infinity, Condition.radiusInMetres(kilometres))
            } else {
                rest.append(part)
            }
        }
        return (metres, rest.count == 1 ? rest[0] : .and(rest))
    }

    /// Reads the query's candidates in its order (by record ID when SQL cannot order them: then
    /// every one is read, and the best page kept), in batches, into `matches` (which may hold
    /// matches already: `nearest`'s). `withoutPoint`: only the records without a point in that field.
    private func scan(
        _ query: Query, cursor: QueryCursor?, limit: Int, databaseID: Int64, now: Int64, oneStatement: Bool, withoutPoint: FieldReference? = nil,
        matches: inout [(key: SortKey, record: Record)]
    ) throws(ContainerError) -> QueryResult? {
        let descriptors = query.sortDescriptors
        let fields: [FieldReference]? = descriptors.count <= PostgresQueryCompiler.maximumSortFields
            && descriptors.allSatisfy { if case .field = $0.key { true } else { false } }
            ? descriptors.compactMap { if case .field(let field) = $0.key { field } else { nil } } : nil

        var names = RecordCoding.FieldNames()
        // Where the next batch starts: the cursor's position, then the last row read.
        // (A distance sort reads every candidate, by record ID, and skips those up to the cursor itself.)
        var position: (keys: [String?], id: RecordID)? = fields == nil ? nil : cursor.map { cursor in
            (cursor.position.values.map { $0.flatMap(PostgresValueKey.key) }, cursor.position.recordID)
        }
        let batch = limit + 1
        let sortFields = fields ?? []
        // With a field sort, the records that have a key for the first sort field come first, read
        // in the order of the sort index (`keyed`); those without one after them.
        var keyed = !sortFields.isEmpty
        if let position, let first = position.keys.first, first == nil { keyed = false }
        // (A sort SQL cannot order reads every candidate: finding them through the points is best.)
        var radius = fields != nil ? try radiusPlan(query, databaseID: databaseID) : .filtered
        // Where a walk's page starts again when the radius is read through its index instead.
        let start = (matches: matches, position: position, keyed: keyed)
        // Whether the points read through the index were all the radius holds (once known).
        var radiusRead = false
        var statements = 0
        while true {
            if oneStatement && statements == 1 { return nil }
            statements += 1
            var compiler = PostgresQueryCompiler(databaseID: databaseID, recordType: query.recordType)
            var walk: Walk?
            if case .eachRecord(let bounded) = radius {
                compiler.distancesPerRecord = true
                walk = bounded
            }
            var condition = query.predicate.condition
            var source = "records r"
            var capped: IndexedRadius?
            if let walk {
                // The walk's radius is tested on the records it reads (outside the LIMIT), the rest on the way.
                condition = Self.radius(of: condition, field: walk.radius.field, center: walk.radius.center).rest
            }
            if case .indexed(let indexed) = radius {
                // The radius's points, at most the cap, and how many there were (up to it); each
                // one's record looked up by its number (LATERAL and OFFSET 0: never a join that
                // reads every record).
                capped = indexed
                condition = Self.radius(of: condition, field: indexed.field, center: indexed.center).rest
                let origin = compiler.bind(PostgresValueKey.hex(indexed.point)) + "::geography"
                let fieldKey = compiler.bindField(PostgresRecordValues.name(of: indexed.field))
                source = """
                    (SELECT q.record_id, count(*) OVER () AS points FROM (SELECT v.record_id FROM record_values v \
                    WHERE v.database_id = \(compiler.database) AND v.field = \(fieldKey) AND v.location IS NOT NULL \
                    AND ST_DWithin(v.location, \(origin), \(compiler.bind(PostgresQueryCompiler.widened(indexed.metres)))) \
                    LIMIT \(compiler.bind(Int64(indexed.cap)))) q) p \
                    CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.database_id = \(compiler.database) AND r.id = p.record_id OFFSET 0) r
                    """
            }
            let ascending = fields == nil ? [] : descriptors.map(\.ascending)
            let joins = compiler.sortJoins(sortFields, firstKeyed: keyed)
            var conditions = ["r.database_id = \(compiler.database)", "r.record_type = \(compiler.recordType)"]
            if !sortFields.isEmpty {
                if keyed {
                    conditions.append("k0.sort_key IS NOT NULL")
                    // A bound the sort index seeks to (the exact test is `after`).
                    if let first = position?.keys.first, let key = first {
                        conditions.append("k0.sort_key \(ascending[0] ? ">=" : "<=") \(compiler.bind(PostgresValueKey.storedHex(key).head))")
                    }
                } else {
                    conditions.append("k0.sort_key IS NULL")
                }
            }
            if let zoneID = query.zoneID {
                conditions.append("r.zone_name = \(compiler.bind(zoneID.zoneName))")
                conditions.append("r.owner_name = \(compiler.bind(zoneID.ownerName))")
            }
            let filter = compiler.filter(condition, now: now)
            if filter == "FALSE" { return page(&matches, query, limit: limit) }
            if filter != "TRUE" { conditions.append(filter) }
            if let withoutPoint {
                conditions.append("""
                    NOT EXISTS (SELECT 1 FROM record_values p WHERE p.database_id = \(compiler.database) AND p.record_id = r.id \
                    AND p.field = \(compiler.bindField(PostgresRecordValues.name(of: withoutPoint))) AND p.location IS NOT NULL)
                    """)
            }
            if let position {
                conditions.append(compiler.after(keys: position.keys, ascending: ascending, id: position.id))
                // Without a sort, a bound the record ID index (`records_by_type`) seeks to.
                if fields != nil && sortFields.isEmpty { conditions.append(#"r.record_name COLLATE "C" >= "# + compiler.bind(position.id.recordName)) }
            }
            let walked = walk != nil
            let columns = (0..<sortFields.count).map { ", " + PostgresQueryCompiler.sortKey($0, walked: walked) }.joined() + (capped == nil ? "" : ", p.points")
            let select: String
            if let walk {
                // At most `walk.records` records in the query's order (PostgreSQL keeps their order
                // through the subquery: nothing sorted twice), then the radius tested on each.
                let keys = sortFields.indices.map { ", k\($0).sort_key AS k\($0)_key, k\($0).sort_tail AS k\($0)_tail" }.joined()
                let within = compiler.within(walk.radius.field, of: walk.radius.center, metres: walk.radius.metres)
                select = """
                    SELECT r.zone_name, r.owner_name, r.record_name, r.body\(columns) FROM (SELECT r.id, r.zone_name, r.owner_name, r.record_name, r.body\(keys) \
                    FROM \(source) \(joins) WHERE \(conditions.joined(separator: " AND ")) ORDER BY \(PostgresQueryCompiler.orderBy(ascending, keyed: keyed)) \
                    LIMIT \(compiler.bind(Int64(walk.records)))) r
                    WHERE \(within) ORDER BY \(PostgresQueryCompiler.orderBy(ascending, keyed: keyed, walked: true))
                    """
            } else {
                select = """
                    SELECT r.zone_name, r.owner_name, r.record_name, r.body\(columns) FROM \(source) \(joins)
                    WHERE \(conditions.joined(separator: " AND ")) ORDER BY \(PostgresQueryCompiler.orderBy(ascending, keyed: keyed))
                    """
            }
            // The rows of a batch: nil when they complete the page (returned).
            func take(_ rows: [[PostgresCell]]) throws(ContainerError) -> QueryResult? {
                for cells in rows {
                    let zoneName = try session.decode(cells[0], String.self)
                    let ownerName = try session.decode(cells[1], String.self)
                    let recordName = try session.decode(cells[2], String.self)
                    let body = try session.decode(cells[3], ByteBuffer.self)
                    var keys: [String?] = []
                    for index in sortFields.indices { keys.append(try session.decode(cells[4 + index], String?.self)) }
                    position = (keys, RecordID(recordName: recordName, zoneID: ZoneID(zoneName: zoneName, ownerName: ownerName)))
                    // (In a field sort's order, SQL starts after the cursor.)
                    guard let match = try candidate(recordName, body, query, after: fields == nil ? cursor : nil, now: now, names: &names) else { continue }
                    if fields != nil {
                        // In order already: the page is the first matches.
                        matches.append(match)
                        if matches.count > limit { return page(&matches, query, limit: limit) }
                    } else {
                        Self.insert(match, into: &matches, keeping: limit + 1, descriptors)
                    }
                }
                return nil
            }
            // Whether the radius holds more points than were read through the index: every row says
            // how many (up to the cap); with none, a count says (in a snapshot: a transaction's).
            func overflows(_ rows: [[PostgresCell]]) throws(ContainerError) -> Bool? {
                guard let capped, !radiusRead else { return false }
                radiusRead = !oneStatement || !rows.isEmpty
                guard let first = rows.first else { return oneStatement ? nil : try radiusOverflows(capped, of: query, databaseID: databaseID) }
                return try session.decode(first[4 + sortFields.count], Int64.self) >= Int64(capped.cap)
            }
            if oneStatement {
                let size = compiler.bind(Int64(batch))
                let statement = compiler.statement(select + " LIMIT \(size)")
                let rows = try session.prepared(statement.sql, statement.parameters)
                switch try overflows(rows) {
                case false?: break
                case true?:
                    // More points than the cap: the page is read in order, in one statement still.
                    radius = .eachRecord(nil)
                    statements = 0
                    continue
                case nil:
                    // (No row to tell: in a transaction.)
                    return nil
                }
                if let result = try take(rows) { return result }
                // More rows than the batch: the next statement (none, outside a transaction).
                if rows.count == batch { continue }
            } else {
                // In a transaction: one statement read a batch at a time, however many rows it
                // takes to fill the page (a statement per batch sorted its candidates anew each
                // time: a predicate SQL cannot narrow, on a million records, took minutes).
                var result: QueryResult?
                var overflowed = false
                let purpose = withoutPoint != nil ? "then the records without a point, by record ID"
                    : fields == nil ? "every candidate, by record ID, keeping the best page (SQL cannot order them as the evaluator does)"
                    : capped.map { "the candidates among at most \($0.cap) points within the radius (found through its index), in the query's order" }
                    ?? walk.map { "at most \($0.records) records in the query's order, each one's point measured, until the page is full (if not, the radius is read through its index)" }
                    ?? (sortFields.isEmpty ? "the candidates by record ID, until the page is full"
                    : keyed ? "the candidates with a value for the first sort field, in the sort's order, until the page is full"
                    : "then the candidates without a value for the first sort field")
                _ = try readThroughCursor("kquery_scan", compiler.statement(select), batch: batch, purpose: purpose, whole: capped != nil) { rows throws(ContainerError) in
                    if try overflows(rows) == true {
                        overflowed = true
                        return true
                    }
                    result = try take(rows)
                    return result != nil
                }
                if explanation != nil, let capped, !radiusRead {
                    // (Explaining reads no rows: the count says which way the page is read.)
                    radiusRead = true
                    overflowed = try radiusOverflows(capped, of: query, databaseID: databaseID)
                }
                if overflowed {
                    // More points than the cap: none of them taken; the radius is read in order.
                    radius = .eachRecord(nil)
                    continue
                }
                if let result { return result }
            }
            if let walk {
                // The walk ended without a full page: the radius through its index, from the
                // page's start (outside a transaction, one statement answers it: one snapshot).
                radius = .indexed(walk.radius)
                (matches, position, keyed) = start
                statements = 0
                continue
            }
            if keyed {
                keyed = false
                continue
            }
            return page(&matches, query, limit: limit)
        }
    }

    /// How `scan` reads a radius (see `densePoints`).
    enum RadiusPlan: Equatable {
        /// As the predicate's other tests (no radius, or one holding fewer than `densePoints`
        /// points: the index finds them).
        case filtered
        /// The records in the query's order, each one's point measured; with a walk, at most
        /// so many a statement before the radius is read through its index instead.
        case eachRecord(Walk?)
        /// The radius's points through its index, at most so many.
        case indexed(IndexedRadius)
    }

    /// A radius read in order for at most `records` records a statement, then through its index
    /// (`radius`) when that has not filled the page (see `densePoints`).
    struct Walk: Equatable {
        var records: Int
        var radius: IndexedRadius
    }

    /// A radius read through its index: around `center` (`point`, as PostGIS reads it) on
    /// `field`, `metres` wide (the least of the query's radii there), at most `cap` points.
    struct IndexedRadius: Equatable {
        var field: FieldReference
        var center: Location
        var point: [UInt8]
        var metres: Double
        var cap: Int
    }

    /// How `query`, which stops at a full page, reads the radii its predicate ANDs (`< r` or
    /// `<= r` on a distance): see `densePoints`. Only the plan depends on the answer.
    func radiusPlan(_ query: Query, databaseID: Int64) throws(ContainerError) -> RadiusPlan {
        let parts: [Condition]
        if case .and(let conjuncts) = query.predicate.condition { parts = conjuncts } else { parts = [query.predicate.condition] }
        let most = densePoints * Self.indexedPointsFactor
        var plan = RadiusPlan.filtered
        for part in parts {
            guard case .distance(let field, let center, let relation, let kilometres) = part, relation == .lessThan || relation == .lessThanOrEqual,
                  let point = PostgresRecordValues.point(latitude: center.latitude, longitude: center.longitude)
            else { continue }
            // (An infinite radius asks only for a point; a negative or NaN one matches nothing.)
            let metres = Condition.radiusInMetres(kilometres)
            guard metres.isFinite, metres >= 0 else { continue }
            let reach = metres * Self.sphereSlack + 1
            // Fewer points than that within this radius: it narrows the query, through the index.
            guard let nearest = try nthNearest(densePoints, to: point, field: field, query: query, databaseID: databaseID), nearest <= reach
            else { return .filtered }
            // As many points again in each equal area out to the radius: the estimate.
            let estimate = Double(densePoints) * (reach / max(nearest, 1)) * (reach / max(nearest, 1))
            let least = Self.radius(of: query.predicate.condition, field: field, center: center).metres ?? metres
            if estimate >= Double(most) {
                // Records in order costing what the estimated points would (`walkPerPoint`); then
                // at most four times the estimated points (more: the estimate was far too low,
                // and the walk goes on unbounded).
                let points = min(estimate, Self.largestWalk)
                let walk = Walk(records: Int(points * Self.walkPerPoint), radius: IndexedRadius(field: field, center: center, point: point, metres: least, cap: 4 * Int(points)))
                return .eachRecord(walk)
            }
            if plan == .filtered {
                plan = .indexed(IndexedRadius(field: field, center: center, point: point, metres: least, cap: 2 * most))
            }
        }
        return plan
    }

    /// Whether `radius` holds `cap` points or more (counted through its index, up to that).
    private func radiusOverflows(_ radius: IndexedRadius, of query: Query, databaseID: Int64) throws(ContainerError) -> Bool {
        var compiler = PostgresQueryCompiler(databaseID: databaseID, recordType: query.recordType)
        let origin = compiler.bind(PostgresValueKey.hex(radius.point)) + "::geography"
        let fieldKey = compiler.bindField(PostgresRecordValues.name(of: radius.field))
        let metres = compiler.bind(PostgresQueryCompiler.widened(radius.metres))
        let cap = compiler.bind(Int64(radius.cap))
        let statement = compiler.statement("""
            SELECT count(*) FROM (SELECT 1 FROM record_values v
            WHERE v.database_id = \(compiler.database) AND v.field = \(fieldKey) AND v.location IS NOT NULL
            AND ST_DWithin(v.location, \(origin), \(metres)) LIMIT \(cap)) q
            """)
        if explanation != nil {
            try explain(statement, purpose: "whether the radius holds more than the \(radius.cap) points read through its index (then the records are read in order)")
        }
        guard let cell = try session.prepared(statement.sql, statement.parameters).first?.first else { return false }
        return try session.decode(cell, Int64.self) >= Int64(radius.cap)
    }

    /// The distance in metres from `point` to the `n`-th nearest point of `field` (nil: fewer).
    private func nthNearest(_ n: Int, to point: [UInt8], field: FieldReference, query: Query, databaseID: Int64) throws(ContainerError) -> Double? {
        var compiler = PostgresQueryCompiler(databaseID: databaseID, recordType: query.recordType)
        let origin = compiler.bind(PostgresValueKey.hex(point)) + "::geography"
        let fieldKey = compiler.bindField(PostgresRecordValues.name(of: field))
        let offset = compiler.bind(Int64(n - 1))
        let statement = compiler.statement("""
            SELECT p.location <-> \(origin) FROM record_values p
            WHERE p.database_id = \(compiler.database) AND p.field = \(fieldKey) AND p.location IS NOT NULL
            ORDER BY p.location <-> \(origin) OFFSET \(offset) LIMIT 1
            """)
        if explanation != nil {
            try explain(statement, purpose: "whether the radius holds \(n) points or more (then each record's point is measured in turn)")
        }
        guard let cell = try session.prepared(statement.sql, statement.parameters).first?.first else { return nil }
        return try session.decode(cell, Double.self)
    }

    /// A candidate row's record and its sort key, when the record is in the query's scope, matches
    /// its predicate (the evaluator has the last word) and comes after `cursor`; nil otherwise.
    private func candidate(
        _ recordName: String, _ body: ByteBuffer, _ query: Query, after cursor: QueryCursor?, now: Int64, names: inout RecordCoding.FieldNames
    ) throws(ContainerError) -> (key: SortKey, record: Record)? {
        let record = try decode(body, recordName, names: &names)
        guard query.isInScope(record), query.predicate.matches(record, now: now) else { return nil }
        let key = SortKey(record, query.sortDescriptors)
        if let cursor, SortOrder.compare(key, cursor.position, query.sortDescriptors) <= 0 { return nil }
        return (key, record)
    }

    /// Runs `statement` as the cursor `name` (in the transaction) and hands its rows to `take` a
    /// batch at a time, `batch` rows first and then twice as many each time up to
    /// `largestBatch`, until `take` has enough (true, returned) or the rows run out (false).
    /// While explaining, PostgreSQL plans the cursor instead, and no rows are read (`purpose`
    /// says what the statement is for).
    private func readThroughCursor(
        _ name: String, _ statement: (sql: String, parameters: [PostgresParameter]), batch first: Int, purpose: String, whole: Bool = false,
        _ take: ([[PostgresCell]]) throws(ContainerError) -> Bool
    ) throws(ContainerError) -> Bool {
        // A cursor is planned for its first tenth (`cursor_tuple_fraction`): a statement that
        // sorts all its rows anyway is planned for them all, or PostgreSQL may read a whole sort
        // index in order to join each entry to a few rows it expects (a radius read through its
        // index: PostGIS expects 10 points).
        if whole { try session.run(PostgresQuery(unsafeSQL: "SET LOCAL cursor_tuple_fraction = 1")) }
        if explanation != nil {
            try explain(statement, cursor: name, purpose: purpose)
            if whole { try session.run(PostgresQuery(unsafeSQL: "RESET cursor_tuple_fraction")) }
            return false
        }
        try session.rows(PostgresQuery(unsafeSQL: "DECLARE \(name) NO SCROLL CURSOR FOR " + statement.sql, binds: PostgresSession.bindings(statement.parameters)))
        if whole { try session.run(PostgresQuery(unsafeSQL: "RESET cursor_tuple_fraction")) }
        var batch = first
        var enough = false
        while !enough {
            let rows = try session.rows(PostgresQuery(unsafeSQL: "FETCH \(batch) FROM \(name)")).map { Array($0.makeRandomAccess()) }
            enough = try take(rows)
            if rows.count < batch { break }
            batch = min(batch * 2, Self.largestBatch)
        }
        try session.run(PostgresQuery(unsafeSQL: "CLOSE \(name)"))
        return enough
    }

    /// Adds `statement` and PostgreSQL's plan for it (as the cursor `cursor`, if named) to the explanation.
    private func explain(_ statement: (sql: String, parameters: [PostgresParameter]), cursor: String? = nil, purpose: String) throws(ContainerError) {
        guard let explanation else { return }
        let sql = cursor.map { "DECLARE \($0) NO SCROLL CURSOR FOR " } ?? ""
        let rows = try session.rows(PostgresQuery(unsafeSQL: "EXPLAIN " + sql + statement.sql, binds: PostgresSession.bindings(statement.parameters)))
        var plan: [String] = []
        for row in rows { plan.append(try session.decode(row, String.self)) }
        explanation.statements.append(.init(purpose: purpose, sql: statement.sql, parameters: statement.parameters, plan: plan))
    }

    /// How `query` runs on the database: each statement it may need, in turn, with PostgreSQL's
    /// plan for it (`kquery query --postgres URL --explain`). Nothing is read but the plans.
    func explain(_ query: Query, cursor: QueryCursor?, in database: StoredDatabase, now: Int64) throws(ContainerError) -> String? {
        var explaining = self
        let explanation = PostgresExplanation()
        explaining.explanation = explanation
        _ = try explaining.query(query, cursor: cursor, databaseID: database.id, now: now, oneStatement: false)
        return explanation.description(of: query)
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
