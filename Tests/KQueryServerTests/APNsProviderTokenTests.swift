import Crypto
import KQuery
@testable import KQueryContainer
@testable import KQueryServer
import Testing

import Foundation

/// The APNs provider token (SPEC §10): one JWT reused until it is `refreshInterval` old, then
/// signed anew with the current time.
@Suite struct APNsProviderTokenTests {
    @Test func theTokenIsReusedThenRefreshed() throws {
        let clock = Locked(Date(timeIntervalSince1970: 1_700_000_000))
        let key = P256.Signing.PrivateKey()
        let provider = APNsProviderToken(teamID: "TEAM", keyID: "KEY", key: key.rawRepresentation, refreshInterval: .seconds(40 * 60), now: { clock.withLock { $0 } })
        let first = try provider.current()
        clock.withLock { $0 += 39 * 60 }
        #expect(try provider.current() == first)
        clock.withLock { $0 += 2 * 60 }
        let second = try provider.current()
        #expect(second != first)
        let claims = try #require(second.split(separator: ".").dropFirst().first)
        let json = try JSON.parse(String(decoding: try #require(APNsDeliveryTests.base64URL(claims)), as: UTF8.self))
        #expect(json["iat"] == .int(1_700_000_000 + 41 * 60))
        #expect(json["iss"] == .string("TEAM"))
        // A clock that went back signs anew rather than reuse a token from the future.
        clock.withLock { $0 -= 3600 }
        #expect(try provider.current() != second)
        provider.invalidate()
    }

    @Test func headersCarryThePushsFacts() throws {
        var notification = OutboxNotification(
            id: 1, database: DatabaseKey(environment: .production, scope: .private, userRecordName: "_u"), subscriptionID: "s", owner: "_u",
            payload: .object([("aps", .object([("content-available", .int(1))])), ("ck", .object([("nid", .string("0F8FAD5B-D9CB-469F-A165-70867728950E"))]))]),
            priority: 5, pushType: "background", created: 1_700_000_000_123)
        var headers = Dictionary(uniqueKeysWithValues: APNsDelivery.headers(for: notification, topic: "com.example.app", expiration: .seconds(3600)))
        #expect(headers["apns-topic"] == "com.example.app")
        #expect(headers["apns-push-type"] == "background")
        #expect(headers["apns-priority"] == "5")
        #expect(headers["apns-expiration"] == String(1_700_000_000 + 3600))
        #expect(headers["apns-id"] == "0f8fad5b-d9cb-469f-a165-70867728950e")
        #expect(headers["apns-collapse-id"] == nil)
        notification.collapseID = "c1"
        notification.payload = .object([("ck", .object([("nid", .string("not-a-uuid"))]))])
        headers = Dictionary(uniqueKeysWithValues: APNsDelivery.headers(for: notification, topic: "t", expiration: .seconds(0)))
        #expect(headers["apns-collapse-id"] == "c1")
        #expect(headers["apns-id"] == nil)
    }

    @Test func answersSortIntoOutcomes() {
        #expect(APNsOutcome(status: 200, body: []) == .delivered)
        #expect(APNsOutcome(status: 410, body: Array(#"{"reason":"ExpiredToken"}"#.utf8)) == .unregistered(reason: "ExpiredToken"))
        #expect(APNsOutcome(status: 400, body: Array(#"{"reason":"BadDeviceToken"}"#.utf8)) == .refused(status: 400, reason: "BadDeviceToken"))
        #expect(APNsOutcome(status: 413, body: Array(#"{"reason":"PayloadTooLarge"}"#.utf8)) == .refused(status: 413, reason: "PayloadTooLarge"))
        #expect(APNsOutcome(status: 429, body: Array(#"{"reason":"TooManyRequests"}"#.utf8)) == .throttled(reason: "429 TooManyRequests"))
        #expect(APNsOutcome(status: 500, body: Array("not json".utf8)) == .serviceFailed(reason: "500 HTTP 500"))
        #expect(!APNsOutcome(status: 503, body: []).isFinal)
        #expect(!APNsOutcome(status: 403, body: Array(#"{"reason":"ExpiredProviderToken"}"#.utf8)).isFinal)
    }
}
