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

    /// Calls `body` with each of the record's rows: the field's number, its key's bytes (nil:
    /// none) and its members' keys (nil: not a list; the token row's members are its tokens).
    package static func forEachRow<E: Error>(of record: Record, _ body: (Int64, [UInt8]?, [[UInt8]]?) throws(E) -> Void) throws(E) {
        let type = record.recordType
        func row(_ name: String, _ value: FieldValue) throws(E) {
            var members: [[UInt8]]?
            if case .list(_, let items) = value { members = items.compactMap(PostgresValueKey.bytes) }
            try body(fieldKey(recordType: type, field: name), PostgresValueKey.bytes(value), members)
        }
        for (key, value) in record.fields { try row(key.name, value) }
        for field in systemFields {
            if let value = record.value(of: field) { try row(name(of: field), value) }
        }
        try body(fieldKey(recordType: type, field: tokensField), nil, record.searchTokens.sorted().map { Array($0.utf8) })
    }

    /// The rows' field numbers, keys ("" for none) and members ("n" for not a list, else the keys
    /// joined by commas), as three arrays for one `unnest`.
    package static func rows(of record: Record) -> (fields: [Int64], keys: [String], members: [String]) {
        var fields: [Int64] = []
        var keys: [String] = []
        var members: [String] = []
        forEachRow(of: record) { (field: Int64, key: [UInt8]?, list: [[UInt8]]?) in
            fields.append(field)
            keys.append(key.map(PostgresValueKey.hex) ?? "")
            members.append(list.map { $0.map(PostgresValueKey.hex).joined(separator: ",") } ?? "n")
        }
        return (fields, keys, members)
    }

    /// Writes a stored record's rows (`backfill`; a record's save writes them with the record).
    private static func save(_ record: Record, id: Int64, databaseID: Int64, _ session: PostgresSession) throws(ContainerError) {
        let (fields, keys, members) = rows(of: record)
        try session.run("""
            INSERT INTO record_values (database_id, record_id, field, sort_key, members)
            SELECT \(databaseID), \(id), f, NULLIF(k, ''), CASE WHEN m = 'n' THEN NULL ELSE string_to_array(m, ',') END
            FROM unnest(\(fields)::bigint[], \(keys)::text[], \(members)::text[]) AS v (f, k, m)
            """)
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
}
