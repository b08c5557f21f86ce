import Foundation
import KQuery
import KQueryContainer
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
}
