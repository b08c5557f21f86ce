import KQuery
import KQueryContainer
import KQueryStore
import NIOCore
import PostgresNIO

/// The `record_values` rows of a record: what queries on PostgreSQL filter and sort on.
///
/// One row per field the record has (user fields, and the system fields a predicate or sort can
/// name, under `systemName`), with the field's `sort_key` (`PostgresValueKey`, NULL for a list or
/// NaN) and, for a list, the keys of its members (`members`). One more row, `tokensField`, holds
/// the record's full-text tokens (those of every STRING and STRING_LIST field) in `members`.
/// Written in the transaction that writes the record, by every write path (they all end in
/// `saveRecord`, `deleteRecord` or `deleteZone`).
///
/// A row names its record by the record's number (`records.id`, never reused) and its field by
/// `fieldKey`, a number for the record type and field name together: narrow rows, and keys that
/// sort in few comparisons (the rows named by text were most of a large database's size and of
/// the time its indexes took to build).
package enum PostgresRecordValues {
    /// The row name of a system field: a control character no user field name holds.
    package static func name(of field: FieldReference) -> String {
        if case .user(let key) = field { return key.name }
        return "\u{1}" + field.name
    }

    package static let tokensField = "\u{1}tokens"

    /// The number `record_values` knows a record type's field by: a SipHash of the type and the
    /// row name (`name(of:)`), under a fixed key. Two fields of one type sharing a number
    /// (odds of 2^-64 a pair) would share rows: the executor evaluates the predicate on every
    /// candidate, so a filter would still be exact.
    package static func fieldKey(recordType: String, field: String) -> Int64 {
        var message = Array(recordType.utf8)
        message.append(0)
        message.append(contentsOf: field.utf8)
        return Int64(bitPattern: SipHash.tag(message, key: 0x4B51_7565_7279_4669, 0x656C_644B_6579_7331))
    }

    package static func fieldKey(recordType: String, _ field: FieldReference) -> Int64 {
        fieldKey(recordType: recordType, field: name(of: field))
    }

    /// The system fields a record has rows for.
    static let systemFields: [FieldReference] = FieldReference.systemFields.map(\.field)

    /// Calls `body` with each of the record's rows: the field's number, its key's indexed head
    /// (nil: none) and the rest of it (nil: none; `PostgresValueKey.stored`), its members' keys'
    /// heads (nil: not a list; the token row's members are its tokens) and, for a location, its
    /// point (`geography`).
    package static func forEachRow<E: Error>(
        of record: Record, _ body: (Int64, _ key: [UInt8]?, _ tail: [UInt8]?, _ members: [[UInt8]]?, _ point: [UInt8]?) throws(E) -> Void
    ) throws(E) {
        let type = record.recordType
        func row(_ name: String, _ value: FieldValue) throws(E) {
            var members: [[UInt8]]?
            if case .list(_, let items) = value { members = items.compactMap { PostgresValueKey.bytes($0).map { PostgresValueKey.stored($0).head } } }
            let key = PostgresValueKey.bytes(value).map(PostgresValueKey.stored)
            try body(fieldKey(recordType: type, field: name), key?.head, key?.tail, members, geography(value))
        }
        for (key, value) in record.fields { try row(key.name, value) }
        for field in systemFields {
            if let value = record.value(of: field) { try row(name(of: field), value) }
        }
        let tokens = record.searchTokens.sorted().map { PostgresValueKey.stored(Array($0.utf8)).head }
        try body(fieldKey(recordType: type, field: tokensField), nil, nil, tokens, nil)
    }

    /// The rows' field numbers, keys' heads ("" for none) and tails ("" for none), members ("n"
    /// for not a list, else the keys joined by commas) and points ("" for none), as five arrays
    /// for one `unnest`.
    package static func rows(of record: Record) -> (fields: [Int64], keys: [String], tails: [String], members: [String], locations: [String]) {
        var fields: [Int64] = []
        var keys: [String] = []
        var tails: [String] = []
        var members: [String] = []
        var locations: [String] = []
        forEachRow(of: record) { (field: Int64, key: [UInt8]?, tail: [UInt8]?, list: [[UInt8]]?, point: [UInt8]?) in
            fields.append(field)
            keys.append(key.map(PostgresValueKey.hex) ?? "")
            tails.append(tail.map(PostgresValueKey.hex) ?? "")
            members.append(list.map { $0.map(PostgresValueKey.hex).joined(separator: ",") } ?? "n")
            locations.append(point.map(PostgresValueKey.hex) ?? "")
        }
        return (fields, keys, tails, members, locations)
    }

    /// The point PostGIS holds for a location (`record_values.location`, a `geography(Point,4326)`
    /// that distance predicates and sorts read through a GiST index), as EWKB; nil for any other
    /// value, and for a location the evaluator measures no distance to (a latitude outside
    /// [-90, 90] or a coordinate not finite: PostGIS would move it into range).
    package static func geography(_ value: FieldValue) -> [UInt8]? {
        guard case .location(let location) = value else { return nil }
        return point(latitude: location.latitude, longitude: location.longitude)
    }

    /// A point's EWKB (little-endian, SRID 4326, longitude first), its longitude brought into
    /// [-180, 180] exactly (the evaluator measures longitudes modulo 360); nil where the
    /// evaluator measures no distance.
    package static func point(latitude: Double, longitude: Double) -> [UInt8]? {
        guard latitude.magnitude <= 90, longitude.isFinite else { return nil }
        // The remainder is exact, and so is each subtraction (Sterbenz).
        var longitude = longitude.truncatingRemainder(dividingBy: 360)
        if longitude > 180 { longitude -= 360 } else if longitude < -180 { longitude += 360 }
        var bytes: [UInt8] = [0x01, 0x01, 0x00, 0x00, 0x20, 0xE6, 0x10, 0x00, 0x00]
        bytes.reserveCapacity(25)
        for coordinate in [longitude, latitude + 0] {
            let bits = coordinate.bitPattern
            for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        }
        return bytes
    }

    /// Writes a stored record's rows (`backfill`, at version 6, before the points of version 7:
    /// `backfillLocations`; a record's save writes them with the record).
    private static func save(_ record: Record, id: Int64, databaseID: Int64, _ session: PostgresSession) throws(ContainerError) {
        let (fields, keys, tails, members, _) = rows(of: record)
        try session.run("""
            INSERT INTO record_values (database_id, record_id, field, sort_key, sort_tail, members)
            SELECT \(databaseID), \(id), f, NULLIF(k, ''), NULLIF(t, ''), CASE WHEN m = 'n' THEN NULL ELSE string_to_array(m, ',') END
            FROM unnest(\(fields)::bigint[], \(keys)::text[], \(tails)::text[], \(members)::text[]) AS v (f, k, t, m)
            """)
    }

    /// Splits the keys stored whole before version 11 that are longer than an index entry holds
    /// (`PostgresValueKey.indexedBytes`: only keys that compressed well fit) into head and tail,
    /// and cuts long members to their heads, a database at a time.
    static func splitLongKeys(_ session: PostgresSession) throws(ContainerError) {
        let limit = "\(2 * PostgresValueKey.indexedBytes)"
        let databases = try session.rows("SELECT id FROM databases").map { row throws(ContainerError) in try session.decode(row, Int64.self) }
        for databaseID in databases {
            try session.run("""
                UPDATE record_values SET sort_tail = substr(sort_key, \(unescaped: limit) + 1), sort_key = left(sort_key, \(unescaped: limit))
                WHERE database_id = \(databaseID) AND length(sort_key) > \(unescaped: limit)
                """)
            try session.run("""
                UPDATE record_values SET members = ARRAY(SELECT left(m, \(unescaped: limit)) FROM unnest(members) AS m)
                WHERE database_id = \(databaseID) AND members IS NOT NULL
                AND EXISTS (SELECT 1 FROM unnest(members) AS m WHERE length(m) > \(unescaped: limit))
                """)
        }
    }

    /// Writes the rows of every record already stored (the migration that adds the table): a
    /// database at a time, a page of records at a time.
    static func backfill(_ session: PostgresSession) throws(ContainerError) {
        let databases = try session.rows("SELECT id FROM databases").map { row throws(ContainerError) in try session.decode(row, Int64.self) }
        for databaseID in databases {
            var after: Int64 = .min
            var names = RecordCoding.FieldNames()
            while true {
                let rows = try session.rows("""
                    SELECT id, record_name, body FROM records WHERE database_id = \(databaseID) AND id > \(after) ORDER BY id LIMIT 500
                    """)
                if rows.isEmpty { break }
                for row in rows {
                    let (id, recordName, body) = try session.decode(row, (Int64, String, ByteBuffer).self)
                    let record: Record
                    do {
                        record = try body.withUnsafeReadableBytes { bytes throws(RecordDecodingError) in try RecordCoding.decode(bytes, names: &names) }
                    } catch {
                        throw ContainerError(.internalError, "\(session.name): record '\(recordName)' is corrupt: \(error)")
                    }
                    try save(record, id: id, databaseID: databaseID, session)
                    after = id
                }
            }
        }
    }

    /// Writes the point of every location row already stored (the migration that adds
    /// `record_values.location`), read from the rows' keys (a location's key holds its latitude
    /// and longitude exactly): a database at a time, a batch of rows at a time.
    static func backfillLocations(_ session: PostgresSession) throws(ContainerError) {
        let databases = try session.rows("SELECT id FROM databases").map { row throws(ContainerError) in try session.decode(row, Int64.self) }
        let lower = PostgresValueKey.lower(.location), upper = PostgresValueKey.upper(.location)
        for databaseID in databases {
            var after: (record: Int64, field: Int64) = (.min, .min)
            while true {
                let rows = try session.rows("""
                    SELECT record_id, field, sort_key FROM record_values
                    WHERE database_id = \(databaseID) AND sort_key >= \(lower) AND sort_key < \(upper) AND (record_id, field) > (\(after.record), \(after.field))
                    ORDER BY record_id, field LIMIT 5000
                    """)
                if rows.isEmpty { break }
                var records: [Int64] = [], fields: [Int64] = [], points: [String] = []
                for row in rows {
                    let (record, field, key) = try session.decode(row, (Int64, Int64, String).self)
                    after = (record, field)
                    guard let location = PostgresValueKey.location(ofKey: key),
                          let point = point(latitude: location.latitude, longitude: location.longitude)
                    else { continue }
                    records.append(record)
                    fields.append(field)
                    points.append(PostgresValueKey.hex(point))
                }
                try session.run("""
                    UPDATE record_values v SET location = p::geography FROM unnest(\(records)::bigint[], \(fields)::bigint[], \(points)::text[]) AS u (r, f, p)
                    WHERE v.database_id = \(databaseID) AND v.record_id = u.r AND v.field = u.f
                    """)
            }
        }
    }
}
