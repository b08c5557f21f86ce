/// The limits of SPEC §14 (Apple's, research 1.2), checked before anything is stored.
public struct KeyValueStoreLimits: Hashable, Sendable {
    /// Keys per store.
    public var maximumKeys = 1024
    /// Bytes of one value's binary property list.
    public var maximumValueBytes = 1_048_576
    /// Bytes of all values' binary property lists together (key names do not count).
    public var maximumTotalBytes = 1_048_576
    /// UTF-16 code units of a key.
    public var maximumKeyUTF16 = 128
    /// UTF-8 bytes of a key (its record name, base64 of them, then fits CloudKit's 255).
    public var maximumKeyUTF8 = 189
    /// The legacy rule of Apple's old documentation: at most 64 UTF-8 bytes a key.
    public var legacyKeyLength = false

    public init() {}

    /// Apple's exception text for a key that breaks a length rule, or nil.
    func keyProblem(_ key: String) -> KeyValueStoreError? {
        if key.isEmpty { return KeyValueStoreError(.invalidKeyOrValue, "Invalid key parameter provided") }
        if legacyKeyLength, key.utf8.count > 64 {
            return KeyValueStoreError(.invalidArgument, "NSUbiquitousKeyValueStore: key '\(key)' is too long.")
        }
        if key.utf16.count > maximumKeyUTF16 {
            return KeyValueStoreError(
                .invalidArgument, "NSUbiquitousKeyValueStore key '\(key)' is longer than the maximum allowed UTF-16 code units of (\(maximumKeyUTF16))")
        }
        if key.utf8.count > maximumKeyUTF8 {
            return KeyValueStoreError(
                .invalidArgument, "NSUbiquitousKeyValueStore key '\(key)' is larger than the maximum allowed UTF-8 code units of (\(maximumKeyUTF8))")
        }
        return nil
    }
}
