import Foundation
import KQuery
import Synchronization

/// iCloud key-value storage on Linux: `NSUbiquitousKeyValueStore`'s API and behaviour (SPEC §14),
/// synced through a CloudKit container, over `kquery serve`'s Web Services or in process.
///
/// A store is a container's store identifier, a user and one device's state directory. Every
/// write is kept in the device directory before it returns (it survives kill -9 of the process)
/// and is uploaded in the background a moment later; other devices' writes arrive as
/// `didChangeExternallyNotification` (and on `changes`).
///
/// ```swift
/// let store = try UbiquitousKeyValueStore(configuration: .init(
///     storeIdentifier: "ABCDE12345.com.example.notes", deviceDirectory: "~/.notes-kvs",
///     transport: WebServicesTransport(server: url, containerIdentifier: "iCloud.com.example.notes", apiToken: t, webAuthToken: w)))
/// try store.set("dark", forKey: "theme")
/// store.string(forKey: "theme")   // "dark"
/// for await change in store.changes { print(change.reason, change.changedKeys) }
/// ```
public final class UbiquitousKeyValueStore: @unchecked Sendable {
    public static let didChangeExternallyNotification = Notification.Name("NSUbiquitousKeyValueStoreDidChangeExternallyNotification")

    public struct Configuration: Sendable {
        /// The store's identifier (Apple's `com.apple.developer.ubiquity-kvstore-identifier`): its
        /// zone's name on the server.
        public var storeIdentifier: String
        /// One device's state: two directories are two devices of the user.
        public var deviceDirectory: String
        /// The server or container the store syncs with; nil keeps values on the device only
        /// (`synchronize()` then returns false).
        public var transport: (any KeyValueStoreTransport)?
        public var limits = KeyValueStoreLimits()
        /// How long after a local change the upload waits, gathering more changes into it.
        public var uploadDelay: Duration = .seconds(2)
        /// The least time between two background uploads that local changes start: Apple allows
        /// "several a minute". Later changes wait and go together; none is dropped.
        /// `synchronize()`, pushes and `syncNow()` are not held back.
        public var minimumUploadInterval: Duration = .seconds(10)
        /// Whether the store syncs by itself (after changes, on pushes); without it only
        /// `synchronize()` and `syncNow()` do.
        public var automaticallySyncs = true
        /// Where the notification is posted.
        public var notificationCenter: NotificationCenter = .default
        /// The device's clock, milliseconds since 1970: each write's `localModificationDate`.
        public var clock: @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }

        public init(storeIdentifier: String, deviceDirectory: String, transport: (any KeyValueStoreTransport)? = nil) {
            self.storeIdentifier = storeIdentifier
            self.deviceDirectory = deviceDirectory
            self.transport = transport
        }
    }

    public let configuration: Configuration
    /// The device's identity: its zone subscription, and the device the server skips when it
    /// pushes this device's own changes.
    public let deviceIdentifier: String

    struct State {
        var journal: DeviceJournal
        /// Keys with a value now.
        var keyCount = 0
        /// The bytes of every value now.
        var totalBytes = 0
        var prepared = false
        /// The visible values before a change of user, to name the keys it changed.
        var previousAccountValues: [String: PropertyListValue]?
        var lastSyncError: KeyValueStoreError?
    }

    let state: Locked<State>
    private let observers = Locked<[UUID: AsyncStream<KeyValueStoreChange>.Continuation]>([:])
    private let wakes: AsyncStream<SyncWake>
    private let wakeContinuation: AsyncStream<SyncWake>.Continuation
    let syncSerializer = SyncSerializer()
    private let tasks = Locked<[Task<Void, Never>]>([])
    private let syncStarted = Atomic<Bool>(false)

    enum SyncWake { case localChange, now }

    /// Opens the store's state in the device directory (made if missing) and, when the
    /// configuration has a transport and syncs by itself, starts syncing.
    public init(configuration: Configuration) throws(KeyValueStoreError) {
        self.configuration = configuration
        let directory = (configuration.deviceDirectory as NSString).expandingTildeInPath
        deviceIdentifier = try Self.deviceIdentifier(in: directory)
        let name = Data(configuration.storeIdentifier.utf8).base64EncodedString()
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "=", with: "")
        let journal = try DeviceJournal(path: (directory as NSString).appendingPathComponent("kvs-\(name).journal"))
        var state = State(journal: journal)
        for entry in journal.entries.values where entry.value != nil {
            state.keyCount += 1
            state.totalBytes += entry.bytes?.count ?? 0
        }
        self.state = Locked(state)
        (wakes, wakeContinuation) = AsyncStream.makeStream(of: SyncWake.self, bufferingPolicy: .bufferingNewest(1))
        if configuration.transport != nil, configuration.automaticallySyncs { startSyncing() }
    }

    deinit {
        for task in tasks.withLock({ $0 }) { task.cancel() }
        wakeContinuation.finish()
        for continuation in observers.withLock({ $0.values }) { continuation.finish() }
    }

    /// Stops the background sync (what is pending stays on the device for the next run).
    public func close() {
        for task in tasks.withLock({ tasks in defer { tasks.removeAll() }; return tasks }) { task.cancel() }
        configuration.transport?.stopListening()
    }

    /// The device identifier kept in the directory's `device` file, made on first use.
    private static func deviceIdentifier(in directory: String) throws(KeyValueStoreError) -> String {
        let path = (directory as NSString).appendingPathComponent("device")
        if let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8),
           !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let identifier = UUID().uuidString.lowercased()
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try Data(identifier.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw KeyValueStoreError(.deviceStorage, "\(directory): cannot keep the device's identity (\(error.localizedDescription))")
        }
        return identifier
    }

    // MARK: Reading

    /// The value, or nil.
    public func object(forKey key: String) -> Any? { value(forKey: key)?.foundationValue }

    /// The value as this package's enum, or nil.
    public func value(forKey key: String) -> PropertyListValue? {
        state.withLock { $0.journal.entries[key]?.value }
    }

    /// A string as it is, a number as its text; nil for anything else.
    public func string(forKey key: String) -> String? {
        switch value(forKey: key) {
        case .string(let text): text
        case .integer(let number): String(number)
        case .real(let number): NSNumber(value: number).stringValue
        case .bool(let flag): flag ? "1" : "0"
        default: nil
        }
    }

    public func array(forKey key: String) -> [Any]? {
        guard case .array(let values)? = value(forKey: key) else { return nil }
        return values.map(\.foundationValue)
    }

    public func dictionary(forKey key: String) -> [String: Any]? {
        guard case .dictionary(let values)? = value(forKey: key) else { return nil }
        return values.mapValues(\.foundationValue)
    }

    public func data(forKey key: String) -> Data? {
        guard case .data(let bytes)? = value(forKey: key) else { return nil }
        return bytes
    }

    /// A number's `longLongValue`; a string scanned as a long long after leading whitespace (0 if
    /// that fails); 0 for anything else.
    public func longLong(forKey key: String) -> Int64 {
        switch value(forKey: key) {
        case .integer(let number): number
        case .real(let number): NSNumber(value: number).int64Value
        case .bool(let flag): flag ? 1 : 0
        case .string(let text): Scanner(string: text).scanInt64() ?? 0
        default: 0
        }
    }

    /// A number's or a string's `doubleValue`; 0 for anything else.
    public func double(forKey key: String) -> Double {
        switch value(forKey: key) {
        case .integer(let number): Double(number)
        case .real(let number): number
        case .bool(let flag): flag ? 1 : 0
        case .string(let text): (text as NSString).doubleValue
        default: 0
        }
    }

    /// A number's `boolValue`; a string is true when it is "YES", starts with "Y" (any case), or
    /// has a non-zero `integerValue`; false for anything else.
    public func bool(forKey key: String) -> Bool {
        switch value(forKey: key) {
        case .bool(let flag): flag
        case .integer(let number): number != 0
        case .real(let number): number != 0
        case .string(let text):
            text == "YES" || text.uppercased().hasPrefix("Y") || (text as NSString).integerValue != 0
        default: false
        }
    }

    /// Every key with its value.
    public var dictionaryRepresentation: [String: Any] {
        state.withLock { state in
            var result: [String: Any] = [:]
            for (key, entry) in state.journal.entries { if let value = entry.value { result[key] = value.foundationValue } }
            return result
        }
    }

    /// Every key with its value, as this package's enum.
    public var values: [String: PropertyListValue] {
        state.withLock { state in state.journal.entries.compactMapValues(\.value) }
    }

    // MARK: Writing

    /// Sets a property-list value (nil removes the key). Anything else is refused with
    /// SyncedDefaults' "Tried to set an object that is not a valid plist value."
    public func set(_ anObject: Any?, forKey key: String) throws(KeyValueStoreError) {
        guard let anObject else { return try removeObject(forKey: key) }
        guard let value = PropertyListValue(anObject) else {
            throw KeyValueStoreError(.invalidKeyOrValue, "Tried to set an object that is not a valid plist value.")
        }
        try set(value, forKey: key)
    }

    public func set(_ aString: String?, forKey key: String) throws(KeyValueStoreError) {
        guard let aString else { return try removeObject(forKey: key) }
        try set(PropertyListValue.string(aString), forKey: key)
    }

    public func set(_ aData: Data?, forKey key: String) throws(KeyValueStoreError) {
        guard let aData else { return try removeObject(forKey: key) }
        try set(PropertyListValue.data(aData), forKey: key)
    }

    /// An array whose members are property lists; otherwise Apple's message for `setArray:`.
    public func set(_ anArray: [Any]?, forKey key: String) throws(KeyValueStoreError) {
        guard let anArray else { return try removeObject(forKey: key) }
        guard let value = PropertyListValue(anArray) else {
            throw KeyValueStoreError(.invalidKeyOrValue, "Tried to set an object that is not a valid plist value.")
        }
        try set(value, forKey: key)
    }

    public func set(_ aDictionary: [String: Any]?, forKey key: String) throws(KeyValueStoreError) {
        guard let aDictionary else { return try removeObject(forKey: key) }
        guard let value = PropertyListValue(aDictionary) else {
            throw KeyValueStoreError(.invalidKeyOrValue, "Tried to set an object that is not a valid plist value.")
        }
        try set(value, forKey: key)
    }

    public func set(_ value: Int64, forKey key: String) throws(KeyValueStoreError) { try set(PropertyListValue.integer(value), forKey: key) }
    public func set(_ value: Double, forKey key: String) throws(KeyValueStoreError) { try set(PropertyListValue.real(value), forKey: key) }
    public func set(_ value: Bool, forKey key: String) throws(KeyValueStoreError) { try set(PropertyListValue.bool(value), forKey: key) }

    /// Apple's typed setters take an object of one class, and raise for another: `setString:`
    /// with "…: expected value should be an NSString" and the like. Here the check is for values
    /// arriving untyped (`Any`), with the same message.
    public func setChecked(_ anObject: Any?, forKey key: String, expecting expected: PropertyListType) throws(KeyValueStoreError) {
        guard let anObject else { return try removeObject(forKey: key) }
        guard let value = PropertyListValue(anObject), expected.holds(value) else {
            throw KeyValueStoreError(
                .invalidArgument, "-[NSUbiquitousKeyValueStore set\(expected.setterName):forKey:]: expected value should be an \(expected.className)")
        }
        try set(value, forKey: key)
    }

    /// Sets a value, checked against the limits first: a write that breaks one changes nothing,
    /// is reported with reason 2 (`quotaViolationChange`) and throws.
    public func set(_ value: PropertyListValue, forKey key: String) throws(KeyValueStoreError) {
        if let problem = configuration.limits.keyProblem(key) { throw problem }
        let bytes = BinaryPropertyList.encode(value)
        let limits = configuration.limits
        let store = configuration.storeIdentifier
        let refusal = try state.withLock { state throws(KeyValueStoreError) -> KeyValueStoreError? in
            let old = state.journal.entries[key]
            // An equal value changes nothing, and keeps its timestamp (research 1.7.5).
            if old?.value == value { return nil }
            let oldBytes = old?.value == nil ? 0 : old?.bytes?.count ?? 0
            if bytes.count > limits.maximumValueBytes {
                return KeyValueStoreError(.quotaExceeded, "Exceeded maximum size (\(limits.maximumValueBytes)) for key \(key): the value is \(bytes.count) bytes", keys: [key])
            }
            if old?.value == nil, state.keyCount + 1 > limits.maximumKeys {
                return KeyValueStoreError(.quotaExceeded, "Exceeded maximum number of keys (\(limits.maximumKeys)) in store (\(store))", keys: [key])
            }
            let total = state.totalBytes - oldBytes + bytes.count
            if total > limits.maximumTotalBytes {
                return KeyValueStoreError(.quotaExceeded, "Exceeded maximum total bytes (\(limits.maximumTotalBytes)) in store (\(store)): it would be \(total) bytes", keys: [key])
            }
            let date = max(configuration.clock(), (old?.date ?? 0) + 1)
            try state.journal.put(key, DeviceEntry(value: value, bytes: bytes, date: date, pending: true, tag: old?.tag))
            if old?.value == nil { state.keyCount += 1 }
            state.totalBytes = total
            return nil
        }
        if let refusal {
            post(KeyValueStoreChange(reason: .quotaViolationChange, changedKeys: [key]))
            throw refusal
        }
        wakeContinuation.yield(.localChange)
    }

    /// Removes the key; the removal syncs as the record's deletion.
    public func removeObject(forKey key: String) throws(KeyValueStoreError) {
        if let problem = configuration.limits.keyProblem(key) { throw problem }
        let changed = try state.withLock { state throws(KeyValueStoreError) -> Bool in
            guard let old = state.journal.entries[key], old.value != nil else { return false }
            let date = max(configuration.clock(), old.date + 1)
            try state.journal.put(key, DeviceEntry(value: nil, bytes: nil, date: date, pending: true, tag: old.tag))
            state.keyCount -= 1
            state.totalBytes -= old.bytes?.count ?? 0
            return true
        }
        if changed { wakeContinuation.yield(.localChange) }
    }

    // MARK: Sync

    /// Asks for an upload of what is pending and a pull, and returns at once: true, or false when
    /// the store has nowhere to sync (no server or container configured).
    @discardableResult
    public func synchronize() -> Bool {
        guard configuration.transport != nil else { return false }
        if configuration.automaticallySyncs {
            wakeContinuation.yield(.now)
        } else {
            Task { _ = try? await self.syncNow() }
        }
        return true
    }

    /// The keys whose writes the server has yet to take.
    public var pendingKeys: [String] {
        state.withLock { state in state.journal.entries.filter(\.value.pending).map(\.key).sorted() }
    }

    /// The last background sync's error, if it failed (cleared by one that succeeds).
    public var lastSyncError: KeyValueStoreError? { state.withLock { $0.lastSyncError } }

    // MARK: Notifications

    /// The store's notifications, as they are posted: each access is a new sequence.
    public var changes: AsyncStream<KeyValueStoreChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: KeyValueStoreChange.self)
        let id = UUID()
        observers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in self?.observers.withLock { _ = $0.removeValue(forKey: id) } }
        return stream
    }

    func post(_ change: KeyValueStoreChange) {
        configuration.notificationCenter.post(name: Self.didChangeExternallyNotification, object: self, userInfo: change.userInfo)
        for continuation in observers.withLock({ Array($0.values) }) { continuation.yield(change) }
    }

    /// Starts the background sync of a store configured without `automaticallySyncs` (after its
    /// observers are in place, say, so that they see what the first sync brings). Once only.
    public func startSyncing() {
        guard let transport = configuration.transport, !syncStarted.exchange(true, ordering: .relaxed) else { return }
        let device = deviceIdentifier
        let wakes = self.wakes
        let delay = configuration.uploadDelay
        let interval = configuration.minimumUploadInterval
        let syncing = Task { [weak self] in
            // Opportunistically at start, as Apple's runtime does a moment after a store is made.
            _ = try? await self?.syncNow()
            var lastUpload: ContinuousClock.Instant?
            for await wake in wakes {
                if wake == .localChange {
                    var wait = delay
                    if let lastUpload { wait = max(wait, lastUpload + interval - .now) }
                    if wait > .zero { try? await Task.sleep(for: wait) }
                    lastUpload = .now
                }
                if Task.isCancelled { return }
                guard let self else { return }
                do { _ = try await self.syncNow() } catch {
                    // Kept pending; tried again on the next change, push or synchronize().
                    try? await Task.sleep(for: .milliseconds(500))
                }
            }
        }
        let listening = Task { [weak self] in
            while !Task.isCancelled {
                await transport.waitForChange(device: device)
                if Task.isCancelled { return }
                guard let self else { return }
                self.wakeContinuation.yield(.now)
            }
        }
        tasks.withLock { $0 += [syncing, listening] }
    }
}

/// The property-list classes Apple's typed setters expect.
public enum PropertyListType: Sendable {
    case string, data, array, dictionary

    func holds(_ value: PropertyListValue) -> Bool {
        switch (self, value) {
        case (.string, .string), (.data, .data), (.array, .array), (.dictionary, .dictionary): true
        default: false
        }
    }

    var className: String {
        switch self {
        case .string: "NSString"
        case .data: "NSData"
        case .array: "NSArray"
        case .dictionary: "NSDictionary"
        }
    }

    var setterName: String {
        switch self {
        case .string: "String"
        case .data: "Data"
        case .array: "Array"
        case .dictionary: "Dictionary"
        }
    }
}

/// Runs syncs one after another: a sync awaits the network, and two at once would merge twice.
actor SyncSerializer {
    private var last: Task<Void, Never>?

    func run<T: Sendable>(_ operation: @escaping @Sendable () async throws(KeyValueStoreError) -> T) async throws(KeyValueStoreError) -> T {
        let previous = last
        let task = Task { () async -> Result<T, KeyValueStoreError> in
            await previous?.value
            do throws(KeyValueStoreError) { return .success(try await operation()) } catch { return .failure(error) }
        }
        last = Task { _ = await task.value }
        return try await task.value.get()
    }
}
