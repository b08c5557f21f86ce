import KQueryContainer
import KQueryPostgres
import KQueryStore
import KQueryWebServices

/// `kquery serve --postgres URL`: the server's shared store is a PostgreSQL database's containers.
public struct PostgresServerStore: SharedContainerStore {
    public let containers: PostgresContainers

    public init(containers: PostgresContainers) { self.containers = containers }

    public func openContainer(_ identifier: String, assetPolicy: AssetPolicy) throws(ContainerError) -> Container {
        try containers.openContainer(identifier, assetPolicy: assetPolicy)
    }

    public func containerIdentifiers() throws(ContainerError) -> [String] { try containers.containerIdentifiers() }
    public func serverSecret() throws(ContainerError) -> [UInt8] { try containers.serverSecret() }
    public func listen(wake: @escaping @Sendable (QueuedPushes) -> Void, copied: @escaping @Sendable (String) -> Void) {
        containers.listen(wake: wake, copied: copied)
    }
    public func publishStreamCopy(_ message: String) { containers.publishStreamCopy(message) }
    public func stopListening() { containers.stopListening() }
    public func holdsAPNsDuty() -> Bool { containers.holdsAPNsDuty() }
    public func claimPush(_ id: Int64, of identifier: String, seconds: Int) -> Bool { containers.claimPush(id, of: identifier, seconds: seconds) }

    public func registerDevice(containerIdentifier: String, environment: String, user: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError) {
        try containers.registerDevice(containerIdentifier: containerIdentifier, environment: environment, user: user, apnsEnvironment: apnsEnvironment, apnsToken: apnsToken)
    }

    public func removeDevice(containerIdentifier: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError) {
        try containers.removeDevice(containerIdentifier: containerIdentifier, apnsEnvironment: apnsEnvironment, apnsToken: apnsToken)
    }

    public func devices(containerIdentifier: String, environment: String, user: String) throws(ContainerError) -> [(apnsEnvironment: String, apnsToken: String)] {
        try containers.devices(containerIdentifier: containerIdentifier, environment: environment, user: user)
    }

    public func spendWebAuthToken(_ key: String, expires: Int64) throws(ContainerError) -> Bool {
        try containers.spendWebAuthToken(key, expires: expires)
    }

    public func giveBackWebAuthToken(_ key: String) throws(ContainerError) { try containers.giveBackWebAuthToken(key) }

    public func userDirectory() throws(ServerError) -> UserDirectory {
        let entries: [(name: String, entry: String)]
        do throws(ContainerError) { entries = try containers.directoryUsers() } catch { throw ServerError(error) }
        return try UserDirectory(entries: entries, in: "\(containers.location)'s directory_users")
    }

    public func learnedSchemaKeeper(_ identifier: String) -> any LearnedSchemaKeeper {
        PostgresLearnedSchema(containers: containers, identifier: identifier)
    }
}

/// A container's learned schema in PostgreSQL, for every node (`learned_schemas`).
struct PostgresLearnedSchema: LearnedSchemaKeeper {
    let containers: PostgresContainers
    let identifier: String

    func load() throws(ContainerError) -> (schema: Schema, version: Int64) {
        guard let kept = try containers.learnedSchema(identifier) else { return (Schema(), 0) }
        return (try LearnedSchema.schema(kept.text, "\(containers.location) (\(identifier))"), kept.version)
    }

    func replace(_ schema: Schema, over version: Int64) throws(ContainerError) -> Bool {
        try containers.replaceLearnedSchema(identifier, text: LearnedSchema.text(schema), version: version)
    }
}
