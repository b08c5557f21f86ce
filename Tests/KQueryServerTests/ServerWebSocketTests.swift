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
}
