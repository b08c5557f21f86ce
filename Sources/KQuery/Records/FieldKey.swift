
/// A field name interned to a small integer, so compiled predicates, indexes and records compare
/// field names with one integer comparison instead of hashing strings on every record.
///
/// Keys are process-wide and never freed: a program meets a bounded vocabulary of field names.
public struct FieldKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    @usableFromInline let rawValue: UInt32

    /// Interns `name` (creating its key on first use).
    public init(_ name: String) {
        self.init(name, hash: _ASCIINameTable.hash(name))
    }

    /// Interns `name` whose hash (`_ASCIINameTable.hash`, or `validNameHash`) is known.
    init(_ name: String, hash: UInt64?) {
        rawValue = FieldKey._registry.withLock { $0.intern(name, hash: hash) }
    }

    /// The key of `name` if some record or predicate has used it, without interning it.
    public static func existing(_ name: String) -> FieldKey? {
        let hash = _ASCIINameTable.hash(name)
        return _registry.withLock { $0.id(of: name, hash: hash) }.map(FieldKey.init(rawValue:))
    }

    init(rawValue: UInt32) { self.rawValue = rawValue }

    public var name: String { FieldKey._registry.withLock { $0.names[Int(rawValue)] } }
    public var description: String { name }

    /// Orders by interning order, which is arbitrary but stable within a process.
    public static func < (lhs: FieldKey, rhs: FieldKey) -> Bool { lhs.rawValue < rhs.rawValue }

    /// `ids` is the truth: String keys, so canonically equivalent spellings share a key. `cache`
    /// answers again for ASCII names already seen, by their bytes and a cheap hash, because every
    /// predicate and record interns the same few names and String hashing dominated validation.
    private struct _Registry {
        var ids: [String: UInt32] = [:]
        var names: [String] = []
        var cache = _ASCIINameTable()

        mutating func intern(_ name: String, hash: UInt64?) -> UInt32 {
            if let hash, let id = cache.id(of: name, hash: hash) { return id }
            let id: UInt32
            if let existing = ids[name] {
                id = existing
            } else {
                id = UInt32(names.count)
                names.append(name)
                ids[name] = id
            }
            if let hash { cache.insert(name, hash: hash, id: id) }
            return id
        }

        func id(of name: String, hash: UInt64?) -> UInt32? {
            if let hash, let id = cache.id(of: name, hash: hash) { return id }
            return ids[name]
        }
    }

    private static let _registry = Locked(_Registry())

    /// `isValidName(name)` and the name's hash for `init(_:hash:)`, in one pass over its bytes:
    /// the hash when the name is valid, nil when it is not.
    static func validNameHash(_ name: String) -> UInt64? {
        guard name.utf8.count <= 255 else { return nil }
        let hash: UInt64?? = name.utf8.withContiguousStorageIfAvailable { bytes in
            guard let first = bytes.first, first.isASCIILetter || first == UInt8(ascii: "_") else { return nil }
            var hash = _ASCIINameTable.start(bytes.count)
            for byte in bytes {
                guard byte.isFieldNameByte else { return nil }
                hash = _ASCIINameTable.combine(hash, byte)
            }
            return _ASCIINameTable.finish(hash)
        }
        return hash ?? (isValidName(name) ? _ASCIINameTable.hash(name) : nil)
    }

    /// Whether `name` is a valid CloudKit field name: letters, digits, `_` and `$`, starting with a
    /// letter or `_`, at most 255 characters (CloudKit's `isCStyleIdentifier` and length check).
    public static func isValidName(_ name: String) -> Bool {
        var bytes = name.utf8.makeIterator()
        guard let first = bytes.next(), first.isASCIILetter || first == UInt8(ascii: "_") else { return false }
        while let byte = bytes.next() {
            guard byte.isFieldNameByte else { return false }
        }
        return name.utf8.count <= 255
    }

    /// Why `name` is not a valid field name, in CloudKit's words (`CKValidateKeyName`), or nil when it is.
    public static func nameProblem(_ name: String) -> String? {
        if name.isEmpty { return "recordKey can not be empty" }
        if name.utf16.count > 255 { return "recordKey (\(name)) is too long" }
        return isValidName(name) ? nil : "recordKey (\(name)) contains invalid characters"
    }
}

/// An open-addressing table from ASCII names to ids, a cache in front of `[String: UInt32]`.
///
/// For ASCII text, byte equality is String equality, so the cache can never disagree with the
/// dictionary. Probes are bounded: a name that would need a long probe (hostile collisions) is not
/// cached and takes the dictionary's path instead.
struct _ASCIINameTable {
    private struct Slot {
        /// 0 marks an empty slot; hashes of names are odd.
        var hash: UInt64 = 0
        var name = ""
        var id: UInt32 = 0
    }

    private var slots = [Slot](repeating: Slot(), count: 64)
    private var count = 0
    private static let maximumProbe = 8
    private static let seed = UInt64.random(in: .min ... .max)

    /// The hash of an ASCII name (seeded per process), or nil when the name is not ASCII.
    static func hash(_ name: String) -> UInt64? {
        let hash: UInt64?? = name.utf8.withContiguousStorageIfAvailable { bytes in
            var hash = start(bytes.count)
            var high: UInt8 = 0
            for byte in bytes {
                high |= byte
                hash = combine(hash, byte)
            }
            return high < 0x80 ? finish(hash) : nil
        }
        return hash ?? nil
    }

    /// FNV-1a over the bytes, from a per-process seed.
    @inline(__always) static func start(_ count: Int) -> UInt64 { seed ^ UInt64(count) }
    @inline(__always) static func combine(_ hash: UInt64, _ byte: UInt8) -> UInt64 { (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }

    /// murmur3's finalizer, so every bit of the hash depends on every byte; odd, never 0.
    @inline(__always) static func finish(_ hash: UInt64) -> UInt64 {
        var hash = (hash ^ (hash >> 33)) &* 0xFF51_AFD7_ED55_8CCD
        hash = (hash ^ (hash >> 33)) &* 0xC4CE_B9FE_1A85_EC53
        return (hash ^ (hash >> 33)) | 1
    }

    func id(of name: String, hash: UInt64) -> UInt32? {
        let mask = slots.count - 1
        var index = Int(truncatingIfNeeded: hash) & mask
        for _ in 0..<Self.maximumProbe {
            let slot = slots[index]
            if slot.hash == 0 { return nil }
            if slot.hash == hash, slot.name == name { return slot.id }
            index = (index + 1) & mask
        }
        return nil
    }

    mutating func insert(_ name: String, hash: UInt64, id: UInt32) {
        if (count + 1) * 2 > slots.count { grow() }
        if place(Slot(hash: hash, name: name, id: id)) { count += 1 }
    }

    /// Stores `slot` in the first empty place of its probe; false when the probe is too long.
    private mutating func place(_ slot: Slot) -> Bool {
        let mask = slots.count - 1
        var index = Int(truncatingIfNeeded: slot.hash) & mask
        for _ in 0..<Self.maximumProbe {
            if slots[index].hash == 0 {
                slots[index] = slot
                return true
            }
            index = (index + 1) & mask
        }
        return false
    }

    private mutating func grow() {
        let old = slots
        slots = [Slot](repeating: Slot(), count: old.count * 2)
        count = 0
        for slot in old where slot.hash != 0 {
            if place(slot) { count += 1 }
        }
    }
}

extension UInt8 {
    @inlinable package var isASCIILetter: Bool { (self | 0x20) >= UInt8(ascii: "a") && (self | 0x20) <= UInt8(ascii: "z") }
    @inlinable package var isASCIIDigit: Bool { self >= UInt8(ascii: "0") && self <= UInt8(ascii: "9") }
    /// A byte a field name may hold after its first: `[0-9A-Za-z_$]`.
    @inlinable package var isFieldNameByte: Bool { isASCIILetter || isASCIIDigit || self == UInt8(ascii: "_") || self == UInt8(ascii: "$") }
}
