import KQueryContainer
import PostgresNIO

/// The tables a PostgreSQL database holds for KQuery, created and migrated by the server itself.
///
/// Versioned: `kquery_schema` holds the version the tables are at, and `migrations[n]` takes
/// them from version n to n + 1, in one transaction, under an advisory lock so nodes starting
/// together migrate once. A database at a newer version than this build knows is refused.
///
/// Every table leads with its distribution key (SPEC §16, Citus): the database key
/// (`database_id`, a `databases.id`) for what belongs to one database, the container key
/// (`container_id`) for what a container shares across its databases (outbox, asset bytes,
/// secrets). Every statement filters on that key.
/// ```
/// server_secrets(name PK, value)                  the web auth secret the nodes share
/// courier_claims(container_id, id PK, holder, until)   pushes a node's web courier is handing out (v2)
/// device_tokens(container_id, environment, user_record_name, apns_environment, apns_token PK)   APNs devices (v3)
/// spent_web_auth_tokens(token_key PK, expires)   single-use web auth tokens spent on any node (server-wide, like server_secrets)
/// directory_users(name PK, entry)                the user directory, one JSON object a user (v8, server-wide)
/// learned_schemas(container_id PK, version, schema)   a container's learned schema, in the Schema Language (v8)
/// containers(id PK, identifier UNIQUE, secret_high, secret_low, outbox_sequence)
/// databases(id PK, container_id, environment, scope, user_record_name, sequence, horizon, subscriptions_version)   (v10)
/// zones(database_id, zone_name, owner_name PK, created_sequence, changed_sequence)
/// zone_tombstones(database_id, zone_name, owner_name PK, deleted_sequence)
/// records(database_id, zone_name, owner_name, record_name PK, record_type, change_sequence, body, id)   id: record_ids (v6); by type and record ID (v9)
/// record_tombstones(database_id, zone_name, owner_name, record_name PK, record_type, deleted_sequence)
/// record_references(database_id, zone_name, owner_name, target_name, action, source_name PK)
/// subscriptions(database_id, subscription_id PK, position, owner, body)
/// outbox(container_id, id PK, environment, scope, user_record_name, subscription_id, owner,
///        notification_id, payload, priority, push_type, created, collapse_id, delivered, excluded_device)
/// asset_uploads(container_id, token PK, ...), asset_receipts(container_id, receipt PK, ...),
/// asset_blobs(container_id, content_hash PK, ...), asset_chunks(container_id, owner, chunk PK, bytes),
/// asset_blob_chunks(container_id, content_hash PK, owner), asset_references(container_id, database_id, zone_name, owner_name, record_name, content_hash PK)
/// record_values(database_id, record_id, field PK, sort_key, sort_tail, members, location)   what queries filter and sort on (v6; location: v7; sort_tail: v11)
/// ```
/// A record's `body` is `RecordCoding`'s binary form, as in a container file.
enum PostgresSchema {
    /// The version this build writes.
    static var version: Int { migrations.count }

    /// The advisory lock that serialises migrations (an arbitrary constant: "KQry").
    static let migrationLock: Int64 = 0x4B51_7279

    static let migrations: [[String]] = [
        [
            """
            CREATE TABLE containers (
                id bigserial PRIMARY KEY, identifier text NOT NULL UNIQUE, secret_high bigint NOT NULL, secret_low bigint NOT NULL,
                outbox_sequence bigint NOT NULL DEFAULT 0)
            """,
            """
            CREATE TABLE databases (
                id bigserial PRIMARY KEY, container_id bigint NOT NULL REFERENCES containers (id), environment bigint NOT NULL,
                scope bigint NOT NULL, user_record_name text NOT NULL, sequence bigint NOT NULL DEFAULT 0, horizon bigint NOT NULL DEFAULT 0,
                UNIQUE (container_id, environment, scope, user_record_name))
            """,
            """
            CREATE TABLE zones (
                database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL,
                created_sequence bigint NOT NULL, changed_sequence bigint NOT NULL,
                PRIMARY KEY (database_id, zone_name, owner_name))
            """,
            "CREATE INDEX zones_by_change ON zones (database_id, changed_sequence)",
            """
            CREATE TABLE zone_tombstones (
                database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL, deleted_sequence bigint NOT NULL,
                PRIMARY KEY (database_id, zone_name, owner_name))
            """,
            "CREATE INDEX zone_tombstones_by_change ON zone_tombstones (database_id, deleted_sequence)",
            """
            CREATE TABLE records (
                database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL, record_name text NOT NULL,
                record_type text NOT NULL, change_sequence bigint NOT NULL, body bytea NOT NULL,
                PRIMARY KEY (database_id, zone_name, owner_name, record_name))
            """,
            recordsByChange.create,
            recordsByDatabaseChange.create,
            recordsShares.create,
            """
            CREATE TABLE record_tombstones (
                database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL, record_name text NOT NULL,
                record_type text NOT NULL, deleted_sequence bigint NOT NULL,
                PRIMARY KEY (database_id, zone_name, owner_name, record_name))
            """,
            recordTombstonesByChange.create,
            """
            CREATE TABLE record_references (
                database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL,
                target_name text NOT NULL, action text NOT NULL, source_name text NOT NULL,
                PRIMARY KEY (database_id, zone_name, owner_name, target_name, action, source_name))
            """,
            recordReferencesBySource.create,
            """
            CREATE TABLE subscriptions (
                database_id bigint NOT NULL, subscription_id text NOT NULL, position bigserial, owner text NOT NULL, body text NOT NULL,
                PRIMARY KEY (database_id, subscription_id))
            """,
            """
            CREATE TABLE outbox (
                container_id bigint NOT NULL, id bigint NOT NULL, environment bigint NOT NULL, scope bigint NOT NULL,
                user_record_name text NOT NULL, subscription_id text NOT NULL, owner text NOT NULL, notification_id text NOT NULL,
                payload text NOT NULL, priority bigint NOT NULL, push_type text NOT NULL, created bigint NOT NULL,
                collapse_id text, delivered bigint NOT NULL DEFAULT 0, excluded_device text,
                PRIMARY KEY (container_id, id))
            """,
            "CREATE INDEX outbox_by_owner ON outbox (container_id, owner, id)",
            """
            CREATE TABLE asset_uploads (
                container_id bigint NOT NULL, token text NOT NULL, environment bigint NOT NULL, scope bigint NOT NULL,
                user_record_name text NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL, record_name text NOT NULL,
                field_name text NOT NULL, record_type text, expires bigint NOT NULL, state bigint NOT NULL,
                PRIMARY KEY (container_id, token))
            """,
            """
            CREATE TABLE asset_receipts (
                container_id bigint NOT NULL, receipt text NOT NULL, environment bigint NOT NULL, scope bigint NOT NULL,
                user_record_name text NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL, record_name text NOT NULL,
                field_name text NOT NULL, content_hash text NOT NULL, file_checksum text NOT NULL, size bigint NOT NULL,
                expires bigint NOT NULL, spent boolean NOT NULL,
                PRIMARY KEY (container_id, receipt))
            """,
            "CREATE INDEX asset_receipts_by_blob ON asset_receipts (container_id, content_hash)",
            """
            CREATE TABLE asset_blobs (
                container_id bigint NOT NULL, content_hash text NOT NULL, size bigint NOT NULL, file_checksum text NOT NULL,
                content_type text NOT NULL, released bigint NOT NULL,
                PRIMARY KEY (container_id, content_hash))
            """,
            """
            CREATE TABLE asset_chunks (
                container_id bigint NOT NULL, owner text NOT NULL, chunk bigint NOT NULL, bytes bytea NOT NULL,
                PRIMARY KEY (container_id, owner, chunk))
            """,
            """
            CREATE TABLE asset_blob_chunks (
                container_id bigint NOT NULL, content_hash text NOT NULL, owner text NOT NULL,
                PRIMARY KEY (container_id, content_hash), UNIQUE (container_id, owner))
            """,
            """
            CREATE TABLE asset_references (
                container_id bigint NOT NULL, database_id bigint NOT NULL, zone_name text NOT NULL, owner_name text NOT NULL,
                record_name text NOT NULL, content_hash text NOT NULL,
                PRIMARY KEY (container_id, database_id, zone_name, owner_name, record_name, content_hash))
            """,
            "CREATE INDEX asset_references_by_blob ON asset_references (container_id, content_hash)",
            "CREATE TABLE server_secrets (name text PRIMARY KEY, value bytea NOT NULL)",
        ],
        [
            // Version 2: web courier claims, so two nodes' polls never hand out one push.
            """
            CREATE TABLE courier_claims (
                container_id bigint NOT NULL, id bigint NOT NULL, holder text NOT NULL, until timestamptz NOT NULL,
                PRIMARY KEY (container_id, id))
            """
        ],
        [
            // Version 3: APNs device tokens, so the node holding the APNs duty knows every node's registrations.
            """
            CREATE TABLE device_tokens (
                container_id bigint NOT NULL, environment text NOT NULL, user_record_name text NOT NULL,
                apns_environment text NOT NULL, apns_token text NOT NULL,
                PRIMARY KEY (container_id, environment, user_record_name, apns_environment, apns_token))
            """
        ],
        [
            // Version 4: single-use web auth tokens spent on any node (a hash of each, until it would expire).
            "CREATE TABLE spent_web_auth_tokens (token_key text PRIMARY KEY, expires bigint NOT NULL)",
            "CREATE INDEX spent_web_auth_tokens_by_expiry ON spent_web_auth_tokens (expires)",
        ],
        [
            // Version 5 created the first `record_values`, its rows named by text (record ID,
            // record type, field); version 6 replaces it, so a database below 5 skips it.
            "SELECT 1",
        ],
        [
            // Version 6: records numbered (`records.id`, from `record_ids`, never reused), and the
            // values queries filter and sort on (`PostgresRecordValues`), one row per record
            // field, naming the record by number and the field by `fieldKey`; the rows of the
            // records already stored are written by `backfill`.
            "DROP TABLE IF EXISTS record_values",
            "CREATE SEQUENCE IF NOT EXISTS record_ids",
            "ALTER TABLE records ADD COLUMN IF NOT EXISTS id bigint NOT NULL DEFAULT nextval('record_ids')",
            recordsByID.create,
            """
            CREATE TABLE record_values (
                database_id bigint NOT NULL, record_id bigint NOT NULL, field bigint NOT NULL, sort_key text COLLATE "C",
                sort_tail text COLLATE "C", members text[], PRIMARY KEY (database_id, record_id, field))
            """,
            recordValuesByKey.create,
            recordValuesMembers.create,
        ],
        [
            // Version 7: each location's point as PostGIS geography, for distance predicates and
            // sorts through a GiST index (`btree_gist` lets it lead with the database and field);
            // the points of the rows already stored are written by `backfillLocations`. The key
            // index loses the record's number.
            "CREATE EXTENSION IF NOT EXISTS postgis",
            "CREATE EXTENSION IF NOT EXISTS btree_gist",
            "ALTER TABLE record_values ADD COLUMN IF NOT EXISTS location geography(Point, 4326)",
            recordValuesLocations.create,
            // The key index without the record's number (version 6 had it).
            recordValuesByKey.drop,
            recordValuesByKey.create,
        ],
        [
            // Version 8: what each node kept in files of its own, for every node: the user
            // directory (`kquery users --postgres`) and each container's learned schema, its
            // version counting the changes (a node writes only over the version it read).
            "CREATE TABLE directory_users (name text PRIMARY KEY, entry text NOT NULL)",
            """
            CREATE TABLE learned_schemas (
                container_id bigint PRIMARY KEY REFERENCES containers (id), version bigint NOT NULL, schema text NOT NULL)
            """,
        ],
        [
            // Version 9: the records of a type in record ID order, for queries without a sort.
            recordsByType.create,
        ],
        [
            // Version 10: a count of each database's subscription changes, so a node keeps the
            // set it read while nobody changes it instead of reading it again at every write.
            "ALTER TABLE databases ADD COLUMN IF NOT EXISTS subscriptions_version bigint NOT NULL DEFAULT 0",
        ],
        [
            // Version 11: keys longer than an index entry holds (a long string, bytes, a long
            // token: `PostgresValueKey.indexedBytes`) are stored as their head, indexed, and the
            // rest (`sort_tail`); rows stored before are split by `splitLongKeys`. (Version 6
            // creates the column too, for the rows its backfill writes.)
            #"ALTER TABLE record_values ADD COLUMN IF NOT EXISTS sort_tail text COLLATE "C""#,
        ],
    ]

    /// An index of the record tables, which a load may build after its rows.
    struct SecondaryIndex {
        let name: String
        let create: String
        let drop: String

        init(name: String, definition: String) {
            self.name = name
            create = "CREATE INDEX IF NOT EXISTS \(name) \(definition)"
            drop = "DROP INDEX IF EXISTS \(name)"
        }

        init(name: String, create: String, drop: String) {
            self.name = name
            self.create = create
            self.drop = drop
        }
    }

    static let recordsByChange = SecondaryIndex(name: "records_by_change", definition: "ON records (database_id, zone_name, owner_name, change_sequence)")
    static let recordsByDatabaseChange = SecondaryIndex(name: "records_by_database_change", definition: "ON records (database_id, change_sequence)")
    // Shares are found without reading a database's other records (who sees what in shared databases).
    static let recordsShares = SecondaryIndex(
        name: "records_shares", definition: "ON records (database_id, change_sequence) WHERE record_type = 'cloudkit.share'")
    static let recordTombstonesByChange = SecondaryIndex(
        name: "record_tombstones_by_change", definition: "ON record_tombstones (database_id, zone_name, owner_name, deleted_sequence)")
    static let recordReferencesBySource = SecondaryIndex(
        name: "record_references_by_source", definition: "ON record_references (database_id, zone_name, owner_name, source_name)")
    // A record type's records in record ID order (byte order, as the evaluator compares), the
    // order of a query without a sort: its pages are read off the index, stopping when the page
    // is full, rather than every match read and sorted first (a 50 km `NEAR` matching most of
    // 1,000,000 records took seconds). Version 9.
    static let recordsByType = SecondaryIndex(
        name: "records_by_type",
        definition: #"ON records (database_id, record_type, record_name COLLATE "C", zone_name COLLATE "C", owner_name COLLATE "C")"#)
    // A record by its number (`record_values` names records so).
    static let recordsByID = SecondaryIndex(
        name: "records_by_id", create: "CREATE UNIQUE INDEX IF NOT EXISTS records_by_id ON records (database_id, id)",
        drop: "DROP INDEX IF EXISTS records_by_id")
    // Equality, ranges, prefixes and sorts on one field of one record type (ties are put in
    // record ID order by an incremental sort of the few that share a key). Rows without a key
    // (lists, NaN, the token rows: a tenth of them) are not in it. Without the record's number
    // (read from the row) the rows sharing a key are one entry (deduplicated): 373 MB instead of
    // 922 at 1,000,000 records, built in 12 s instead of 15, queries as fast.
    static let recordValuesByKey = SecondaryIndex(
        name: "record_values_by_key", definition: "ON record_values (database_id, field, sort_key) WHERE sort_key IS NOT NULL")
    // List membership (CONTAINS, IN a list field) and full-text tokens: only lists and token rows
    // have members (a strict operator such as `@>` implies the index's condition).
    static let recordValuesMembers = SecondaryIndex(
        name: "record_values_members", definition: "ON record_values USING gin (members) WHERE members IS NOT NULL")

    // Distance predicates (`ST_DWithin`) and distance sorts (nearest first: `<->`) on one field
    // of one record type; only locations have a point.
    static let recordValuesLocations = SecondaryIndex(
        name: "record_values_locations", definition: "ON record_values USING gist (database_id, field, location) WHERE location IS NOT NULL")

    // The query values' primary key (`record_values` is written only with its record, whose own
    // primary key a load keeps: a row twice is found there).
    static let recordValuesKey = SecondaryIndex(
        name: "record_values_pkey",
        create: "ALTER TABLE record_values ADD CONSTRAINT record_values_pkey PRIMARY KEY (database_id, record_id, field)",
        drop: "ALTER TABLE record_values DROP CONSTRAINT IF EXISTS record_values_pkey")

    /// The indexes a load into a database without records (`kquery migrate`, `PostgresContainerStorage.loadStarted`)
    /// drops and builds at its end: one sorted build costs a fraction of maintaining them row by
    /// row (the 1,000,000-record copy spent most of its time there). The primary keys of the
    /// other record tables stay: they find a record copied twice. A load that crashed before its end leaves them missing; they are built
    /// again by the next load's end, and by every node opening the database (`migrate`), so no
    /// node serves without them.
    static let deferredIndexes = [
        recordsByChange, recordsByDatabaseChange, recordsShares, recordsByType, recordTombstonesByChange, recordReferencesBySource, recordsByID, recordValuesKey,
        recordValuesByKey, recordValuesMembers, recordValuesLocations,
    ]

    /// The deferred indexes the database lacks.
    static func missingIndexes(_ session: PostgresSession) throws(ContainerError) -> [SecondaryIndex] {
        let present = Set(try session.rows("""
            SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ANY(\(deferredIndexes.map(\.name))::text[])
            """).map { row throws(ContainerError) in try session.decode(row, String.self) })
        return deferredIndexes.filter { !present.contains($0.name) }
    }

    /// Builds the deferred indexes the database lacks, each in a transaction of its own (a crash
    /// keeps those built), with memory enough to sort a large table's keys in few passes.
    static func buildMissingIndexes(_ session: PostgresSession) throws(ContainerError) {
        try build(missingIndexes(session), session)
    }

    /// Builds `indexes`, each in a transaction of its own.
    static func build(_ indexes: [SecondaryIndex], _ session: PostgresSession) throws(ContainerError) {
        for index in indexes {
            try session.run("BEGIN")
            do throws(ContainerError) {
                try session.run("SET LOCAL maintenance_work_mem = '1GB'")
                try session.run(PostgresQuery(unsafeSQL: index.create))
                try session.run("COMMIT")
            } catch {
                _ = try? session.run("ROLLBACK")
                throw error
            }
        }
    }

    /// Work a migration step does beyond its statements, in its transaction, after them: the step
    /// that creates `record_values` writes the rows of the records already stored, the one that
    /// adds their points writes those, the one that adds `sort_tail` splits the long keys.
    static func afterStep(_ step: Int, _ session: PostgresSession) throws(ContainerError) {
        if migrations[step].contains(where: { $0.contains("CREATE TABLE record_values") }) { try PostgresRecordValues.backfill(session) }
        if migrations[step].contains(where: { $0.contains("ADD COLUMN IF NOT EXISTS location") }) { try PostgresRecordValues.backfillLocations(session) }
        if migrations[step].contains(where: { $0.contains("ADD COLUMN IF NOT EXISTS sort_tail") }) { try PostgresRecordValues.splitLongKeys(session) }
    }

    /// A migration statement's failure, said so that whoever runs the server can act: an
    /// extension (PostGIS) that is not installed, or that this database user may not create.
    static func statementFailure(_ statement: String, _ error: ContainerError, _ session: PostgresSession) -> ContainerError {
        guard statement.hasPrefix("CREATE EXTENSION") else { return error }
        let name = statement.split(separator: " ").last.map(String.init) ?? "postgis"
        return ContainerError(error.code, """
            \(session.name): the PostgreSQL extension \(name) could not be created (\(error.reason)). KQuery keeps locations \
            as PostGIS geography: install PostGIS for PostgreSQL 15 (Debian: postgresql-15-postgis-3, which scripts/bootstrap \
            installs), then as a superuser run `CREATE EXTENSION IF NOT EXISTS postgis; CREATE EXTENSION IF NOT EXISTS btree_gist;` \
            in this database (or serve it once as a superuser)
            """)
    }

    /// Brings the database's tables to `version`, creating them in an empty database, and builds
    /// the deferred indexes a crashed load left missing unless `loading` (the load builds them at its end).
    static func migrate(_ session: PostgresSession, loading: Bool = false) throws(ContainerError) {
        try session.run("SELECT pg_advisory_lock(\(migrationLock))")
        do throws(ContainerError) {
            try session.run("CREATE TABLE IF NOT EXISTS kquery_schema (version bigint NOT NULL)")
            let rows = try session.rows("SELECT version FROM kquery_schema")
            var current = 0
            if let row = rows.first {
                current = Int(try session.decode(row, Int64.self))
            } else {
                try session.run("INSERT INTO kquery_schema (version) VALUES (0)")
            }
            guard current <= version else {
                throw ContainerError(.internalError, "\(session.name): its KQuery schema is version \(current); this kquery knows up to \(version)")
            }
            for step in current..<version {
                try session.run("BEGIN")
                do throws(ContainerError) {
                    for statement in migrations[step] {
                        do throws(ContainerError) {
                            try session.run(PostgresQuery(unsafeSQL: statement))
                        } catch {
                            throw statementFailure(statement, error, session)
                        }
                    }
                    try afterStep(step, session)
                    try session.run("UPDATE kquery_schema SET version = \(Int64(step + 1))")
                    try session.run("COMMIT")
                } catch {
                    _ = try? session.run("ROLLBACK")
                    throw error
                }
            }
            if !loading { try buildMissingIndexes(session) }
        } catch {
            _ = try? session.run("SELECT pg_advisory_unlock(\(migrationLock))")
            throw error
        }
        try session.run("SELECT pg_advisory_unlock(\(migrationLock))")
    }
}
