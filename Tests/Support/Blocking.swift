import Foundation

/// Runs blocking work (a child process to its end, a pipe read) on a thread of its own and waits
/// for it without holding one of the concurrency pool's threads: there are as many as cores (two
/// here), and the in-process servers of the tests running beside it need them. A test that waited
/// on a child process in place stalled every other server in the test process.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
