import Foundation

/// `NSUbiquitousKeyValueStoreDidChangeExternallyNotification`'s `userInfo` keys, with the raw
/// strings equal to the constants' names.
public let NSUbiquitousKeyValueStoreChangeReasonKey = "NSUbiquitousKeyValueStoreChangeReasonKey"
public let NSUbiquitousKeyValueStoreChangedKeysKey = "NSUbiquitousKeyValueStoreChangedKeysKey"

/// Why the store's values changed from outside (Apple's raw values).
public enum KeyValueStoreChangeReason: Int, Hashable, Sendable {
    /// Another device of the user wrote a value (`NSUbiquitousKeyValueStoreServerChange`).
    case serverChange = 0
    /// The first download on this device: local writes made before it lost to the server.
    case initialSyncChange = 1
    /// A write was refused for a limit; the keys are the refused ones.
    case quotaViolationChange = 2
    /// The device's user changed: the whole store was replaced, whatever the timestamps.
    case accountChange = 3
}

public let NSUbiquitousKeyValueStoreServerChange = KeyValueStoreChangeReason.serverChange.rawValue
public let NSUbiquitousKeyValueStoreInitialSyncChange = KeyValueStoreChangeReason.initialSyncChange.rawValue
public let NSUbiquitousKeyValueStoreQuotaViolationChange = KeyValueStoreChangeReason.quotaViolationChange.rawValue
public let NSUbiquitousKeyValueStoreAccountChange = KeyValueStoreChangeReason.accountChange.rawValue

/// One `didChangeExternallyNotification`, as the store's `changes` sequence gives it.
public struct KeyValueStoreChange: Hashable, Sendable {
    public var reason: KeyValueStoreChangeReason
    public var changedKeys: [String]

    public init(reason: KeyValueStoreChangeReason, changedKeys: [String]) {
        self.reason = reason
        self.changedKeys = changedKeys
    }

    /// The notification's `userInfo`.
    public var userInfo: [String: Any] {
        [NSUbiquitousKeyValueStoreChangeReasonKey: NSNumber(value: reason.rawValue), NSUbiquitousKeyValueStoreChangedKeysKey: changedKeys]
    }
}
