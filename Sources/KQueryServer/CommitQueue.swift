#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

import Foundation

import KQuery
import KQueryContainer

/// The server's record modifies, committed one after another on one thread in the order they
/// arrived, and acknowledged from a second thread once the disk has them.
///
/// Run on a pool of blocking threads, concurrent modifies queued on the container's writer lock,
/// which favours no one: under load a few waited several times longer than the rest (a modify p99
/// three times its mean), and every hand-off of the lock woke another thread. Here a modify's
/// request reads its body on the cooperative pool, then queues its commit; the committer runs the
/// queue in order, each commit without waiting for the disk, and passes each to the syncer, which
/// waits until the commit is durable (one `fdatasync` covers every commit made before it starts:
/// group commit) and resumes its request. The committer goes on committing meanwhile.
///
/// The commits queued for one container are run as a batch (`Container.batchingWrites`): one
/// transaction, each modify in a savepoint of its own, one commit for all. Each page they change
/// (the outbox's last, the change index's last, the database's row) is then written to the log
/// once for the batch rather than once per modify, which was most of the log's bytes, of the
/// commit's system calls and of the sync's work. A batch that cannot commit fails all its modifies.
final class CommitQueue: Sendable {
    /// A commit, run on the committer in its container's batch: nil when it failed (its request
    /// already resumed), else how to wait for its durability and resume its request.
    struct Commit: Sendable {
        var container: Container
        /// The records the commit reads, read ahead with its batch's (`Container.batchingWrites`).
        var reads: (database: DatabaseKey, records: [RecordID])?
        var run: @Sendable () -> Settlement?
        /// Resumes its request with the error when `run` is never called (its batch failed first).
        var fail: @Sendable (ContainerError) -> Void
    }

    /// The most commits one batch takes: the first of a batch waits for all of them.
    static let largestBatch = 128

    struct Settlement: Sendable {
        /// Returns once the commit is on stable storage.
        var waitUntilDurable: @Sendable () throws(ContainerError) -> Void
        /// Resumes the request: nil once durable, else why it could not be made so.
        var resume: @Sendable (ContainerError?) -> Void
    }

    private let commits = BlockingQueue<Commit>()
    private let settlements = BlockingQueue<Settlement>()

    init() {
        let (commits, settlements) = (commits, settlements)
        Thread.detachNewThread {
            while let taken = commits.takeAll() {
                // Runs of commits to one container, in arrival order.
                var start = 0
                while start < taken.count {
                    let container = taken[start].container
                    var end = start + 1
                    while end < taken.count, end - start < Self.largestBatch, taken[end].container === container { end += 1 }
                    Self.commit(taken[start..<end], to: container, settlements: settlements)
                    start = end
                }
            }
            settlements.close()
        }
        Thread.detachNewThread {
            while let batch = settlements.takeAll() {
                for settlement in batch {
                    do throws(ContainerError) {
                        try settlement.waitUntilDurable()
                        settlement.resume(nil)
                    } catch {
                        settlement.resume(error)
                    }
                }
            }
        }
    }

    /// Runs `batch` in one transaction of `container`; passes the settlements of its commits to
    /// the syncer once it has committed, or fails them all when it could not. A batch that fails
    /// before its commits run (its transaction's start, or reading their records ahead) runs each
    /// of them again alone: one request's records (a name PostgreSQL cannot hold) must not fail
    /// the others' modifies, and every request is answered.
    private static func commit(_ batch: ArraySlice<Commit>, to container: Container, settlements: BlockingQueue<Settlement>) {
        var settled: [Settlement] = []
        settled.reserveCapacity(batch.count)
        var reads: [DatabaseKey: [RecordID]] = [:]
        for commit in batch { if let read = commit.reads { reads[read.database, default: []] += read.records } }
        var ran = 0
        do throws(ContainerError) {
            try container.batchingWrites(prefetching: reads) {
                for commit in batch {
                    ran += 1
                    if let settlement = commit.run() { settled.append(settlement) }
                }
            }
        } catch {
            for settlement in settled { settlement.resume(error) }
            let unrun = batch.indices.dropFirst(ran)
            if batch.count > 1 {
                for index in unrun { Self.commit(batch[index...index], to: container, settlements: settlements) }
            } else {
                for index in unrun { batch[index].fail(error) }
            }
            return
        }
        for settlement in settled { settlements.append(settlement) }
    }

    deinit {
        // The committer drains what is queued, then closes the syncer's queue.
        commits.close()
    }

    /// Runs `commit` (writes to `container`) on the committer, in arrival order, then returns its
    /// value once `durable` (called on the syncer) has returned. `reads`: the records it reads.
    func run<T: Sendable>(
        in container: Container, reading reads: (database: DatabaseKey, records: [RecordID])? = nil,
        _ commit: @escaping @Sendable () throws(ContainerError) -> T,
        durable: @escaping @Sendable () throws(ContainerError) -> Void
    ) async throws(ContainerError) -> T {
        let outcome: Result<T, ContainerError> = await withCheckedContinuation { continuation in
            // Exactly one of `run` and `fail` is called.
            let queued = commits.append(Commit(container: container, reads: reads, run: { () -> Settlement? in
                let value: T
                do throws(ContainerError) { value = try commit() } catch {
                    continuation.resume(returning: .failure(error))
                    return nil
                }
                return Settlement(waitUntilDurable: durable) { error in
                    continuation.resume(returning: error.map { .failure($0) } ?? .success(value))
                }
            }, fail: { error in continuation.resume(returning: .failure(error)) }))
            if !queued { continuation.resume(returning: .failure(ContainerError(.internalError, "the server is stopping: the modify was not applied"))) }
        }
        return try outcome.get()
    }
}

/// A queue between threads: producers append, one consumer takes everything queued at once,
/// waiting while it is empty.
private final class BlockingQueue<Element>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let nonEmpty = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var elements: [Element] = []
    private var isClosed = false

    init() {
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        nonEmpty.initialize(to: pthread_cond_t())
        pthread_cond_init(nonEmpty, nil)
    }

    deinit {
        pthread_cond_destroy(nonEmpty)
        pthread_mutex_destroy(mutex)
        nonEmpty.deallocate()
        mutex.deallocate()
    }

    /// Queues `element`; false once the queue is closed.
    @discardableResult
    func append(_ element: Element) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !isClosed else { return false }
        elements.append(element)
        if elements.count == 1 { pthread_cond_signal(nonEmpty) }
        return true
    }

    /// Everything queued, in order, waiting until there is something; nil once closed and empty.
    func takeAll() -> [Element]? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while elements.isEmpty {
            if isClosed { return nil }
            pthread_cond_wait(nonEmpty, mutex)
        }
        var taken: [Element] = []
        swap(&taken, &elements)
        return taken
    }

    /// Refuses further elements; the consumer still takes those queued.
    func close() {
        pthread_mutex_lock(mutex)
        isClosed = true
        pthread_cond_signal(nonEmpty)
        pthread_mutex_unlock(mutex)
    }
}
