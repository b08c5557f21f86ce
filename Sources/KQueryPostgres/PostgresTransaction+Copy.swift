import KQuery
import KQueryContainer
import KQueryStore
import NIOCore
import PostgresNIO

/// The writes of `kquery migrate` (`ContainerCopy`): a page of a zone's record changes with
/// `COPY ... FROM STDIN` (`PostgresCopyText`) rather than upserts of `unnest`ed arrays.
extension PostgresTransaction {
    func copiedThrough(_ zone: ZoneID, of database: StoredDatabase) throws(ContainerError) -> Int64 {
        guard let row = try session.rows("""
            SELECT greatest(
                (SELECT max(change_sequence) FROM records
                 WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName) AND owner_name = \(zone.ownerName)),
                (SELECT max(deleted_sequence) FROM record_tombstones
                 WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName) AND owner_name = \(zone.ownerName)))
            """).first else { return 0 }
        return try session.decode(row, Int64?.self) ?? 0
    }

    /// The page's records are copied as new rows: a page follows every change the database holds
    /// in the zone (`copiedThrough`), so none of its records is there, unless the source changed
    /// since a record's earlier version was copied. Then its key is taken, the COPY fails, and the
    /// page is written again with upserts (`writeRecordChanges`). A tombstone in the page is
    /// written as `deleteRecord` does (it must remove a live copy).
    ///
    /// `prepared`: the page's COPY rows (`PostgresCopyPage`), made on the copy's reading thread
    /// while the page before was written; made here when absent.
    ///
    /// Each page commits without waiting for its log to reach the disk (`synchronous_commit`
    /// off): a crash loses at most the last pages, which the rerun copies again, and the copy's
    /// last writes (its subscriptions and sequence) commit durably, syncing the log of every page
    /// before them.
    func appendRecordChanges(
        _ page: [(sequence: Int64, change: RecordZoneChange)], prepared: (any Sendable)?, in database: StoredDatabase
    ) throws(ContainerError) {
        prefetched?.forgetAll()
        try session.run("SET LOCAL synchronous_commit = off")
        var rows: PostgresCopyPage
        if let prepared = prepared as? PostgresCopyPage, prepared.databaseID == database.id {
            rows = prepared
        } else {
            rows = try PostgresCopyPage(page, numbers: recordNumbers(PostgresCopyPage.recordCount(page)), databaseID: database.id, storage: name)
        }
        if let zone = rows.zone {
            try session.run("SAVEPOINT kquery_copy")
            let copied = try session.copy(rows.records, into: "records", columns: Self.recordColumns)
            guard copied else {
                try session.run("ROLLBACK TO kquery_copy")
                try session.run("RELEASE kquery_copy")
                return try writeRecordChanges(page, in: database)
            }
            try session.run("RELEASE kquery_copy")
            _ = try session.copy(rows.values, into: "record_values", columns: Self.valueColumns)
            if rows.references.readableBytes > 0 {
                _ = try session.copy(rows.references, into: "record_references", columns: Self.referenceColumns)
            }
            // A tombstone the copy wrote before the source saved the record again (checked only
            // when the zone has any).
            try session.run("""
                DELETE FROM record_tombstones WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName)
                AND owner_name = \(zone.ownerName) AND record_name = ANY(\(rows.names)::text[])
                AND EXISTS (SELECT 1 FROM record_tombstones WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName)
                            AND owner_name = \(zone.ownerName))
                """)
        }
        for (sequence, change) in page {
            guard case .deleted(let id, let recordType) = change else { continue }
            try deleteRecord(Record(recordType: recordType, recordID: id), sequence: sequence, in: database)
        }
    }

    /// `count` new record numbers (`records.id`), in one round trip.
    func recordNumbers(_ count: Int) throws(ContainerError) -> [Int64] {
        guard count > 0 else { return [] }
        return try session.rows("SELECT nextval('record_ids') FROM generate_series(1, \(Int64(count)))").map { row throws(ContainerError) in
            try session.decode(row, Int64.self)
        }
    }

    static let recordColumns = ["database_id", "zone_name", "owner_name", "record_name", "record_type", "change_sequence", "body", "id"]
    static let valueColumns = ["database_id", "record_id", "field", "sort_key", "sort_tail", "members", "location"]
    static let referenceColumns = ["database_id", "zone_name", "owner_name", "target_name", "action", "source_name"]

    /// The record's row (numbered `number`), its `record_values` rows (`PostgresRecordValues.rows`)
    /// and its reference rows (each target and action once, as the primary key wants).
    static func copyRows(
        of record: Record, number: Int64, sequence: Int64, databaseID: Int64,
        records: inout PostgresCopyText, values: inout PostgresCopyText, references: inout PostgresCopyText
    ) throws(PostgresCopyText.UnstorableText) {
        let id = record.recordID
        func recordKey(_ rows: inout PostgresCopyText) throws(PostgresCopyText.UnstorableText) {
            rows.int(databaseID)
            try rows.text(id.zoneID.zoneName)
            try rows.text(id.zoneID.ownerName)
        }
        try recordKey(&records)
        try records.text(id.recordName)
        try records.text(record.recordType)
        records.int(sequence)
        records.bytea(RecordCoding.encode(record))
        records.int(number)
        records.endRow()
        // The columns every values row of the record leads with.
        var lead = PostgresCopyText(capacity: 32)
        lead.int(databaseID)
        lead.int(number)
        PostgresRecordValues.forEachRow(of: record) { (field: Int64, key: [UInt8]?, tail: [UInt8]?, members: [[UInt8]]?, point: [UInt8]?) in
            values.columns(lead)
            values.int(field)
            if let key { values.hex(key) } else { values.null() }
            if let tail { values.hex(tail) } else { values.null() }
            if let members { values.hexArray(members) } else { values.null() }
            if let point { values.hex(point) } else { values.null() }
            values.endRow()
        }
        var seen = Set<[String]>()
        for reference in record.trackedReferences where seen.insert([reference.recordID.recordName, reference.action.rawValue]).inserted {
            try recordKey(&references)
            try references.text(reference.recordID.recordName)
            try references.text(reference.action.rawValue)
            try references.text(id.recordName)
            references.endRow()
        }
    }
}

/// A copy's page of record changes as COPY rows (`PostgresTransaction.appendRecordChanges`): its
/// records (numbered ahead), their query values and references, made without a transaction, so
/// on the copy's reading thread while the page before is written
/// (`PostgresContainerStorage.prepareRecordChanges`).
struct PostgresCopyPage: Sendable {
    let databaseID: Int64
    var records = ByteBuffer(), values = ByteBuffer(), references = ByteBuffer()
    /// The names of the page's records, and their zone (nil: the page holds no record).
    var names: [String] = []
    var zone: ZoneID?

    static func recordCount(_ page: [(sequence: Int64, change: RecordZoneChange)]) -> Int {
        page.count(where: { if case .changed = $0.change { true } else { false } })
    }

    /// `numbers`: one for each record of the page (`recordCount`), in order.
    init(_ page: [(sequence: Int64, change: RecordZoneChange)], numbers: [Int64], databaseID: Int64, storage: String) throws(ContainerError) {
        self.databaseID = databaseID
        var records = PostgresCopyText(), values = PostgresCopyText(), references = PostgresCopyText()
        var numbers = numbers.makeIterator()
        for (sequence, change) in page {
            guard case .changed(let record) = change else { continue }
            guard let number = numbers.next() else { throw ContainerError(.internalError, "\(storage): a copied page lacks record numbers") }
            let id = record.recordID
            zone = id.zoneID
            names.append(id.recordName)
            do throws(PostgresCopyText.UnstorableText) {
                try PostgresTransaction.copyRows(
                    of: record, number: number, sequence: sequence, databaseID: databaseID, records: &records, values: &values, references: &references)
            } catch {
                throw ContainerError(.badRequest, "\(storage): record '\(id.recordName)' holds a U+0000, which PostgreSQL text cannot hold")
            }
        }
        self.records = records.take()
        self.values = values.take()
        self.references = references.take()
    }
}
