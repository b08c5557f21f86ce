import Foundation
import HummingbirdWSClient
import KQuery
import Logging

/// The web courier's WebSocket stream (`/aps/stream?tok=…`), held open while a store listens:
/// each frame is a push saying the store's zone may have changed. The stream is the device's own,
/// so every device of a user hears every push (but its own changes). A push that arrives while
/// nobody waits is remembered, so one that comes during a sync is not missed; a stream that
/// drops is opened again a second later, and reopening counts as a push (what came meanwhile is
/// fetched).
final class CourierListener: Sendable {
    private struct State {
        var url: String?
        var connection: Task<Void, Never>?
        var pending = false
        var waiter: (id: UUID, continuation: CheckedContinuation<Void, Never>)?
    }

    private let state = Locked(State())
    private static let logger = Logger(label: "kquery.kvs.courier", factory: { _ in SwiftLogNoOpLogHandler() })

    deinit {
        let waiter = state.withLock { state in
            state.connection?.cancel()
            return state.waiter.take()
        }
        waiter?.continuation.resume()
    }

    /// Returns at the next push on the stream at `url` (opened first when it is not), at once when
    /// one came since the last return, or after `timeout`, or when the task is cancelled.
    func wait(url: String, timeout: Duration) async {
        open(url)
        let id = UUID()
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.wake(id)
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let (now, replaced) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return (true, nil)
                    }
                    // One waiter at a time: an earlier one returns.
                    let replaced = state.waiter.take()?.continuation
                    state.waiter = (id, continuation)
                    return (false, replaced)
                }
                replaced?.resume()
                if now { continuation.resume() }
            }
        } onCancel: {
            wake(id)
        }
    }

    /// Stops listening: the stream closes and a waiter returns.
    func close() {
        let waiter = state.withLock { state in
            state.connection?.cancel()
            state.connection = nil
            state.url = nil
            return state.waiter.take()
        }
        waiter?.continuation.resume()
    }

    private func wake(_ id: UUID) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.waiter?.id == id else { return nil }
            return state.waiter.take()?.continuation
        }
        waiter?.resume()
    }

    private func pushed() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter.take() { return waiter.continuation }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    private func open(_ url: String) {
        state.withLock { state in
            guard state.url != url || state.connection == nil else { return }
            state.connection?.cancel()
            state.url = url
            let pushed: @Sendable () -> Void = { [weak self] in self?.pushed() }
            state.connection = Task {
                while !Task.isCancelled {
                    do {
                        try await WebSocketClient.connect(url: url, logger: Self.logger) { inbound, _, _ in
                            pushed()
                            for try await _ in inbound.messages(maxSize: 1 << 20) { pushed() }
                        }
                    } catch {
                        // Refused or dropped: try again in a moment.
                    }
                    try? await Task.sleep(for: .seconds(1))
                }
            }
        }
    }
}
