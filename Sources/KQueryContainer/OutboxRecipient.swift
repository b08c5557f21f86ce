import KQuery

/// Whose notifications a reader of the outbox wants: one user's, in one environment (a web
/// courier poll), so a backlog of other users' pushes never hides them.
public struct OutboxRecipient: Hashable, Sendable {
    public var owner: String
    public var environment: ContainerEnvironment

    public init(owner: String, environment: ContainerEnvironment) {
        self.owner = owner
        self.environment = environment
    }
}

extension OutboxNotification {
    /// Whose queue the notification is in: its subscription's owner's, in its environment.
    public var recipient: OutboxRecipient { OutboxRecipient(owner: owner, environment: database.environment) }
}

/// Whom the pushes a commit queued are for, as the nodes on one database tell each other (SPEC
/// §16): some users of one container, or everyone when that cannot be said (too many to name in
/// one message, or a wake that may have been missed). A node wakes only the web courier polls and
/// streams of those users: waking every poll for every push made each one read the outbox a
/// thousand times a second under a thousand modifies a second.
public enum QueuedPushes: Sendable, Equatable {
    case everyone
    case recipients(containerIdentifier: String, Set<OutboxRecipient>)
}
