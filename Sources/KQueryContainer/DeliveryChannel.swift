/// The ways a queued notification leaves the outbox (SPEC §10). Each channel acknowledges its own
/// delivery; the notification is removed once every channel has, so the web courier popping a push
/// does not take it from APNs, nor APNs from the courier.
public struct DeliveryChannel: OptionSet, Hashable, Sendable {
    public let rawValue: Int

    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The long poll (and WebSocket) of CloudKit JS.
    public static let webCourier = DeliveryChannel(rawValue: 1)
    /// Apple Push Notification service, to registered devices.
    public static let apns = DeliveryChannel(rawValue: 2)
    /// Every channel: what `pendingNotifications(limit:)` and `acknowledge(_:)` mean.
    public static let all: DeliveryChannel = [.webCourier, .apns]
}
