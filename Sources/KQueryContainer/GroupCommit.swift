import CKQuerySupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Group commit for a WAL file: many transactions, one `fdatasync`.
///
/// The container file commits with `synchronous = NORMAL`: a commit appends its frames to the
/// write-ahead log without waiting for the disk, and the writer lock passes to the next write at
/// once. Before a write is acknowledged, `waitUntilDurable` makes sure an `fdatasync` of the log
/// that began after the write committed has completed. The first waiter runs that sync for
/// every commit so far; writes that commit meanwhile wait for the next one, which the first of
/// them runs. With a disk that takes milliseconds to sync, concurrent writers share syncs instead
/// of queueing for one each, and an acknowledged write is on stable storage exactly as with
/// `synchronous = FULL` (a kill -9 never loses a commit in either mode: it is in the page cache).
final class GroupCommit: @unchecked Sendable {
    private let walPath: String
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let synced = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Commits so far, the commits the last completed sync covers, whether a sync is running.
    private var committedCount: UInt64 = 0
    private var durableCount: UInt64 = 0
    private var isSyncing = false
    /// The error of the last sync, reported to the writes it covered.
    private var failure: (count: UInt64, message: String)?

    init(walPath: String) {
        self.walPath = walPath
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        synced.initialize(to: pthread_cond_t())
        pthread_cond_init(synced, nil)
    }

    deinit {
        pthread_cond_destroy(synced)
        pthread_mutex_destroy(mutex)
        synced.deallocate()
        mutex.deallocate()
    }

    /// Counts a commit; call once the transaction committed.
    func committed() {
        pthread_mutex_lock(mutex)
        committedCount += 1
        pthread_mutex_unlock(mutex)
    }

    /// Returns once every commit counted before the call is on stable storage.
    func waitUntilDurable() throws(ContainerError) {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        let ticket = committedCount
        while durableCount < ticket {
            if isSyncing {
                pthread_cond_wait(synced, mutex)
                continue
            }
            isSyncing = true
            let covered = committedCount
            pthread_mutex_unlock(mutex)
            let message = Self.sync(walPath)
            pthread_mutex_lock(mutex)
            isSyncing = false
            if let message {
                failure = (covered, message)
            } else {
                durableCount = max(durableCount, covered)
                failure = nil
            }
            pthread_cond_broadcast(synced)
            if let failure, failure.count >= ticket, durableCount < ticket {
                throw ContainerError(.internalError, "the change was committed but could not be made durable: \(failure.message)")
            }
        }
    }

    /// Starts writing the log's dirty pages to disk without waiting: a long write (an asset's
    /// chunks) then finds most of its bytes on disk when it waits to be durable, instead of all.
    func startWriteback() {
        let descriptor = open(walPath, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = kquery_start_writeback(descriptor)
        close(descriptor)
    }

    /// `fdatasync`s the file at `path`; nil when it worked (or there is no file: SQLite removes the
    /// log only after copying it into the database and syncing that), else what went wrong.
    ///
    /// `fdatasync`, as SQLite syncs its own log: it writes the log's content and the metadata
    /// needed to read it back (its size when it grew), and skips what recovery does not need
    /// (times), which an `fsync` journals too.
    private static func sync(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        if descriptor < 0 { return errno == ENOENT ? nil : "cannot open \(path) (errno \(errno))" }
        defer { close(descriptor) }
        return fdatasync(descriptor) == 0 ? nil : "fdatasync of \(path) failed (errno \(errno))"
    }
}
