import Dispatch
import KQuery
import KQueryContainer
import KQueryStore
import PostgresNIO

/// A container's data in a PostgreSQL database (SPEC §16), which any number of `kquery serve`
/// nodes share; one database may hold many containers.
///
/// Unlike a container file, nothing is mirrored in memory: every read is SQL, so a node sees
/// what every other node committed. Reads run in a `REPEATABLE READ READ ONLY` transaction (one
/// consistent snapshot). Writes run in a `READ COMMITTED` transaction that first takes the
/// container's transaction-scoped advisory lock, so write bodies run one at a time across all
/// nodes, as the protocol requires, and each sees every write committed before it. PostgreSQL's
/// commit is durable when it returns (`synchronous_commit` on), so `waitUntilDurable` has nothing
/// to wait for. The tables are described in `PostgresSchema`.
package final class PostgresContainerStorage: ContainerStorage {
    package let secret: (UInt64, UInt64)
    /// The container's number in `containers`, which container-wide rows lead with.
    let containerID: Int64
    /// The container's identifier, which a commit's wake-up names (`QueuedPushes`).
    let containerIdentifier: String
    /// Closed when the last storage or `PostgresContainers` using it goes.
    let pool: PostgresConnectionPool
    /// The databases' numbers, which never change once given (no database row is deleted), so
    /// a query needs no statement to find its database. At most `databaseIDLimit`.
    private let databaseIDs = Locked<[DatabaseKey: Int64]>([:])
    private static let databaseIDLimit = 65_536
    /// The most statements `queryWithoutBlocking` sends for one query.
    private static let statementsWithoutBlocking = 3
    /// How many points a radius holds before a query reads records in its own order and
    /// measures each one's point (`PostgresTransaction.densePoints`).
    let densePoints: Int
    /// Its default: 2,000.
    package static let densePoints = PostgresTransaction.densePoints
    /// The most field tests and sort fields a query's SQL holds (`PostgresQueryCompiler`).
    package static let maximumFieldTests = PostgresQueryCompiler.maximumFieldTests
    package static let maximumSortFields = PostgresQueryCompiler.maximumSortFields

    /// Opens `containerIdentifier` in the database at `location`, creating or migrating the
    /// schema and the container's row as needed. `connections`: the most open at once. `loading`:
    /// opened for a copy into it (`kquery migrate`), which builds the indexes a crashed copy left
    /// unbuilt at its end (`loadFinished`) rather than now, over the rows it is about to add to.
    /// `densePoints`: see `PostgresTransaction.densePoints` (tests make it small).
    package convenience init(
        location: PostgresLocation, containerIdentifier: String, connections: Int = 8, loading: Bool = false,
        densePoints: Int = PostgresContainerStorage.densePoints
    ) throws(ContainerError) {
        let pool = PostgresConnectionPool(location: location, limit: connections)
        do {
            try self.init(pool: pool, containerIdentifier: containerIdentifier, migrated: false, loading: loading, densePoints: densePoints)
        } catch {
            pool.shutdown()
            throw error
        }
    }

    /// Opens the container on `pool`'s connections; `migrated`: whether the schema is known current.
    init(
        pool: PostgresConnectionPool, containerIdentifier: String, migrated: Bool, loading: Bool = false,
        densePoints: Int = PostgresContainerStorage.densePoints
    ) throws(ContainerError) {
        self.pool = pool
        self.containerIdentifier = containerIdentifier
        self.densePoints = max(1, densePoints)
        let location = pool.location
        (containerID, secret) = try pool.withConnection { session throws(ContainerError) in
                if !migrated { try PostgresSchema.migrate(session, loading: loading) }
                var generator = SystemRandomNumberGenerator()
                let high = Int64(bitPattern: generator.next()), low = Int64(bitPattern: generator.next())
                try session.run("""
                    INSERT INTO containers (identifier, secret_high, secret_low) VALUES (\(containerIdentifier), \(high), \(low))
                    ON CONFLICT (identifier) DO NOTHING
                    """)
                guard let row = try session.rows("SELECT id, secret_high, secret_low FROM containers WHERE identifier = \(containerIdentifier)").first
                else { throw ContainerError(.internalError, "\(location): the container '\(containerIdentifier)' could not be created") }
                let (id, storedHigh, storedLow) = try session.decode(row, (Int64, Int64, Int64).self)
                return (id, (UInt64(bitPattern: storedHigh), UInt64(bitPattern: storedLow)))
        }
    }

    package func read<T>(_ body: (any StorageTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try pool.withConnection { session throws(ContainerError) -> T in
            try Self.transaction(session, begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") { () throws(ContainerError) -> T in
                try body(PostgresTransaction(session: session, containerID: containerID, densePoints: densePoints))
            }
        }
    }

    package func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try pool.withConnection { plain throws(ContainerError) -> T in
            var session = plain
            session.held = HeldWrites(containerID: containerID)
            return try Self.transaction(session, begin: "BEGIN") { () throws(ContainerError) -> T in
                try lock(session)
                let memo = DatabaseMemo()
                let result = try body(PostgresTransaction(session: session, containerID: containerID, memo: memo, densePoints: densePoints))
                // (A body that caught the failure of sending its held writes must not commit without them.)
                if let failure = session.held?.failure { throw failure }
                try memo.deferred.flush(session, containerID: containerID, containerIdentifier: containerIdentifier)
                return result
            }
        }
    }

    /// A query in one statement and no transaction when one answers it (a page from the first
    /// rows read: most queries), otherwise in a read-only snapshot. A query was four round trips
    /// (BEGIN, the database's row, the query, COMMIT), the node's and PostgreSQL's work for each.
    package func query(_ query: Query, cursor: QueryCursor?, in key: DatabaseKey, now: Int64) throws(ContainerError) -> QueryResult {
        try pool.withConnection { session throws(ContainerError) -> QueryResult in
            let tx = PostgresTransaction(session: session, containerID: containerID, densePoints: densePoints)
            let databaseID: Int64
            if let known = databaseIDs.withLock({ $0[key] }) {
                databaseID = known
            } else {
                guard let found = try tx.database(key)?.id else { return QueryResult(records: [], cursor: nil) }
                databaseID = found
                databaseIDs.withLock { ids in
                    if ids.count >= Self.databaseIDLimit { ids = [:] }
                    ids[key] = found
                }
            }
            if let page = try tx.query(query, cursor: cursor, databaseID: databaseID, now: now, oneStatement: true) { return page }
            return try Self.transaction(session, begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") { () throws(ContainerError) -> QueryResult in
                try tx.query(query, cursor: cursor, databaseID: databaseID, now: now, oneStatement: false) ?? QueryResult(records: [], cursor: nil)
            }
        }
    }

    /// `query` for a page a few statements answer, without holding a thread while PostgreSQL
    /// runs them (a task waits for the connection and the rows); nil, left to `query`, for a
    /// database not yet known, a query needing more statements, or a connection that broke.
    /// On a blocking thread a query took two thread switches more, each way: under 64
    /// connections its p99 was 20 ms against 13, and its CPU in the node 7-10% more.
    package func queryWithoutBlocking(_ query: Query, cursor: QueryCursor?, in key: DatabaseKey, now: Int64) async throws(ContainerError) -> QueryResult? {
        guard let databaseID = databaseIDs.withLock({ $0[key] }) else { return nil }
        let answer = try await pool.withConnectionWithoutBlocking { session async throws(ContainerError) -> QueryResult? in
            let script = StatementScript()
            var scripted = session
            scripted.script = script
            let tx = PostgresTransaction(session: scripted, containerID: containerID, densePoints: densePoints)
            // Each run stops at the first statement without rows, whose rows are then fetched; a
            // query wanting more statements than a radius's look at its points and the page's
            // (`radiusPlan`) is left to `query`.
            for _ in 0...Self.statementsWithoutBlocking {
                do throws(ContainerError) {
                    return try tx.query(query, cursor: cursor, databaseID: databaseID, now: now, oneStatement: true)
                } catch {
                    guard let wanted = script.wanted else { throw error }
                    script.give(try await session.preparedWithoutBlocking(wanted.sql, wanted.parameters))
                }
            }
            return nil
        }
        return answer ?? nil
    }

    /// Other nodes write the same container.
    package var isShared: Bool { true }

    /// Queries run as SQL (`PostgresTransaction.query`): a node keeps no database in memory.
    package var runsQueries: Bool { true }

    /// Commits are durable when they return.
    package func waitUntilDurable() throws(ContainerError) {}

    /// Nothing to start: PostgreSQL syncs its log at each commit.
    package func startWriteback() {}

    package func adoptSecret(_ secret: (UInt64, UInt64)) throws(ContainerError) {
        try pool.withConnection { session throws(ContainerError) in
            _ = try session.run("""
                UPDATE containers SET secret_high = \(Int64(bitPattern: secret.0)), secret_low = \(Int64(bitPattern: secret.1)) WHERE id = \(containerID)
                """)
        }
    }

    /// Drops the deferred indexes (`PostgresSchema.deferredIndexes`) when the database holds no
    /// records, or lacks one of them already (a copy that crashed): the copy then writes its rows
    /// without them and `loadFinished` builds them. A node opening the database meanwhile builds
    /// them first (it never serves without them); the copy then goes on maintaining them.
    package func loadStarted() throws(ContainerError) {
        try pool.withConnection { session throws(ContainerError) in
            let empty = try session.rows("SELECT 1 FROM records LIMIT 1").isEmpty
            let missing = try PostgresSchema.missingIndexes(session)
            guard empty || !missing.isEmpty else { return }
            for index in PostgresSchema.deferredIndexes { try session.run(PostgresQuery(unsafeSQL: index.drop)) }
        }
    }

    /// Numbers the page's records and writes its COPY rows (`PostgresCopyPage`), outside the
    /// page's transaction: numbers a crash leaves unused are skipped, never reused.
    package func prepareRecordChanges(_ page: [(sequence: Int64, change: RecordZoneChange)], in database: StoredDatabase) throws(ContainerError) -> (any Sendable)? {
        let count = PostgresCopyPage.recordCount(page)
        guard count > 0 else { return nil }
        let (numbers, name) = try pool.withConnection { session throws(ContainerError) in
            (try PostgresTransaction(session: session, containerID: containerID).recordNumbers(count), session.name)
        }
        return try PostgresCopyPage(page, numbers: numbers, databaseID: database.id, storage: name)
    }

    /// Builds the deferred indexes the copy put off (or a crashed one left unbuilt).
    /// The GIN and GiST indexes are built on a connection of their own beside the others:
    /// PostgreSQL builds them in one process, a btree in several, so the two connections together
    /// keep more cores busy.
    package func loadFinished() throws(ContainerError) {
        let missing = try pool.withConnection { session throws(ContainerError) in try PostgresSchema.missingIndexes(session) }
        let single = [PostgresSchema.recordValuesMembers.name, PostgresSchema.recordValuesLocations.name]
        let apart = missing.filter { single.contains($0.name) }
        let rest = missing.filter { !single.contains($0.name) }
        let failure = Locked<ContainerError?>(nil)
        let group = DispatchGroup()
        if !apart.isEmpty {
            let pool = pool
            DispatchQueue.global().async(group: group) {
                do throws(ContainerError) {
                    try pool.withConnection { session throws(ContainerError) in try PostgresSchema.build(apart, session) }
                } catch {
                    failure.withLock { $0 = error }
                }
            }
        }
        defer { group.wait() }
        try pool.withConnection { session throws(ContainerError) in try PostgresSchema.build(rest, session) }
        group.wait()
        if let error = failure.withLock({ $0 }) { throw error }
    }

    /// ANALYZE: after `kquery migrate` PostgreSQL had no statistics for the tables it loaded, and
    /// planned a record's point lookup on the change-order index (filtering every record of the
    /// zone: 9 ms at 20,000 records) until autovacuum analyzed them.
    package func refreshStatistics() throws(ContainerError) {
        _ = try pool.withConnection { session throws(ContainerError) in try session.run("ANALYZE") }
    }

    /// One transaction for the whole batch, a write that sends a statement in a savepoint of its
    /// own (one whose writes are all held sends none: `HeldWrites`).
    package func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try pool.withConnection { plain throws(ContainerError) -> T in
            var session = plain
            session.held = HeldWrites(containerID: containerID)
            return try Self.transaction(session, begin: "BEGIN") { () throws(ContainerError) -> T in
                try lock(session)
                let batch = PostgresBatch(session: session, containerID: containerID)
                let result = try body(batch)
                if let failure = batch.failure ?? session.held?.failure { throw failure }
                try batch.deferred.flush(session, containerID: containerID, containerIdentifier: containerIdentifier)
                return result
            }
        }
    }

    /// Takes the container's write lock until the transaction ends ("KQry", then the container).
    private func lock(_ session: PostgresSession) throws(ContainerError) {
        // Sent, not waited for: the statements after it wait in PostgreSQL until it holds the lock.
        try session.send("SELECT pg_advisory_xact_lock(\(Int32(PostgresSchema.migrationLock)), \(Int32(truncatingIfNeeded: containerID)))")
    }

    /// Runs `body` between `begin` and COMMIT, rolling back when it throws.
    private static func transaction<T>(_ session: PostgresSession, begin: PostgresQuery, _ body: () throws(ContainerError) -> T) throws(ContainerError) -> T {
        try session.send(begin)
        do throws(ContainerError) {
            let result = try body()
            try session.run("COMMIT")
            return result
        } catch {
            session.held?.discard()
            _ = try? session.run("ROLLBACK")
            throw error
        }
    }
}

/// The writes of a batch (`PostgresContainerStorage.batch`), each undone alone when it fails: by
/// dropping what it held, or by rolling back to the savepoint its first statement opened.
private final class PostgresBatch: StorageBatchWriter {
    let session: PostgresSession
    let containerID: Int64
    /// Why the transaction cannot commit, if a savepoint could not be undone.
    var failure: ContainerError?
    /// The databases' rows as the released writes left them (`PostgresTransaction.memo`).
    private var databases: [DatabaseKey: StoredDatabase] = [:]
    /// The counters the released writes moved, written before the batch commits.
    private(set) var deferred = DeferredWrites()
    /// The records read ahead of the writes (`prefetchRecords`).
    private let prefetched = RecordPrefetch()
    /// The most records one batch reads ahead.
    static let prefetchLimit = 1_000

    init(session: PostgresSession, containerID: Int64) {
        self.session = session
        self.containerID = containerID
    }

    func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T {
        if let failure { throw failure }
        guard let held = session.held else { throw ContainerError(.internalError, "\(session.name): a batch's write without held writes") }
        // Statements numbered below the write's savepoint (or, with none sent, every statement)
        // are earlier writes' (`takeSentFailure`).
        _ = session.takeSentFailure()
        // The write's statements go after a savepoint, sent with the first of them: a write whose
        // writes are all held (`HeldWrites`) sends none, and is undone by dropping them.
        held.beginWrite()
        do throws(ContainerError) {
            // The rows as the batch's earlier writes left them; this write's changes count once
            // it applied (a failed one's are dropped with it).
            let memo = DatabaseMemo(databases, deferred: deferred)
            let result = try body(PostgresTransaction(session: session, containerID: containerID, memo: memo, prefetched: prefetched))
            // Sent, not waited for: a modify's release was one of its two round trips on the
            // committer, which waited for them one modify after another. Should it or a statement
            // before it fail, the next statement waited for (or the COMMIT) finds out, and fails the batch.
            if held.savepoint == .open { try session.send("RELEASE kquery_write") }
            held.endWrite()
            databases = memo.databases
            deferred = memo.deferred
            return result
        } catch {
            let firstOwn = held.firstStatement
            let savepointOpen = held.abandonWrite()
            if let broken = held.failure {
                // What earlier writes held may not have been sent: the batch cannot commit.
                failure = broken
                throw error
            }
            if let failed = session.takeSentFailure(), failed < (firstOwn ?? Int.max) {
                // A statement of a write this batch counted as done failed: rolling back to the
                // last savepoint would undo that write, which its caller is told succeeded.
                failure = error
                throw error
            }
            guard savepointOpen else { throw error }
            do throws(ContainerError) {
                try session.run("ROLLBACK TO kquery_write")
                try session.run("RELEASE kquery_write")
            } catch let undoing {
                failure = undoing
            }
            throw error
        }
    }

    /// Reads the records in one statement, in the batch's transaction (which holds the write lock,
    /// so they stay as read until a write of the batch changes them). Each modify read its
    /// record's old version with a statement of its own, a round trip the committer waited for
    /// one modify after another: most of a modify's time on the committer, 350 µs of 600.
    func prefetchRecords(_ ids: [RecordID], in key: DatabaseKey) throws(ContainerError) {
        if let failure { throw failure }
        // (A name holding U+0000 cannot be stored, and a statement naming it would fail the
        // batch: its modify finds no such record, and is refused alone when it saves one.)
        let ids = ids.filter(PostgresTransaction.storable).prefix(Self.prefetchLimit)
        guard !ids.isEmpty else { return }
        let memo = DatabaseMemo(databases, deferred: deferred)
        let transaction = PostgresTransaction(session: session, containerID: containerID, memo: memo)
        guard let (database, rows) = try transaction.databaseAndRecords(key, ids) else { return }
        databases = memo.databases
        deferred = memo.deferred   // (the outbox counter read with the database's row)
        for id in ids { prefetched.store(.absent, for: id, in: database.id) }
        for row in rows {
            guard row.count == 4 else { throw ContainerError(.internalError, "\(session.name): a record read ahead has \(row.count) columns") }
            let cell = row.startIndex
            let id = RecordID(
                recordName: try session.decode(row[cell + 2], String.self),
                zoneID: ZoneID(zoneName: try session.decode(row[cell], String.self), ownerName: try session.decode(row[cell + 1], String.self)))
            prefetched.store(.body(try session.decode(row[cell + 3], ByteBuffer.self)), for: id, in: database.id)
        }
    }
}
