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
    private var idle: [PostgresConnection] = []
    private var open = 0
    private var nextID = 0
    private var closed = false

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
    func shutdown() {
        condition.lock()
        guard !closed else { return condition.unlock() }
        closed = true
        let connections = idle
        idle = []
        condition.broadcast()
        condition.unlock()
        for connection in connections { try? connection.close().wait() }
        try? group.syncShutdownGracefully()
    }

    /// Lends `body` a connection, waiting for one while `limit` are lent. A connection that broke
    /// is closed, not returned.
    func withConnection<T>(_ body: (PostgresSession) throws(ContainerError) -> T) throws(ContainerError) -> T {
        let connection = try borrow()
        defer { giveBack(connection) }
        return try body(PostgresSession(connection: connection, logger: logger, name: location.description))
    }

    private func borrow() throws(ContainerError) -> PostgresConnection {
        condition.lock()
        while idle.isEmpty && open >= limit && !closed { condition.wait() }
        if closed {
            condition.unlock()
            throw ContainerError(.internalError, "\(location): the storage is closed")
        }
        if let connection = idle.popLast() {
            condition.unlock()
            return connection
        }
        open += 1
        nextID += 1
        let id = nextID
        condition.unlock()
        do {
            return try PostgresConnection.connect(on: group.next(), configuration: location.configuration, id: id, logger: logger).wait()
        } catch {
            condition.lock()
            open -= 1
            condition.signal()
            condition.unlock()
            throw PostgresSession.storageError(error, name: location.description)
        }
    }

    private func giveBack(_ connection: PostgresConnection) {
        condition.lock()
        if connection.isClosed || closed {
            open -= 1
            condition.signal()
            condition.unlock()
            if !connection.isClosed { try? connection.close().wait() }
            return
        }
        idle.append(connection)
        condition.signal()
        condition.unlock()
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

    /// Runs a statement and returns its rows.
    @discardableResult
    func rows(_ query: PostgresQuery) throws(ContainerError) -> [PostgresRow] {
        do {
            return try connection.query(query, logger: logger).wait().rows
        } catch {
            throw Self.storageError(error, name: name)
        }
    }

    /// Runs a statement and returns how many rows it changed.
    @discardableResult
    func run(_ query: PostgresQuery) throws(ContainerError) -> Int {
        do {
            return try connection.query(query, logger: logger).wait().metadata.rows ?? 0
        } catch {
            throw Self.storageError(error, name: name)
        }
    }

    /// Streams `rows` (`PostgresCopyText`) into `table`'s `columns` with `COPY ... FROM STDIN`.
    /// False, nothing copied, when a row's key is taken (SQLSTATE 23505): the transaction must
    /// then roll back to a savepoint before it goes on.
    func copy(_ rows: ByteBuffer, into table: String, columns: [String]) throws(ContainerError) -> Bool {
        let promise = connection.eventLoop.makePromise(of: Void.self)
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
            return true
        } catch {
            if Self.sqlState(error) == "23505" { return false }
            throw Self.storageError(error, name: name)
        }
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
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                let state = error.serverInfo?[.sqlState]
                let code = state.map { " (\($0))" } ?? ""
                // Class 22, a data exception, is a value PostgreSQL cannot hold (text with U+0000):
                // the request's fault, not the server's.
                return ContainerError(state?.hasPrefix("22") == true ? .badRequest : .internalError, "\(name): \(message)\(code)")
            }
            return ContainerError(.internalError, "\(name): \(error.code)\(error.underlying.map { ": \($0)" } ?? "")")
        }
        return ContainerError(.internalError, "\(name): \(error)")
    }

    /// The SQLSTATE of a server error, if the error is one.
    static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }
}
