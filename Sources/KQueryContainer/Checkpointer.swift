#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

import Dispatch
import GRDB
import KQuery

/// Checkpoints a container file's write-ahead log mostly away from the writes.
///
/// By default SQLite checkpoints from the committing connection once the log passes 1,000 pages:
/// that commit copies the log into the database and syncs the database, tens of milliseconds
/// during which the server's committer, and every modify queued behind it, waits. Under a modify
/// load those stalls were the p99. Here the writer's automatic checkpoint is off. Every
/// `interval` commits a PASSIVE checkpoint runs on a connection and a thread of its own (it never
/// blocks a writer), copying and syncing the bulk of the log. Writes go on meanwhile, so it never
/// copies quite all of it, and SQLite starts a log over only once all of it is copied: after each
/// background pass the writer makes a pass of its own, which copies the few pages written during
/// the background one, so that its next write starts the log over. A failed checkpoint is tried
/// again after the next interval (the log only grows meanwhile); SQLite checkpoints the rest when
/// the last connection closes.
final class Checkpointer: Sendable {
    /// Commits between background passes: a one-record modify appends a few pages, so about
    /// SQLite's own 1,000-page interval.
    static let interval = 200

    private let path: String
    private let queue = DispatchQueue(label: "kquery.checkpoint", qos: .utility)
    /// Commits since the last background pass was scheduled, whether one is scheduled or running,
    /// and whether the writer should make its pass.
    private let state = Locked((commits: 0, scheduled: false, writerPass: false))
    /// The background pass's connection, opened at the first pass.
    private let connection = Locked<DatabaseQueue?>(nil)

    init(path: String) {
        self.path = path
    }

    /// Counts a commit; schedules a background pass every `interval` commits (one at a time).
    /// Returns whether the writer should checkpoint now (a background pass has just ended).
    func committed() -> Bool {
        let (schedule, writerPass) = state.withLock { state in
            state.commits += 1
            let writerPass = state.writerPass
            state.writerPass = false
            guard state.commits >= Self.interval, !state.scheduled else { return (false, writerPass) }
            state.commits = 0
            state.scheduled = true
            return (true, writerPass)
        }
        if schedule { queue.async { self.backgroundPass() } }
        return writerPass
    }

    private func backgroundPass() {
        let passed = connection.withLock { connection -> Bool in
            do {
                if connection == nil {
                    // Opening creates a missing file: a container closed and removed while this
                    // pass waited to run must not be made again, empty.
                    guard access(path, F_OK) == 0 else { return false }
                    var configuration = Configuration()
                    configuration.busyMode = .timeout(10)
                    connection = try DatabaseQueue(path: path, configuration: configuration)
                }
                try connection?.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
                return true
            } catch {
                // A connection that failed is opened anew at the next pass.
                connection = nil
                return false
            }
        }
        state.withLock { state in
            state.scheduled = false
            state.writerPass = passed
        }
    }

    /// The writer's pass, on the writer's connection, after its commit.
    static func writerPass(_ db: GRDB.Database) {
        try? db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)")
    }
}
