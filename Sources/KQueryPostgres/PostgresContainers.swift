import KQuery
import KQueryContainer
import Logging
import NIOCore
import PostgresNIO

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Every container of one PostgreSQL database, as a `kquery serve --postgres URL` node sees them
/// (SPEC §16): opened on one pool of connections, with the secret the nodes share and the wake-up
/// they send each other when pushes are queued (LISTEN/NOTIFY, a hint only: the outbox rows are
/// the data, read with SQL).
public final class PostgresContainers: Sendable {
    public let location: PostgresLocation
    let pool: PostgresConnectionPool
    private let densePoints: Int
    private let opened = Locked<[String: Container]>([:])
    private let listener = Locked<Task<Void, Never>?>(nil)
    /// The connection holding the APNs duty's advisory lock, while this node holds it.
    private let duty = Locked<PostgresConnection?>(nil)

    /// This node, in its courier claims.
    private let node = UUID().uuidString

    /// The channel nodes NOTIFY when a transaction queued pushes.
    static let pushChannel = "kquery_pushes"
    /// The channel nodes NOTIFY with a copy of a push one of their WebSocket streams took, for
    /// the user's streams on the other nodes.
    static let copyChannel = "kquery_stream_copies"
    /// The longest copy one NOTIFY carries, in UTF-8 bytes (PostgreSQL refuses 8,000 and more);
    /// a longer one goes in parts (`StreamCopyParts`).
    public static let copyLimit = 7_900

    /// The most connections a node opens by default: four a core. More made the tail worse, not
    /// the throughput better: with 64 on a 2-core machine (node and PostgreSQL on it) indexed
    /// queries ran at the same rate with a p99 of 254-670 ms, with 4 or 8 at 70-83 ms.
    public static let defaultConnections = 4 * max(ProcessInfo.processInfo.activeProcessorCount, 1)

    /// Connects, and creates or migrates the schema. `connections`: the most open at once.
    /// `loading`: opened for a copy into it (`kquery migrate`), which builds the indexes a crashed
    /// copy left unbuilt at its end rather than now, over the rows it is about to add to.
    public convenience init(location: PostgresLocation, connections: Int = defaultConnections, loading: Bool = false) throws(ContainerError) {
        try self.init(location: location, connections: connections, loading: loading, densePoints: PostgresContainerStorage.densePoints)
    }

    /// `densePoints`: see `PostgresTransaction.densePoints` (tests make it small, so a few points
    /// take the ways a wide radius is read).
    package init(location: PostgresLocation, connections: Int = defaultConnections, loading: Bool = false, densePoints: Int) throws(ContainerError) {
        self.location = location
        self.densePoints = densePoints
        pool = PostgresConnectionPool(location: location, limit: connections)
        do {
            try pool.withConnection { session throws(ContainerError) in try PostgresSchema.migrate(session, loading: loading) }
        } catch {
            pool.shutdown()
            throw error
        }
    }

    deinit {
        listener.withLock { $0?.cancel() }
        if let connection = duty.withLock({ $0 }) { try? connection.close().wait() }
        pool.shutdown()
    }

    /// Closes the connections; containers opened here answer nothing after.
    public func close() {
        stopListening()
        releaseAPNsDuty()
        pool.shutdown()
    }

    /// Whether this node holds the APNs duty, trying to take it when nobody does: a session
    /// advisory lock on a connection of its own, which PostgreSQL releases when the connection
    /// ends (the node stopped or died), so another node's next pass takes it over.
    public func holdsAPNsDuty() -> Bool {
        duty.withLock { held in
            if let connection = held, !connection.isClosed { return true }
            held = nil
            var logger = Logger(label: "kquery.postgres.duty")
            logger.logLevel = .critical
            guard let connection = try? PostgresConnection.connect(
                on: pool.eventLoop, configuration: location.configuration, id: 0, logger: logger).wait()
            else { return false }
            let taken = try? PostgresSession.send(on: connection) { [logger] in
                connection.query("SELECT pg_try_advisory_lock(\(Int32(PostgresSchema.migrationLock)), \(Self.apnsDutyKey))", logger: logger)
            }.wait().rows.first?.decode(Bool.self)
            guard taken == true else {
                try? connection.close().wait()
                return false
            }
            held = connection
            return true
        }
    }

    /// Gives the APNs duty up (another node's next pass takes it).
    public func releaseAPNsDuty() {
        if let connection = duty.withLock({ held in defer { held = nil }; return held }) { try? connection.close().wait() }
    }

    /// Claims queued push `id` of container `identifier` for this node's web courier for `seconds`:
    /// false while another node's unlapsed claim holds it. Lapsed claims of the container are
    /// cleared on the way. A failure to ask is a refusal: the push waits, it is not lost.
    public func claimPush(_ id: Int64, of identifier: String, seconds: Int) -> Bool {
        let claimed = try? pool.withConnection { session throws(ContainerError) -> Bool in
            let rows = try session.rows("""
                WITH container AS (SELECT id FROM containers WHERE identifier = \(identifier)),
                     lapsed AS (DELETE FROM courier_claims WHERE container_id = (SELECT id FROM container) AND id <> \(id)
                                AND until < now() - interval '10 minutes')
                INSERT INTO courier_claims (container_id, id, holder, until)
                SELECT id, \(id), \(node), now() + make_interval(secs => \(Double(seconds))) FROM container
                ON CONFLICT (container_id, id) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
                WHERE courier_claims.until < now() OR courier_claims.holder = EXCLUDED.holder
                RETURNING id
                """)
            return !rows.isEmpty
        }
        return claimed ?? false
    }

    /// Registers a device token (again: registering twice keeps one).
    public func registerDevice(containerIdentifier: String, environment: String, user: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError) {
        _ = try pool.withConnection { session throws(ContainerError) in
            try session.run("""
                INSERT INTO device_tokens (container_id, environment, user_record_name, apns_environment, apns_token)
                SELECT id, \(environment), \(user), \(apnsEnvironment), \(apnsToken) FROM containers WHERE identifier = \(containerIdentifier)
                ON CONFLICT DO NOTHING
                """)
        }
    }

    /// Forgets a device token of a container.
    public func removeDevice(containerIdentifier: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError) {
        _ = try pool.withConnection { session throws(ContainerError) in
            try session.run("""
                DELETE FROM device_tokens WHERE container_id = (SELECT id FROM containers WHERE identifier = \(containerIdentifier))
                AND apns_environment = \(apnsEnvironment) AND apns_token = \(apnsToken)
                """)
        }
    }

    /// The device tokens a user registered in a container's environment.
    public func devices(containerIdentifier: String, environment: String, user: String) throws(ContainerError) -> [(apnsEnvironment: String, apnsToken: String)] {
        try pool.withConnection { session throws(ContainerError) in
            try session.rows("""
                SELECT apns_environment, apns_token FROM device_tokens
                WHERE container_id = (SELECT id FROM containers WHERE identifier = \(containerIdentifier))
                AND environment = \(environment) AND user_record_name = \(user) ORDER BY apns_environment, apns_token
                """).map { row throws(ContainerError) in
                let (apnsEnvironment, apnsToken) = try session.decode(row, (String, String).self)
                return (apnsEnvironment, apnsToken)
            }
        }
    }

    /// The second key of the APNs duty's advisory lock ("APNS"; container write locks use
    /// container numbers, which start at 1 and stay far below it).
    static let apnsDutyKey: Int32 = 0x4150_4E53

    /// The container `identifier`, opened (and created) on first use, then kept.
    public func openContainer(_ identifier: String, assetPolicy: AssetPolicy = AssetPolicy()) throws(ContainerError) -> Container {
        try opened.withLock { containers throws(ContainerError) -> Container in
            if let container = containers[identifier] { return container }
            let storage = try PostgresContainerStorage(pool: pool, containerIdentifier: identifier, migrated: true, densePoints: densePoints)
            let container = try Container(containerIdentifier: identifier, storage: storage, assetPolicy: assetPolicy)
            containers[identifier] = container
            return container
        }
    }

    /// Container `identifier`'s storage on these connections (created when new), to copy into or
    /// out of (`kquery migrate`).
    package func storage(_ identifier: String) throws(ContainerError) -> PostgresContainerStorage {
        try PostgresContainerStorage(pool: pool, containerIdentifier: identifier, migrated: true, densePoints: densePoints)
    }

    /// Every container the database holds.
    public func containerIdentifiers() throws(ContainerError) -> [String] {
        try pool.withConnection { session throws(ContainerError) in
            try session.rows("SELECT identifier FROM containers ORDER BY identifier").map { row throws(ContainerError) in try session.decode(row, String.self) }
        }
    }

    /// Spends a single-use web auth token (named by `key`, a hash of it) for every node: false when
    /// it was spent already. One spend in 256 also forgets the tokens past their expiry (refused as
    /// expired before they are looked up here), so the table holds a token lifetime's traffic.
    public func spendWebAuthToken(_ key: String, expires: Int64) throws(ContainerError) -> Bool {
        try pool.withConnection { session throws(ContainerError) -> Bool in
            if UInt8.random(in: 0...255) == 0 {
                let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
                try session.run("DELETE FROM spent_web_auth_tokens WHERE expires < \(now)")
            }
            return try session.run("""
                INSERT INTO spent_web_auth_tokens (token_key, expires) VALUES (\(key), \(expires)) ON CONFLICT (token_key) DO NOTHING
                """) == 1
        }
    }

    /// Takes back the spending of a token whose request failed.
    public func giveBackWebAuthToken(_ key: String) throws(ContainerError) {
        _ = try pool.withConnection { session throws(ContainerError) in try session.run("DELETE FROM spent_web_auth_tokens WHERE token_key = \(key)") }
    }

    // MARK: The user directory and learned schemas, shared by the nodes

    /// The user directory's entries (each one user's JSON object), by name.
    public func directoryUsers() throws(ContainerError) -> [(name: String, entry: String)] {
        try pool.withConnection { session throws(ContainerError) in
            try session.rows("SELECT name, entry FROM directory_users ORDER BY name").map { row throws(ContainerError) in
                let (name, entry) = try session.decode(row, (String, String).self)
                return (name, entry)
            }
        }
    }

    /// Saves a user's entry (again: replaces it) for every node.
    public func saveDirectoryUser(name: String, entry: String) throws(ContainerError) {
        _ = try pool.withConnection { session throws(ContainerError) in
            try session.run("""
                INSERT INTO directory_users (name, entry) VALUES (\(name), \(entry)) ON CONFLICT (name) DO UPDATE SET entry = EXCLUDED.entry
                """)
        }
    }

    /// The schema container `identifier` learned (Schema Language text) and its version; nil when
    /// it learned none yet (or there is no such container).
    public func learnedSchema(_ identifier: String) throws(ContainerError) -> (text: String, version: Int64)? {
        try pool.withConnection { session throws(ContainerError) -> (text: String, version: Int64)? in
            guard let row = try session.rows("""
                SELECT l.schema, l.version FROM learned_schemas l JOIN containers c ON c.id = l.container_id WHERE c.identifier = \(identifier)
                """).first else { return nil }
            let (text, version) = try session.decode(row, (String, Int64).self)
            return (text, version)
        }
    }

    /// Replaces container `identifier`'s learned schema with `text` as version `version + 1`, if
    /// it is still at `version` (0: none yet): false when another node changed it first (read it
    /// again, and grow that).
    public func replaceLearnedSchema(_ identifier: String, text: String, version: Int64) throws(ContainerError) -> Bool {
        try pool.withConnection { session throws(ContainerError) -> Bool in
            guard let row = try session.rows("SELECT id FROM containers WHERE identifier = \(identifier)").first else {
                throw ContainerError(.notFound, "\(location) holds no container \(identifier)")
            }
            let container = try session.decode(row, Int64.self)
            if version == 0 {
                return try session.run("""
                    INSERT INTO learned_schemas (container_id, version, schema) VALUES (\(container), 1, \(text)) ON CONFLICT (container_id) DO NOTHING
                    """) == 1
            }
            return try session.run("""
                UPDATE learned_schemas SET version = \(version + 1), schema = \(text) WHERE container_id = \(container) AND version = \(version)
                """) == 1
        }
    }

    /// The web auth secret all nodes share: 32 random bytes, made by the first node that asks.
    public func serverSecret() throws(ContainerError) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        let fresh = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return try pool.withConnection { session throws(ContainerError) in
            try session.run("""
                INSERT INTO server_secrets (name, value) VALUES ('web-auth', \(ByteBuffer(bytes: fresh))) ON CONFLICT (name) DO NOTHING
                """)
            guard let row = try session.rows("SELECT value FROM server_secrets WHERE name = 'web-auth'").first else {
                throw ContainerError(.internalError, "\(location): the shared secret could not be made")
            }
            var bytes = try session.decode(row, ByteBuffer.self)
            return bytes.readBytes(length: bytes.readableBytes) ?? []
        }
    }

    /// Sends `message` (a copy of a push a stream took) to every node's `listen(copied:)`, this
    /// one's too: one NOTIFY, or for a copy over `copyLimit` bytes its parts, in one transaction
    /// (PostgreSQL delivers a transaction's notifications together, in order). A copy that cannot
    /// be sent, or is over `StreamCopyParts.largest`, is dropped: it is a courtesy to the user's
    /// other devices, the push itself was delivered, and they get it at their next sync.
    public func publishStreamCopy(_ message: String) {
        guard let parts = StreamCopyParts.split(message, limit: Self.copyLimit) else { return }
        _ = try? pool.withConnection { session throws(ContainerError) in
            guard parts.count > 1 else { return try session.run("SELECT pg_notify(\(Self.copyChannel), \(message))") }
            try session.run("BEGIN")
            do throws(ContainerError) {
                for part in parts { try session.run("SELECT pg_notify(\(Self.copyChannel), \(part))") }
                return try session.run("COMMIT")
            } catch {
                _ = try? session.run("ROLLBACK")
                throw error
            }
        }
    }

    /// Calls `wake` with whom the pushes are for each time any node commits a transaction that
    /// queued pushes, and `copied` with each message any node publishes (`publishStreamCopy`),
    /// until `stopListening`; a lost connection is made again (a second later), then `wake` is
    /// called for everyone, since pushes may have been queued while nobody listened (copies sent
    /// meanwhile are missed).
    public func listen(wake: @escaping @Sendable (QueuedPushes) -> Void, copied: @escaping @Sendable (String) -> Void) {
        let location = location
        let task = Task.detached {
            var logger = Logger(label: "kquery.postgres.listen")
            logger.logLevel = .critical
            var attempt = 0
            while !Task.isCancelled {
                attempt += 1
                do {
                    let connection = try await PostgresConnection.connect(configuration: location.configuration, id: attempt, logger: logger)
                    defer { Task { try? await connection.close() } }
                    if attempt > 1 { wake(.everyone) }
                    // Both channels on the one connection; when either ends, the connection is made again.
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            try await connection.listen(on: Self.pushChannel) { notifications in
                                for try await notification in notifications { wake(QueuedPushes(notifyPayload: notification.payload)) }
                            }
                        }
                        group.addTask {
                            try await connection.listen(on: Self.copyChannel) { notifications in
                                var parts = StreamCopyParts()
                                for try await notification in notifications {
                                    if let message = parts.take(notification.payload) { copied(message) }
                                }
                            }
                        }
                        // (A LISTEN written as the connection closed would never be answered:
                        // the connection's end ends the group too.)
                        group.addTask { try await connection.closeFuture.get() }
                        _ = try? await group.next()
                        group.cancelAll()
                        // Ends both listens and the wait for the end (which no cancellation ends).
                        try? await connection.close()
                    }
                } catch {
                    if Task.isCancelled { return }
                }
                try? await Task.sleep(for: .seconds(1))
            }
        }
        listener.withLock { old in
            old?.cancel()
            old = task
        }
    }

    public func stopListening() {
        listener.withLock { task in
            task?.cancel()
            task = nil
        }
    }
}

/// A stream copy too long for one NOTIFY, in parts: each `"\u{1}part ID INDEX COUNT\n"` and a
/// slice of the message, cut between characters. A copy is JSON, so a message that does not
/// begin with the marker is whole. The listener puts parts together (`take`); PostgreSQL
/// delivers one transaction's notifications together and in order, so a copy's parts arrive
/// one after another, and a copy missing a part (its listener reconnected meanwhile) is dropped.
struct StreamCopyParts {
    /// The longest copy sent in parts, in UTF-8 bytes: a push's payload is a few kilobytes.
    static let largest = 64 * 1024
    static let marker = "\u{1}part "

    /// The copy being put together: its ID, its parts so far and how many it has.
    private var current: (id: String, parts: [Substring], count: Int)?

    /// `message` as it is (nil: over `largest`) when it fits in `limit` bytes, else its parts.
    static func split(_ message: String, limit: Int) -> [String]? {
        let bytes = message.utf8.count
        guard bytes > limit else { return [message] }
        guard bytes <= largest else { return nil }
        let id = UUID().uuidString
        // Each part's header is at most this long (ID, two numbers of at most 3 digits).
        let room = limit - (marker.utf8.count + id.utf8.count + 10)
        var slices: [Substring] = []
        var start = message.startIndex, size = 0
        var index = message.startIndex
        while index < message.endIndex {
            let next = message.index(after: index)
            let length = message.utf8.distance(from: index, to: next)
            if size + length > room {
                slices.append(message[start..<index])
                start = index
                size = 0
            }
            size += length
            index = next
        }
        slices.append(message[start..<message.endIndex])
        return slices.enumerated().map { "\(marker)\(id) \($0.offset) \(slices.count)\n\($0.element)" }
    }

    /// The whole message once `payload` completes it (or `payload` itself when it is whole); nil
    /// while parts are missing, or for a part out of order.
    mutating func take(_ payload: String) -> String? {
        guard payload.hasPrefix(Self.marker) else {
            current = nil
            return payload
        }
        guard let newline = payload.firstIndex(of: "\n") else { return nil }
        let header = payload[payload.index(payload.startIndex, offsetBy: Self.marker.count)..<newline].split(separator: " ")
        guard header.count == 3, let index = Int(header[1]), let count = Int(header[2]), count > 1, count <= 64, index < count else { return nil }
        let id = String(header[0]), slice = payload[payload.index(after: newline)...]
        if index == 0 {
            current = (id, [slice], count)
        } else if let partial = current, partial.id == id, partial.count == count, partial.parts.count == index {
            current?.parts.append(slice)
        } else {
            current = nil
            return nil
        }
        guard let whole = current, whole.parts.count == whole.count else { return nil }
        current = nil
        return whole.parts.joined()
    }
}
