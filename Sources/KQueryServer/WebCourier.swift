import KQuery
import KQueryContainer
import KQueryWebServices
import ServiceLifecycle

import Foundation

/// The long-poll push channel CloudKit JS listens on (SPEC §10): `tokens/create` hands a client a
/// web courier URL, and each `GET` on it pops the oldest notification queued in the container's
/// outbox for the token's user (acknowledging it), or waits for one up to a timeout.
///
/// Pops are serialized by the actor, so two polls never deliver the same notification; a
/// notification is acknowledged only after it is handed over (at least once, SPEC §10).
actor WebCourier {
    /// What a web courier token stands for: one user's notifications in one container and environment.
    struct Subscriber: Hashable, Sendable {
        var containerIdentifier: String
        var environment: ContainerEnvironment
        var user: String
    }

    /// How many pending notifications a pop looks through for its user.
    static let scanLimit = 10_000

    private var waiters: [UUID: CheckedContinuation<Void, Never>] = [:]
    private var isShuttingDown = false
    /// The channels a pop acknowledges: the courier's own, and APNs' too when the server does not
    /// deliver to APNs (so the row leaves the outbox).
    let acknowledges: DeliveryChannel

    init(acknowledges: DeliveryChannel = .all) {
        self.acknowledges = acknowledges
    }

    /// The token of a web courier URL, and back.
    static func token(for subscriber: Subscriber, secret: ServerSecret) -> String {
        secret.token("courier", [subscriber.containerIdentifier, subscriber.environment.name, subscriber.user])
    }

    static func subscriber(token: String, secret: ServerSecret) -> Subscriber? {
        guard let parts = secret.parts("courier", of: token), parts.count == 3, let environment = ContainerEnvironment(name: parts[1]) else { return nil }
        return Subscriber(containerIdentifier: parts[0], environment: environment, user: parts[2])
    }

    /// The next notification's payload for `subscriber`, or nil when none came within `timeout`
    /// (or the server is shutting down).
    func next(for subscriber: Subscriber, in container: Container, timeout: Duration) async throws(ServerError) -> JSON? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let payload = try pop(for: subscriber, in: container) { return payload }
            if isShuttingDown || ContinuousClock.now >= deadline { return nil }
            await waitForPushes(until: deadline)
            if Task.isCancelled || Task.isShuttingDownGracefully { return nil }
        }
    }

    private func pop(for subscriber: Subscriber, in container: Container) throws(ServerError) -> JSON? {
        do throws(ContainerError) {
            let pending = try container.pendingNotifications(for: .webCourier, limit: Self.scanLimit)
            guard let notification = pending.first(where: { $0.owner == subscriber.user && $0.database.environment == subscriber.environment }) else {
                return nil
            }
            try container.acknowledge([notification.id], channel: acknowledges)
            return notification.payload
        } catch {
            throw ServerError(error)
        }
    }

    /// Suspends until pushes are queued, the deadline passes, the poll is cancelled or the server
    /// shuts down gracefully.
    private func waitForPushes(until deadline: ContinuousClock.Instant) async {
        let id = UUID()
        let timer = Task { [weak self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            await self?.wake(id)
        }
        await withTaskCancellationOrGracefulShutdownHandler {
            await suspend(id, until: deadline)
        } onCancelOrGracefulShutdown: {
            Task { await self.wake(id) }
        }
        timer.cancel()
    }

    private func suspend(_ id: UUID, until deadline: ContinuousClock.Instant) async {
        await withCheckedContinuation { continuation in
            // A wake that came before the poll was registered must not be lost.
            if isShuttingDown || Task.isCancelled || Task.isShuttingDownGracefully || ContinuousClock.now >= deadline {
                continuation.resume()
            } else {
                waiters[id] = continuation
            }
        }
    }

    private func wake(_ id: UUID) {
        waiters.removeValue(forKey: id)?.resume()
    }

    /// Wakes every waiting poll to look at the outbox again: a modify queued pushes.
    func pushesQueued() {
        let woken = waiters
        waiters = [:]
        for continuation in woken.values { continuation.resume() }
    }

    /// Ends every waiting poll (they answer 204) and every later wait: the server is stopping.
    func shutDown() {
        isShuttingDown = true
        pushesQueued()
    }
}
