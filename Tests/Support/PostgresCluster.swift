#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KQuery

/// A throwaway PostgreSQL 15 cluster for the tests (SPEC §16): `initdb` in a temporary directory,
/// a free port on 127.0.0.1, run as the `postgres` user when the tests run as root (PostgreSQL
/// refuses root), stopped and removed when the test process exits. One per test process, started
/// by the first test that asks; each test then takes a database, or a container, of its own.
///
/// PostgreSQL missing is a failure, never a skip: `scripts/bootstrap` installs it.
public final class PostgresCluster: Sendable {
    public let port: Int
    public let directory: String
    /// The superuser the cluster was made with (trust authentication on loopback).
    public let user = "kquery"

    private static let shared = Locked<Result<PostgresCluster, ClusterError>?>(nil)
    private static let binaries = "/usr/lib/postgresql/15/bin"
    /// Databases handed out so far, for fresh names.
    private let databases = Locked(0)

    public struct ClusterError: Error, CustomStringConvertible {
        public let description: String

        public init(description: String) { self.description = description }
    }

    /// The test process's cluster, started on first use.
    public static func start() throws -> PostgresCluster {
        try shared.withLock { cluster in
            if let cluster { return try cluster.get() }
            let result = Result { () throws(ClusterError) -> PostgresCluster in try PostgresCluster() }
            cluster = result
            if case .success = result { atexit { PostgresCluster.stopShared() } }
            return try result.get()
        }
    }

    private static func stopShared() {
        guard case .success(let cluster)? = shared.withLock({ $0 }) else { return }
        cluster.stop()
    }

    private init() throws(ClusterError) {
        guard FileManager.default.isExecutableFile(atPath: Self.binaries + "/initdb") else {
            throw ClusterError(description: "PostgreSQL 15 is not installed (\(Self.binaries)/initdb): run scripts/bootstrap")
        }
        Self.removeAbandonedClusters()
        directory = NSTemporaryDirectory() + "kquery-pg-\(UUID().uuidString)"
        port = Self.freePort()
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try "\(getpid())".write(toFile: directory + "/owner", atomically: true, encoding: .utf8)
            if getuid() == 0 { try Self.run("/bin/chown", ["postgres", directory]) }
            _ = try Self.runAsPostgres(Self.binaries + "/initdb", ["-D", directory + "/data", "-A", "trust", "-U", user, "-E", "UTF8", "--locale=C"])
            // fsync stays on: the kill -9 tests rely on commits being durable.
            _ = try Self.runAsPostgres(Self.binaries + "/pg_ctl", [
                "-D", directory + "/data", "-l", directory + "/log", "-w", "-t", "60",
                "-o", "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c max_connections=400 -c shared_buffers=64MB"
                    // Every statement logged with its database's name, for the statement-log test (Citus).
                    + " -c log_statement=all -c log_line_prefix=@%d@ -c log_min_duration_statement=-1",
                "start",
            ])
        } catch let error as ClusterError {
            throw error
        } catch {
            throw ClusterError(description: "the test PostgreSQL cluster could not start: \(error)")
        }
    }

    /// A new, empty database; returns its URL.
    public func createDatabase() throws -> String {
        try createNamedDatabase().url
    }

    /// A new, empty database; returns its name and URL.
    public func createNamedDatabase() throws -> (name: String, url: String) {
        let number = databases.withLock { count in
            count += 1
            return count
        }
        let name = "k\(getpid())_\(number)"
        try Self.run("/usr/bin/psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", user, "-d", "postgres", "-q", "-c", "CREATE DATABASE \(name)"])
        return (name, url(database: name))
    }

    /// Ends the connections to `database` that `condition` (SQL on `pg_stat_activity`) picks, as a
    /// restart or an administrator would (`pg_terminate_backend`); returns how many.
    public func endConnections(to database: String, where condition: String = "TRUE") throws -> Int {
        let ended = try psql(database, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND (\(condition))")
        guard let count = Int(ended.trimmingCharacters(in: .whitespacesAndNewlines)) else { throw ClusterError(description: "pg_terminate_backend printed \(ended)") }
        return count
    }

    public func url(database: String) -> String { "postgresql://\(user)@127.0.0.1:\(port)/\(database)" }

    /// Runs one statement through psql on `database`; returns what it printed (unaligned, tuples only).
    @discardableResult
    public func psql(_ database: String, _ sql: String) throws -> String {
        try Self.run("/usr/bin/psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", user, "-d", database, "-q", "-A", "-t", "-c", sql])
    }

    /// What the cluster logged so far (every statement, each line led by `@`, its database's name and `@`).
    public func log() throws -> String { try String(contentsOfFile: directory + "/log", encoding: .utf8) }

    public func stop() {
        _ = try? Self.runAsPostgres(Self.binaries + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Stops and removes the clusters of test processes that ended without stopping theirs (a
    /// crash: `atexit` never ran), which would otherwise run on: a cluster's `owner` file names
    /// its process. One without an owner is left alone for ten minutes (it may be starting).
    private static func removeAbandonedClusters() {
        let temporary = NSTemporaryDirectory()
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: temporary) else { return }
        for name in names where name.hasPrefix("kquery-pg-") && !name.hasPrefix("kquery-pg-output-") {
            let directory = temporary + name
            if let text = try? String(contentsOfFile: directory + "/owner", encoding: .utf8) {
                // Alive (or a process that took its number since): left alone.
                guard let owner = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), Glibc.kill(owner, 0) == -1, errno == ESRCH else { continue }
            } else {
                let modified = (try? FileManager.default.attributesOfItem(atPath: directory))?[.modificationDate] as? Date
                guard let modified, modified.timeIntervalSinceNow < -600 else { continue }
            }
            if FileManager.default.fileExists(atPath: directory + "/data/postmaster.pid") {
                _ = try? runAsPostgres(binaries + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
            }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    private static func runAsPostgres(_ tool: String, _ arguments: [String]) throws -> String {
        if getuid() == 0 { return try run("/usr/sbin/runuser", ["-u", "postgres", "--", tool] + arguments) }
        return try run(tool, arguments)
    }

    /// Runs `tool` and returns what it printed (standard output and error, through a file: a
    /// server `pg_ctl` starts would hold a pipe open). posix_spawn and waitpid rather than
    /// Foundation's Process, whose wait missed the exit of `runuser` here and hung.
    @discardableResult
    private static func run(_ tool: String, _ arguments: [String]) throws -> String {
        let output = NSTemporaryDirectory() + "kquery-pg-output-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: output) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // (The cluster pg_ctl starts lives on: it must not keep another thread's pipe open.)
        try SpawnedProcess.closeInheritedDescriptors(&actions)
        let argv = ([tool] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, tool, &actions, nil, argv, environ)
        guard spawned == 0 else { throw ClusterError(description: "\(tool) could not start (\(spawned))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        // Exited normally with status 0: the low 7 bits (the signal) and the exit code are zero.
        guard status == 0 else {
            throw ClusterError(description: "\(tool) \(arguments.joined(separator: " ")) failed (status \(status)): \(text)")
        }
        return text
    }

    /// A port nothing listens on now: the kernel's pick for a socket bound to port 0.
    private static func freePort() -> Int {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socketFD) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketFD, $0, length) == 0 && getsockname(socketFD, $0, &length) == 0 }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : Int.random(in: 20_000..<60_000)
    }
}
