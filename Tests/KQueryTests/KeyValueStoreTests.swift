import Foundation
import KQuery
import KQueryContainer
import KQueryKeyValueStore
import KQueryTestSupport
import PropertyBased
import Testing

/// Devices of one user, each a store on its own state directory, synced through one container in
/// this process. Writes are stamped by a shared logical clock, so "newest" is never a tie.
final class KeyValueDevices: @unchecked Sendable {
    let container: Container
    let storeIdentifier: String
    private let ticks = Locked<Int64>(1_800_000_000_000)

    init(container: Container? = nil, storeIdentifier: String = "ABCDE.com.example.kvs") throws {
        self.container = try container ?? Container(containerIdentifier: "iCloud.com.example.kvs")
        self.storeIdentifier = storeIdentifier
    }

    var clock: @Sendable () -> Int64 { { [ticks] in ticks.withLock { $0 += 1; return $0 } } }

    /// A device of `user` on `directory` (a fresh one by default) that syncs only when told.
    func device(user: String = "_alice", directory: String? = nil, limits: KeyValueStoreLimits = KeyValueStoreLimits(),
                center: NotificationCenter = NotificationCenter()) throws -> UbiquitousKeyValueStore {
        var configuration = UbiquitousKeyValueStore.Configuration(
            storeIdentifier: storeIdentifier, deviceDirectory: directory ?? TemporaryFiles.path("kvs-device"),
            transport: ContainerTransport(container: container, user: user, storeIdentifier: storeIdentifier))
        configuration.automaticallySyncs = false
        configuration.clock = clock
        configuration.limits = limits
        configuration.notificationCenter = center
        return try UbiquitousKeyValueStore(configuration: configuration)
    }
}

/// Collects a store's notifications from NotificationCenter, as an app observing it would.
final class NotificationLog: @unchecked Sendable {
    private let entries = Locked<[(reason: Int?, keys: [String]?, sameStore: Bool)]>([])
    private var token: NSObjectProtocol?
    let center: NotificationCenter

    init(_ center: NotificationCenter, store: @escaping @Sendable () -> UbiquitousKeyValueStore?) {
        self.center = center
        token = center.addObserver(forName: UbiquitousKeyValueStore.didChangeExternallyNotification, object: nil, queue: nil) { [entries] note in
            let info = note.userInfo ?? [:]
            let reason = (info[NSUbiquitousKeyValueStoreChangeReasonKey] as? NSNumber)?.intValue ?? (info[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int)
            let keys = info[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String]
            let same = (note.object as AnyObject?) === store()
            entries.withLock { $0.append((reason, keys, same)) }
        }
    }

    deinit { if let token { center.removeObserver(token) } }

    var all: [(reason: Int?, keys: [String]?, sameStore: Bool)] { entries.withLock { $0 } }
}

@Suite struct KeyValueStoreTests {
    // MARK: Values and coercions

    /// Apple's getter coercions (research 1.1), one row per stored value.
    @Test func gettersCoerceAsApplesDo() throws {
        let store = try KeyValueDevices().device()
        try store.set(PropertyListValue.string("  42 apples"), forKey: "text")
        try store.set(PropertyListValue.string("yes please"), forKey: "yes")
        try store.set(PropertyListValue.string("7"), forKey: "seven")
        try store.set(PropertyListValue.string("no"), forKey: "no")
        try store.set(Int64(12), forKey: "int")
        try store.set(2.5, forKey: "real")
        try store.set(true, forKey: "flag")
        try store.set(Data([1, 2]), forKey: "data")
        try store.set([1, "a"] as [Any], forKey: "array")
        try store.set(["k": 1] as [String: Any], forKey: "dict")

        #expect(store.string(forKey: "text") == "  42 apples")
        #expect(store.string(forKey: "int") == "12")
        #expect(store.string(forKey: "real") == "2.5")
        #expect(store.string(forKey: "flag") == "1")
        #expect(store.string(forKey: "data") == nil && store.string(forKey: "array") == nil && store.string(forKey: "missing") == nil)

        #expect(store.longLong(forKey: "text") == 42)
        #expect(store.longLong(forKey: "no") == 0)
        #expect(store.longLong(forKey: "int") == 12 && store.longLong(forKey: "real") == 2 && store.longLong(forKey: "flag") == 1)
        #expect(store.longLong(forKey: "data") == 0 && store.longLong(forKey: "missing") == 0)

        #expect(store.double(forKey: "text") == 42 && store.double(forKey: "real") == 2.5 && store.double(forKey: "int") == 12)
        #expect(store.double(forKey: "dict") == 0)

        #expect(store.bool(forKey: "yes") && store.bool(forKey: "seven") && !store.bool(forKey: "no"))
        #expect(store.bool(forKey: "int") && store.bool(forKey: "flag") && !store.bool(forKey: "data") && !store.bool(forKey: "missing"))

        #expect(store.data(forKey: "data") == Data([1, 2]) && store.data(forKey: "text") == nil)
        #expect(store.array(forKey: "array")?.count == 2 && store.array(forKey: "dict") == nil)
        #expect(store.dictionary(forKey: "dict")?["k"] as? Int64 == 1 && store.dictionary(forKey: "array") == nil)
        #expect(store.dictionaryRepresentation.count == 10)
        #expect(store.object(forKey: "int") as? Int64 == 12)
    }

    /// Setters: a non-plist value and a typed setter given another type are refused with Apple's
    /// messages and change nothing; nil removes; an equal value is not written again.
    @Test func settersCheckTypes() throws {
        let store = try KeyValueDevices().device()
        #expect(throws: KeyValueStoreError(.invalidKeyOrValue, "Tried to set an object that is not a valid plist value.")) {
            try store.set(NSObject() as Any, forKey: "k")
        }
        #expect(throws: KeyValueStoreError(.invalidKeyOrValue, "Tried to set an object that is not a valid plist value.")) {
            try store.set([1, NSObject()] as [Any], forKey: "k")
        }
        #expect(throws: KeyValueStoreError(.invalidArgument, "-[NSUbiquitousKeyValueStore setString:forKey:]: expected value should be an NSString")) {
            try store.setChecked(5, forKey: "k", expecting: .string)
        }
        #expect(store.object(forKey: "k") == nil)
        try store.setChecked("five", forKey: "k", expecting: .string)
        #expect(store.string(forKey: "k") == "five")
        try store.set(nil as String?, forKey: "k")
        #expect(store.object(forKey: "k") == nil)
        #expect(throws: KeyValueStoreError(.invalidKeyOrValue, "Invalid key parameter provided")) { try store.set("v", forKey: "") }
        try store.set("same", forKey: "s")
        let date = Date(timeIntervalSince1970: 1_700_000_000.5)
        try store.set(date, forKey: "d")
        #expect(store.object(forKey: "d") as? Date == date)
    }

    /// The binary property lists this package writes decode with Foundation to the same value.
    @Test func binaryPropertyListsRoundTripThroughFoundation() async {
        let leaf = Gen.oneOf(
            Gen.int(in: -1_000_000...1_000_000).map { PropertyListValue.integer(Int64($0)) },
            Gen.int(in: -100...100).map { PropertyListValue.real(Double($0) / 8) },
            Gen.bool.map(PropertyListValue.bool),
            Gen.int(in: 0...40).map { PropertyListValue.string(String(repeating: "é", count: $0 % 3) + String(repeating: "x", count: $0)) },
            Gen.int(in: 0...300).map { PropertyListValue.data(Data((0..<$0).map { UInt8(truncatingIfNeeded: $0) })) },
            Gen.int(in: 0...1_000_000).map { PropertyListValue.date(Date(timeIntervalSinceReferenceDate: Double($0))) })
        let tree = Gen.oneOf(
            leaf, leaf.array(of: 0...20).map(PropertyListValue.array),
            leaf.array(of: 0...20).map { values in PropertyListValue.dictionary(Dictionary(uniqueKeysWithValues: values.enumerated().map { ("k\($0.offset)", $0.element) })) })
        await propertyCheck(count: 300, input: tree.array(of: 0...20)) { members in
            let value = PropertyListValue.array(members)
            let bytes = PropertyListValue.binaryPropertyList(value)
            let decoded = try? PropertyListValue(propertyListBytes: bytes)
            #expect(decoded == value, "\(value) came back as \(String(describing: decoded))")
        }
        // Large counts and references (over 255 objects, strings over 14 units).
        let big = PropertyListValue.array((0..<70_000).map { .integer(Int64($0)) })
        #expect((try? PropertyListValue(propertyListBytes: PropertyListValue.binaryPropertyList(big))) == big)
    }

    /// Property lists Foundation's decoder would take or crash on, which a store refuses first:
    /// a dictionary keyed by a set (PlistFuzz found that one crashing the process), XML, a
    /// truncated trailer.
    @Test func malformedPropertyListsAreRefusedBeforeFoundation() {
        var keyedBySet: [UInt8] = Array("bplist00".utf8) + [0xD1, 0x01, 0x02, 0xC0, 0x10, 0x05, 0x08, 0x0B, 0x0C]
        keyedBySet += [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 0, 0, 3] + [UInt8](repeating: 0, count: 8) + [0, 0, 0, 0, 0, 0, 0, 14]
        let xml = Data(#"<?xml version="1.0"?><plist version="1.0"><string>x</string></plist>"#.utf8)
        let good = PropertyListValue.binaryPropertyList(.dictionary(["k": .array([.integer(1)])]))
        for bytes in [Data(keyedBySet), xml, good.dropLast(1), Data("bplist00".utf8), Data()] {
            #expect(throws: KeyValueStoreError.self) { try PropertyListValue(propertyListBytes: bytes) }
        }
        var keyedByString = keyedBySet
        keyedByString[11] = 0x51
        keyedByString.insert(0x61, at: 12)
        // Shifted by one byte: the integer's and the table's offsets move too.
        keyedByString[15] = 0x08; keyedByString[16] = 0x0B; keyedByString[17] = 0x0D
        keyedByString[keyedByString.count - 1] = 15
        #expect((try? PropertyListValue(propertyListBytes: Data(keyedByString))) == .dictionary(["a": .integer(5)]))
    }

    /// A binary property list of `objects` (each its marker and contents, references
    /// `referenceSize` bytes wide), the first one the top.
    static func propertyList(_ objects: [[UInt8]], referenceSize: UInt8 = 1) -> Data {
        func bigEndian(_ value: Int, _ size: Int) -> [UInt8] { (0..<size).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        var out: [UInt8] = Array("bplist00".utf8)
        var offsets: [Int] = []
        for object in objects {
            offsets.append(out.count)
            out += object
        }
        let table = out.count
        for offset in offsets { out += bigEndian(offset, 4) }
        out += [0, 0, 0, 0, 0, 0, 4, referenceSize] + bigEndian(objects.count, 8) + bigEndian(0, 8) + bigEndian(table, 8)
        return Data(out)
    }

    /// Hostile shapes a few bytes can take, refused before anything is decoded: a count that
    /// overflows when doubled (it trapped), arrays naming the next one twice (2^40 objects once
    /// copied out), a reference cycle, nesting 600 deep. Sharing within bounds is a value.
    @Test func hostilePropertyListShapesAreRefused() {
        let overflowingCount = Self.propertyList([[0xDF, 0x13, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]])
        let doubling: [[UInt8]] = (0..<40).map { (index: Int) -> [UInt8] in [0xA2, UInt8(index + 1), UInt8(index + 1)] }
        let bomb = Self.propertyList(doubling + [[0x08]])
        let cycle = Self.propertyList([[0xA1, 0x01], [0xA1, 0x00]])
        func chain(_ length: Int) -> Data {
            let links: [[UInt8]] = (0..<length).map { (index: Int) -> [UInt8] in [0xA1, UInt8((index + 1) >> 8), UInt8((index + 1) & 0xFF)] }
            return Self.propertyList(links + [[0x09]], referenceSize: 2)
        }
        let deep = chain(600)
        for bytes in [overflowingCount, bomb, cycle, deep] {
            #expect(throws: KeyValueStoreError.self) { try PropertyListValue(propertyListBytes: bytes) }
        }
        let shared = Self.propertyList([[0xA3, 0x01, 0x01, 0x02], [0xA2, 0x02, 0x02], [0x09]])
        #expect((try? PropertyListValue(propertyListBytes: shared)) == .array([.array([.bool(true), .bool(true)]), .array([.bool(true), .bool(true)]), .bool(true)]))
        #expect((try? PropertyListValue(propertyListBytes: chain(500))) != nil, "500 deep is within bounds")
    }

    // MARK: Limits

    /// Every limit at, below and above its boundary: the refused write changes nothing, throws,
    /// and posts reason 2 with the key.
    @Test func limitsRefuseWholeWrites() throws {
        let devices = try KeyValueDevices()
        let center = NotificationCenter()
        let store = try devices.device(center: center)
        let log = NotificationLog(center) { store }

        // Keys: 128 UTF-16 units and 189 UTF-8 bytes pass, one more fails.
        try store.set("v", forKey: String(repeating: "k", count: 128))
        #expect(throws: KeyValueStoreError.self) { try store.set("v", forKey: String(repeating: "k", count: 129)) }
        let wide = String(repeating: "é", count: 94) + "a"  // 189 UTF-8 bytes, 95 UTF-16 units
        try store.set("v", forKey: wide)
        do {
            try store.set("v", forKey: wide + "a")
            Issue.record("a 190-byte key was taken")
        } catch {
            #expect(error.message.contains("maximum allowed UTF-8 code units of (189)"))
        }
        do {
            try store.set("v", forKey: String(repeating: "k", count: 129))
        } catch {
            #expect(error.message == "NSUbiquitousKeyValueStore key '\(String(repeating: "k", count: 129))' is longer than the maximum allowed UTF-16 code units of (128)")
        }
        var legacy = KeyValueStoreLimits()
        legacy.legacyKeyLength = true
        let old = try devices.device(limits: legacy)
        try old.set("v", forKey: String(repeating: "k", count: 64))
        #expect(throws: KeyValueStoreError(.invalidArgument, "NSUbiquitousKeyValueStore: key '\(String(repeating: "k", count: 65))' is too long.")) {
            try old.set("v", forKey: String(repeating: "k", count: 65))
        }

        // Value bytes: a data value's plist is its bytes plus a header, count and trailer.
        let overhead = PropertyListValue.binaryPropertyList(.data(Data(count: 1_000_000))).count - 1_000_000
        let fresh = try devices.device(center: center)
        try fresh.set(Data(count: 1_048_576 - overhead), forKey: "exact")
        #expect(fresh.data(forKey: "exact")?.count == 1_048_576 - overhead)
        try fresh.removeObject(forKey: "exact")
        do {
            try fresh.set(Data(count: 1_048_576 - overhead + 1), forKey: "over")
            Issue.record("a value one byte over was taken")
        } catch {
            #expect(error.code == .quotaExceeded && error.message.hasPrefix("Exceeded maximum size (1048576) for key over"))
            #expect(error.keys == ["over"])
        }
        #expect(fresh.object(forKey: "over") == nil)

        // Total bytes: two values that fit alone, not together.
        let half = 600_000
        try fresh.set(Data(count: half), forKey: "a")
        #expect(throws: KeyValueStoreError.self) { try fresh.set(Data(count: half), forKey: "b") }
        #expect(fresh.object(forKey: "b") == nil)
        // Replacing a value counts the new bytes instead of the old.
        try fresh.set(Data(count: half + 10), forKey: "a")
        #expect(fresh.data(forKey: "a")?.count == half + 10)

        // Keys: 1,024 fit, the 1,025th does not; replacing one of them still does.
        let many = try devices.device(center: center)
        for index in 0..<1024 { try many.set(Int64(index), forKey: "key\(index)") }
        do {
            try many.set(Int64(0), forKey: "key1024")
            Issue.record("a 1,025th key was taken")
        } catch {
            #expect(error.message.hasPrefix("Exceeded maximum number of keys (1024) in store"))
        }
        try many.set(Int64(-1), forKey: "key7")
        try many.removeObject(forKey: "key8")
        try many.set(Int64(0), forKey: "key1024")
        #expect(many.dictionaryRepresentation.count == 1024)

        let quota = log.all.filter { $0.reason == 2 }
        #expect(quota.map(\.keys) == [["over"], ["b"], ["key1024"]])
    }

    // MARK: Persistence

    /// Writes are on the device at once: a store opened again on the directory has them, pending.
    @Test func writesPersistOnTheDevice() throws {
        let devices = try KeyValueDevices()
        let directory = TemporaryFiles.path("kvs-device")
        do {
            let store = try devices.device(directory: directory)
            try store.set("dark", forKey: "theme")
            try store.set(["a": [1, 2.5, true]] as [String: Any], forKey: "nested")
            try store.set("gone", forKey: "removed")
            try store.removeObject(forKey: "removed")
        }
        let again = try devices.device(directory: directory)
        #expect(again.string(forKey: "theme") == "dark")
        #expect(again.value(forKey: "nested") == .dictionary(["a": .array([.integer(1), .real(2.5), .bool(true)])]))
        #expect(again.object(forKey: "removed") == nil)
        #expect(again.pendingKeys == ["nested", "removed", "theme"])
    }

    /// A damaged tail (a torn last record) is cut off; what came before it stays.
    @Test func aTornJournalTailIsDropped() throws {
        let devices = try KeyValueDevices()
        let directory = TemporaryFiles.path("kvs-device")
        do {
            let store = try devices.device(directory: directory)
            try store.set("one", forKey: "a")
            try store.set("two", forKey: "b")
        }
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: directory).first { $0.hasSuffix(".journal") })
        let path = directory + "/" + file
        let data = try #require(FileManager.default.contents(atPath: path))
        try data.dropLast(3).write(to: URL(fileURLWithPath: path))
        let again = try devices.device(directory: directory)
        #expect(again.string(forKey: "a") == "one" && again.object(forKey: "b") == nil)
        try again.set("three", forKey: "c")
        let third = try devices.device(directory: directory)
        #expect(third.string(forKey: "c") == "three")
    }

    // MARK: Sync and the four reasons

    /// Two devices converge; the other device gets reason 0 with the key, the writer nothing.
    @Test func twoDevicesConvergeAndOnlyTheOtherIsNotified() async throws {
        let devices = try KeyValueDevices()
        let centerA = NotificationCenter(), centerB = NotificationCenter()
        let a = try devices.device(center: centerA)
        let b = try devices.device(center: centerB)
        let logA = NotificationLog(centerA) { a }
        let logB = NotificationLog(centerB) { b }
        _ = try await a.syncNow()
        _ = try await b.syncNow()
        try a.set("dark", forKey: "theme")
        try a.set(Int64(3), forKey: "level")
        let changesA = try await a.syncNow()
        #expect(changesA.isEmpty)
        let changesB = try await b.syncNow()
        #expect(changesB == [KeyValueStoreChange(reason: .serverChange, changedKeys: ["level", "theme"])])
        #expect(b.string(forKey: "theme") == "dark" && b.longLong(forKey: "level") == 3)
        #expect(logB.all.count == 1 && logB.all[0].reason == 0 && logB.all[0].keys == ["level", "theme"] && logB.all[0].sameStore)
        // Only real changes notify: the same value again, then a removal.
        try b.set(Int64(3), forKey: "level")
        _ = try await b.syncNow()
        try b.removeObject(forKey: "theme")
        _ = try await b.syncNow()
        #expect(try await a.syncNow() == [KeyValueStoreChange(reason: .serverChange, changedKeys: ["theme"])])
        #expect(a.object(forKey: "theme") == nil)
        #expect(logA.all.map(\.keys) == [["theme"]])
        let againA = try await a.syncNow(), againB = try await b.syncNow()
        #expect(againA.isEmpty && againB.isEmpty)
        // The records are ordinary records: KVSRecord, base64 names, value and localModificationDate.
        let database = try devices.container.database(.private, user: "_alice")
        let record = try #require(try database.record(RecordID(recordName: Data("level".utf8).base64EncodedString(), zoneID: ZoneID(zoneName: devices.storeIdentifier))))
        #expect(record.recordType == "KVSRecord")
        if case .bytes(let bytes)? = record["value"] { #expect(try PropertyListValue(propertyListBytes: Data(bytes)) == .integer(3)) } else { Issue.record("no value field") }
        if case .timestamp? = record["localModificationDate"] {} else { Issue.record("no localModificationDate") }
    }

    /// Offline writes on both devices: per key the newer write wins, on both.
    @Test func newestWriteWinsPerKey() async throws {
        let devices = try KeyValueDevices()
        let a = try devices.device(), b = try devices.device()
        _ = try await a.syncNow()
        _ = try await b.syncNow()
        try a.set("a1", forKey: "x")
        try b.set("b1", forKey: "x")  // newer
        try b.set("b2", forKey: "y")
        try a.set("a2", forKey: "y")  // newer
        _ = try await a.syncNow()
        let changes = try await b.syncNow()
        #expect(changes == [KeyValueStoreChange(reason: .serverChange, changedKeys: ["y"])])
        _ = try await a.syncNow()
        #expect(a.values == b.values)
        #expect(a.string(forKey: "x") == "b1" && a.string(forKey: "y") == "a2")
    }

    /// Reason 1: a new device's writes made before its first download lose to the server's
    /// values; keys the server lacks are kept and uploaded.
    @Test func initialSyncChangeDiscardsEarlierLocalWrites() async throws {
        let devices = try KeyValueDevices()
        let a = try devices.device()
        try a.set("server", forKey: "shared")
        _ = try await a.syncNow()
        let b = try devices.device()
        try b.set("local", forKey: "shared")  // newer by the clock, but before the first download
        try b.set("mine", forKey: "only-b")
        let changes = try await b.syncNow()
        #expect(changes == [KeyValueStoreChange(reason: .initialSyncChange, changedKeys: ["shared"])])
        #expect(b.string(forKey: "shared") == "server" && b.string(forKey: "only-b") == "mine")
        _ = try await a.syncNow()
        #expect(a.values == b.values)
    }

    /// Reason 3: the device's user changes; the whole store is replaced by the new user's, its
    /// pending writes too, whatever the timestamps.
    @Test func accountChangeReplacesTheStore() async throws {
        let devices = try KeyValueDevices()
        let bob = try devices.device(user: "_bob")
        try bob.set("bob's", forKey: "name")
        _ = try await bob.syncNow()
        let directory = TemporaryFiles.path("kvs-device")
        let alice = try devices.device(user: "_alice", directory: directory)
        try alice.set("alice's", forKey: "name")
        try alice.set(Int64(1), forKey: "alice-only")
        _ = try await alice.syncNow()
        let switched = try devices.device(user: "_bob", directory: directory)
        try switched.set("newer but offline", forKey: "pending")
        let changes = try await switched.syncNow()
        #expect(changes == [KeyValueStoreChange(reason: .accountChange, changedKeys: ["alice-only", "name", "pending"])])
        #expect(switched.values == ["name": .string("bob's")])
    }

    /// A device whose token the server no longer honours (its deletion history compacted away)
    /// fetches everything again, and drops the keys the server no longer has.
    @Test func anExpiredTokenRefetchesEverything() async throws {
        let devices = try KeyValueDevices()
        let a = try devices.device(), b = try devices.device()
        try a.set("x", forKey: "gone")
        try a.set("y", forKey: "kept")
        _ = try await a.syncNow()
        _ = try await b.syncNow()
        try a.removeObject(forKey: "gone")
        try a.set("z", forKey: "new")
        _ = try await a.syncNow()
        try devices.container.database(.private, user: "_alice").compactChangeHistory(keepingLast: 0)
        let changes = try await b.syncNow()
        #expect(changes == [KeyValueStoreChange(reason: .serverChange, changedKeys: ["gone", "new"])])
        #expect(b.values == a.values)
    }

    /// Values over 102,400 bytes travel as an asset (`assetValue`).
    @Test func largeValuesTravelAsAssets() async throws {
        let devices = try KeyValueDevices()
        let a = try devices.device(), b = try devices.device()
        let big = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try a.set(big, forKey: "blob")
        _ = try await a.syncNow()
        _ = try await b.syncNow()
        #expect(b.data(forKey: "blob") == big)
        let database = try devices.container.database(.private, user: "_alice")
        let record = try #require(try database.record(RecordID(recordName: Data("blob".utf8).base64EncodedString(), zoneID: ZoneID(zoneName: devices.storeIdentifier))))
        #expect(record["value"] == nil && record["assetValue"] != nil)
    }

    /// A record another client wrote with garbage bytes, or fields of the wrong type, is an error
    /// for the sync, never a crash, and changes nothing on the device.
    @Test(arguments: [
        ("value", FieldValue.bytes([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74, 0x30, 0x30, 0xFF, 0x00])),
        ("value", FieldValue.string("not bytes")),
        ("localModificationDate", FieldValue.string("yesterday")),
    ])
    func hostileRecordsAreErrors(field: String, value: FieldValue) async throws {
        let devices = try KeyValueDevices()
        let a = try devices.device()
        try a.set("fine", forKey: "k")
        _ = try await a.syncNow()
        let database = try devices.container.database(.private, user: "_alice")
        var record = Record(recordType: "KVSRecord", recordName: Data("evil".utf8).base64EncodedString(), fields: [
            "value": .bytes([UInt8](PropertyListValue.binaryPropertyList(.string("ok")))), "localModificationDate": .timestamp(1),
        ])
        record.fields[field] = value
        record.recordID.zoneID = ZoneID(zoneName: devices.storeIdentifier)
        _ = try database.modify([RecordOperation(kind: .forceReplace, record: record)])
        let b = try devices.device()
        await #expect(throws: KeyValueStoreError.self) { try await b.syncNow() }
        #expect(b.values.isEmpty)
        await #expect(throws: KeyValueStoreError.self) { try await a.syncNow() }
        #expect(a.values == ["k": .string("fine")])
    }

    /// The AsyncSequence gives the same changes as the notification, and automatic sync delivers
    /// another device's write without a call.
    @Test func changesArriveOnTheAsyncSequence() async throws {
        let devices = try KeyValueDevices()
        var configuration = UbiquitousKeyValueStore.Configuration(
            storeIdentifier: devices.storeIdentifier, deviceDirectory: TemporaryFiles.path("kvs-device"),
            transport: ContainerTransport(container: devices.container, user: "_alice", storeIdentifier: devices.storeIdentifier))
        configuration.uploadDelay = .zero
        configuration.minimumUploadInterval = .zero
        configuration.notificationCenter = NotificationCenter()
        let watcher = try UbiquitousKeyValueStore(configuration: configuration)
        defer { watcher.close() }
        let changes = watcher.changes
        _ = try await watcher.syncNow()
        let writer = try devices.device()
        _ = try await writer.syncNow()
        try writer.set("hello", forKey: "greeting")
        _ = try await writer.syncNow()
        var iterator = changes.makeAsyncIterator()
        var seen: [String] = []
        while !seen.contains("greeting"), let change = await iterator.next() { seen += change.changedKeys }
        #expect(watcher.string(forKey: "greeting") == "hello")
        #expect(watcher.synchronize())
    }

    /// Without a transport a store works on the device alone and `synchronize()` says false.
    @Test func aStoreWithoutTransportStaysLocal() async throws {
        let store = try UbiquitousKeyValueStore(configuration: .init(storeIdentifier: "s", deviceDirectory: TemporaryFiles.path("kvs-device")))
        try store.set("v", forKey: "k")
        #expect(!store.synchronize())
        await #expect(throws: KeyValueStoreError.self) { try await store.syncNow() }
        #expect(store.string(forKey: "k") == "v")
    }

    // MARK: Convergence

    /// Random interleavings of set, remove and sync on 2 to 4 devices end with every device
    /// equal, and each key never removed holding its newest write (every write gets a later tick
    /// of the shared clock, so the newest is the last one made).
    @Test func randomInterleavingsConverge() async {
        await propertyCheck(count: 40, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            do {
                let devices = try KeyValueDevices()
                let count = Int.random(in: 2...4, using: &rng)
                var stores: [UbiquitousKeyValueStore] = []
                for _ in 0..<count { stores.append(try devices.device()) }
                // Every device has had its first download: after it, no write is discarded (reason 1).
                for store in stores { _ = try await store.syncNow() }
                var newest: [String: PropertyListValue] = [:]
                var removed: Set<String> = []
                var serial: Int64 = 0
                for _ in 0..<Int.random(in: 10...60, using: &rng) {
                    let store = stores[Int.random(in: 0..<count, using: &rng)]
                    let key = "k\(Int.random(in: 0..<5, using: &rng))"
                    switch Int.random(in: 0..<10, using: &rng) {
                    case 0..<5:
                        serial += 1
                        try store.set(Int64(serial), forKey: key)
                        newest[key] = .integer(serial)
                    case 5:
                        if store.object(forKey: key) != nil { removed.insert(key) }
                        try store.removeObject(forKey: key)
                    default:
                        _ = try await store.syncNow()
                    }
                }
                for _ in 0..<2 { for store in stores { _ = try await store.syncNow() } }
                let first = stores[0].values
                for store in stores.dropFirst() { #expect(store.values == first, "seed \(seed)") }
                for store in stores { #expect(store.pendingKeys.isEmpty, "seed \(seed)") }
                for (key, value) in newest where !removed.contains(key) { #expect(first[key] == value, "seed \(seed) key \(key)") }
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }
}
