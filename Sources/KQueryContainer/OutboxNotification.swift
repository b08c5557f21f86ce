import KQuery

/// A push waiting in the outbox (SPEC §10): written in the transaction of the modify that caused
/// it, removed only when delivery acknowledges it, so a crash loses none (a push may go twice).
public struct OutboxNotification: Hashable, Sendable {
    /// The outbox's number for it, in queue order; what `acknowledge` takes.
    public var id: Int64
    /// The database whose change it reports.
    public var database: DatabaseKey
    public var subscriptionID: String
    /// The user it goes to.
    public var owner: String
    /// The push (`{"aps":..., "ck":...}`); its `ck.nid` is shared by the pushes of one change.
    public var payload: JSON {
        get { payloadContent.json }
        set { payloadContent = PushJSON(newValue) }
    }
    /// The push as kept: a query push from a template is made into JSON when read (in memory the
    /// outbox keeps it so; a file writes its JSON).
    public var payloadContent: PushJSON
    /// APNs priority: 10, or 5 for a silent push.
    public var priority: Int
    /// `alert` or `background`.
    public var pushType: String
    /// When it was queued, in milliseconds since 1970.
    public var created: Int64
    /// APNs' `apns-collapse-id`: the value of the subscription's `collapseIDKey` field, if any.
    public var collapseID: String? = nil
    /// The device that made the change (the `apnsToken` its modify named): CloudKit does not push
    /// a change to the device that made it, so delivery skips this one (SPEC §10).
    public var excludedDevice: String? = nil
}

extension OutboxNotification {
    package init(
        id: Int64, database: DatabaseKey, subscriptionID: String, owner: String, payload: JSON, priority: Int, pushType: String, created: Int64,
        collapseID: String? = nil, excludedDevice: String? = nil
    ) {
        self.init(id: id, database: database, subscriptionID: subscriptionID, owner: owner, payloadContent: PushJSON(payload), priority: priority,
                  pushType: pushType, created: created, collapseID: collapseID, excludedDevice: excludedDevice)
    }

    /// A push to queue: the outbox numbers it (`id` 0 until then).
    init(database: DatabaseKey, subscriptionID: String, owner: String, payload: PushPayload, created: Int64, excludedDevice: String? = nil) {
        self.init(id: 0, database: database, subscriptionID: subscriptionID, owner: owner, payloadContent: payload.content, priority: payload.priority,
                  pushType: payload.pushType, created: created, collapseID: payload.collapseID, excludedDevice: excludedDevice)
    }
}
