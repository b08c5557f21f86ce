/// Why a store refused a write, or could not sync. The messages are Apple's where Apple has one
/// (research 1.1, 1.2): Swift cannot catch the `NSInvalidArgumentException` Apple raises, so the
/// same text arrives as a thrown error.
public struct KeyValueStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Code: String, Hashable, Sendable {
        /// Apple's `NSInvalidArgumentException`: a key too long, a typed setter given another type.
        case invalidArgument
        /// SyncedDefaults 2222: an empty key, a value that is not a property list.
        case invalidKeyOrValue
        /// SyncedDefaults 6666: a limit of keys, value bytes or total bytes (reason 2 is posted too).
        case quotaExceeded
        /// The server, or the container, answered with something a store cannot read.
        case invalidServerAnswer
        /// The server, or the container, refused or failed a request.
        case syncFailed
        /// The server no longer has the changes since the device's token: fetch everything again.
        case changeTokenExpired
        /// No server or container is configured: the store keeps its values on the device only.
        case notConfigured
        /// The device directory could not be read or written.
        case deviceStorage
    }

    public var code: Code
    public var message: String
    /// The keys a refused write named (a quota violation's `ChangedKeys`).
    public var keys: [String]

    public init(_ code: Code, _ message: String, keys: [String] = []) {
        self.code = code
        self.message = message
        self.keys = keys
    }

    public var description: String { message }
}
