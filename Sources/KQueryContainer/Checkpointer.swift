#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

import Dispatch
import GRDB
import GRDBSQLite
import KQuery

/// Checkpoints a container file's write-ahead log mostly away from the writes.
///
/// By default SQLite checkpoints from the committing connection once the log passes 1,000 pages:
/// that commit copies the log into the database and syncs the database, tens of milliseconds
/// during which the server's committer, and every modify queued behind it, waits. Under a modify
/// load those stalls were the p99. Here the writer's automatic checkpoint is off. Each time the
/// log has grown by `interval` pages (frames, counted by SQLite's WAL hook on the writer's
/// connection), a PASSIVE checkpoint runs on a connection and a thread of its own (it never
/// blocks a writer), copying and syncing the bulk of the log. Counted in pages, not commits: a
/// commit of a batch of modifies writes many pages, and a pass that copies more syncs more at
/// once, which the syncs of the writes waiting to be acknowledged then queue behind. Writes go on
/// meanwhile, so it never copies quite all of it, and SQLite starts a log over only once all of it
/// is copied: after each background pass the writer makes a pass of its own, which copies the few
/// pages written during the background one, so that its next write starts the log over. A failed
/// checkpoint is tried again after the next interval (the log only grows meanwhile); SQLite
/// checkpoints the rest when the last connection closes.
final class Checkpointer: Sendable {
    /// Pages the log gains between background passes: SQLite's own automatic interval.
    static let interval = 1_000
    /// Pages the log may gain while bulk writes (assets' bytes) go on, before a pass runs anyway.
    /// A pass inside an upload copies and syncs what the upload just wrote while the upload goes
    /// on (a dozen passes in a 50 MB one, which ran at 300 MB/s with them and 450 without): the
    /// copying waits for the upload's end, up to 256 MB of log.
    static let deferredInterval = 65_536

    private let path: String
    private let queue = DispatchQueue(label: "kquery.checkpoint", qos: .utility)
    /// The log's pages when the last background pass was scheduled, its pages after the last
    /// commit (from the WAL hook), whether a pass is scheduled or running, whether the writer
    /// should make its pass, and how many bulk writes are holding passes back.
    private typealias State = (passFrames: Int, frames: Int, scheduled: Bool, writerPass: Bool, deferrals: Int)
    private let state = Locked<State>((passFrames: 0, frames: 0, scheduled: false, writerPass: false, deferrals: 0))
    /// The background pass's connection, opened at the first pass.
    private let connection = Locked<DatabaseQueue?>(nil)

    init(path: String) {
        self.path = path
    }

    /// Counts the log's pages after each commit on the writer's connection `db` (SQLite calls
    /// the hook; setting it ends SQLite's automatic checkpoint on that connection).
    func watch(_ db: GRDB.Database) {
        sqlite3_wal_hook(db.sqliteConnection, { context, _, _, frames in
            guard let context else { return SQLITE_OK }
            Unmanaged<Checkpointer>.fromOpaque(context).takeUnretainedValue().state.withLock { $0.frames = Int(frames) }
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Stops counting (before the checkpointer goes away while the connection stays).
    static func unwatch(_ db: GRDB.Database) {
        sqlite3_wal_hook(db.sqliteConnection, nil, nil)
    }

    /// Called after a commit; schedules a background pass once the log has grown by `interval`
    /// pages since the last (one at a time). Returns whether the writer should checkpoint now (a
    /// background pass has just ended).
    func committed() -> Bool {
        let (schedule, writerPass) = state.withLock { state in
            let writerPass = state.writerPass
            state.writerPass = false
            return (Self.claimPass(&state, after: state.deferrals > 0 ? Self.deferredInterval : Self.interval), writerPass)
        }
        if schedule { queue.async { self.backgroundPass() } }
        return writerPass
    }

    /// Whether a background pass is due (the log has grown by `interval` pages since the last and
    /// none is scheduled); if so, it is marked scheduled from the log's current page.
    private static func claimPass(_ state: inout State, after interval: Int) -> Bool {
        // The log started over since the last pass: count from its start.
        if state.frames < state.passFrames { state.passFrames = 0 }
        guard state.frames - state.passFrames >= interval, !state.scheduled else { return false }
        state.passFrames = state.frames
        state.scheduled = true
        return true
    }

    /// Bulk writes start: passes wait (up to `deferredInterval` pages) until the last ends.
    func deferPasses() {
        state.withLock { $0.deferrals += 1 }
    }

    /// Bulk writes end: the pass they held back runs now, once the last has ended.
    func resumePasses() {
        let schedule = state.withLock { state in
            state.deferrals = max(0, state.deferrals - 1)
            return state.deferrals == 0 && Self.claimPass(&state, after: Self.interval)
        }
        if schedule { queue.async { self.backgroundPass() } }
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
