#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a pthread mutex: what `Synchronization.Mutex` is, but with a lock that
/// ThreadSanitizer understands. `Mutex` takes its futex with raw system calls that TSan does not
/// see, so every access it protects is reported as a race and the sanitizer suite cannot tell a
/// real race from it.
package final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Reached only holding `mutex`, which makes each access exclusive already (a nested
    /// `withLock` waits for the lock rather than overlap): Swift's run-time check is skipped.
    @exclusivity(unchecked) private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock; `body` must not let the value escape.
    package func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
