import KQueryContainer
import KQueryWebServices

/// Where a server's containers live when it is one node of many on one database (`kquery serve
/// --postgres URL`, SPEC §16) instead of files in its data directory: the containers, the secret
/// every node signs its tokens with (so a token from one node works on another), and a wake-up
/// when any node queues pushes (so a client polling this node hears of a push another queued).
/// The server knows no database engine: `kquery` hands it one.
public protocol SharedContainerStore: Sendable {
    /// The container `identifier`, opened (and created) in the shared database.
    func openContainer(_ identifier: String, assetPolicy: AssetPolicy) throws(ContainerError) -> Container
    /// Every container the database holds.
    func containerIdentifiers() throws(ContainerError) -> [String]
    /// The web auth secret all nodes share, made by the first node that asks.
    func serverSecret() throws(ContainerError) -> [UInt8]
    /// Calls `wake` with whom they are for whenever any node (this one too) has queued pushes, and
    /// `copied` with each message any node publishes, until `stopListening`.
    func listen(wake: @escaping @Sendable (QueuedPushes) -> Void, copied: @escaping @Sendable (String) -> Void)
    /// Sends `message` to every node's `listen(copied:)`: a copy of a push one of this node's
    /// WebSocket streams took, for the user's streams on other nodes (dropped when it cannot go).
    func publishStreamCopy(_ message: String)
    func stopListening()
    /// Whether this node delivers to APNs now: one node at a time holds the duty (so a push goes
    /// to APNs once), and another takes it over when that node stops or dies.
    func holdsAPNsDuty() -> Bool
    /// Claims queued push `id` of container `identifier` for a web courier answer on this node
    /// for `seconds`: false when another node holds it, so two polls on two nodes never deliver
    /// the same push (a claim lapses, so a node that died holding one delays the push, never loses it).
    func claimPush(_ id: Int64, of identifier: String, seconds: Int) -> Bool
    /// Registers a user's APNs device token in a container's environment (`tokens/register`)
    /// for every node: the one holding the APNs duty delivers to it.
    func registerDevice(containerIdentifier: String, environment: String, user: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError)
    /// Forgets a device token of a container that APNs reported gone (410).
    func removeDevice(containerIdentifier: String, apnsEnvironment: String, apnsToken: String) throws(ContainerError)
    /// The device tokens a user registered in a container's environment, on any node.
    func devices(containerIdentifier: String, environment: String, user: String) throws(ContainerError) -> [(apnsEnvironment: String, apnsToken: String)]
    /// Spends a single-use web auth token for every node (`--single-use-web-auth-tokens`): false
    /// when any node spent it already. `key` names the token (a hash of it, never the token); it
    /// is remembered until `expires` (milliseconds since 1970), when the token expires anyway.
    func spendWebAuthToken(_ key: String, expires: Int64) throws(ContainerError) -> Bool
    /// Takes back the spending of a token whose request was not answered with success.
    func giveBackWebAuthToken(_ key: String) throws(ContainerError)
    /// The user directory every node shares (`kquery users --postgres`), without the server
    /// configuration's users.
    func userDirectory() throws(ServerError) -> UserDirectory
    /// Where container `identifier`'s learned schema is kept for every node.
    func learnedSchemaKeeper(_ identifier: String) -> any LearnedSchemaKeeper
}
