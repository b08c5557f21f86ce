import KQueryContainer
import KQueryPostgres
import KQueryServer

/// `kquery serve --postgres URL`: the server's shared store is a PostgreSQL database's containers.
struct PostgresServerStore: SharedContainerStore {
    let containers: PostgresContainers

    func openContainer(_ identifier: String, assetPolicy: AssetPolicy) throws(ContainerError) -> Container {
        try containers.openContainer(identifier, assetPolicy: assetPolicy)
    }

    func containerIdentifiers() throws(ContainerError) -> [String] { try containers.containerIdentifiers() }
    func serverSecret() throws(ContainerError) -> [UInt8] { try containers.serverSecret() }
    func listenForPushes(_ wake: @escaping @Sendable () -> Void) { containers.listenForPushes(wake) }
    func stopListening() { containers.stopListening() }
    func holdsAPNsDuty() -> Bool { containers.holdsAPNsDuty() }
    func claimPush(_ id: Int64, of identifier: String, seconds: Int) -> Bool { containers.claimPush(id, of: identifier, seconds: seconds) }

    func registerDevice(containerIdentifier: String, environment: String, user: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError) {
        try containers.registerDevice(containerIdentifier: containerIdentifier, environment: environment, user: user, apnsEnvironment: apnsEnvironment, apnsToken: apnsToken)
    }

    func removeDevice(containerIdentifier: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError) {
        try containers.removeDevice(containerIdentifier: containerIdentifier, apnsEnvironment: apnsEnvironment, apnsToken: apnsToken)
    }

    func devices(containerIdentifier: String, environment: String, user: String) throws(ContainerError) -> [(apnsEnvironment: String, apnsToken: String)] {
        try containers.devices(containerIdentifier: containerIdentifier, environment: environment, user: user)
    }

    func spendWebAuthToken(_ key: String, expires: Int64) throws(ContainerError) -> Bool {
        try containers.spendWebAuthToken(key, expires: expires)
    }

    func giveBackWebAuthToken(_ key: String) throws(ContainerError) { try containers.giveBackWebAuthToken(key) }
}
