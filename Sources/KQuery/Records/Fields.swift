import CKQuerySupport

/// Gives a record's fields from elsewhere (a store's columns), for `Fields` that read them only
/// when needed. Must give the same fields every time.
package protocol FieldsProvider: AnyObject, Sendable {
    /// The record's fields, all stored (not lazy).
    func fields(at position: Int) -> Fields
    /// One field of the record, as `fields(at:)[key]`.
    func value(of key: FieldKey, at position: Int) -> FieldValue?
}

/// A record's user fields: a small array of (key, value) entries kept sorted by key.
///
/// Records have few fields (typically under 20), so one sorted contiguous buffer beats a dictionary
/// in memory and in lookup time: a lookup by `FieldKey` never hashes a string, and a scan touches
/// one allocation per record.
public struct Fields: Hashable, Sendable, Sequence {
    public typealias Element = (key: FieldKey, value: FieldValue)

    /// The value first: its 17 bytes and then the 4-byte key pack into 24 bytes, where the key first
    /// padded the entry to 32 (8 bytes a field of every record held in memory).
    @usableFromInline
    struct _Entry: Hashable, Sendable {
        @usableFromInline var value: FieldValue
        @usableFromInline var key: FieldKey

        @usableFromInline init(key: FieldKey, value: FieldValue) {
            self.key = key
            self.value = value
        }
    }

    @usableFromInline var _stored: ContiguousArray<_Entry> = []
    /// Where the fields are read from until they are first read or changed (a store's columns).
    @usableFromInline var _lazy: _LazySource?

    @usableFromInline
    struct _LazySource: Sendable {
        let provider: any FieldsProvider
        let position: Int

        /// One field, read from the provider (kept out of line: the provider is package API).
        @usableFromInline func value(of key: FieldKey) -> FieldValue? { provider.value(of: key, at: position) }
    }

    /// The entries, read from the lazy source when there is one (each time: a value cannot keep
    /// what it read); changing them first stores them.
    @usableFromInline var _entries: ContiguousArray<_Entry> {
        get {
            if let lazy = _lazy { return lazy.provider.fields(at: lazy.position)._stored }
            return _stored
        }
        _modify {
            _store()
            yield &_stored
        }
    }

    /// Reads lazy fields into the entries (before a change).
    @usableFromInline mutating func _store() {
        guard let lazy = _lazy else { return }
        _stored = lazy.provider.fields(at: lazy.position)._stored
        _lazy = nil
    }

    /// Calls `body` with the entries in place (stored ones without a copy).
    @inlinable
    func withEntries<T>(_ body: (UnsafeBufferPointer<_Entry>) throws -> T) rethrows -> T {
        if _lazy == nil { return try _stored.withUnsafeBufferPointer(body) }
        return try _entries.withUnsafeBufferPointer(body)
    }

    public init() {}

    /// Fields read from `provider` at `position` when first needed.
    package init(provider: any FieldsProvider, position: Int) {
        _lazy = _LazySource(provider: provider, position: position)
    }

    public static func == (a: Fields, b: Fields) -> Bool { a._entries == b._entries }
    public func hash(into hasher: inout Hasher) { hasher.combine(_entries) }

    public init<S: Sequence>(_ pairs: S) where S.Element == (String, FieldValue) {
        for (name, value) in pairs { self[name] = value }
    }

    /// Whether any field's value satisfies `predicate`, read in place (no entry copied out, as
    /// iterating the fields does).
    @inlinable
    public func containsValue(where predicate: (FieldValue) throws -> Bool) rethrows -> Bool {
        try withEntries { try $0.contains { try predicate($0.value) } }
    }

    /// Calls `body` with each field in key order, its value where it lies (not copied).
    @inlinable
    package func forEachField(_ body: (FieldKey, borrowing FieldValue) throws -> Void) rethrows {
        try withEntries { entries in
            for index in entries.indices { try body(entries[index].key, entries[index].value) }
        }
    }

    /// Makes room for `count` fields.
    public mutating func reserveCapacity(_ count: Int) { _entries.reserveCapacity(count) }

    /// Appends a field without keeping the key order: a decoder adds a record's fields this way,
    /// then calls `sortAppended()` once (a file keeps fields in the order of the process that wrote
    /// it, whose keys were numbered otherwise; inserting each in order went through the generic
    /// insert).
    package mutating func appendUnordered(_ key: FieldKey, _ value: FieldValue) {
        _entries.append(_Entry(key: key, value: value))
    }

    /// Puts the fields in key order after `appendUnordered`; of a key appended twice, the value
    /// appended last stays (as setting it twice would leave it).
    package mutating func sortAppended() {
        guard _entries.count > 1 else { return }
        if _entries.count <= 32 {
            // A record's few fields: a stable insertion sort in place, no allocation (and next to
            // nothing when they are in order already).
            _entries.withUnsafeMutableBufferPointer { entries in
                for index in 1..<entries.count {
                    var at = index
                    while at > 0, entries[at - 1].key.rawValue > entries[at].key.rawValue {
                        entries.swapAt(at - 1, at)
                        at -= 1
                    }
                }
            }
        } else {
            // Stable: by key, then by the order appended.
            _entries = ContiguousArray(_entries.enumerated().sorted { ($0.element.key.rawValue, $0.offset) < ($1.element.key.rawValue, $1.offset) }.map(\.element))
        }
        let repeated = _entries.withUnsafeBufferPointer { entries in
            (1..<entries.count).contains { entries[$0 - 1].key == entries[$0].key }
        }
        guard repeated else { return }
        var result = ContiguousArray<_Entry>()
        result.reserveCapacity(_entries.count)
        for entry in _entries {
            if let last = result.last, last.key == entry.key { result[result.count - 1] = entry } else { result.append(entry) }
        }
        _entries = result
    }

    public var count: Int { withEntries { $0.count } }
    public var isEmpty: Bool { count == 0 }

    /// Where `key` is or would go among stored entries (not for lazy fields).
    @inlinable
    func _index(of key: FieldKey) -> (found: Bool, index: Int) {
        _stored.withUnsafeBufferPointer { entries in
            // Few fields: a linear scan beats binary search's unpredictable branches.
            if entries.count <= 12 {
                for index in 0..<entries.count where entries[index].key.rawValue >= key.rawValue {
                    return (entries[index].key == key, index)
                }
                return (false, entries.count)
            }
            var low = 0
            var high = entries.count
            while low < high {
                let mid = (low + high) >> 1
                let k = entries[mid].key
                if k == key { return (true, mid) }
                if k < key { low = mid + 1 } else { high = mid }
            }
            return (false, low)
        }
    }

    @inlinable
    public subscript(key: FieldKey) -> FieldValue? {
        get {
            if let lazy = _lazy { return lazy.value(of: key) }
            let (found, index) = _index(of: key)
            return found ? _stored[index].value : nil
        }
        set {
            _store()
            let (found, index) = _index(of: key)
            switch (found, newValue) {
            case (true, let value?): _entries[index].value = value
            case (true, nil): _entries.remove(at: index)
            case (false, let value?): _entries.insert(_Entry(key: key, value: value), at: index)
            case (false, nil): break
            }
        }
    }

    /// Asks the CPU to start loading the field storage of the record at `record`, ahead of a scan
    /// reaching it. The storage address is read as a plain word (no retain, which would write to
    /// the storage and wait for it); a prefetch never faults, so a stale address is harmless.
    /// `fieldsOffset` is `_fieldsOffset`, read once by the caller's loop.
    @inlinable
    static func _prefetchStorage(of record: UnsafePointer<Record>, fieldsOffset: Int) {
        let storage = UnsafeRawPointer(record).load(fromByteOffset: fieldsOffset, as: UInt.self)
        guard let address = UnsafeRawPointer(bitPattern: storage) else { return }
        kquery_prefetch(address)
        kquery_prefetch(address + 64)
    }

    /// Prefetches the part of `record` that holds its fields' address.
    @inlinable
    static func _prefetchRecord(_ record: UnsafePointer<Record>, fieldsOffset: Int) {
        kquery_prefetch(UnsafeRawPointer(record) + fieldsOffset)
    }

    /// Where `Record.fields` (whose only stored property is the entries array) sits in a record.
    @usableFromInline static let _fieldsOffset = MemoryLayout<Record>.offset(of: \Record.fields) ?? 0

    public subscript(name: String) -> FieldValue? {
        get { FieldKey.existing(name).flatMap { self[$0] } }
        set { self[FieldKey(name)] = newValue }
    }

    public var keys: [FieldKey] { _entries.map(\.key) }

    /// Field names in alphabetical order (for stable output).
    public var sortedNames: [String] { _entries.map(\.key.name).sorted() }

    public func makeIterator() -> some IteratorProtocol<Element> {
        _entries.lazy.map { (key: $0.key, value: $0.value) }.makeIterator()
    }
}
