import KQuery
import KQueryContainer
import KQueryStore
import NIOCore
import PostgresNIO

/// One transaction on the PostgreSQL database, scoped to one container: every statement filters
/// on the database key (`database_id`) or, for container-wide tables, the container key.
struct PostgresTransaction: StorageWriteTransaction {
    let session: PostgresSession
    let containerID: Int64
    /// The databases' rows as this write transaction read and changed them (nil: read each
    /// time). A write holds the container's lock, so no other transaction changes them meanwhile:
    /// a modify read its database's row twice, each a round trip the committer waited for.
    var memo: DatabaseMemo? = nil
    /// The records the batch this write is part of read ahead (`PostgresBatch.prefetchRecords`),
    /// which its record writes keep current.
    var prefetched: RecordPrefetch? = nil
    /// Set while explaining a query (`explain`): its statements are planned, not run.
    var explanation: PostgresExplanation? = nil
    /// See `PostgresTransaction.densePoints`.
    var densePoints = PostgresTransaction.densePoints

    var name: String { session.name }

    /// Decodes a stored record. `names` carries the field keys of the record decoded before.
    func decode(_ body: ByteBuffer, _ recordName: String, names: inout RecordCoding.FieldNames) throws(ContainerError) -> Record {
        do {
            return try body.withUnsafeReadableBytes { bytes throws(RecordDecodingError) in try RecordCoding.decode(bytes, names: &names) }
        } catch {
            throw ContainerError(.internalError, "\(name): record '\(recordName)' is corrupt: \(error)")
        }
    }

    private func key(_ environment: Int64, _ scope: Int64, _ user: String) throws(ContainerError) -> DatabaseKey {
        guard let environment = ContainerEnvironment(rawValue: Int(environment)), let scope = DatabaseScope(rawValue: Int(scope)) else {
            throw ContainerError(.internalError, "\(name): a stored database key is corrupt (\(environment), \(scope))")
        }
        return DatabaseKey(environment: environment, scope: scope, userRecordName: user)
    }

    // MARK: Reading

    func database(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase? {
        if let known = memo?.databases[key] { return known }
        let found = try storedDatabase(key)
        if let memo, let found { memo.databases[key] = found }
        return found
    }

    private func storedDatabase(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase? {
        // With the container's outbox counter: a write that queues pushes needs it, and read
        // apart it was a round trip more the committer waited for in every such batch.
        let rows = try session.prepared("""
            SELECT id, sequence, horizon, subscriptions_version, (SELECT outbox_sequence FROM containers WHERE id = $1::bigint)
            FROM databases WHERE container_id = $1::bigint AND environment = $2::bigint
            AND scope = $3::bigint AND user_record_name = $4::text
            """, [.int64(containerID), .int64(Int64(key.environment.rawValue)), .int64(Int64(key.scope.rawValue)), .text(key.userRecordName)])
        guard let row = rows.first else { return nil }
        return try storedDatabase(row)
    }

    /// A database's row as `storedDatabase` reads it: its first five cells.
    private func storedDatabase(_ row: [PostgresCell]) throws(ContainerError) -> StoredDatabase {
        guard row.count >= 5 else { throw ContainerError(.internalError, "\(name): the databases row has \(row.count) columns") }
        // (Read under the container's write lock in a write: current until the write ends.)
        if let memo, memo.deferred.outboxSequence == nil { memo.deferred.outboxSequence = try session.decode(row[4], Int64?.self) }
        let id = try session.decode(row[0], Int64.self), sequence = try session.decode(row[1], Int64.self)
        return StoredDatabase(
            id: id, sequence: memo?.deferred.sequences[id] ?? sequence, horizon: try session.decode(row[2], Int64.self),
            subscriptionsVersion: try session.decode(row[3], Int64.self))
    }

    /// The database's row and, of `ids`, the records it holds (each row's cells: zone, owner,
    /// name, body), nil without the database. Its row not known yet (the first read of a batch),
    /// both come in one statement: read one after the other they were two round trips the
    /// committer waited for at the start of every batch.
    func databaseAndRecords(_ key: DatabaseKey, _ ids: ArraySlice<RecordID>) throws(ContainerError) -> (StoredDatabase, [ArraySlice<PostgresCell>])? {
        let zones = PostgresParameter.textArray(ids.map(\.zoneID.zoneName)), owners = PostgresParameter.textArray(ids.map(\.zoneID.ownerName))
        let names = PostgresParameter.textArray(ids.map(\.recordName))
        if let known = memo?.databases[key] {
            let rows = try session.prepared("""
                SELECT r.zone_name, r.owner_name, r.record_name, r.body
                FROM unnest($2::text[], $3::text[], $4::text[]) AS i (z, o, n)
                JOIN records r ON r.database_id = $1::bigint AND r.zone_name = i.z AND r.owner_name = i.o AND r.record_name = i.n
                """, [.int64(known.id), zones, owners, names])
            return (known, rows.map { $0[...] })
        }
        // A row for the database alone when it holds none of the records (the LEFT JOIN).
        let rows = try session.prepared("""
            SELECT d.id, d.sequence, d.horizon, d.subscriptions_version, (SELECT outbox_sequence FROM containers WHERE id = $1::bigint),
                   r.zone_name, r.owner_name, r.record_name, r.body
            FROM databases d
            LEFT JOIN (unnest($5::text[], $6::text[], $7::text[]) AS i (z, o, n)
                       JOIN records r ON r.zone_name = i.z AND r.owner_name = i.o AND r.record_name = i.n) ON r.database_id = d.id
            WHERE d.container_id = $1::bigint AND d.environment = $2::bigint AND d.scope = $3::bigint AND d.user_record_name = $4::text
            """, [.int64(containerID), .int64(Int64(key.environment.rawValue)), .int64(Int64(key.scope.rawValue)), .text(key.userRecordName), zones, owners, names])
        guard let first = rows.first else { return nil }
        let database = try storedDatabase(first)
        memo?.databases[key] = database
        return (database, rows.compactMap { row in row.count == 9 && row[8].bytes != nil ? row[5...] : nil })
    }

    func zone(_ zoneID: ZoneID, in database: StoredDatabase) throws(ContainerError) -> StoredZone? {
        // (No zone's name holds a U+0000: PostgreSQL text cannot.)
        guard Self.storable(zoneID) else { return nil }
        let rows = try session.rows("""
            SELECT created_sequence, changed_sequence FROM zones
            WHERE database_id = \(database.id) AND zone_name = \(zoneID.zoneName) AND owner_name = \(zoneID.ownerName)
            """)
        guard let row = rows.first else { return nil }
        let (created, changed) = try session.decode(row, (Int64, Int64).self)
        return StoredZone(zoneID: zoneID, createdSequence: created, changedSequence: changed)
    }

    func zones(in database: StoredDatabase) throws(ContainerError) -> [StoredZone] {
        // Ordered by bytes ("C"), as SQLite orders text.
        try session.rows("""
            SELECT zone_name, owner_name, created_sequence, changed_sequence FROM zones WHERE database_id = \(database.id)
            ORDER BY zone_name COLLATE "C", owner_name COLLATE "C"
            """).map { row throws(ContainerError) in
            let (zoneName, ownerName, created, changed) = try session.decode(row, (String, String, Int64, Int64).self)
            return StoredZone(zoneID: ZoneID(zoneName: zoneName, ownerName: ownerName), createdSequence: created, changedSequence: changed)
        }
    }

    /// Whether PostgreSQL text can hold the ID's names: one holding a U+0000 cannot be stored, so
    /// no such record exists, and a statement naming it would fail its whole transaction (a
    /// batch's: every modify in it).
    static func storable(_ id: RecordID) -> Bool {
        !id.recordName.utf8.contains(0) && storable(id.zoneID)
    }

    /// Whether PostgreSQL text can hold the zone's names (see the record ID's).
    static func storable(_ zoneID: ZoneID) -> Bool {
        !zoneID.zoneName.utf8.contains(0) && !zoneID.ownerName.utf8.contains(0)
    }

    /// Refuses a record PostgreSQL text cannot hold (a U+0000 in its names, type or the records
    /// it refers to), before any statement: BAD_REQUEST for the record alone.
    static func checkStorable(_ record: Record) throws(ContainerError) {
        let id = record.recordID
        guard storable(id), !record.recordType.utf8.contains(0), record.trackedReferences.allSatisfy({ storable($0.recordID) }) else {
            throw ContainerError(.badRequest, "record '\(id.recordName)' holds a U+0000 (in a name, its type or a reference), which PostgreSQL text cannot hold")
        }
    }

    func record(_ id: RecordID, in database: StoredDatabase) throws(ContainerError) -> Record? {
        guard Self.storable(id) else { return nil }
        let body: ByteBuffer
        switch prefetched?.entry(id, in: database.id) {
        case .absent?: return nil
        case .body(let known)?: body = known
        case nil:
            let rows = try session.prepared("""
                SELECT body FROM records WHERE database_id = $1::bigint AND zone_name = $2::text AND owner_name = $3::text AND record_name = $4::text
                """, [.int64(database.id), .text(id.zoneID.zoneName), .text(id.zoneID.ownerName), .text(id.recordName)])
            guard let cell = rows.first?.first else { return nil }
            body = try session.decode(cell, ByteBuffer.self)
        }
        var names = RecordCoding.FieldNames()
        return try decode(body, id.recordName, names: &names)
    }

    func records(in database: StoredDatabase) throws(ContainerError) -> [Record] {
        var names = RecordCoding.FieldNames()
        return try session.rows("SELECT record_name, body FROM records WHERE database_id = \(database.id) ORDER BY change_sequence").map { row throws(ContainerError) in
            let (recordName, body) = try session.decode(row, (String, ByteBuffer).self)
            return try decode(body, recordName, names: &names)
        }
    }

    func shares(in database: StoredDatabase) throws(ContainerError) -> [Record] {
        var names = RecordCoding.FieldNames()
        return try session.rows("""
            SELECT record_name, body FROM records WHERE database_id = \(database.id) AND record_type = \(SharingKeys.shareRecordType)
            ORDER BY change_sequence
            """).map { row throws(ContainerError) in
            let (recordName, body) = try session.decode(row, (String, ByteBuffer).self)
            return try decode(body, recordName, names: &names)
        }
    }

    func referrers(to target: RecordID, action: Reference.Action, in database: StoredDatabase) throws(ContainerError) -> [String] {
        // (Nothing refers to a record PostgreSQL cannot name: no statement, which would fail the batch.)
        guard Self.storable(target) else { return [] }
        return try session.rows("""
            SELECT source_name FROM record_references WHERE database_id = \(database.id) AND zone_name = \(target.zoneID.zoneName)
            AND owner_name = \(target.zoneID.ownerName) AND target_name = \(target.recordName) AND action = \(action.rawValue)
            ORDER BY source_name COLLATE "C"
            """).map { row throws(ContainerError) in try session.decode(row, String.self) }
    }

    func recordChanges(in zone: ZoneID, of database: StoredDatabase, after sequence: Int64, includingDeletions: Bool, limit: Int)
        throws(ContainerError) -> [(sequence: Int64, change: RecordZoneChange)] {
        let limit = Int64(max(limit, 0))
        // Each side reads at most `limit` rows in sequence order from its index.
        let query: PostgresQuery = includingDeletions ? """
            SELECT * FROM (
                (SELECT change_sequence AS s, record_name, record_type, body FROM records
                 WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName) AND owner_name = \(zone.ownerName) AND change_sequence > \(sequence)
                 ORDER BY change_sequence LIMIT \(limit))
                UNION ALL
                (SELECT deleted_sequence, record_name, record_type, NULL FROM record_tombstones
                 WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName) AND owner_name = \(zone.ownerName) AND deleted_sequence > \(sequence)
                 ORDER BY deleted_sequence LIMIT \(limit))) changes
            ORDER BY s LIMIT \(limit)
            """ : """
            SELECT change_sequence, record_name, record_type, body FROM records
            WHERE database_id = \(database.id) AND zone_name = \(zone.zoneName) AND owner_name = \(zone.ownerName) AND change_sequence > \(sequence)
            ORDER BY change_sequence LIMIT \(limit)
            """
        var names = RecordCoding.FieldNames()
        return try session.rows(query).map { row throws(ContainerError) in
            let (changeSequence, recordName, recordType, body) = try session.decode(row, (Int64, String, String, ByteBuffer?).self)
            if let body { return (changeSequence, .changed(try decode(body, recordName, names: &names))) }
            return (changeSequence, .deleted(RecordID(recordName: recordName, zoneID: zone), recordType: recordType))
        }
    }

    func zoneChanges(of database: StoredDatabase, after sequence: Int64, limit: Int) throws(ContainerError)
        -> [(sequence: Int64, zoneID: ZoneID, deleted: Bool)] {
        let limit = Int64(max(limit, 0))
        return try session.rows("""
            SELECT * FROM (
                (SELECT changed_sequence AS s, zone_name, owner_name, false AS deleted FROM zones
                 WHERE database_id = \(database.id) AND changed_sequence > \(sequence) ORDER BY changed_sequence LIMIT \(limit))
                UNION ALL
                (SELECT deleted_sequence, zone_name, owner_name, true FROM zone_tombstones
                 WHERE database_id = \(database.id) AND deleted_sequence > \(sequence) ORDER BY deleted_sequence LIMIT \(limit))) changes
            ORDER BY s LIMIT \(limit)
            """).map { row throws(ContainerError) in
            let (changeSequence, zoneName, ownerName, deleted) = try session.decode(row, (Int64, String, String, Bool).self)
            return (changeSequence, ZoneID(zoneName: zoneName, ownerName: ownerName), deleted)
        }
    }

    func allDatabases() throws(ContainerError) -> [(key: DatabaseKey, stored: StoredDatabase)] {
        try session.rows("""
            SELECT id, environment, scope, user_record_name, sequence, horizon, subscriptions_version FROM databases
            WHERE container_id = \(containerID) ORDER BY id
            """).map { row throws(ContainerError) in
            let (id, environment, scope, user, sequence, horizon, version) = try session.decode(row, (Int64, Int64, Int64, String, Int64, Int64, Int64).self)
            let stored = StoredDatabase(id: id, sequence: memo?.deferred.sequences[id] ?? sequence, horizon: horizon, subscriptionsVersion: version)
            return (try key(environment, scope, user), stored)
        }
    }

    func subscribedDatabases() throws(ContainerError) -> [DatabaseKey] {
        try session.rows("""
            SELECT d.environment, d.scope, d.user_record_name FROM databases d
            WHERE d.container_id = \(containerID) AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.database_id = d.id)
            ORDER BY d.id
            """).map { row throws(ContainerError) in
            let (environment, scope, user) = try session.decode(row, (Int64, Int64, String).self)
            return try key(environment, scope, user)
        }
    }

    func subscriptions(in database: StoredDatabase) throws(ContainerError) -> [Subscription] {
        try session.prepared("SELECT body FROM subscriptions WHERE database_id = $1::bigint ORDER BY position", [.int64(database.id)]).map { row throws(ContainerError) in
            guard let cell = row.first else { throw ContainerError(.internalError, "\(name): a subscriptions row has no body") }
            let body = try session.decode(cell, String.self)
            let json: JSON
            do { json = try JSON.parse(body) } catch { throw ContainerError(.internalError, "\(name): a stored subscription is not JSON: \(error)") }
            return try Subscription(storedJSON: json)
        }
    }

    func pendingNotifications(for channels: DeliveryChannel, recipient: OutboxRecipient?, limit: Int) throws(ContainerError) -> [OutboxNotification] {
        let columns: PostgresQuery = """
            SELECT id, environment, scope, user_record_name, subscription_id, owner, payload, priority, push_type, created, collapse_id, excluded_device
            FROM outbox
            """
        let mask = Int64(channels.rawValue), limit = Int64(max(limit, 0))
        // No owner holds NUL, which a literal (below) cannot carry.
        if let recipient, recipient.owner.contains("\0") { return [] }
        let rows = if let recipient {
            // The owner is written into the statement, not bound: for a parameter the planner
            // guessed the owner's share of the outbox from its statistics, and when one user's
            // pushes filled most of it (a user subscribed to everything) the plan read the whole
            // outbox in order for every other user's poll (100 ms against 0.1 for 240,000 rows).
            try session.rows("""
                \(unescaped: columns.sql) WHERE container_id = \(containerID) AND owner = \(unescaped: PostgresParameter.text(recipient.owner).literal)
                AND environment = \(Int64(recipient.environment.rawValue)) AND delivered & \(mask) <> \(mask) ORDER BY id LIMIT \(limit)
                """)
        } else {
            try session.rows("""
                \(unescaped: columns.sql) WHERE container_id = \(containerID) AND delivered & \(mask) <> \(mask) ORDER BY id LIMIT \(limit)
                """)
        }
        return try rows.map { row throws(ContainerError) in
            let (id, environment, scope, user, subscriptionID, owner, payloadText, priority, pushType, created, collapseID, excludedDevice) =
                try session.decode(row, (Int64, Int64, Int64, String, String, String, String, Int64, String, Int64, String?, String?).self)
            guard let payload = try? JSON.parse(payloadText) else { throw ContainerError(.internalError, "\(name): outbox entry \(id) is corrupt") }
            return OutboxNotification(
                id: id, database: try key(environment, scope, user), subscriptionID: subscriptionID, owner: owner, payload: payload,
                priority: Int(priority), pushType: pushType, created: created, collapseID: collapseID, excludedDevice: excludedDevice)
        }
    }

    // MARK: Writing

    func createDatabase(_ key: DatabaseKey) throws(ContainerError) -> StoredDatabase {
        guard let row = try session.rows("""
            INSERT INTO databases (container_id, environment, scope, user_record_name)
            VALUES (\(containerID), \(Int64(key.environment.rawValue)), \(Int64(key.scope.rawValue)), \(key.userRecordName)) RETURNING id
            """).first else { throw ContainerError(.internalError, "\(name): the database \(key) could not be created") }
        let created = StoredDatabase(id: try session.decode(row, Int64.self), sequence: 0, horizon: 0)
        memo?.databases[key] = created
        return created
    }

    func setHorizon(_ horizon: Int64, of database: StoredDatabase) throws(ContainerError) {
        try session.run("UPDATE databases SET horizon = \(horizon) WHERE id = \(database.id)")
        memo?.change(database.id) { $0.horizon = horizon }
    }

    func setSequence(_ sequence: Int64, of database: StoredDatabase) throws(ContainerError) {
        let memo = try writeMemo()
        memo.deferred.sequences[database.id] = sequence
        memo.change(database.id) { $0.sequence = sequence }
    }

    func saveZone(_ zone: StoredZone, in database: StoredDatabase) throws(ContainerError) {
        let zoneID = zone.zoneID
        try session.run("""
            WITH forgotten AS (DELETE FROM zone_tombstones
                WHERE database_id = \(database.id) AND zone_name = \(zoneID.zoneName) AND owner_name = \(zoneID.ownerName))
            INSERT INTO zones (database_id, zone_name, owner_name, created_sequence, changed_sequence)
            VALUES (\(database.id), \(zoneID.zoneName), \(zoneID.ownerName), \(zone.createdSequence), \(zone.changedSequence))
            ON CONFLICT (database_id, zone_name, owner_name)
            DO UPDATE SET created_sequence = EXCLUDED.created_sequence, changed_sequence = EXCLUDED.changed_sequence
            """)
    }

    func deleteZone(_ zoneID: ZoneID, sequence: Int64, in database: StoredDatabase) throws(ContainerError) {
        prefetched?.forgetAll()
        let place = "database_id = $1 AND zone_name = $2 AND owner_name = $3"
        var bindings = PostgresBindings()
        bindings.append(database.id)
        bindings.append(zoneID.zoneName)
        bindings.append(zoneID.ownerName)
        bindings.append(sequence)
        try session.run(PostgresQuery(unsafeSQL: """
            WITH r AS (DELETE FROM records WHERE \(place)), t AS (DELETE FROM record_tombstones WHERE \(place)),
                 x AS (DELETE FROM record_references WHERE \(place)), z AS (DELETE FROM zones WHERE \(place)),
                 v AS (DELETE FROM record_values WHERE database_id = $1 AND record_id IN (SELECT id FROM records WHERE \(place)))
            INSERT INTO zone_tombstones (database_id, zone_name, owner_name, deleted_sequence) VALUES ($1, $2, $3, $4)
            ON CONFLICT (database_id, zone_name, owner_name) DO UPDATE SET deleted_sequence = EXCLUDED.deleted_sequence
            """, binds: bindings))
    }

    func saveRecord(_ record: Record, sequence: Int64, in database: StoredDatabase) throws(ContainerError) {
        try Self.checkStorable(record)
        prefetched?.forget(record.recordID, in: database.id)
        if let held = session.held { return held.hold(.save(record, sequence: sequence, database: database.id)) }
        try saveRecord(record, sequence: sequence, inDatabase: database.id)
    }

    /// Sends a record's save (`saveRecord`; the database by number).
    func saveRecord(_ record: Record, sequence: Int64, inDatabase database: Int64) throws(ContainerError) {
        let id = record.recordID
        let (fields, keys, tails, members, locations) = PostgresRecordValues.rows(of: record)
        // One prepared statement: the tombstone, the old reference rows and the query values of
        // fields the record no longer has go; the record and its query values are written (a
        // record saved again keeps its number, `id`).
        // (Four statements, each planned anew, were most of a modify's time in PostgreSQL.)
        try session.send("""
            WITH t AS (DELETE FROM record_tombstones WHERE database_id = $1::bigint AND zone_name = $2::text
                       AND owner_name = $3::text AND record_name = $4::text),
                 x AS (DELETE FROM record_references WHERE database_id = $1::bigint AND zone_name = $2::text
                       AND owner_name = $3::text AND source_name = $4::text),
                 r AS (INSERT INTO records (database_id, zone_name, owner_name, record_name, record_type, change_sequence, body)
                       VALUES ($1::bigint, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::bytea)
                       ON CONFLICT (database_id, zone_name, owner_name, record_name)
                       DO UPDATE SET record_type = EXCLUDED.record_type, change_sequence = EXCLUDED.change_sequence, body = EXCLUDED.body
                       RETURNING id),
                 d AS (DELETE FROM record_values WHERE database_id = $1::bigint AND record_id = (SELECT id FROM r)
                       AND field <> ALL($8::bigint[]))
            INSERT INTO record_values (database_id, record_id, field, sort_key, sort_tail, members, location)
            SELECT $1::bigint, (SELECT id FROM r), f, NULLIF(k, ''), NULLIF(t, ''), CASE WHEN m = 'n' THEN NULL ELSE string_to_array(m, ',') END,
                   NULLIF(l, '')::geography
            FROM unnest($8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[]) AS u (f, k, t, m, l)
            ON CONFLICT (database_id, record_id, field)
            DO UPDATE SET sort_key = EXCLUDED.sort_key, sort_tail = EXCLUDED.sort_tail, members = EXCLUDED.members, location = EXCLUDED.location
            """, [
                .int64(database), .text(id.zoneID.zoneName), .text(id.zoneID.ownerName), .text(id.recordName), .text(record.recordType),
                .int64(sequence), .bytea(ByteBuffer(bytes: RecordCoding.encode(record))),
                .int64Array(fields), .textArray(keys), .textArray(tails), .textArray(members), .textArray(locations),
            ])
        let references = record.trackedReferences
        guard !references.isEmpty else { return }
        try session.send("""
            INSERT INTO record_references (database_id, zone_name, owner_name, target_name, action, source_name)
            SELECT \(database), \(id.zoneID.zoneName), \(id.zoneID.ownerName), target, action, \(id.recordName)
            FROM unnest(\(references.map(\.recordID.recordName))::text[], \(references.map(\.action.rawValue))::text[]) AS r (target, action)
            ON CONFLICT DO NOTHING
            """)
    }

    /// Many records in two statements (three with references): their rows go as arrays. A page of
    /// `kquery migrate` was a round trip per record before, 1.5 records a millisecond. A record
    /// named twice is written once, as its last version.
    func saveRecords(_ records: consuming [(record: Record, sequence: Int64)], in database: StoredDatabase) throws(ContainerError) {
        let records = records
        for (record, _) in records { try Self.checkStorable(record) }
        if let prefetched { for (record, _) in records { prefetched.forget(record.recordID, in: database.id) } }
        if let held = session.held {
            for (record, sequence) in records { held.hold(.save(record, sequence: sequence, database: database.id)) }
            return
        }
        try saveRecords(records, inDatabase: database.id)
    }

    /// Sends the saves of `saveRecords` (the database by number).
    func saveRecords(_ records: consuming [(record: Record, sequence: Int64)], inDatabase database: Int64) throws(ContainerError) {
        guard records.count > 1 else {
            for (record, sequence) in records { try saveRecord(record, sequence: sequence, inDatabase: database) }
            return
        }
        var last: [RecordID: Int] = [:]
        for (index, entry) in records.enumerated() { last[entry.record.recordID] = index }
        var valueRecords: [Int64] = [], valueFields: [Int64] = [], valueKeys: [String] = [], valueTails: [String] = [], valueMembers: [String] = [], valueLocations: [String] = []
        var zones: [String] = [], owners: [String] = [], names: [String] = [], types: [String] = [], sequences: [Int64] = [], bodies: [ByteBuffer] = []
        var referenceZones: [String] = [], referenceOwners: [String] = [], targets: [String] = [], actions: [String] = [], sources: [String] = []
        for (index, (record, sequence)) in records.enumerated() where last[record.recordID] == index {
            let id = record.recordID
            zones.append(id.zoneID.zoneName)
            owners.append(id.zoneID.ownerName)
            names.append(id.recordName)
            types.append(record.recordType)
            sequences.append(sequence)
            bodies.append(ByteBuffer(bytes: RecordCoding.encode(record)))
            let (fields, keys, tails, members, locations) = PostgresRecordValues.rows(of: record)
            valueRecords.append(contentsOf: repeatElement(Int64(zones.count), count: fields.count))
            valueFields += fields
            valueKeys += keys
            valueTails += tails
            valueMembers += members
            valueLocations += locations
            for reference in record.trackedReferences {
                referenceZones.append(id.zoneID.zoneName)
                referenceOwners.append(id.zoneID.ownerName)
                targets.append(reference.recordID.recordName)
                actions.append(reference.action.rawValue)
                sources.append(id.recordName)
            }
        }
        // Prepared and sent without waiting, as a single save's: a modify of many records was three
        // statements planned anew and three round trips waited for.
        try session.send("""
            WITH input AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bytea[])
                           AS i (zone_name, owner_name, record_name, record_type, change_sequence, body)),
                 t AS (DELETE FROM record_tombstones d USING input i WHERE d.database_id = $1::bigint AND d.zone_name = i.zone_name
                       AND d.owner_name = i.owner_name AND d.record_name = i.record_name),
                 x AS (DELETE FROM record_references d USING input i WHERE d.database_id = $1::bigint AND d.zone_name = i.zone_name
                       AND d.owner_name = i.owner_name AND d.source_name = i.record_name),
                 v AS (DELETE FROM record_values d USING records r, input i WHERE d.database_id = $1::bigint
                       AND r.database_id = $1::bigint AND r.zone_name = i.zone_name AND r.owner_name = i.owner_name
                       AND r.record_name = i.record_name AND d.record_id = r.id)
            INSERT INTO records (database_id, zone_name, owner_name, record_name, record_type, change_sequence, body)
            SELECT $1::bigint, zone_name, owner_name, record_name, record_type, change_sequence, body FROM input
            ON CONFLICT (database_id, zone_name, owner_name, record_name)
            DO UPDATE SET record_type = EXCLUDED.record_type, change_sequence = EXCLUDED.change_sequence, body = EXCLUDED.body
            """, [.int64(database), .textArray(zones), .textArray(owners), .textArray(names), .textArray(types), .int64Array(sequences), .byteaArray(bodies)])
        // The query values (`PostgresRecordValues`), each row naming its record by position.
        try session.send("""
            INSERT INTO record_values (database_id, record_id, field, sort_key, sort_tail, members, location)
            SELECT $1::bigint, r.id, f, NULLIF(k, ''), NULLIF(t, ''), CASE WHEN m = 'n' THEN NULL ELSE string_to_array(m, ',') END,
                   NULLIF(l, '')::geography
            FROM unnest($5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[]) AS v (i, f, k, t, m, l)
            JOIN records r ON r.database_id = $1::bigint AND r.zone_name = ($2::text[])[i] AND r.owner_name = ($3::text[])[i]
                 AND r.record_name = ($4::text[])[i]
            """, [
                .int64(database), .textArray(zones), .textArray(owners), .textArray(names),
                .int64Array(valueRecords), .int64Array(valueFields), .textArray(valueKeys), .textArray(valueTails), .textArray(valueMembers),
                .textArray(valueLocations),
            ])
        guard !sources.isEmpty else { return }
        try session.send("""
            INSERT INTO record_references (database_id, zone_name, owner_name, target_name, action, source_name)
            SELECT $1::bigint, z, o, target, action, source
            FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS r (z, o, target, action, source)
            ON CONFLICT DO NOTHING
            """, [.int64(database), .textArray(referenceZones), .textArray(referenceOwners), .textArray(targets), .textArray(actions), .textArray(sources)])
    }

    func deleteRecord(_ record: Record, sequence: Int64, in database: StoredDatabase) throws(ContainerError) {
        prefetched?.forget(record.recordID, in: database.id)
        if let held = session.held { return held.hold(.delete(record, sequence: sequence, database: database.id)) }
        try deleteRecord(record, sequence: sequence, inDatabase: database.id)
    }

    /// Sends a record's deletion (`deleteRecord`; the database by number).
    func deleteRecord(_ record: Record, sequence: Int64, inDatabase database: Int64) throws(ContainerError) {
        let id = record.recordID
        try session.send("""
            WITH r AS (DELETE FROM records WHERE database_id = \(database) AND zone_name = \(id.zoneID.zoneName)
                       AND owner_name = \(id.zoneID.ownerName) AND record_name = \(id.recordName)),
                 x AS (DELETE FROM record_references WHERE database_id = \(database) AND zone_name = \(id.zoneID.zoneName)
                       AND owner_name = \(id.zoneID.ownerName) AND source_name = \(id.recordName)),
                 v AS (DELETE FROM record_values WHERE database_id = \(database) AND record_id = (
                       SELECT id FROM records WHERE database_id = \(database) AND zone_name = \(id.zoneID.zoneName)
                       AND owner_name = \(id.zoneID.ownerName) AND record_name = \(id.recordName)))
            INSERT INTO record_tombstones (database_id, zone_name, owner_name, record_name, record_type, deleted_sequence)
            VALUES (\(database), \(id.zoneID.zoneName), \(id.zoneID.ownerName), \(id.recordName), \(record.recordType), \(sequence))
            ON CONFLICT (database_id, zone_name, owner_name, record_name)
            DO UPDATE SET record_type = EXCLUDED.record_type, deleted_sequence = EXCLUDED.deleted_sequence
            """)
    }

    func saveSubscription(_ subscription: Subscription, in database: StoredDatabase) throws(ContainerError) {
        guard !subscription.subscriptionID.utf8.contains(0) else {
            throw ContainerError(.badRequest, "subscription ID '\(subscription.subscriptionID)' holds a U+0000, which PostgreSQL text cannot hold")
        }
        let body = try subscription.storedJSON().serialized
        // Deleted and inserted: a saved-again subscription moves to the end of the save order.
        // Sent, not waited for (the next statement waited for reports their failure): a request's
        // subscriptions share a transaction, where each waited for was two round trips a save.
        // Prepared, planned once (a request of 200 took 10% longer with each planned anew).
        try session.send("DELETE FROM subscriptions WHERE database_id = $1::bigint AND subscription_id = $2::text",
                         [.int64(database.id), .text(subscription.subscriptionID)])
        try session.send("INSERT INTO subscriptions (database_id, subscription_id, owner, body) VALUES ($1::bigint, $2::text, $3::text, $4::text)",
                         [.int64(database.id), .text(subscription.subscriptionID), .text(subscription.owner), .text(body)])
        try subscriptionsChanged(database)
    }

    func deleteSubscription(_ subscriptionID: String, in database: StoredDatabase) throws(ContainerError) {
        // (No subscription ID holds a U+0000 here: nothing to delete.)
        guard !subscriptionID.utf8.contains(0) else { return }
        try session.send("DELETE FROM subscriptions WHERE database_id = $1::bigint AND subscription_id = $2::text", [.int64(database.id), .text(subscriptionID)])
        try subscriptionsChanged(database)
    }

    /// Counts a change to the database's subscriptions, so every node reads the set again
    /// (`StoredDatabase.subscriptionsVersion`).
    private func subscriptionsChanged(_ database: StoredDatabase) throws(ContainerError) {
        try session.send("UPDATE databases SET subscriptions_version = subscriptions_version + 1 WHERE id = $1::bigint", [.int64(database.id)])
        memo?.change(database.id) { $0.subscriptionsVersion += 1 }
    }

    func enqueue(_ notifications: consuming [OutboxNotification]) throws(ContainerError) -> [OutboxNotification] {
        var queued = notifications
        // Wakes the other nodes' couriers when the transaction commits (not before; never if it does not).
        guard !queued.isEmpty else { return queued }
        // Numbered by the container's own counter, in the transaction: a write that rolls back
        // takes no number (a PostgreSQL sequence would burn one), and numbers are never reused.
        // A write transaction reads it once and writes it when it ends (`DeferredWrites`).
        let memo = try writeMemo()
        if memo.deferred.outboxSequence == nil { memo.deferred.outboxSequence = try outboxSequence() }
        var nextID = (memo.deferred.outboxSequence ?? 0) + 1
        memo.deferred.outboxSequence = nextID + Int64(queued.count) - 1
        for position in queued.indices {
            queued[position].id = nextID
            nextID += 1
            memo.deferred.recipients.insert(queued[position].recipient)
        }
        if let held = session.held {
            for notification in queued { held.hold(.push(notification)) }
        } else {
            try insertOutbox(queued)
        }
        return queued
    }

    /// Sends the rows of numbered pushes (`enqueue`), as arrays, in one statement.
    func insertOutbox(_ notifications: [OutboxNotification]) throws(ContainerError) {
        guard !notifications.isEmpty else { return }
        var ids: [Int64] = [], environments: [Int64] = [], scopes: [Int64] = [], users: [String] = [], subscriptions: [String] = []
        var owners: [String] = [], notificationIDs: [String] = [], payloads: [String] = [], priorities: [Int64] = [], pushTypes: [String] = []
        var created: [Int64] = [], collapseIDs: [String] = [], excludedDevices: [String] = [], present: [Int64] = []
        for new in notifications {
            let payload = new.payload
            ids.append(new.id)
            environments.append(Int64(new.database.environment.rawValue))
            scopes.append(Int64(new.database.scope.rawValue))
            users.append(new.database.userRecordName)
            subscriptions.append(new.subscriptionID)
            owners.append(new.owner)
            notificationIDs.append(payload["ck"]?["nid"]?.stringValue ?? "")
            payloads.append(String(decoding: payload.serializedBytes, as: UTF8.self))
            priorities.append(Int64(new.priority))
            pushTypes.append(new.pushType)
            created.append(new.created)
            collapseIDs.append(new.collapseID ?? "")
            excludedDevices.append(new.excludedDevice ?? "")
            // Which of the two optional columns hold a value (an array of text holds no NULL here).
            present.append((new.collapseID == nil ? 0 : 1) | (new.excludedDevice == nil ? 0 : 2))
        }
        try session.send("""
            INSERT INTO outbox (container_id, id, environment, scope, user_record_name, subscription_id, owner, notification_id, payload,
                                priority, push_type, created, collapse_id, excluded_device)
            SELECT $1::bigint, i, e, s, u, sub, o, n, p, pr, t, c, CASE WHEN f & 1 = 1 THEN col END, CASE WHEN f & 2 = 2 THEN x END
            FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[],
                        $11::text[], $12::bigint[], $13::text[], $14::text[], $15::bigint[]) AS v (i, e, s, u, sub, o, n, p, pr, t, c, col, x, f)
            """, [
                .int64(containerID), .int64Array(ids), .int64Array(environments), .int64Array(scopes), .textArray(users), .textArray(subscriptions),
                .textArray(owners), .textArray(notificationIDs), .textArray(payloads), .int64Array(priorities), .textArray(pushTypes),
                .int64Array(created), .textArray(collapseIDs), .textArray(excludedDevices), .int64Array(present),
            ])
    }

    /// The memo of the write transaction this is (every write transaction has one: `write`, a
    /// batch's writes), which keeps the counters written at its end.
    private func writeMemo() throws(ContainerError) -> DatabaseMemo {
        guard let memo else { throw ContainerError(.internalError, "\(name): a write outside a write transaction") }
        return memo
    }

    /// The container's last outbox number.
    private func outboxSequence() throws(ContainerError) -> Int64 {
        guard let row = try session.prepared("SELECT outbox_sequence FROM containers WHERE id = $1::bigint", [.int64(containerID)]).first, let cell = row.first
        else { throw ContainerError(.internalError, "\(name): the container's outbox counter is missing") }
        return try session.decode(cell, Int64.self)
    }

    func acknowledge(_ ids: [Int64], on channels: DeliveryChannel) throws(ContainerError) {
        guard !ids.isEmpty else { return }
        let all = Int64(DeliveryChannel.all.rawValue)
        try session.run("""
            UPDATE outbox SET delivered = delivered | \(Int64(channels.rawValue)) WHERE container_id = \(containerID) AND id = ANY(\(ids)::bigint[])
            """)
        try session.run("""
            DELETE FROM outbox WHERE container_id = \(containerID) AND id = ANY(\(ids)::bigint[]) AND delivered & \(all) = \(all)
            """)
    }

    func compactHistory(of database: StoredDatabase, keepingLast count: Int) throws(ContainerError) -> Int64 {
        let rows = try session.rows("""
            SELECT s FROM (SELECT deleted_sequence AS s FROM record_tombstones WHERE database_id = \(database.id)
                           UNION ALL SELECT deleted_sequence FROM zone_tombstones WHERE database_id = \(database.id)) tombstones
            ORDER BY s DESC LIMIT 1 OFFSET \(Int64(max(count, 0)))
            """)
        guard let row = rows.first else { return database.horizon }
        let newestDropped = try session.decode(row, Int64.self)
        try session.run("DELETE FROM record_tombstones WHERE database_id = \(database.id) AND deleted_sequence <= \(newestDropped)")
        try session.run("DELETE FROM zone_tombstones WHERE database_id = \(database.id) AND deleted_sequence <= \(newestDropped)")
        let horizon = max(database.horizon, newestDropped)
        try session.run("UPDATE databases SET horizon = \(horizon) WHERE id = \(database.id)")
        memo?.change(database.id) { $0.horizon = horizon }
        return horizon
    }
}

/// The records a batch read ahead of its writes (`PostgresBatch.prefetchRecords`), by database
/// number: each one's body as the batch's transaction held it, or `absent` when it had none. A write
/// of the batch that changes a record forgets it (a write rolled back to its savepoint then leaves
/// nothing stale behind), and its next read is a statement again.
final class RecordPrefetch {
    /// A record read ahead: its body, or none.
    enum Entry {
        case absent
        case body(ByteBuffer)
    }

    private var entries: [Int64: [RecordID: Entry]] = [:]

    /// The record as read ahead, nil when it was not (or was forgotten since).
    func entry(_ id: RecordID, in database: Int64) -> Entry? {
        entries[database]?[id]
    }

    func store(_ entry: Entry, for id: RecordID, in database: Int64) {
        entries[database, default: [:]][id] = entry
    }

    func forget(_ id: RecordID, in database: Int64) {
        entries[database]?.removeValue(forKey: id)
    }

    func forgetAll() {
        entries = [:]
    }
}

/// The databases' rows a write transaction has read, as it changed them (`PostgresTransaction.memo`),
/// and the counters its writes moved, written once when the transaction ends (`DeferredWrites`).
final class DatabaseMemo {
    var databases: [DatabaseKey: StoredDatabase]
    var deferred: DeferredWrites

    init(_ databases: [DatabaseKey: StoredDatabase] = [:], deferred: DeferredWrites = DeferredWrites()) {
        self.databases = databases
        self.deferred = deferred
    }

    func change(_ id: Int64, _ body: (inout StoredDatabase) -> Void) {
        for (key, database) in databases where database.id == id { body(&databases[key, default: database]) }
    }
}

/// Counters a write transaction moves, kept here and written once before it commits (`flush`):
/// each modify of a batch updated its database's row and the container's row (the latter a
/// round trip the committer waited for, to learn the outbox numbers) and sent a NOTIFY, a third
/// of a modify's statements. The transaction holds the container's write lock, so no other
/// changes these rows meanwhile; its reads of them see the values kept here.
struct DeferredWrites {
    /// Database ID: its change sequence as the transaction's writes left it.
    var sequences: [Int64: Int64] = [:]
    /// The container's last outbox number, once read (nil: not yet read).
    var outboxSequence: Int64?
    /// Whom the pushes queued are for (none: `outboxSequence` did not move). When some were,
    /// the counter is written and every node is woken at commit, the wake-up naming them so that
    /// each node wakes their polls alone.
    var recipients: Set<OutboxRecipient> = []

    /// Sends the writes kept, in one statement (not waited for: the COMMIT after them reports
    /// their failure). Three statements a batch before, each a message both ends handled.
    func flush(_ session: PostgresSession, containerID: Int64, containerIdentifier: String) throws(ContainerError) {
        let ids = Array(sequences.keys), values = ids.map { sequences[$0] ?? 0 }
        // (The container's write lock orders the writers of these rows: the order they are updated in does not matter.)
        let databases = "UPDATE databases SET sequence = u.s FROM unnest($1::bigint[], $2::bigint[]) AS u (id, s) WHERE databases.id = u.id"
        if !recipients.isEmpty, let outboxSequence {
            let wake = QueuedPushes.recipients(containerIdentifier: containerIdentifier, recipients).notifyPayload
            try session.send("""
                WITH d AS (\(databases)), c AS (UPDATE containers SET outbox_sequence = $3::bigint WHERE id = $4::bigint)
                SELECT pg_notify($5::text, $6::text)
                """, [.int64Array(ids), .int64Array(values), .int64(outboxSequence), .int64(containerID), .text(PostgresContainers.pushChannel), .text(wake)])
        } else if !ids.isEmpty {
            try session.send(databases, [.int64Array(ids), .int64Array(values)])
        }
    }
}
