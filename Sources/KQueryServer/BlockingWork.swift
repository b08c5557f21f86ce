import NIOPosix

/// The threads the container's blocking calls run on. A modify waits for its transaction to reach
/// the disk (fsync); run on Swift's cooperative pool, which has one thread per core, two such
/// waits would stall every other request. Here they wait on threads of their own, so concurrent
/// modifies can reach the container together and share its commits.
final class BlockingWork: Sendable {
    private let pool: NIOThreadPool

    init(threads: Int) {
        pool = NIOThreadPool(numberOfThreads: max(threads, 1))
        pool.start()
    }

    deinit {
        pool.shutdownGracefully { _ in }
    }

    /// Runs `body` on one of the pool's threads and returns what it returns or throws.
    func run<T: Sendable, Failure: Error>(_ body: @escaping @Sendable () throws(Failure) -> T) async throws(Failure) -> T {
        let outcome: Result<T, Failure>
        do {
            outcome = try await pool.runIfActive { () -> Result<T, Failure> in
                do throws(Failure) { return .success(try body()) } catch { return .failure(error) }
            }
        } catch {
            // The pool stops only when the server is released; run inline rather than refuse.
            do throws(Failure) { outcome = .success(try body()) } catch { outcome = .failure(error) }
        }
        return try outcome.get()
    }
}
