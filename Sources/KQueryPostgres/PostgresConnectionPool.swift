import KQueryContainer
import Logging
import NIOCore
import NIOPosix
import PostgresNIO

// Foundation, not FoundationEssentials: NSCondition.
import Foundation

/// A bounded set of connections to one PostgreSQL database, lent one at a time to a transaction.
///
/// Why synchronous: `ContainerStorage`'s bodies are synchronous (the container's rules run inside
/// a transaction without suspending, as on SQLite), so a transaction's statements are sent with
/// postgres-nio's `EventLoopFuture` API and waited for on the caller's thread. The connections
/// live on an event loop group of their own, which never runs the container's code, so a wait
/// never blocks the loop that must answer it (`wait()` on one of its own loops is refused, and no
/// caller is on one). Callers on Swift's cooperative pool block a thread while they wait, as they
/// do on a SQLite disk sync; the alternative, an async protocol, would make every container
/// operation async for one storage.
final class PostgresConnectionPool: @unchecked Sendable {
    let location: PostgresLocation
    /// The most connections open at once.
    let limit: Int
    private let group: MultiThreadedEventLoopGroup
    private let logger: Logger
    private let condition = NSCondition()
    /// Guarded by `condition`.
    private var idle: [PooledConnection] = []
    private var open = 0
    private var nextID = 0
    private var closed = false
    /// Tasks waiting for a connection without a thread (`withConnectionWithoutBlocking`), oldest first.
    private var taskWaiters = CircularBuffer<CheckedContinuation<Lending, Never>>()
    /// Threads waiting in `borrow`.
    private var threadWaiters = 0
    /// Whether the next connection given back goes to a task while threads wait too.
    private var taskNext = false
    /// Connections lent to tasks now, at most `taskLimit`. A task holds its connection while it
    /// waits for its rows and needs a thread of Swift's cooperative pool to give it back; a
    /// thread waiting in `borrow` may be one of those threads (a synchronous storage call made
    /// from async code). With every connection lent to tasks and every cooperative thread
    /// waiting for one, nothing moved again: the server's PostgreSQL suites hung so, under load.
    /// One connection kept from tasks is always held by a thread that gives it back by itself.
    private var lentToTasks = 0
    private var taskLimit: Int { limit - 1 }

    init(location: PostgresLocation, limit: Int) {
        self.location = location
        self.limit = max(limit, 1)
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var logger = Logger(label: "kquery.postgres")
        logger.logLevel = .critical
        self.logger = logger
    }

    deinit { shutdown() }

    /// The event loop the pool's connections run on (for a connection kept outside the pool).
    var eventLoop: any EventLoop { group.next() }

    /// Closes every connection and stops the event loop (the pool lends none after).
    ///
    /// A connection lent meanwhile is closed too, which fails the statement its borrower waits
    /// for, and the loop stops once it is given back (or after `shutdownGrace`): a statement
    /// on a stopped loop never completes, and its borrower waited for ever, holding its thread
    /// (a test's modifying task outlived its test so, and with the cooperative pool's other
    /// thread blocked too, the whole test process stopped).
    func shutdown() {
        condition.lock()
        guard !closed else { return condition.unlock() }
        closed = true
        let connections = idle
        idle = []
        open -= connections.count
        let lent = opened.filter { connection in !connections.contains { $0.connection === connection } }
        opened = []
        let tasks = taskWaiters
        taskWaiters.removeAll()
        condition.broadcast()
        condition.unlock()
        for task in tasks { task.resume(returning: .none) }
        for pooled in connections { try? pooled.connection.close().wait() }
        for connection in lent where !connection.isClosed { try? connection.close().wait() }
        let deadline = Date(timeIntervalSinceNow: Self.shutdownGrace)
        condition.lock()
        while open > 0 && condition.wait(until: deadline) {}
        condition.unlock()
        try? group.syncShutdownGracefully()
    }

    /// How long `shutdown` waits for connections lent to be given back.
    static let shutdownGrace: TimeInterval = 10

    /// Every connection opened and not known closed (pruned as more open), for `shutdown`.
    /// Guarded by `condition`.
    private var opened: [PostgresConnection] = []

    /// Notes a connection opened (`opened`).
    private func noteOpened(_ connection: PostgresConnection) {
        condition.lock()
        if opened.count >= 2 * limit { opened.removeAll { $0.isClosed } }
        opened.append(connection)
        condition.unlock()
    }

    /// Lends `body` a connection, waiting for one while `limit` are lent. A connection that broke
    /// is closed, not returned.
    func withConnection<T>(_ body: (PostgresSession) throws(ContainerError) -> T) throws(ContainerError) -> T {
        let pooled = try borrow()
        defer { giveBack(pooled) }
        return try body(PostgresSession(connection: pooled.connection, logger: logger, name: location.description, statements: pooled))
    }

    /// Lends `body` a connection as `withConnection` does, a task waiting for one (or for one to
    /// open) without holding a thread. Nil, no connection lent, when the pool is closed or the
    /// connection a task waited for broke: `withConnection` then opens one or throws.
    func withConnectionWithoutBlocking<T>(_ body: (PostgresSession) async throws(ContainerError) -> T) async throws(ContainerError) -> T? {
        guard let pooled = try await lend() else { return nil }
        let result: Result<T, ContainerError>
        do throws(ContainerError) {
            result = .success(try await body(PostgresSession(connection: pooled.connection, logger: logger, name: location.description, statements: pooled)))
        } catch {
            result = .failure(error)
        }
        // (A query's statements are waited for: none is pending, and giving back waits for none.)
        giveBack(pooled, byTask: true)
        return try result.get()
    }

    /// An idle connection, a new one while fewer than `limit` are open, or else the next one
    /// given back; nil when the pool is closed (or a connection given back was broken).
    private func lend() async throws(ContainerError) -> PooledConnection? {
        // (Decided under the lock, in the continuation's synchronous body: a task cannot hold it.)
        let lending = await withCheckedContinuation { (task: CheckedContinuation<Lending, Never>) in
            condition.lock()
            if closed || taskLimit < 1 {
                // (With one connection, tasks take none: the blocking way lends it to a thread.)
                condition.unlock()
                task.resume(returning: .none)
            } else if lentToTasks >= taskLimit {
                taskWaiters.append(task)
                condition.unlock()
            } else if let connection = takeIdle() {
                lentToTasks += 1
                condition.unlock()
                task.resume(returning: .lent(connection))
            } else if open < limit {
                lentToTasks += 1
                let id = opening()
                condition.unlock()
                task.resume(returning: .open(id))
            } else {
                taskWaiters.append(task)
                condition.unlock()
            }
        }
        switch lending {
        case .lent(let connection): return connection
        case .none: return nil
        case .open(let id):
            do {
                let connection = try await connect(id: id).get()
                noteOpened(connection)
                return PooledConnection(connection)
            } catch {
                throw openingFailed(error, byTask: true)
            }
        }
    }

    /// What a task waiting for a connection gets (`lend`).
    private enum Lending {
        case lent(PooledConnection)
        /// None: the pool is closed, or the connection given back was broken.
        case none
        /// None idle, and fewer than the limit open: the task opens connection `id`.
        case open(Int)
    }

    private func borrow() throws(ContainerError) -> PooledConnection {
        condition.lock()
        threadWaiters += 1
        while idle.isEmpty && open >= limit && !closed { condition.wait() }
        threadWaiters -= 1
        if closed {
            condition.unlock()
            throw ContainerError(.internalError, "\(location): the storage is closed")
        }
        if let connection = takeIdle() {
            condition.unlock()
            return connection
        }
        let id = opening()
        condition.unlock()
        do {
            let connection = try connect(id: id).wait()
            noteOpened(connection)
            return PooledConnection(connection)
        } catch {
            throw openingFailed(error, byTask: false)
        }
    }

    /// An idle connection still open, forgetting those PostgreSQL closed while they sat (a
    /// restart, `pg_terminate_backend`): lent, each would fail its borrower's statement.
    /// Called with `condition` locked.
    private func takeIdle() -> PooledConnection? {
        while let pooled = idle.popLast() {
            if !pooled.connection.isClosed { return pooled }
            open -= 1
        }
        return nil
    }

    /// Counts a connection about to be opened and numbers it (called with `condition` locked).
    private func opening() -> Int {
        open += 1
        nextID += 1
        return nextID
    }

    /// Uncounts a connection that could not be opened (for a task: `byTask`); the error to throw.
    private func openingFailed(_ error: any Error, byTask: Bool) -> ContainerError {
        condition.lock()
        open -= 1
        if byTask { lentToTasks -= 1 }
        condition.signal()
        // A task waiting for a task's connection would wait for one given back: it goes the
        // blocking way, which opens one.
        let task = byTask ? taskWaiters.popFirst() : nil
        condition.unlock()
        task?.resume(returning: .none)
        return PostgresSession.storageError(error, name: location.description)
    }

    /// Opens connection `id`, set for the pool's statements.
    private func connect(id: Int) -> EventLoopFuture<PostgresConnection> {
        let logger = logger
        return PostgresConnection.connect(on: group.next(), configuration: location.configuration, id: id, logger: logger).flatMap { connection in
            // A prepared statement planned once: left to choose, PostgreSQL planned a query
            // anew at every run (its generic plan's estimate was higher, though the plan was
            // the same), and the planning was three quarters of the query's time.
            PostgresSession.send(on: connection) { connection.query("SET plan_cache_mode = force_generic_plan", logger: logger) }
                // No JIT compilation: it is for long analytic queries, and compiled a plan PostgreSQL
                // thought costly (a radius's points) in 250 ms for a statement that ran in 70.
                .flatMap { _ in PostgresSession.send(on: connection) { connection.query("SET jit = off", logger: logger) } }
                // No parallel workers: a request reads a page, and a generic plan's guess at a
                // LIMIT it cannot see (a tenth of the rows) made a radius walked in order start
                // two workers, 15-20 ms, for a page PostgreSQL then read in 6. Concurrent requests
                // are the node's parallelism.
                .flatMap { _ in PostgresSession.send(on: connection) { connection.query("SET max_parallel_workers_per_gather = 0", logger: logger) } }
                .map { _ in connection }
                .flatMapError { error in connection.close().flatMapThrowing { () throws -> PostgresConnection in throw error } }
        }
    }

    private func giveBack(_ pooled: PooledConnection, byTask: Bool = false) {
        // Statements a borrower sent and never waited for are done before the next borrower's.
        for statement in pooled.pending { _ = try? statement.wait() }
        pooled.pending = []
        pooled.sentFailure = nil
        let connection = pooled.connection
        condition.lock()
        if byTask { lentToTasks -= 1 }
        if connection.isClosed || closed {
            // Closed before it is uncounted: `shutdown` stops the loop once none is counted.
            if !connection.isClosed {
                condition.unlock()
                try? connection.close().wait()
                condition.lock()
            }
            open -= 1
            condition.broadcast()
            // A task waiting opens no connection: it goes the blocking way, which does.
            let task = threadWaiters == 0 ? taskWaiters.popFirst() : nil
            condition.unlock()
            task?.resume(returning: .none)
            return
        }
        // Threads (writes and most requests) and tasks (queries) waiting both: each kind gets
        // every other connection, so neither starves the other (nor queries the committer).
        if !taskWaiters.isEmpty && (threadWaiters == 0 || taskNext) && lentToTasks < taskLimit, let task = taskWaiters.popFirst() {
            taskNext = false
            lentToTasks += 1
            condition.unlock()
            task.resume(returning: .lent(pooled))
            return
        }
        taskNext = !taskWaiters.isEmpty
        idle.append(pooled)
        condition.signal()
        condition.unlock()
    }
}

/// A pooled connection and the statements prepared on it (`PostgresSession.prepared`).
///
/// Lent to one session at a time (`PostgresConnectionPool`), so its cache needs no lock.
final class PooledConnection: @unchecked Sendable {
    /// The most statements kept prepared on one connection; past it the cache starts over.
    static let statementLimit = 256
    let connection: PostgresConnection
    var statements: [String: PreparedQuery] = [:]
    /// Statements sent and not waited for (`PostgresSession.send`), oldest first.
    var pending: [EventLoopFuture<Void>] = []
    /// How many statements have been sent on the connection (numbering them from 0).
    var sentCount = 0
    /// The number of the last sent statement found failed (`PostgresSession.takeSentFailure`).
    var sentFailure: Int?

    init(_ connection: PostgresConnection) {
        self.connection = connection
    }
}

/// A parameter of a prepared statement (`PostgresSession.prepared`), whose SQL casts it to its
/// type (`$1::bigint`, `$2::text`, `$3::text[]`), so PostgreSQL knows the types at preparation.
enum PostgresParameter: Sendable {
    case int64(Int64)
    case double(Double)
    case text(String)
    /// Text or NULL.
    case optionalText(String?)
    case textArray([String])
    case int64Array([Int64])
    case bytea(ByteBuffer)
    case byteaArray([ByteBuffer])

    /// The cast the statement's SQL gives the parameter.
    var cast: String {
        switch self {
        case .int64: "bigint"
        case .double: "float8"
        case .text, .optionalText: "text"
        case .textArray: "text[]"
        case .int64Array: "bigint[]"
        case .bytea: "bytea"
        case .byteaArray: "bytea[]"
        }
    }

    /// The value as a SQL literal would spell it (`kquery query --explain`).
    var literal: String {
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
        switch self {
        case .int64(let value): return String(value)
        case .double(let value): return value.isFinite ? "\(value)" : quoted("\(value)")
        case .text(let value): return quoted(value)
        case .optionalText(let value): return value.map(quoted) ?? "NULL"
        case .textArray(let values): return "ARRAY[" + values.map(quoted).joined(separator: ", ") + "]"
        case .int64Array(let values): return "ARRAY[" + values.map(String.init).joined(separator: ", ") + "]"
        case .bytea(let bytes): return "'\\x" + PostgresValueKey.hex(Array(bytes.readableBytesView)) + "'::bytea"
        case .byteaArray(let values): return "ARRAY[" + values.map { "'\\x" + PostgresValueKey.hex(Array($0.readableBytesView)) + "'::bytea" }.joined(separator: ", ") + "]"
        }
    }

    var data: PostgresData {
        switch self {
        case .int64(let value): PostgresData(int64: value)
        case .double(let value): PostgresData(double: value)
        case .text(let value): PostgresData(string: value)
        case .optionalText(let value): value.map { PostgresData(string: $0) } ?? PostgresData(type: .text, value: nil)
        case .textArray(let values): PostgresData(array: values.map { PostgresData(string: $0) }, elementType: .text)
        case .int64Array(let values): PostgresData(array: values.map { PostgresData(int64: $0) }, elementType: .int8)
        case .bytea(let bytes): PostgresData(type: .bytea, formatCode: .binary, value: bytes)
        case .byteaArray(let values): PostgresData(array: values.map { PostgresData(type: .bytea, formatCode: .binary, value: $0) }, elementType: .bytea)
        }
    }
}

/// Where COPY's async calls run (postgres-nio has COPY only as an async function): on a queue of
/// their own, not Swift's cooperative pool. A copy waits for its COPY on the caller's thread; from
/// a thread of that pool (a test, a request), with every other thread of it waiting too, a task
/// queued there would never run.
final class PostgresCopyExecutor: TaskExecutor {
    static let shared = PostgresCopyExecutor()
    private let queue = DispatchQueue(label: "kquery.postgres.copy")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// One lent connection: runs statements and waits for their rows.
struct PostgresSession {
    let connection: PostgresConnection
    let logger: Logger
    /// The database, for messages.
    let name: String
    /// The statements prepared on the connection (nil: a connection outside the pool, which
    /// prepares none).
    var statements: PooledConnection? = nil
    /// Rows given ahead for the prepared statements the session's caller sends (nil: none, each
    /// statement is run). See `StatementScript`.
    var script: StatementScript? = nil
    /// The writes a write transaction holds back (nil: each is sent when made): sent before any
    /// other statement on the session, which must follow them (`HeldWrites`).
    var held: HeldWrites? = nil

    /// Runs `sql` as a named prepared statement, prepared on this connection the first time:
    /// PostgreSQL then plans it once (a generic plan, `plan_cache_mode`), not at every run. A
    /// query's planning took 0.3 of its 0.43 ms, its run as a prepared statement 0.05.
    /// Every parameter in `sql` is cast to its type (`PostgresParameter.cast`). Each row's cells.
    func prepared(_ sql: String, _ parameters: [PostgresParameter]) throws(ContainerError) -> [[PostgresCell]] {
        try releaseHeld()
        if let script { return try script.rows(sql, parameters) }
        guard let statements else {
            return try rows(PostgresQuery(unsafeSQL: sql, binds: Self.bindings(parameters))).map { Array($0.makeRandomAccess()) }
        }
        let rows: [PostgresRow]
        do {
            let prepared = try statement(sql, statements)
            let binds = parameters.map(\.data)
            rows = try Self.send(on: connection) { prepared.execute(binds) }.wait()
        } catch {
            throw settled(after: error)
        }
        try settle()
        return Self.cells(rows)
    }

    /// `prepared` without holding the thread while PostgreSQL answers.
    func preparedWithoutBlocking(_ sql: String, _ parameters: [PostgresParameter]) async throws(ContainerError) -> [[PostgresCell]] {
        guard let statements else { return try prepared(sql, parameters) }
        do {
            let statement: PreparedQuery
            if let known = statements.statements[sql] {
                statement = known
            } else {
                if statements.statements.count >= PooledConnection.statementLimit { forgetStatements(statements) }
                statement = try await Self.send(on: connection) { [connection] in connection.prepare(query: sql) }.get()
                statements.statements[sql] = statement
            }
            let binds = parameters.map(\.data)
            return Self.cells(try await Self.send(on: connection) { statement.execute(binds) }.get())
        } catch {
            throw Self.storageError(error, name: name)
        }
    }

    /// Each row's cells. postgres-nio asks for every column in binary but labels a prepared
    /// statement's columns with the format of its description (text).
    private static func cells(_ rows: [PostgresRow]) -> [[PostgresCell]] {
        rows.map { row in
            row.makeRandomAccess().map { cell in
                var cell = cell
                cell.format = .binary
                return cell
            }
        }
    }

    private func forgetStatements(_ statements: PooledConnection) {
        for old in statements.statements.values { _ = old.deallocate() }
        statements.statements = [:]
    }

    /// Sends a prepared statement whose rows are not needed, without waiting for it: the
    /// statements after it on the connection run after it, and its failure is the error of the
    /// next statement waited for (`settle`). A write's statements were each a round trip the
    /// committer waited for, most of a modify's time in the node.
    func send(_ sql: String, _ parameters: [PostgresParameter]) throws(ContainerError) {
        try releaseHeld()
        guard let statements else {
            _ = try prepared(sql, parameters)
            return
        }
        do {
            let prepared = try statement(sql, statements)
            let binds = parameters.map(\.data)
            statements.pending.append(Self.send(on: connection) { prepared.execute(binds) }.map { _ in })
            statements.sentCount += 1
        } catch {
            throw settled(after: error)
        }
    }

    /// `send` for a statement with inline parameters.
    func send(_ query: PostgresQuery) throws(ContainerError) {
        try releaseHeld()
        guard let statements else {
            try run(query)
            return
        }
        statements.pending.append(Self.send(on: connection) { [connection, logger] in connection.query(query, logger: logger) }.map { _ in })
        statements.sentCount += 1
    }

    /// Sends the writes held back, if any, before a statement that must follow them.
    private func releaseHeld() throws(ContainerError) {
        guard let held, held.isWaiting else { return }
        var plain = self
        plain.held = nil
        try held.send(on: plain)
    }

    /// How many statements have been sent on the connection: the number the next one sent gets.
    var sentCount: Int { statements?.sentCount ?? 0 }

    /// The number of the sent statement whose failure was last thrown (then forgotten), if one
    /// was: tells a write whether the error it caught was its own statement's or an earlier one's.
    func takeSentFailure() -> Int? {
        guard let statements else { return nil }
        defer { statements.sentFailure = nil }
        return statements.sentFailure
    }

    /// The statement prepared for `sql` on this connection, prepared now if it is not yet.
    private func statement(_ sql: String, _ statements: PooledConnection) throws -> PreparedQuery {
        if let known = statements.statements[sql] { return known }
        if statements.statements.count >= PooledConnection.statementLimit { forgetStatements(statements) }
        let statement = try Self.send(on: connection) { [connection] in connection.prepare(query: sql) }.wait()
        statements.statements[sql] = statement
        return statement
    }

    /// Throws the error of the first statement sent and not waited for that failed (they have
    /// all finished: statements run in order, and one after them has).
    private func settle() throws(ContainerError) {
        guard let statements, !statements.pending.isEmpty else { return }
        let sent = statements.pending
        statements.pending = []
        for (index, statement) in sent.enumerated() {
            do {
                try statement.wait()
            } catch {
                statements.sentFailure = statements.sentCount - sent.count + index
                throw Self.storageError(error, name: name)
            }
        }
    }

    /// The error to report when a statement waited for failed: an earlier sent one's, which
    /// aborted the transaction, if one failed; else its own.
    private func settled(after error: any Error) -> ContainerError {
        do {
            try settle()
        } catch let earlier {
            return earlier
        }
        return Self.storageError(error, name: name)
    }

    /// Sends a statement (`body` writes it) from the connection's event loop, failing it at once
    /// when the connection is closed. postgres-nio writes a statement to its channel without a
    /// promise, so one written after PostgreSQL closed the connection (a restart,
    /// `pg_terminate_backend`) was dropped by the channel and never completed: its borrower
    /// waited forever, with the connection. On the loop, an open connection's handler takes the
    /// statement at once, and fails it if the connection closes later.
    static func send<T: Sendable>(on connection: PostgresConnection, _ body: @escaping @Sendable () -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        let loop = connection.eventLoop
        @Sendable func write() -> EventLoopFuture<T> {
            connection.isClosed ? loop.makeFailedFuture(ContainerError(.internalError, "PostgreSQL closed the connection")) : body()
        }
        return loop.inEventLoop ? write() : loop.flatSubmit(write)
    }

    /// Decodes a cell, a corrupt value becoming the container's error.
    func decode<Value: PostgresDecodable>(_ cell: PostgresCell, _ type: Value.Type) throws(ContainerError) -> Value {
        do {
            return try cell.decode(type)
        } catch {
            throw ContainerError(.internalError, "\(name): a stored value could not be read: \(String(reflecting: error))")
        }
    }

    static func bindings(_ parameters: [PostgresParameter]) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: parameters.count)
        for parameter in parameters {
            switch parameter {
            case .int64(let value): bindings.append(value)
            case .double(let value): bindings.append(value)
            case .text(let value): bindings.append(value)
            case .optionalText(let value): bindings.append(value)
            case .textArray(let values): bindings.append(values)
            case .int64Array(let values): bindings.append(values)
            case .bytea(let bytes): bindings.append(bytes)
            case .byteaArray(let values): bindings.append(values)
            }
        }
        return bindings
    }

    /// Runs a statement and returns its rows.
    @discardableResult
    func rows(_ query: PostgresQuery) throws(ContainerError) -> [PostgresRow] {
        try releaseHeld()
        let rows: [PostgresRow]
        do {
            rows = try Self.send(on: connection) { [connection, logger] in connection.query(query, logger: logger) }.wait().rows
        } catch {
            throw settled(after: error)
        }
        try settle()
        return rows
    }

    /// Runs a statement and returns how many rows it changed.
    @discardableResult
    func run(_ query: PostgresQuery) throws(ContainerError) -> Int {
        try releaseHeld()
        let count: Int
        do {
            count = try Self.send(on: connection) { [connection, logger] in connection.query(query, logger: logger) }.wait().metadata.rows ?? 0
        } catch {
            throw settled(after: error)
        }
        try settle()
        return count
    }

    /// Streams `rows` (`PostgresCopyText`) into `table`'s `columns` with `COPY ... FROM STDIN`.
    /// False, nothing copied, when a row's key is taken (SQLSTATE 23505): the transaction must
    /// then roll back to a savepoint before it goes on.
    func copy(_ rows: ByteBuffer, into table: String, columns: [String]) throws(ContainerError) -> Bool {
        try releaseHeld()
        let promise = connection.eventLoop.makePromise(of: Void.self)
        // postgres-nio writes a COPY as it writes other statements (`send`): one written as the
        // connection closed would never end, so the connection's end fails the copy. (A callback
        // a copy, kept until the connection closes: `kquery migrate` copies a thousand records a
        // page, so a million leave a few thousand.)
        connection.closeFuture.whenComplete { _ in promise.fail(ContainerError(.internalError, "PostgreSQL closed the connection")) }
        Task(executorPreference: PostgresCopyExecutor.shared) { [connection, logger] in
            do {
                try await connection.copyFrom(table: table, columns: columns, logger: logger) { writer in try await writer.write(rows) }
                promise.succeed()
            } catch {
                promise.fail(error)
            }
        }
        do {
            try promise.futureResult.wait()
        } catch {
            if Self.sqlState(error) == "23505" {
                try settle()
                return false
            }
            throw settled(after: error)
        }
        try settle()
        return true
    }

    /// Decodes a row's one column, a corrupt value becoming the container's error.
    func decode<Column: PostgresDecodable>(_ row: PostgresRow, _ type: Column.Type) throws(ContainerError) -> Column {
        do {
            return try row.decode(type)
        } catch {
            throw ContainerError(.internalError, "\(name): a stored value could not be read: \(error)")
        }
    }

    /// Decodes a row's columns, a corrupt value becoming the container's error.
    func decode<each Column: PostgresDecodable>(_ row: PostgresRow, _ types: (repeat each Column).Type) throws(ContainerError) -> (repeat each Column) {
        do {
            return try row.decode(types)
        } catch {
            throw ContainerError(.internalError, "\(name): a stored value could not be read: \(error)")
        }
    }

    /// PostgreSQL's message for the error (postgres-nio's own description hides it).
    static func storageError(_ error: any Error, name: String) -> ContainerError {
        if let error = error as? ContainerError { return error }
        // The server's message and SQLSTATE: a statement's (PSQLError) or a prepared one's
        // (postgres-nio's older API: PostgresError).
        var server: (message: String, state: String?)?
        if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
            server = (message, error.serverInfo?[.sqlState])
        } else if case .server(let fields) = error as? PostgresError, let message = fields.fields[.message] {
            server = (message, fields.fields[.sqlState])
        }
        if let (message, state) = server {
            let code = state.map { " (\($0))" } ?? ""
            // Class 22, a data exception, is a value PostgreSQL cannot hold (text with U+0000):
            // the request's fault, not the server's, and said to its client without the server's name.
            if state?.hasPrefix("22") == true { return ContainerError(.badRequest, "a value PostgreSQL cannot hold: \(message)\(code)") }
            return ContainerError(.internalError, "\(name): \(message)\(code)")
        }
        if let error = error as? PSQLError {
            return ContainerError(.internalError, "\(name): \(error.code)\(error.underlying.map { ": \($0)" } ?? "")")
        }
        return ContainerError(.internalError, "\(name): \(error)")
    }

    /// The SQLSTATE of a server error, if the error is one.
    static func sqlState(_ error: any Error) -> String? {
        if case .server(let server) = error as? PostgresError { return server.fields[.sqlState] }
        return (error as? PSQLError)?.serverInfo?[.sqlState]
    }
}

/// The rows of the prepared statements a synchronous caller will send, got ahead without holding
/// a thread (`PostgresContainerStorage.queryWithoutBlocking`): the caller runs once with no rows
/// given, and the first statement it sends is noted (`wanted`) and ends the run with an error;
/// its rows are then fetched, given (`give`), and the caller runs again, now answered at once.
final class StatementScript {
    private var givenRows: [(sql: String, rows: [[PostgresCell]])] = []
    private var next = 0
    /// The statement the last run stopped at, with its parameters.
    private(set) var wanted: (sql: String, parameters: [PostgresParameter])?

    /// The rows given for the next statement, which must be `sql`; otherwise notes it as wanted and throws.
    func rows(_ sql: String, _ parameters: [PostgresParameter]) throws(ContainerError) -> [[PostgresCell]] {
        if next < givenRows.count, givenRows[next].sql == sql {
            next += 1
            return givenRows[next - 1].rows
        }
        wanted = (sql, parameters)
        throw ContainerError(.internalError, "a statement was sent that had no rows given ahead")
    }

    /// Gives the rows of the statement wanted, for the next run (which starts from the first statement).
    func give(_ rows: [[PostgresCell]]) {
        if let wanted { givenRows.append((wanted.sql, rows)) }
        wanted = nil
        next = 0
    }
}
