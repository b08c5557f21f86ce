import Foundation

/// A key's version as the server holds it: a `KVSRecord` read back.
public struct RemoteKeyValue: Hashable, Sendable {
    public var key: String
    /// The value's binary property list (from `value`, or the bytes of `assetValue`).
    public var bytes: Data
    /// `localModificationDate`, milliseconds since 1970.
    public var date: Int64
    public var changeTag: String?

    public init(key: String, bytes: Data, date: Int64, changeTag: String?) {
        self.key = key
        self.bytes = bytes
        self.date = date
        self.changeTag = changeTag
    }
}

/// One entry of a zone change fetch.
public enum RemoteKeyChange: Hashable, Sendable {
    case saved(RemoteKeyValue)
    case deleted(key: String)
}

/// A page of zone changes and the token after it.
public struct RemoteKeyChanges: Hashable, Sendable {
    public var changes: [RemoteKeyChange]
    public var token: String
    public var moreComing: Bool

    public init(changes: [RemoteKeyChange], token: String, moreComing: Bool) {
        self.changes = changes
        self.token = token
        self.moreComing = moreComing
    }
}

/// A write to upload: a value (`bytes`) or a removal (nil), conditional on the server still
/// holding the version `baseTag` names (none: the record must not exist yet).
public struct KeyWrite: Hashable, Sendable {
    public var key: String
    public var bytes: Data?
    public var date: Int64
    public var baseTag: String?

    public init(key: String, bytes: Data?, date: Int64, baseTag: String?) {
        self.key = key
        self.bytes = bytes
        self.date = date
        self.baseTag = baseTag
    }
}

/// What the server did with a write.
public enum KeyWriteResult: Hashable, Sendable {
    /// Saved; the record's new change tag.
    case saved(tag: String?)
    case deleted
    /// The server's version is not the one the write was based on: pull, merge, retry.
    case conflict
    /// Refused: the reason, and whether it is the server's quota.
    case failed(String, quotaExceeded: Bool)
}

/// How a store reaches the server model of SPEC §14 (a zone per store in the user's private
/// database, a `KVSRecord` per key): the Web Services API of `kquery serve`, or a container in
/// process. Both answer the same calls; the store's sync does the rest.
public protocol KeyValueStoreTransport: Sendable {
    /// The user the store syncs as (its `userRecordName`).
    func currentUser() async throws(KeyValueStoreError) -> String
    /// Makes sure the store's zone and this device's zone subscription exist.
    func prepare(device: String) async throws(KeyValueStoreError)
    /// Changes to the store's zone after `token` (nil: everything).
    func fetchChanges(since token: String?) async throws(KeyValueStoreError) -> RemoteKeyChanges
    /// Applies the writes (at most 200), one result each, in order.
    func save(_ writes: [KeyWrite], device: String) async throws(KeyValueStoreError) -> [KeyWriteResult]
    /// Waits for a push saying the zone may have changed (another device wrote), or returns after
    /// a while anyway; a store calls it in a loop while it runs.
    func waitForChange(device: String) async
    /// Stops what `waitForChange` keeps open (a push stream): the store is closing.
    func stopListening()
}

extension KeyValueStoreTransport {
    public func stopListening() {}
}

/// The `KVSRecord` form of SPEC §14: record name base64 of the key's UTF-8, the value's binary
/// property list in `value` (BYTES) or, over 102,400 bytes, in `assetValue` (an asset), and
/// `localModificationDate`.
public enum KeyValueRecord {
    public static let recordType = "KVSRecord"
    public static let assetThreshold = 102_400

    public static func recordName(forKey key: String) -> String { Data(key.utf8).base64EncodedString() }

    /// The key a record name stands for, or nil when it is not base64 of UTF-8.
    public static func key(forRecordName name: String) -> String? {
        guard let data = Data(base64Encoded: name), let key = String(data: data, encoding: .utf8), !key.isEmpty else { return nil }
        return key
    }
}
