import HummingbirdWSClient
import KQuery
import KQueryServer
import Logging
import Testing

/// The web courier's WebSocket stream: a modify's push arrives as a text frame.
@Suite struct ServerWebSocketTests {
    @Test func streamDeliversPushes() async throws {
        try await ServerHarness().run { c in
            let user = "_wes"
            var answer = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "all", "subscriptionType": "query",
                  "query": {"recordType": "Msg"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
                """, user: user)
            #expect(answer.status == 200)
            answer = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: user)
            let url = try #require(answer.json["webcourierURL"]?.stringValue)
            let token = try #require(url.split(separator: "tok=").last?.split(separator: "&").first)
            let received = Locked<[String]>([])
            try await WebSocketClient.connect(url: "ws://127.0.0.1:\(c.port)/aps/stream?tok=\(token)", logger: Logger(label: "ws-test")) { inbound, outbound, _ in
                for name in ["m1", "m2"] {
                    _ = try await c.post("private", "records/modify", """
                        {"operations": [{"operationType": "create", "record": {"recordName": "\(name)", "recordType": "Msg"}}]}
                        """, user: user)
                }
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message else { continue }
                    let count = received.withLock { $0.append(text); return $0.count }
                    if count == 2 { break }
                }
                try await outbound.close(.normalClosure, reason: nil)
            }
            let rids = received.withLock { $0 }.compactMap { try? JSON.parse($0)["ck"]?["qry"]?["rid"]?.stringValue }
            #expect(rids == ["m1", "m2"])
        }
    }

    /// Two devices of one user, each with a stream: a push reaches both, whichever stream took it
    /// from the user's queue, except the device whose modify made the change (it names its token).
    /// The courier timeout is long: a device that missed a push would not hear it before the
    /// test's time limit.
    @Test(.timeLimit(.minutes(1))) func everyStreamOfAUserHearsEachPushButItsOwnChange() async throws {
        try await ServerHarness(directory: nil, { $0.courierTimeout = .seconds(300) }).run { c in
            let user = "_two"
            let subscribed = try await c.post("private", "subscriptions/modify", """
                {"operations": [{"operationType": "create", "subscription": {"subscriptionID": "all", "subscriptionType": "query",
                  "query": {"recordType": "Msg"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}
                """, user: user)
            #expect(subscribed.status == 200)
            func courier(_ client: String) async throws -> (token: String, url: String) {
                let made = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: #"{"clientId": "\#(client)"}"#, user: user)
                let url = try #require(made.json["webcourierURL"]?.stringValue)
                let query = try #require(url.split(separator: "?").last)
                return (try #require(made.json["apnsToken"]?.stringValue), "ws://127.0.0.1:\(c.port)/aps/stream?\(query)")
            }
            func create(_ name: String, device: String? = nil) async throws {
                let named = device.map { #", "apnsToken": "\#($0)""# } ?? ""
                let saved = try await c.post("private", "records/modify", """
                    {"operations": [{"operationType": "create", "record": {"recordName": "\(name)", "recordType": "Msg"}}]\(named)}
                    """, user: user)
                #expect(saved.status == 200)
            }
            let a = try await courier("device-a"), b = try await courier("device-b")
            let (heardA, toA) = AsyncStream.makeStream(of: String.self)
            let (heardB, toB) = AsyncStream.makeStream(of: String.self)
            @Sendable func listen(_ url: String, _ sink: AsyncStream<String>.Continuation) async throws {
                try await WebSocketClient.connect(url: url, logger: Logger(label: "ws-test")) { inbound, _, _ in
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message, let rid = try? JSON.parse(text)["ck"]?["qry"]?["rid"]?.stringValue else { continue }
                        sink.yield(rid)
                    }
                }
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await listen(a.url, toA) }
                group.addTask { try await listen(b.url, toB) }
                // Probes until both streams are open and have heard one.
                let probing = Task {
                    var count = 0
                    while !Task.isCancelled {
                        count += 1
                        try await create("probe-\(count)")
                        try await Task.sleep(for: .milliseconds(200))
                    }
                }
                var itA = heardA.makeAsyncIterator(), itB = heardB.makeAsyncIterator()
                _ = await itA.next()
                _ = await itB.next()
                probing.cancel()
                _ = await probing.result
                try await create("m1", device: a.token)
                try await create("m2")
                func next(_ iterator: inout AsyncStream<String>.Iterator) async -> String? {
                    while let rid = await iterator.next() {
                        if !rid.hasPrefix("probe-") { return rid }
                    }
                    return nil
                }
                #expect(await next(&itA) == "m2", "device A made m1: it hears m2 only")
                #expect(await next(&itB) == "m1")
                #expect(await next(&itB) == "m2")
                group.cancelAll()
            }
        }
    }
}
