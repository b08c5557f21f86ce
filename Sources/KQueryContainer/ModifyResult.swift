import KQuery

/// A modify's answer: one result per operation, in order, and the notifications it queued.
public struct ModifyResult: Hashable, Sendable {
    public var results: [RecordResult]
    /// The pushes the committed changes produced, as written to the outbox.
    public var notifications: [OutboxNotification]
    /// The committed record changes, in order (cascaded deletions included): what the console
    /// explains subscription verdicts for.
    public var changes: [RecordChange] = []
}
