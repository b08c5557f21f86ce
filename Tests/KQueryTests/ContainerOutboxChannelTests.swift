import Foundation
import GRDB
import KQuery
@testable import KQueryContainer
import Testing

private typealias F = ContainerFixture

/// Per-channel acknowledgement of the outbox (SPEC §10): the web courier and APNs each take a push,
/// and it leaves the outbox once both have.
@Suite struct ContainerOutboxChannelTests {
    /// Queues one push for `_u1` per created record.
    private static func queue(_ names: [String], in container: Container) throws -> [Int64] {
        let database = try F.privateDatabase(container)
        if try database.subscription("notes") == nil {
            try database.saveSubscription(try .query("notes", recordType: "Note", predicate: "TRUEPREDICATE", options: .firesOnRecordCreation,
                                                     notificationInfo: NotificationInfo(alertBody: "new", collapseIDKey: "topic")))
        }
        let result = try database.modify(names.map { F.operation(.create, F.record($0, ["topic": .string("t-\($0)")])) })
        return result.notifications.map(\.id)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func eachChannelAcknowledgesItsOwnDelivery(storage: ContainerFixture.Storage) throws {
        let container = try F.container(storage)
        let ids = try Self.queue(["a", "b"], in: container)
        #expect(ids.count == 2)
        #expect(try container.pendingNotifications(for: .webCourier).map(\.id) == ids)
        #expect(try container.pendingNotifications(for: .apns).map(\.id) == ids)
        #expect(try container.pendingNotifications(for: .apns).map(\.collapseID) == ["t-a", "t-b"])

        try container.acknowledge([ids[0]], channel: .webCourier)
        #expect(try container.pendingNotifications(for: .webCourier).map(\.id) == [ids[1]])
        #expect(try container.pendingNotifications(for: .apns).map(\.id) == ids)
        // Still queued: APNs has not taken it.
        #expect(try container.pendingNotifications().map(\.id) == ids)

        try container.acknowledge([ids[0]], channel: .apns)
        #expect(try container.pendingNotifications().map(\.id) == [ids[1]])
        // Acknowledging again, or an unknown ID, is harmless.
        try container.acknowledge([ids[0], 999], channel: .apns)
        try container.acknowledge([ids[1]], channel: .apns)
        #expect(try container.pendingNotifications(for: .apns).isEmpty)
        #expect(try container.pendingNotifications(for: .webCourier).map(\.id) == [ids[1]])
        // acknowledge(_:) is every channel at once.
        try container.acknowledge([ids[1]])
        #expect(try container.pendingNotifications().isEmpty)
    }

    @Test func aFileFromBeforeTheChannelsOpensAndKeepsItsPushes() throws {
        let path = F.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        var ids: [Int64] = []
        do {
            let container = try F.container(path: path)
            ids = try Self.queue(["a"], in: container)
        }
        // The outbox as it was: no collapseID, no delivered.
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            try db.execute(sql: "ALTER TABLE outbox DROP COLUMN delivered; ALTER TABLE outbox DROP COLUMN collapseID; ALTER TABLE outbox DROP COLUMN excludedDevice")
        }
        try queue.close()

        let container = try F.container(path: path)
        #expect(try container.pendingNotifications(for: .apns).map(\.id) == ids)
        try container.acknowledge(ids, channel: .apns)
        #expect(try container.pendingNotifications(for: .webCourier).map(\.id) == ids)
        try container.acknowledge(ids, channel: .webCourier)
        #expect(try container.pendingNotifications().isEmpty)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func theDeviceThatMadeTheChangeIsKeptWithItsPushes(storage: ContainerFixture.Storage) throws {
        let path = F.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let open = { () throws -> Container in storage == .sqlite ? try F.container(path: path) : try F.container(storage) }
        var container: Container? = try open()
        let database = try F.privateDatabase(try #require(container))
        try database.saveSubscription(try .query("notes", recordType: "Note", predicate: "TRUEPREDICATE", options: .firesOnRecordCreation,
                                                 notificationInfo: NotificationInfo(shouldSendContentAvailable: true)))
        let fromPhone = try database.modify([F.operation(.create, F.record("a", [:]))], device: "phone-token")
        let anonymous = try database.modify([F.operation(.create, F.record("b", [:]))])
        #expect(fromPhone.notifications.map(\.excludedDevice) == ["phone-token"])
        #expect(anonymous.notifications.map(\.excludedDevice) == [nil])
        #expect(fromPhone.notifications[0].webServicesJSON["excludedDevice"] == .string("phone-token"))
        #expect(anonymous.notifications[0].webServicesJSON["excludedDevice"] == nil)
        if storage == .sqlite {
            container = nil
            container = try open()
        }
        #expect(try #require(container).pendingNotifications(for: .apns).map(\.excludedDevice) == ["phone-token", nil])
    }
}
