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
