import Foundation
import KQuery
@testable import KQueryContainer
import KQueryTestSupport
import Testing
@testable import KQueryServer

/// The server's modify path: commits run one at a time in arrival order, each request resumes only
/// after its durability wait returned, and failures of either step reach their own request.
@Suite("Commit queue")
struct CommitQueueTests {
    @Test func commitsRunInArrivalOrderAndAnswerOnlyOnceDurable() async throws {
        let queue = CommitQueue()
        let container = try Container(containerIdentifier: "iCloud.test")
        let log = Locked<[String]>([])
        let running = Locked(0)
        // Requests queued one after another (each waits until the previous is queued) commit in that order.
        var answers: [Task<Int, any Error>] = []
        for index in 0..<50 {
            let queued = Locked(false)
            answers.append(Task { @Sendable in
                try await queue.run(in: container) { () throws(ContainerError) -> Int in
                    queued.withLock { $0 = true }
                    let overlapping = running.withLock { count in count += 1; return count }
                    #expect(overlapping == 1, "two commits ran at once")
                    log.withLock { $0.append("commit \(index)") }
                    running.withLock { $0 -= 1 }
                    return index
                } durable: { () throws(ContainerError) in
                    log.withLock { $0.append("durable \(index)") }
                }
            })
            while !queued.withLock({ $0 }) { await Task.yield() }
        }
        for (index, answer) in answers.enumerated() { #expect(try await answer.value == index) }
        let entries = log.withLock { $0 }
        #expect(entries.filter { $0.hasPrefix("commit") } == (0..<50).map { "commit \($0)" })
        // Each answer came after its own durability wait.
        for index in 0..<50 {
            let commit = try #require(entries.firstIndex(of: "commit \(index)"))
            let durable = try #require(entries.firstIndex(of: "durable \(index)"))
            #expect(commit < durable)
        }
    }

    @Test func aFailedCommitOrSyncFailsOnlyItsRequest() async throws {
        let queue = CommitQueue()
        let container = try Container(containerIdentifier: "iCloud.test")
        await #expect(throws: ContainerError.self) {
            try await queue.run(in: container) { () throws(ContainerError) -> Int in throw ContainerError(.conflict, "refused") } durable: {}
        }
        do {
            _ = try await queue.run(in: container) { () throws(ContainerError) -> Int in 1 } durable: { () throws(ContainerError) in
                throw ContainerError(.internalError, "the disk is gone")
            }
            Issue.record("a failed sync answered success")
        } catch {
            #expect(error.code == .internalError)
            #expect(error.reason.contains("the disk is gone"))
        }
        #expect(try await queue.run(in: container) { () throws(ContainerError) -> Int in 7 } durable: {} == 7)
    }

    /// Modifies queued together to two container files, interleaved, are committed in batches per
    /// container: every one lands with its own result, one failing modify fails alone, and all
    /// are there after reopening.
    @Test func concurrentModifiesToTwoContainerFilesAllLand() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-commit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let paths = ["a", "b"].map { directory.appendingPathComponent("\($0).sqlite").path }
        let queue = CommitQueue()
        do {
            let containers = try paths.map { path throws(ContainerError) in try Container(containerIdentifier: "iCloud.test", path: path) }
            let databases = try containers.map { container throws(ContainerError) in try container.database(.public) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<200 {
                    let side = index % 2
                    let (container, database) = (containers[side], databases[side])
                    group.addTask {
                        // Record 77 is created twice on side 1 (index 77 and 277 do not exist: 153 does): the second fails alone.
                        let name = index == 153 ? "r77" : "r\(index)"
                        let record = Record(recordType: "Item", recordID: RecordID(recordName: name), fields: Fields([("i", .int64(Int64(index)))]))
                        let result = try await queue.run(in: container) { () throws(ContainerError) in
                            try database.modify([RecordOperation(kind: .create, record: record)], durably: false)
                        } durable: { () throws(ContainerError) in try container.waitUntilDurable() }
                        #expect((result.results.first?.error == nil) == (index != 153), "modify \(index): \(result.results)")
                    }
                }
                try await group.waitForAll()
            }
        }
        let reopened = try paths.map { path throws(ContainerError) in try Container(containerIdentifier: "iCloud.test", path: path).database(.public) }
        for index in 0..<200 where index != 153 {
            let record = try reopened[index % 2].record(RecordID(recordName: "r\(index)"))
            #expect(record?["i"] == .int64(Int64(index)), "record \(index)")
        }
    }

    /// A batch that fails before its commits run (reading their records ahead failed: on
    /// PostgreSQL, a name holding U+0000 failed the statement) runs each again alone: the others
    /// commit, the culprit fails, and every request is answered (they waited for ever before).
    @Test(.timeLimit(.minutes(1))) func aBatchThatFailsBeforeItsCommitsRunRunsEachAlone() async throws {
        let storage = PoisonedReadAheadStorage(try SQLiteContainerStorage(path: nil))
        let container = try Container(containerIdentifier: "iCloud.test", storage: storage, clock: { 1_700_000_000_000 })
        let key = DatabaseKey(environment: .development, scope: .public, userRecordName: "")
        let queue = CommitQueue()
        // The first commit holds the committer while the rest queue behind it: one batch.
        let started = Locked(false)
        let first = Task {
            try await queue.run(in: container) { () throws(ContainerError) -> Int in
                started.withLock { $0 = true }
                Thread.sleep(forTimeInterval: 0.3)
                return -1
            } durable: {}
        }
        while !started.withLock({ $0 }) { await Task.yield() }
        let answers = (0..<20).map { index in
            Task { () -> Result<Int, ContainerError> in
                let name = index == 7 ? "poison" : "r\(index)"
                do throws(ContainerError) {
                    return .success(try await queue.run(in: container, reading: (key, [RecordID(recordName: name)])) { () throws(ContainerError) -> Int in index } durable: {})
                } catch {
                    return .failure(error)
                }
            }
        }
        #expect(try await first.value == -1)
        for (index, answer) in answers.enumerated() {
            switch await answer.value {
            case .success(let value): #expect(index != 7 && value == index)
            case .failure(let error): #expect(index == 7 && error.reason == "unreadable name", "\(index): \(error)")
            }
        }
        #expect(storage.poisonedBatches.withLock { $0 } >= 1)
    }
}

/// A storage whose read-ahead fails for a record named "poison", as PostgreSQL's fails for a name
/// it cannot hold, before any of the batch's writes run.
private final class PoisonedReadAheadStorage: ForwardingStorage, @unchecked Sendable {
    let inner: any ContainerStorage
    let poisonedBatches = Locked(0)
    init(_ inner: SQLiteContainerStorage) { self.inner = inner }

    func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T {
        try inner.batch { writer throws(ContainerError) -> T in try body(writer.map { Writer(inner: $0, storage: self) }) }
    }

    final class Writer: StorageBatchWriter {
        let inner: any StorageBatchWriter
        let storage: PoisonedReadAheadStorage
        init(inner: any StorageBatchWriter, storage: PoisonedReadAheadStorage) {
            self.inner = inner
            self.storage = storage
        }

        func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T { try inner.write(body) }
        func prefetchRecords(_ ids: [RecordID], in key: DatabaseKey) throws(ContainerError) {
            if ids.contains(where: { $0.recordName == "poison" }) {
                storage.poisonedBatches.withLock { $0 += 1 }
                throw ContainerError(.badRequest, "unreadable name")
            }
        }
    }
}
