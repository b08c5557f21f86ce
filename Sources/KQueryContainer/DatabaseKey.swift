import KQuery

/// Which database of a container: an environment's public database, or a user's private or shared one.
public struct DatabaseKey: Hashable, Sendable, CustomStringConvertible {
    public var environment: ContainerEnvironment
    public var scope: DatabaseScope
    /// The user whose private or shared database it is; empty for the public database, which all
    /// users share.
    public var userRecordName: String

    public init(environment: ContainerEnvironment, scope: DatabaseScope, userRecordName: String) {
        self.environment = environment
        self.scope = scope
        self.userRecordName = scope == .public ? "" : userRecordName
    }

    /// `development/private/_u1`, `production/public`: what a sync token is bound to.
    public var description: String {
        scope == .public ? "\(environment.name)/public" : "\(environment.name)/\(scope.name)/\(userRecordName)"
    }
}
