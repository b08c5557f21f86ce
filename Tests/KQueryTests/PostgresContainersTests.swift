import Foundation
import KQuery
import KQueryContainer
@testable import KQueryPostgres
import KQueryTestSupport
import NIOCore
import Testing

/// What the nodes on one PostgreSQL share besides containers (SPEC §16): the schema, made once
/// whichever starts first; the token secret; one APNs duty at a time; and URLs read safely.
@Suite struct PostgresContainersTests {
    static func location() throws -> PostgresLocation {
        let url = try PostgresCluster.start().createDatabase()
        return try #require(PostgresLocation(url: url))
    }

    /// Two nodes' shared state on `location`: one to publish stream copies, one to listen.
    static func publisherAndListener(on location: PostgresLocation) throws -> (publisher: PostgresContainers, listener: PostgresContainers) {
        (try PostgresContainers(location: location, connections: 2), try PostgresContainers(location: location, connections: 2))
    }

    static func close(_ publisher: PostgresContainers, _ listener: PostgresContainers) {
        listener.stopListening()
        publisher.close()
        listener.close()
    }

    @Test func nodesShareTheSchemaTheSecretAndTheContainers() throws {
        let location = try Self.location()
        let first = try PostgresContainers(location: location, connections: 2)
        let second = try PostgresContainers(location: location, connections: 2)
        defer {
            first.close()
            second.close()
        }
        #expect(try first.serverSecret() == second.serverSecret())
        #expect(try first.serverSecret().count == 32)
        let container = try first.openContainer("iCloud.shared")
        _ = try container.database(.public).modify([RecordOperation(kind: .create, record: Record(recordType: "Note", recordID: RecordID(recordName: "n")))])
        #expect(try second.containerIdentifiers() == ["iCloud.shared"])
        let seen = try second.openContainer("iCloud.shared").database(.public).lookup([RecordID(recordName: "n")])
        #expect(seen.count == 1)
        #expect(seen.first?.record?.recordType == "Note")
    }

    /// Queries run as SQL in PostgreSQL (no node keeps a database in memory): writes and queries
    /// interleaved at random across two nodes always see every record written so far, and no other.
    @Test func queriesOnEitherNodeSeeEveryWriteSoFar() throws {
        let location = try Self.location()
        let nodes = [try PostgresContainers(location: location, connections: 2), try PostgresContainers(location: location, connections: 2)]
        defer { for node in nodes { node.close() } }
        let databases = try nodes.map { try $0.openContainer("iCloud.queries").database(.public) }
        let query = Query(recordType: "Note", predicate: try ValidatedPredicate("TRUEPREDICATE"))
        var generator = SplitMix(seed: 36)
        var written: Set<String> = []
        for step in 0..<120 {
            let node = Int.random(in: 0...1, using: &generator)
            switch Int.random(in: 0...2, using: &generator) {
            case 0:
                let name = "n\(step)"
                _ = try databases[node].modify([RecordOperation(kind: .create, record: Record(recordType: "Note", recordID: RecordID(recordName: name)))])
                written.insert(name)
            case 1:
                guard let name = written.randomElement(using: &generator) else { continue }
                _ = try databases[node].modify([RecordOperation(kind: .forceDelete, record: Record(recordType: "Note", recordID: RecordID(recordName: name)))])
                written.remove(name)
            default:
                let seen = Set(try databases[node].query(query, now: nil).records.map(\.recordID.recordName))
                #expect(seen == written, "step \(step), node \(node)")
                #expect(!databases[node].queriesAreInMemory)
            }
        }
    }

    /// A node keeps the subscriptions it read while nobody changes them (`subscriptionsVersion`),
    /// and reads them again once another node has: a subscription saved on one node fires for the
    /// other's next modify, and once deleted fires no more, whether the modify commits alone or in a
    /// batch (as the server's committer makes them), the other node's set read before each change.
    @Test(arguments: [false, true]) func aNodeSeesSubscriptionChangesMadeOnAnother(batched: Bool) throws {
        let location = try Self.location()
        let nodes = [try PostgresContainers(location: location, connections: 2), try PostgresContainers(location: location, connections: 2)]
        defer { for node in nodes { node.close() } }
        let containers = try nodes.map { try $0.openContainer("iCloud.subscriptions") }
        let databases = try containers.map { try $0.database(.public) }
        var created = 0
        func create(_ price: Int64) throws -> [String] {
            created += 1
            let operations = [RecordOperation(kind: .create, record: Record(recordType: "Item", recordName: "i\(created)", fields: ["price": .int64(price)]))]
            guard batched else { return try databases[1].modify(operations).notifications.map(\.subscriptionID) }
            var fired: [String] = []
            var failure: (any Error)?
            try containers[1].batchingWrites(prefetching: [databases[1].key: operations.map(\.record.recordID)]) {
                do { fired = try databases[1].modify(operations, durably: false).notifications.map(\.subscriptionID) } catch { failure = error }
            }
            if let failure { throw failure }
            return fired
        }
        func subscription(_ id: String, _ predicate: String) throws -> Subscription {
            Subscription(subscriptionID: id, kind: .query(recordType: "Item", condition: try ValidatedPredicate(predicate).condition, zoneID: nil),
                         options: [.firesOnRecordCreation])
        }
        // The second node reads the (empty) set, then the first saves, changes and deletes.
        #expect(try create(5) == [])
        _ = try databases[0].saveSubscription(try subscription("fives", "price == 5"))
        #expect(try create(5) == ["fives"])
        #expect(try create(6) == [])
        _ = try databases[0].saveSubscription(try subscription("fives", "price == 6"))
        #expect(try create(5) == [])
        #expect(try create(6) == ["fives"])
        try databases[0].deleteSubscription("fives")
        #expect(try create(6) == [])
        // And a change the second node makes itself is seen by the first.
        _ = try databases[1].saveSubscription(try subscription("sevens", "price == 7"))
        let fired = try databases[0].modify([RecordOperation(kind: .create, record: Record(recordType: "Item", recordName: "j", fields: ["price": .int64(7)]))])
        #expect(fired.notifications.map(\.subscriptionID) == ["sevens"])
    }

    /// A node's own subscription changes keep the set it holds current: saving subscriptions one
    /// write at a time never reads the stored set again (each save read every subscription, so
    /// saving n took O(n²): 100,000 through the server did not finish in 10 minutes), while
    /// another node's change is read once. Counted in the statements PostgreSQL logged.
    @Test func aNodesOwnSubscriptionChangesKeepItsSetCurrent() throws {
        let cluster = try PostgresCluster.start()
        let (name, url) = try cluster.createNamedDatabase()
        let location = try #require(PostgresLocation(url: url))
        let nodes = [try PostgresContainers(location: location, connections: 2), try PostgresContainers(location: location, connections: 2)]
        defer { for node in nodes { node.close() } }
        let databases = try nodes.map { try $0.openContainer("iCloud.own").database(.public) }
        func reads() throws -> Int {
            try cluster.log().split(separator: "\n").count { $0.hasPrefix("@\(name)@") && $0.contains("SELECT body FROM subscriptions") }
        }
        var created = 0
        func create(_ price: Int64, on node: Int = 0) throws -> [String] {
            created += 1
            let record = Record(recordType: "Item", recordName: "i\(created)", fields: ["price": .int64(price)])
            return try databases[node].modify([RecordOperation(kind: .create, record: record)]).notifications.map(\.subscriptionID)
        }
        func save(_ id: String, price: Int, on node: Int = 0, options: SubscriptionOptions = [.firesOnRecordCreation]) throws {
            let condition = try ValidatedPredicate("price == \(price)").condition
            _ = try databases[node].saveSubscription(
                Subscription(subscriptionID: id, kind: .query(recordType: "Item", condition: condition, zoneID: nil), options: options))
        }
        #expect(try create(3) == [])
        let start = try reads()
        for n in 0..<20 { try save("s\(n)", price: n) }
        try databases[0].deleteSubscription("s5")
        #expect(try create(3) == ["s3"])
        #expect(try create(5) == [])
        #expect(try reads() == start, "the node read its own changes back")
        try save("other", price: 3, on: 1, options: [.firesOnRecordCreation, .firesOnRecordUpdate])
        #expect(try reads() == start + 1, "the second node reads the set once")
        #expect(try create(3) == ["s3", "other"])
        #expect(try create(3) == ["s3", "other"])
        #expect(try reads() == start + 2, "the first node reads the other's change once")
    }

    /// A batch of modifies (what the server's committer runs) sends its records and its pushes
    /// together, and no savepoint for a modify that sent nothing before it ended (`HeldWrites`):
    /// each modify was four statements, each a message both ends handled. Counted in the
    /// statements PostgreSQL logged; the records and pushes read back whole.
    @Test func aBatchSendsItsModifiesRecordsAndPushesTogether() throws {
        let cluster = try PostgresCluster.start()
        let (name, url) = try cluster.createNamedDatabase()
        let location = try #require(PostgresLocation(url: url))
        let node = try PostgresContainers(location: location, connections: 2)
        defer { node.close() }
        let container = try node.openContainer("iCloud.held")
        let database = try container.database(.public)
        let condition = try ValidatedPredicate("price >= 0").condition
        _ = try database.saveSubscription(Subscription(
            subscriptionID: "all", kind: .query(recordType: "Item", condition: condition, zoneID: nil), options: [.firesOnRecordCreation]))
        func executed(_ text: String) throws -> Int {
            try cluster.log().split(separator: "\n").count { $0.hasPrefix("@\(name)@") && $0.contains("execute") && $0.contains(text) }
        }
        let before = (savepoints: try executed("SAVEPOINT"), outbox: try executed("INSERT INTO outbox"),
                      one: try executed("WITH t AS (DELETE FROM record_tombstones"), many: try executed("WITH input AS"))
        var results: [String] = []
        // Their records read ahead, as the committer reads them: a modify's read of its record
        // is then no statement (one would send what earlier modifies held, and open its savepoint).
        let ids = (1...3).map { RecordID(recordName: "i\($0)") }
        try container.batchingWrites(prefetching: [database.key: ids]) {
            for n in 1...3 {
                let record = Record(recordType: "Item", recordName: "i\(n)", fields: ["price": .int64(Int64(n))])
                let result = try? database.modify([RecordOperation(kind: .create, record: record)], durably: false)
                results.append(result?.notifications.map(\.subscriptionID).joined() ?? "failed")
            }
        }
        #expect(results == ["all", "all", "all"])
        #expect(try executed("SAVEPOINT") == before.savepoints, "a modify that sent nothing opened a savepoint")
        #expect(try executed("INSERT INTO outbox") == before.outbox + 1)
        #expect(try executed("WITH t AS (DELETE FROM record_tombstones") == before.one)
        #expect(try executed("WITH input AS") == before.many + 1)
        for n in 1...3 {
            #expect(try database.record(RecordID(recordName: "i\(n)"))?["price"] == .int64(Int64(n)))
        }
        let pushes = try container.pendingNotifications()
        #expect(pushes.map { $0.payload["ck"]?["qry"]?["rid"]?.stringValue } == ["i1", "i2", "i3"])
        #expect(pushes.allSatisfy { $0.collapseID == nil && $0.excludedDevice == nil && $0.subscriptionID == "all" })
    }

    @Test func oneNodeAtATimeHoldsTheAPNsDuty() throws {
        let location = try Self.location()
        let first = try PostgresContainers(location: location, connections: 1)
        let second = try PostgresContainers(location: location, connections: 1)
        defer { second.close() }
        #expect(first.holdsAPNsDuty())
        #expect(first.holdsAPNsDuty())
        #expect(!second.holdsAPNsDuty())
        // The holder stops (its connection ends, as when it dies): the other takes the duty over
        // on one of its next passes (the server lets the lock go once it sees the connection end).
        first.close()
        var taken = false
        for _ in 0..<100 where !taken {
            taken = second.holdsAPNsDuty()
            if !taken { usleep(100_000) }
        }
        #expect(taken)
    }

    /// A push claimed by one node's courier is not handed out by another's until the claim
    /// lapses; the holder may claim it again (a poll whose answer was not written).
    @Test func aPushIsClaimedByOneNodeAtATime() throws {
        let location = try Self.location()
        let first = try PostgresContainers(location: location, connections: 1)
        let second = try PostgresContainers(location: location, connections: 1)
        defer {
            first.close()
            second.close()
        }
        _ = try first.openContainer("iCloud.claims")
        #expect(first.claimPush(7, of: "iCloud.claims", seconds: 60))
        #expect(!second.claimPush(7, of: "iCloud.claims", seconds: 60))
        #expect(first.claimPush(7, of: "iCloud.claims", seconds: 0))
        // Lapsed (0 seconds): the other node takes it.
        #expect(second.claimPush(7, of: "iCloud.claims", seconds: 60))
        #expect(second.claimPush(8, of: "iCloud.claims", seconds: 60))
        #expect(!first.claimPush(7, of: "iCloud.unknown", seconds: 60))
    }

    /// PostgreSQL text cannot hold U+0000: such a name is refused as a bad request, and nothing
    /// of the modify is kept (SQLite stores it; this is the one difference, in README).
    /// A copy of a push one node's stream took reaches every node's listener whole, one too long
    /// for a NOTIFY (PostgreSQL refuses 8,000 bytes) in parts put together again, in the order
    /// published; one over the largest is dropped, not cut.
    @Test func streamCopiesOfAnySizeReachTheOtherNodesWhole() async throws {
        let (publisher, listener) = try Self.publisherAndListener(on: try Self.location())
        defer { Self.close(publisher, listener) }
        let (received, arriving) = AsyncStream.makeStream(of: String.self)
        listener.listen(wake: { _ in }, copied: { arriving.yield($0) })
        // Nothing waits for ever: after 60 s the stream ends.
        let deadline = Task {
            try await Task.sleep(for: .seconds(60))
            arriving.finish()
        }
        defer { deadline.cancel() }
        // The listener is listening once a probe it is sent arrives.
        var iterator = received.makeAsyncIterator()
        let probe = Task {
            for _ in 0..<100 {
                publisher.publishStreamCopy(#"{"probe":true}"#)
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        while let message = await iterator.next(), message != #"{"probe":true}"# {}
        probe.cancel()
        _ = await probe.result
        let long = #"{"payload":""# + String(repeating: "é日🙂x", count: 2_500) + #""}"#
        #expect(long.utf8.count > 3 * PostgresContainers.copyLimit)
        let messages = [#"{"n":1}"#, long, #"{"n":2}"#, String(repeating: "a", count: StreamCopyParts.largest + 1), #"{"n":3}"#]
        for message in messages { publisher.publishStreamCopy(message) }
        var got: [String] = []
        while let message = await iterator.next() {
            if message != #"{"probe":true}"# { got.append(message) }
            if message == #"{"n":3}"# { break }
        }
        #expect(got == [#"{"n":1}"#, long, #"{"n":2}"#, #"{"n":3}"#])
    }

    /// A node whose listening connection PostgreSQL ended (a restart, an administrator) connects
    /// again, wakes its couriers (pushes queued meanwhile), and hears what is sent after.
    @Test(.timeLimit(.minutes(1))) func aListenerWhoseConnectionEndedListensAgain() async throws {
        let cluster = try PostgresCluster.start()
        let (name, url) = try cluster.createNamedDatabase()
        let (publisher, listener) = try Self.publisherAndListener(on: try #require(PostgresLocation(url: url)))
        defer { Self.close(publisher, listener) }
        let wakes = Locked(0)
        let (received, arriving) = AsyncStream.makeStream(of: String.self)
        listener.listen(wake: { pushes in if pushes == .everyone { wakes.withLock { $0 += 1 } } }, copied: { arriving.yield($0) })
        var iterator = received.makeAsyncIterator()
        // Sends `probe` until the listener hears it.
        func heard(_ probe: String) async -> Bool {
            let sending = Task {
                for _ in 0..<400 {
                    publisher.publishStreamCopy(probe)
                    try await Task.sleep(for: .milliseconds(100))
                }
                arriving.finish()
            }
            defer { sending.cancel() }
            while let message = await iterator.next() {
                if message == probe { return true }
            }
            return false
        }
        #expect(await heard(#"{"probe":1}"#))
        #expect(try cluster.endConnections(to: name, where: "query LIKE 'LISTEN%'") == 1)
        #expect(await heard(#"{"probe":2}"#))
        #expect(wakes.withLock { $0 } >= 1)
    }

    /// A commit that queues pushes wakes every node with whom they are for: the container and
    /// each subscription owner's environment and name, so a node wakes only those users' polls.
    @Test(.timeLimit(.minutes(1))) func aCommitsWakeNamesWhomItsPushesAreFor() async throws {
        let (publisher, listener) = try Self.publisherAndListener(on: try Self.location())
        defer { Self.close(publisher, listener) }
        let (received, arriving) = AsyncStream.makeStream(of: QueuedPushes.self)
        listener.listen(wake: { arriving.yield($0) }, copied: { _ in })
        let container = try publisher.openContainer("iCloud.wakes")
        for user in ["_dave", "_eve"] {
            let condition = try ValidatedPredicate("TRUEPREDICATE").condition
            _ = try container.database(.public, environment: .production, user: user).saveSubscription(
                Subscription(subscriptionID: "all-\(user)", kind: .query(recordType: "Note", condition: condition, zoneID: nil), options: [.firesOnRecordCreation]))
        }
        // Modifies until the listener (listening as soon as its connection is made) hears one.
        let modifying = Task {
            for n in 0..<400 {
                _ = try container.database(.public, environment: .production).modify(
                    [RecordOperation(kind: .create, record: Record(recordType: "Note", recordID: RecordID(recordName: "n\(n)")))])
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        defer { modifying.cancel() }
        var iterator = received.makeAsyncIterator()
        let wake = await iterator.next()
        // Stopped before the nodes close (a modify outliving them failed: see `shutdown`).
        modifying.cancel()
        _ = await modifying.result
        let expected: Set = [OutboxRecipient(owner: "_dave", environment: .production), OutboxRecipient(owner: "_eve", environment: .production)]
        #expect(wake == .recipients(containerIdentifier: "iCloud.wakes", expected))
    }

    /// The wake-up's payload: whom it names read back the same; too many to fit, or a payload that
    /// does not read (another version's), wake everyone.
    @Test func aWakesPayloadReadsBackOrWakesEveryone() {
        let recipients = Set((0..<50).map { OutboxRecipient(owner: "_user\($0) \"🙂\"", environment: $0 % 2 == 0 ? .development : .production) })
        let named = QueuedPushes.recipients(containerIdentifier: "iCloud.com.example", recipients)
        #expect(QueuedPushes(notifyPayload: named.notifyPayload) == named)
        #expect(named.notifyPayload.utf8.count <= QueuedPushes.notifyPayloadLimit)
        let many = QueuedPushes.recipients(containerIdentifier: "iCloud.com.example", Set((0..<1_000).map { OutboxRecipient(owner: "_u\($0)", environment: .development) }))
        #expect(many.notifyPayload == "")
        for payload in ["", "{", "[]", #"{"container":"c"}"#, #"{"container":"c","to":[["staging","_a"]]}"#, #"{"container":"c","to":[["development"]]}"#] {
            #expect(QueuedPushes(notifyPayload: payload) == .everyone, "\(payload)")
        }
        #expect(QueuedPushes.everyone.notifyPayload == "")
    }

    @Test func streamCopyPartsPutTogetherOnlyWholeCopies() throws {
        let message = String(repeating: "ab🙂", count: 3_000)
        let parts = try #require(StreamCopyParts.split(message, limit: 1_000))
        #expect(parts.count > 10 && parts.allSatisfy { $0.utf8.count <= 1_000 })
        var taker = StreamCopyParts()
        #expect(parts.dropLast().allSatisfy { taker.take($0) == nil })
        #expect(taker.take(parts[parts.count - 1]) == message)
        // A part missing: nothing, and the next whole message passes.
        taker = StreamCopyParts()
        for (index, part) in parts.enumerated() where index != 3 { #expect(taker.take(part) == nil) }
        #expect(taker.take("{}") == "{}")
        // A part from another copy in the middle: both dropped.
        let other = try #require(StreamCopyParts.split(message, limit: 1_000))
        taker = StreamCopyParts()
        _ = taker.take(parts[0])
        #expect(taker.take(other[1]) == nil)
        #expect(parts.dropFirst().allSatisfy { taker.take($0) == nil })
        // Short messages stay whole; too long ones are not sent.
        #expect(StreamCopyParts.split("{}", limit: 1_000) == ["{}"])
        #expect(StreamCopyParts.split(String(repeating: "a", count: StreamCopyParts.largest + 1), limit: 1_000) == nil)
        // Malformed parts are passed over.
        for bad in ["\u{1}part ", "\u{1}part x 0 1\nz", "\u{1}part x 5 2\nz", "\u{1}part x 0 99999\nz", "\u{1}part x y z\nz"] {
            var fresh = StreamCopyParts()
            #expect(fresh.take(bad) == nil, "\(bad.debugDescription)")
        }
    }

    /// A pool shut down while a connection is lent (a request still running as a node stops)
    /// closes that connection too and stops its event loop only once it is given back: its
    /// borrower's statements fail. A statement sent after the loop stopped never completed, and
    /// its borrower waited for ever, holding its thread (a test's leftover modifying task and a
    /// blocked read took both cooperative threads so, and the whole test process stopped).
    @Test(.timeLimit(.minutes(2))) func aPoolShutDownWhileAConnectionIsLentFailsItsBorrower() async throws {
        let pool = PostgresConnectionPool(location: try Self.location(), limit: 2)
        let outcome = Locked<String?>(nil), shutDown = Locked(false)
        // Threads of their own: a borrower that never returns must not hold a cooperative one.
        // The borrower starts the shutdown itself (a test's task may wait long for a thread when
        // the whole suite runs), then goes on sending statements for up to a minute.
        Thread.detachNewThread {
            do {
                try pool.withConnection { session throws(ContainerError) in
                    try session.run("SELECT 1")
                    Thread.detachNewThread {
                        pool.shutdown()
                        shutDown.withLock { $0 = true }
                    }
                    for _ in 0..<2400 {
                        try session.run("SELECT 1")
                        usleep(25_000)
                    }
                }
                outcome.withLock { $0 = "ran to its end" }
            } catch {
                outcome.withLock { $0 = "failed" }
            }
        }
        for _ in 0..<9000 where outcome.withLock({ $0 }) == nil || !shutDown.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(outcome.withLock { $0 } == "failed")
        #expect(shutDown.withLock { $0 })
    }

    /// A statement (or a COPY) sent on a connection PostgreSQL has closed fails at once, waited
    /// for on a thread or by a task (postgres-nio dropped it: its borrower waited forever).
    @Test(.timeLimit(.minutes(1))) func aStatementOnAConnectionPostgreSQLClosedFails() async throws {
        let cluster = try PostgresCluster.start()
        let (name, url) = try cluster.createNamedDatabase()
        // Two: a pool lends a task all but one of its connections.
        let pool = PostgresConnectionPool(location: try #require(PostgresLocation(url: url)), limit: 2)
        defer { pool.shutdown() }
        func endEveryConnection() throws { _ = try cluster.endConnections(to: name) }
        func waitUntilClosed(_ session: PostgresSession) async throws {
            for _ in 0..<500 where !session.connection.isClosed { try await Task.sleep(for: .milliseconds(10)) }
            try #require(session.connection.isClosed)
        }
        // Whether `body` threw a ContainerError within 20 s, run apart (one that never ends is
        // left behind: the test fails rather than hangs).
        func failsInTime(_ body: @escaping () async throws -> Void) async -> Bool {
            nonisolated(unsafe) let body = body
            let outcome = Locked<Bool?>(nil)
            Task.detached {
                do {
                    try await body()
                    outcome.withLock { $0 = false }
                } catch {
                    outcome.withLock { $0 = error is ContainerError }
                }
            }
            for _ in 0..<2000 {
                if let failed = outcome.withLock({ $0 }) { return failed }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return false
        }
        // On a thread (the session's statements wait with `wait()`), then by a task.
        let rows = try await pool.withConnectionWithoutBlocking { session async throws(ContainerError) -> Int in
            do {
                try endEveryConnection()
                try await waitUntilClosed(session)
            } catch {
                Issue.record("\(error)")
            }
            #expect(await failsInTime { _ = try session.prepared("SELECT 1::bigint", []) })
            #expect(await failsInTime { try session.rows("SELECT 1") })
            #expect(await failsInTime { try session.run("SELECT 1") })
            #expect(await failsInTime { _ = try session.copy(ByteBuffer(string: "1\n"), into: "containers", columns: ["id"]) })
            #expect(await failsInTime { _ = try await session.preparedWithoutBlocking("SELECT 2::bigint", []) })
            return 0
        }
        #expect(rows == 0)
        // The pool opens a new connection for the next borrower.
        let answer = try pool.withConnection { session throws(ContainerError) in try session.prepared("SELECT 3::bigint", []) }
        #expect(try answer.first?.first?.decode(Int64.self) == 3)
    }

    /// Every pooled connection plans a prepared statement once, compiles nothing (JIT) and starts
    /// no parallel workers: each cost a page far more than it saved (PostgresConnectionPool.connect).
    @Test func pooledConnectionsAreSetForPagedRequests() throws {
        let pool = PostgresConnectionPool(location: try Self.location(), limit: 2)
        defer { pool.shutdown() }
        let settings = try pool.withConnection { session throws(ContainerError) in
            try session.prepared("SELECT current_setting('plan_cache_mode') || ' ' || current_setting('jit') || ' ' || current_setting('max_parallel_workers_per_gather')", [])
        }
        #expect(try settings.first?.first?.decode(String.self) == "force_generic_plan off 0")
    }

    @Test func aNameHoldingNULIsRefusedNotStored() throws {
        let containers = try PostgresContainers(location: try Self.location(), connections: 2)
        defer { containers.close() }
        let database = try containers.openContainer("iCloud.nul").database(.public)
        do {
            _ = try database.modify([RecordOperation(kind: .create, record: Record(recordType: "Note", recordID: RecordID(recordName: "a\u{0}b")))])
            Issue.record("a name holding U+0000 was stored")
        } catch {
            #expect(error.code == .badRequest)
        }
        _ = try database.modify([RecordOperation(kind: .create, record: Record(recordType: "Note", recordID: RecordID(recordName: "fine")))])
        #expect(try database.lookup([RecordID(recordName: "fine")]).first?.record != nil)
    }

    @Test(arguments: [
        "", "postgresql://", "postgresql://host/db", "http://u@h/db", "postgresql://u@/db", "postgresql://u@h", "postgresql://u@h/a/b",
        "postgresql://u@h:notaport/db", "\u{0}", "postgresql://u@h:99999999999999999999/db",
        // A host named twice, or empty; a socket's directory too long for its address; an unknown parameter.
        "postgresql://u@h/db?host=/tmp", "postgresql://u@/db?host=/tmp&host=/var", "postgresql://u@/db?host=",
        "postgresql://u@/db?host=/" + String(repeating: "d", count: 100), "postgresql://u@/db?sslmode=require", "postgresql://u@h/db?host",
    ]) func badURLsAreRefusedNotTrapped(url: String) {
        #expect(PostgresLocation(url: url) == nil)
    }

    @Test func aURLReadsWhole() throws {
        let location = try #require(PostgresLocation(url: "postgresql://kq:secret@127.0.0.1:6543/records"))
        #expect(location == PostgresLocation(host: "127.0.0.1", port: 6543, username: "kq", password: "secret", database: "records"))
        #expect(location.description == "postgresql://kq@127.0.0.1:6543/records")
        #expect(!location.isSocket)
    }

    /// libpq's ways of naming a Unix-domain socket's directory, each read back from its description.
    @Test(arguments: [
        ("postgresql://kq@/records?host=/var/run/postgresql", 5432), ("postgres://kq@:6543/records?host=/tmp/pg", 6543),
        ("postgresql://kq@%2Fvar%2Frun%2Fpostgresql:6543/records", 6543),
    ]) func aSocketsDirectoryReads(url: String, port: Int) throws {
        let location = try #require(PostgresLocation(url: url))
        #expect(location.isSocket)
        #expect(location.host.hasPrefix("/") && !location.host.contains("%"))
        #expect(location.port == port)
        #expect(location.username == "kq" && location.database == "records")
        #expect(PostgresLocation(url: location.description) == location)
    }

    /// A node reaches PostgreSQL through its socket as through TCP.
    @Test func aContainerOpensThroughTheSocket() throws {
        let tcp = try Self.location()
        let socket = try #require(PostgresLocation(url: "postgresql://\(tcp.username)@:\(tcp.port)/\(tcp.database)?host=\(try PostgresCluster.start().directory)"))
        let storage = try PostgresContainerStorage(location: socket, containerIdentifier: "socket", connections: 1)
        let database = try PostgresQueryTests.database(on: storage)
        _ = try database.modify([RecordOperation(kind: .create, record: Record(recordType: "Note", recordName: "viaSocket"))])
        #expect(try database.lookup([RecordID(recordName: "viaSocket")]).first?.record != nil)
    }
}
