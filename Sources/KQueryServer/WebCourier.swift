import KQuery
import KQueryContainer
import KQueryWebServices
import ServiceLifecycle

import Foundation

/// The long-poll push channel CloudKit JS listens on (SPEC §10): `tokens/create` hands a client a
/// web courier URL, and each `GET` on it pops the oldest notification queued in the container's
/// outbox for the token's user, or waits for one up to a timeout.
///
/// Pops are serialized by the actor, and a popped notification is reserved while its answer is
/// written, so two polls never deliver the same one. It is acknowledged only once the answer was
/// written (`delivered`); a poll whose client left gives it back (`returned`), and a reservation
/// nobody settles lapses after `reservationLifetime`: at least once, never zero times (SPEC §10).
actor WebCourier {
    /// What a web courier token stands for: one user's notifications in one container and environment.
    struct Subscriber: Hashable, Sendable {
        var containerIdentifier: String
        var environment: ContainerEnvironment
        var user: String
    }

    /// A popped notification, reserved for the poll that took it until it is settled.
    struct Delivery: Sendable {
        var id: Int64
        var payload: JSON
        /// Whose notification it is, and the token of the poll or stream that took it.
        var subscriber: Subscriber
        var takenBy: String
        /// The device that made the change (never told of it).
        var excludedDevice: String?
    }

    /// An open WebSocket stream: the device (courier token) it listens as, and where copies of
    /// the pushes other streams or polls took for its user go.
    private struct Stream {
        var device: String
        var copies: AsyncStream<JSON>.Continuation
    }

    /// What a pop takes: a push for the client, or a push about a change the polling client made
    /// itself, which it must not get (SPEC §10) and the caller settles unseen.
    enum Taken: Sendable {
        case push(Delivery)
        case ownChange(Delivery)
    }

    /// How long a reservation holds when nobody settles it (an answer that was never written).
    static let reservationLifetime: Duration = .seconds(60)

    /// The notifications being handed over, and when each was taken.
    private var reserved: [Int64: ContinuousClock.Instant] = [:]
    /// The waiting polls and streams, by whose pushes they wait for: pushes queued for a user wake
    /// that user's alone (each woken poll reads the outbox).
    private var waiters: [Subscriber: [UUID: CheckedContinuation<Void, Never>]] = [:]
    /// For each subscriber with a poll in `next`, how many polls and how many wakes for the
    /// subscriber so far (a wake of everyone counts for each). A poll notes the wakes before it
    /// looks at the outbox and waits only if none came since, so a wake between its look and its
    /// wait is not lost.
    private var polling: [Subscriber: (polls: Int, wakes: Int)] = [:]
    /// How many times polls and streams have looked at the outbox (each look is a read of it).
    private(set) var looks = 0
    /// Each user's open streams: a push is taken from the user's queue once, and every other open
    /// stream of the user gets a copy, so each listening device hears it (but the one that made
    /// the change). On many nodes the copy goes to the other nodes' streams too (`shared`).
    private var streams: [Subscriber: [UUID: Stream]] = [:]
    /// This courier, in the copies it sends other nodes (so it passes over its own).
    private let node = UUID().uuidString
    private var isShuttingDown = false
    /// The channels a pop acknowledges: the courier's own, and APNs' too when the server does not
    /// deliver to APNs (so the row leaves the outbox).
    let acknowledges: DeliveryChannel

    /// The other nodes' couriers, when this server is one node of many: a push is claimed there
    /// too before it is handed out.
    let shared: (any SharedContainerStore)?

    /// The copies going to other nodes, sent one at a time in the order delivered.
    private let outgoing: AsyncStream<String>.Continuation?

    init(acknowledges: DeliveryChannel = .all, shared: (any SharedContainerStore)? = nil) {
        self.acknowledges = acknowledges
        self.shared = shared
        if let shared {
            let (messages, outgoing) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1_000))
            self.outgoing = outgoing
            Task.detached {
                for await message in messages { shared.publishStreamCopy(message) }
            }
        } else {
            outgoing = nil
        }
    }

    /// The token of a web courier URL (the client's `apnsToken`), and back. `client` tells the
    /// user's web clients apart (CloudKit JS's `clientId`), so that a modify naming this token as
    /// its device skips this client alone.
    static func token(for subscriber: Subscriber, client: String, secret: ServerSecret) -> String {
        secret.token("courier", [subscriber.containerIdentifier, subscriber.environment.name, subscriber.user, client])
    }

    /// The subscriber of a token (tokens of versions before clients were told apart have no client part).
    static func subscriber(token: String, secret: ServerSecret) -> Subscriber? {
        guard let parts = secret.parts("courier", of: token), parts.count == 3 || parts.count == 4,
              let environment = ContainerEnvironment(name: parts[1])
        else { return nil }
        return Subscriber(containerIdentifier: parts[0], environment: environment, user: parts[2])
    }

    /// The next notification for `subscriber`, polling with the token `device`, reserved until
    /// `delivered` or `returned`; or nil when none came within `timeout` (or the server is
    /// shutting down).
    func next(for subscriber: Subscriber, device: String, in container: Container, timeout: Duration) async throws(ServerError) -> Taken? {
        let deadline = ContinuousClock.now + timeout
        polling[subscriber, default: (0, 0)].polls += 1
        defer { endPolling(subscriber) }
        while true {
            let mark = wakeMark(subscriber)
            if let taken = try pop(for: subscriber, device: device, in: container) { return taken }
            if isShuttingDown || ContinuousClock.now >= deadline { return nil }
            await waitForPushes(of: subscriber, since: mark, until: deadline)
            if Task.isCancelled || Task.isShuttingDownGracefully { return nil }
        }
    }

    private func wakeMark(_ subscriber: Subscriber) -> Int { polling[subscriber]?.wakes ?? 0 }

    private func endPolling(_ subscriber: Subscriber) {
        guard let count = polling[subscriber]?.polls else { return }
        if count <= 1 { polling[subscriber] = nil } else { polling[subscriber]?.polls = count - 1 }
    }

    private func pop(for subscriber: Subscriber, device: String, in container: Container) throws(ServerError) -> Taken? {
        let now = ContinuousClock.now
        looks += 1
        reserved = reserved.filter { now - $0.value < Self.reservationLifetime }
        do throws(ContainerError) {
            // Past the reserved ones there are a few more, if the user has any.
            let pending = try container.pendingNotifications(
                for: .webCourier, recipient: OutboxRecipient(owner: subscriber.user, environment: subscriber.environment), limit: reserved.count + 8)
            for notification in pending where reserved[notification.id] == nil {
                reserved[notification.id] = now
                // Held by another node's poll: skipped here until that claim lapses or it is
                // acknowledged (reserved, so later pops pass over it); the next one may be free.
                if let shared, !shared.claimPush(notification.id, of: container.containerIdentifier, seconds: Int(Self.reservationLifetime.components.seconds)) {
                    continue
                }
                let delivery = Delivery(
                    id: notification.id, payload: notification.payload, subscriber: subscriber, takenBy: device, excludedDevice: notification.excludedDevice)
                return notification.excludedDevice == device ? .ownChange(delivery) : .push(delivery)
            }
            return nil
        } catch {
            throw ServerError(error)
        }
    }

    /// Settles a delivery whose answer was written: no longer reserved (the caller has
    /// acknowledged it in the outbox, on `acknowledges`).
    func delivered(_ delivery: Delivery) {
        reserved[delivery.id] = nil
        copy(delivery.payload, to: delivery.subscriber, takenBy: delivery.takenBy, excluded: delivery.excludedDevice)
        if let outgoing {
            let message = JSON.object([
                ("node", .string(node)), ("container", .string(delivery.subscriber.containerIdentifier)),
                ("environment", .string(delivery.subscriber.environment.name)), ("user", .string(delivery.subscriber.user)),
                ("takenBy", .string(delivery.takenBy)), ("excluded", delivery.excludedDevice.map(JSON.string) ?? .null),
                ("payload", delivery.payload),
            ]).serialized
            outgoing.yield(message)
        }
    }

    /// Hands `payload` to each of `subscriber`'s streams here but the one that took it and the
    /// device whose change it tells of.
    private func copy(_ payload: JSON, to subscriber: Subscriber, takenBy: String, excluded: String?) {
        for stream in streams[subscriber, default: [:]].values where stream.device != takenBy && stream.device != excluded {
            stream.copies.yield(payload)
        }
    }

    /// A copy another node published (`delivered` there): handed to this node's streams of the
    /// user. Copies this courier sent, and messages that do not read as copies, are passed over.
    func copied(_ message: String) {
        guard let json = try? JSON.parse(message), let from = json["node"]?.stringValue, from != node,
              let container = json["container"]?.stringValue, let environment = json["environment"]?.stringValue.flatMap(ContainerEnvironment.init(name:)),
              let user = json["user"]?.stringValue, let takenBy = json["takenBy"]?.stringValue, let payload = json["payload"]
        else { return }
        copy(payload, to: Subscriber(containerIdentifier: container, environment: environment, user: user), takenBy: takenBy, excluded: json["excluded"]?.stringValue)
    }

    /// Opens a stream for `device`: the copies of pushes others take for its user arrive on the
    /// sequence (the newest 1,000 are held when the stream falls behind) until `closeStream`.
    func openStream(for subscriber: Subscriber, device: String) -> (UUID, AsyncStream<JSON>) {
        let id = UUID()
        let (copies, continuation) = AsyncStream.makeStream(of: JSON.self, bufferingPolicy: .bufferingNewest(1_000))
        streams[subscriber, default: [:]][id] = Stream(device: device, copies: continuation)
        return (id, copies)
    }

    func closeStream(_ id: UUID, of subscriber: Subscriber) {
        streams[subscriber]?.removeValue(forKey: id)?.copies.finish()
        if streams[subscriber]?.isEmpty == true { streams[subscriber] = nil }
    }

    /// Settles a delivery whose answer could not be written: the next poll takes it.
    func returned(_ delivery: Delivery) {
        reserved[delivery.id] = nil
        wakePolls(of: delivery.subscriber)
    }

    /// Suspends until pushes are queued, the deadline passes, the poll is cancelled or the server
    /// shuts down gracefully.
    private func waitForPushes(of subscriber: Subscriber, since mark: Int, until deadline: ContinuousClock.Instant) async {
        let id = UUID()
        let timer = Task { [weak self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            await self?.wake(id, of: subscriber)
        }
        await withTaskCancellationOrGracefulShutdownHandler {
            await suspend(id, of: subscriber, since: mark, until: deadline)
        } onCancelOrGracefulShutdown: {
            Task { await self.wake(id, of: subscriber) }
        }
        timer.cancel()
    }

    private func suspend(_ id: UUID, of subscriber: Subscriber, since mark: Int, until deadline: ContinuousClock.Instant) async {
        await withCheckedContinuation { continuation in
            // A wake that came before the poll was registered must not be lost.
            if isShuttingDown || Task.isCancelled || Task.isShuttingDownGracefully || ContinuousClock.now >= deadline || wakeMark(subscriber) != mark {
                continuation.resume()
            } else {
                waiters[subscriber, default: [:]][id] = continuation
            }
        }
    }

    private func wake(_ id: UUID, of subscriber: Subscriber) {
        guard let continuation = waiters[subscriber]?.removeValue(forKey: id) else { return }
        if waiters[subscriber]?.isEmpty == true { waiters[subscriber] = nil }
        continuation.resume()
    }

    /// Wakes the waiting polls of `subscriber` to look at the outbox again.
    private func wakePolls(of subscriber: Subscriber) {
        polling[subscriber]?.wakes += 1
        guard let woken = waiters.removeValue(forKey: subscriber) else { return }
        for continuation in woken.values { continuation.resume() }
    }

    /// Wakes the polls of those pushes were queued for (this node's modify, or any node's).
    func pushesQueued(_ pushes: QueuedPushes) {
        switch pushes {
        case .everyone: pushesQueued()
        case .recipients(let containerIdentifier, let recipients):
            for recipient in recipients {
                wakePolls(of: Subscriber(containerIdentifier: containerIdentifier, environment: recipient.environment, user: recipient.owner))
            }
        }
    }

    /// Wakes every waiting poll to look at the outbox again.
    func pushesQueued() {
        for subscriber in polling.keys { polling[subscriber]?.wakes += 1 }
        let woken = waiters
        waiters = [:]
        for continuation in woken.values.lazy.flatMap(\.values) { continuation.resume() }
    }

    /// Ends every waiting poll (they answer 204) and every later wait: the server is stopping.
    func shutDown() {
        isShuttingDown = true
        for stream in streams.values.flatMap(\.values) { stream.copies.finish() }
        streams = [:]
        outgoing?.finish()
        pushesQueued()
    }
}
