/// A record's user fields: a small array of (key, value) pairs kept sorted by key.
///
/// Records have few fields (typically under 20), so a sorted contiguous array beats a dictionary
/// both in memory and in lookup time, and lookups by `FieldKey` never hash a string.
public struct Fields: Hashable, Sendable, Sequence {
    public typealias Element = (key: FieldKey, value: FieldValue)

    @usableFromInline var _keys: ContiguousArray<FieldKey> = []
    @usableFromInline var _values: ContiguousArray<FieldValue> = []

    public init() {}

    public init<S: Sequence>(_ pairs: S) where S.Element == (String, FieldValue) {
        for (name, value) in pairs { self[name] = value }
    }

    public var count: Int { _keys.count }
    public var isEmpty: Bool { _keys.isEmpty }

    @inlinable
    func _index(of key: FieldKey) -> (found: Bool, index: Int) {
        var low = 0
        var high = _keys.count
        while low < high {
            let mid = (low + high) >> 1
            let k = _keys[mid]
            if k == key { return (true, mid) }
            if k < key { low = mid + 1 } else { high = mid }
        }
        return (false, low)
    }

    @inlinable
    public subscript(key: FieldKey) -> FieldValue? {
        get {
            let (found, index) = _index(of: key)
            return found ? _values[index] : nil
        }
        set {
            let (found, index) = _index(of: key)
            switch (found, newValue) {
            case (true, let value?): _values[index] = value
            case (true, nil):
                _keys.remove(at: index)
                _values.remove(at: index)
            case (false, let value?):
                _keys.insert(key, at: index)
                _values.insert(value, at: index)
            case (false, nil): break
            }
        }
    }

    public subscript(name: String) -> FieldValue? {
        get { FieldKey.existing(name).flatMap { self[$0] } }
        set { self[FieldKey(name)] = newValue }
    }

    public var keys: [FieldKey] { Array(_keys) }

    /// Field names in alphabetical order (for stable output).
    public var sortedNames: [String] { _keys.map(\.name).sorted() }

    public func makeIterator() -> some IteratorProtocol<Element> {
        zip(_keys, _values).lazy.map { (key: $0, value: $1) }.makeIterator()
    }
}
