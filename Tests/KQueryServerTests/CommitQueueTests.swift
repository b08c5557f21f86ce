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
        let log = Locked<[String]>([])
        let running = Locked(0)
        // Requests queued one after another (each waits until the previous is queued) commit in that order.
        var answers: [Task<Int, any Error>] = []
        for index in 0..<50 {
            let queued = Locked(false)
            answers.append(Task { @Sendable in
                try await queue.run { () throws(ContainerError) -> Int in
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
        await #expect(throws: ContainerError.self) {
            try await queue.run { () throws(ContainerError) -> Int in throw ContainerError(.conflict, "refused") } durable: {}
        }
        do {
            _ = try await queue.run { () throws(ContainerError) -> Int in 1 } durable: { () throws(ContainerError) in
                throw ContainerError(.internalError, "the disk is gone")
            }
            Issue.record("a failed sync answered success")
        } catch {
            #expect(error.code == .internalError)
            #expect(error.reason.contains("the disk is gone"))
        }
        #expect(try await queue.run { () throws(ContainerError) -> Int in 7 } durable: {} == 7)
    }
}
