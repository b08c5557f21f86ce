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
package enum PostgresRecordValues {
    /// The row name of a system field: a control character no user field name holds.
    package static func name(of field: FieldReference) -> String {
        if case .user(let key) = field { return key.name }
        return "\u{1}" + field.name
    }

    package static let tokensField = "\u{1}tokens"

    /// The system fields a record has rows for.
    static let systemFields: [FieldReference] = FieldReference.systemFields.map(\.field)

    /// The rows' field names, keys ("" for none) and members ("n" for not a list, else the keys
    /// joined by commas), as three arrays for one `unnest`.
    package static func rows(of record: Record) -> (fields: [String], keys: [String], members: [String]) {
        var fields: [String] = []
        var keys: [String] = []
        var members: [String] = []
        func add(_ name: String, _ value: FieldValue) {
            fields.append(name)
            keys.append(PostgresValueKey.key(value) ?? "")
            if case .list(_, let items) = value {
                members.append(items.compactMap(PostgresValueKey.key).joined(separator: ","))
            } else {
                members.append("n")
            }
        }
        for (key, value) in record.fields { add(key.name, value) }
        for field in systemFields {
            if let value = record.value(of: field) { add(name(of: field), value) }
        }
        let tokens = record.searchTokens
        fields.append(tokensField)
        keys.append("")
        members.append(tokens.sorted().map { PostgresValueKey.hex(Array($0.utf8)) }.joined(separator: ","))
        return (fields, keys, members)
    }

    /// Writes a stored record's rows (`backfill`; a record's save writes them with the record).
    private static func save(_ record: Record, databaseID: Int64, _ session: PostgresSession) throws(ContainerError) {
        let id = record.recordID
        let (fields, keys, members) = rows(of: record)
        try session.run("""
            INSERT INTO record_values (database_id, zone_name, owner_name, record_name, record_type, field, sort_key, members)
            SELECT \(databaseID), \(id.zoneID.zoneName), \(id.zoneID.ownerName), \(id.recordName), \(record.recordType),
                   f, NULLIF(k, ''), CASE WHEN m = 'n' THEN NULL ELSE string_to_array(m, ',') END
            FROM unnest(\(fields)::text[], \(keys)::text[], \(members)::text[]) AS v (f, k, m)
            """)
    }

    /// Writes the rows of every record already stored (the migration that adds the table): a
    /// database at a time, a page of records at a time.
    static func backfill(_ session: PostgresSession) throws(ContainerError) {
        let databases = try session.rows("SELECT id FROM databases").map { row throws(ContainerError) in try session.decode(row, Int64.self) }
        for databaseID in databases {
            var after = ("", "", "")
            var names = RecordCoding.FieldNames()
            while true {
                let rows = try session.rows("""
                    SELECT zone_name, owner_name, record_name, body FROM records WHERE database_id = \(databaseID)
                    AND (zone_name, owner_name, record_name) > (\(after.0), \(after.1), \(after.2))
                    ORDER BY zone_name, owner_name, record_name LIMIT 500
                    """)
                if rows.isEmpty { break }
                for row in rows {
                    let (zone, owner, recordName, body) = try session.decode(row, (String, String, String, ByteBuffer).self)
                    let record: Record
                    do {
                        record = try body.withUnsafeReadableBytes { bytes throws(RecordDecodingError) in try RecordCoding.decode(bytes, names: &names) }
                    } catch {
                        throw ContainerError(.internalError, "\(session.name): record '\(recordName)' is corrupt: \(error)")
                    }
                    try save(record, databaseID: databaseID, session)
                    after = (zone, owner, recordName)
                }
            }
        }
    }
}
