import AsyncHTTPClient
import KQuery
import KQueryContainer
import NIOCore
import NIOSSL
import ServiceLifecycle
import KQueryWebServices

import Foundation

/// Delivers the outbox's pushes to the devices users registered (`tokens/register`) through APNs'
/// provider API over HTTP/2 (SPEC §10), as a service beside the HTTP server.
///
/// Woken when a modify queues pushes (and every `pollInterval`), it reads each container's
/// notifications not yet acknowledged for `DeliveryChannel.apns` and POSTs each to
/// `/3/device/<token>` of every device of its owner, in the notification's environment. A push is
/// acknowledged for APNs once every device took it or refused it for good; a device that is gone
/// (410) is forgotten. 429, 403, 5xx and connection failures are retried with exponential backoff; when
/// the attempts run out the push stays pending and is tried again on a later pass, so a transient
/// failure never drops one.
public final class APNsDelivery: Service, Sendable {
    let configuration: APNsConfiguration
    let containers: ContainerDirectory
    let deviceTokens: DeviceTokens
    let providerToken: APNsProviderToken
    private let log: @Sendable (String) -> Void
    /// Told each push's final outcome for each device (the console's push log).
    private let outcomes: @Sendable (OutboxNotification, String, DeviceTokens.Registration, APNsOutcome) -> Void
    private let wakeups: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    /// How many pending pushes of a container one pass reads at a time.
    static let batchSize = 100

    init(
        configuration: APNsConfiguration, containers: ContainerDirectory, deviceTokens: DeviceTokens, logsToStandardError: Bool,
        outcomes: @escaping @Sendable (OutboxNotification, String, DeviceTokens.Registration, APNsOutcome) -> Void = { _, _, _, _ in }
    ) {
        self.configuration = configuration
        self.outcomes = outcomes
        self.containers = containers
        self.deviceTokens = deviceTokens
        providerToken = APNsProviderToken(
            teamID: configuration.teamID, keyID: configuration.keyID, key: configuration.privateKeyRepresentation,
            refreshInterval: configuration.tokenRefreshInterval)
        log = configuration.log ?? { line in
            if logsToStandardError { FileHandle.standardError.write(Data("apns: \(line)\n".utf8)) }
        }
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        wakeups = stream
        wake = continuation
        // The first pass delivers what was queued before the server started.
        wake.yield()
    }

    /// Asks for a pass over the outbox: a modify queued pushes.
    func pushesQueued() {
        wake.yield()
    }

    /// Delivers until the service group shuts down (SIGTERM): a send in flight is cancelled and its
    /// push stays pending.
    public func run() async throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if !configuration.trustRoots.isEmpty { tls.additionalTrustRoots = [.certificates(configuration.trustRoots)] }
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.tlsConfiguration = tls
        clientConfiguration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: clientConfiguration)
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { tasks in
                tasks.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: self.configuration.pollInterval)
                        self.wake.yield()
                    }
                }
                for await _ in self.wakeups {
                    guard !Task.isCancelled else { break }
                    await self.deliverPending(with: client)
                }
                tasks.cancelAll()
            }
        }
        try? await client.shutdown()
    }

    // MARK: A pass

    /// Delivers what every container holds for APNs.
    func deliverPending(with client: HTTPClient) async {
        // One node of many delivers at a time; the others' passes do nothing.
        guard containers.shared?.holdsAPNsDuty() ?? true else { return }
        var failures: [String] = []
        let all = containers.allContainers(failures: &failures)
        for failure in failures { log("cannot open container \(failure)") }
        // Hosts that did not answer this pass: their pushes wait for the next one rather than each
        // spend its own retries.
        var downHosts: Set<String> = []
        for container in all {
            var more = true
            while more, !Task.isCancelled {
                let pending: [OutboxNotification]
                do throws(ContainerError) { pending = try container.pendingNotifications(for: .apns, limit: Self.batchSize) } catch {
                    log("\(container.containerIdentifier): cannot read the outbox: \(error)")
                    break
                }
                var acknowledged: [Int64] = []
                for notification in pending where !Task.isCancelled {
                    if await deliver(notification, of: container.containerIdentifier, with: client, downHosts: &downHosts) {
                        acknowledged.append(notification.id)
                    }
                }
                do throws(ContainerError) { if !acknowledged.isEmpty { try container.acknowledge(acknowledged, channel: .apns) } } catch {
                    log("\(container.containerIdentifier): cannot acknowledge \(acknowledged.count) pushes: \(error)")
                    break
                }
                // A full batch that made progress may have more behind it; one that made none waits for the next pass.
                more = pending.count == Self.batchSize && !acknowledged.isEmpty
            }
        }
    }

    /// Sends one push to every device of its owner; true when it is done with (to be acknowledged).
    func deliver(_ notification: OutboxNotification, of containerIdentifier: String, with client: HTTPClient, downHosts: inout Set<String>) async -> Bool {
        let devices: [DeviceTokens.Registration]
        do {
            devices = try deviceTokens.registrations(
                containerIdentifier: containerIdentifier, environment: notification.database.environment.name, user: notification.owner)
        } catch {
            log("push \(notification.id) of \(containerIdentifier): its owner's devices cannot be read (\(error.reason)): left pending")
            return false
        }
        var done = true
        // CloudKit does not push a change to the device that made it (SPEC §10).
        for device in devices where device.apnsToken != notification.excludedDevice {
            guard !Task.isCancelled else { return false }
            let host = baseURL(for: device)
            guard !downHosts.contains(host) else {
                done = false
                continue
            }
            let outcome = await send(notification, to: device, with: client)
            outcomes(notification, containerIdentifier, device, outcome)
            switch outcome {
            case .delivered:
                break
            case .unregistered(let reason):
                log("device \(device.apnsToken) (\(device.apnsEnvironment)) is gone (410 \(reason)): forgotten")
                do throws(ServerError) { try deviceTokens.remove(apnsToken: device.apnsToken, apnsEnvironment: device.apnsEnvironment, containerIdentifier: containerIdentifier) } catch {
                    log("cannot forget device \(device.apnsToken): \(error.reason)")
                }
            case .refused(let status, let reason):
                log("push \(notification.id) of \(containerIdentifier) to device \(device.apnsToken) refused (\(status) \(reason)): dropped")
            case .throttled(let reason), .serviceFailed(let reason):
                // A send cancelled by shutdown is no failure to report; the push stays pending all the same.
                if !Task.isCancelled {
                    log("push \(notification.id) of \(containerIdentifier) to device \(device.apnsToken) failed \(configuration.maximumAttempts) times (\(reason)): left pending")
                }
                if case .serviceFailed = outcome { downHosts.insert(host) }
                done = false
            }
        }
        return done
    }

    /// One push to one device, sent again with exponential backoff while it fails transiently.
    func send(_ notification: OutboxNotification, to device: DeviceTokens.Registration, with client: HTTPClient) async -> APNsOutcome {
        var delay = configuration.initialBackoff
        var attempt = 1
        while true {
            let outcome = await sendOnce(notification, to: device, with: client)
            guard !outcome.isFinal, attempt < configuration.maximumAttempts, !Task.isCancelled else { return outcome }
            do { try await Task.sleep(for: delay) } catch { return outcome }
            delay = min(delay * 2, configuration.maximumBackoff)
            attempt += 1
        }
    }

    func sendOnce(_ notification: OutboxNotification, to device: DeviceTokens.Registration, with client: HTTPClient) async -> APNsOutcome {
        // A device token is hex; anything else would not make a path, and APNs would answer BadDeviceToken.
        guard !device.apnsToken.isEmpty, device.apnsToken.utf8.allSatisfy({ $0.isHexDigit }) else {
            return .refused(status: 400, reason: "BadDeviceToken")
        }
        var request = HTTPClientRequest(url: "\(baseURL(for: device))/3/device/\(device.apnsToken)")
        request.method = .POST
        do throws(ServerError) {
            request.headers.add(name: "authorization", value: "bearer \(try providerToken.current())")
        } catch {
            return .serviceFailed(reason: error.reason)
        }
        for (name, value) in Self.headers(for: notification, topic: configuration.topic, expiration: configuration.expiration) {
            request.headers.add(name: name, value: value)
        }
        request.body = .bytes(ByteBuffer(string: notification.payload.serialized))
        do {
            let timeout = configuration.requestTimeout.components
            let response = try await client.execute(request, timeout: .nanoseconds(timeout.seconds * 1_000_000_000 + timeout.attoseconds / 1_000_000_000))
            let body = try await response.body.collect(upTo: 64 * 1024)
            let outcome = APNsOutcome(status: Int(response.status.code), body: Array(body.readableBytesView))
            if case .serviceFailed(let reason) = outcome, reason.contains("ExpiredProviderToken") { providerToken.invalidate() }
            return outcome
        } catch {
            return .serviceFailed(reason: "\(error)")
        }
    }

    /// The production host for devices registered as "production", the sandbox for the others.
    func baseURL(for device: DeviceTokens.Registration) -> String {
        device.apnsEnvironment == "production" ? configuration.productionURL : configuration.sandboxURL
    }

    /// The `apns-*` headers of a push (SPEC §10); `authorization` is added by the sender.
    static func headers(for notification: OutboxNotification, topic: String, expiration: Duration) -> [(String, String)] {
        var headers: [(String, String)] = [
            ("apns-topic", topic),
            ("apns-push-type", notification.pushType),
            ("apns-priority", String(notification.priority)),
            ("apns-expiration", String(notification.created / 1000 + expiration.components.seconds)),
        ]
        if let nid = notification.payload["ck"]?["nid"]?.stringValue, let id = UUID(uuidString: nid) {
            headers.append(("apns-id", id.uuidString.lowercased()))
        }
        if let collapseID = notification.collapseID { headers.append(("apns-collapse-id", collapseID)) }
        return headers
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool { (48...57).contains(self) || (65...70).contains(self) || (97...102).contains(self) }
}
