import Synchronization

/// A field name interned to a small integer, so compiled predicates, indexes and records compare
/// field names with one integer comparison instead of hashing strings on every record.
///
/// Keys are process-wide and never freed: a program meets a bounded vocabulary of field names.
public struct FieldKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    @usableFromInline let rawValue: UInt32

    /// Interns `name` (creating its key on first use).
    public init(_ name: String) {
        rawValue = FieldKey._registry.withLock { registry in
            if let id = registry.ids[name] { return id }
            let id = UInt32(registry.names.count)
            registry.names.append(name)
            registry.ids[name] = id
            return id
        }
    }

    /// The key of `name` if some record or predicate has used it, without interning it.
    public static func existing(_ name: String) -> FieldKey? {
        _registry.withLock { $0.ids[name].map(FieldKey.init(rawValue:)) }
    }

    init(rawValue: UInt32) { self.rawValue = rawValue }

    public var name: String { FieldKey._registry.withLock { $0.names[Int(rawValue)] } }
    public var description: String { name }

    /// Orders by interning order, which is arbitrary but stable within a process.
    public static func < (lhs: FieldKey, rhs: FieldKey) -> Bool { lhs.rawValue < rhs.rawValue }

    private struct _Registry {
        var ids: [String: UInt32] = [:]
        var names: [String] = []
    }

    private static let _registry = Mutex(_Registry())

    /// Whether `name` is a valid CloudKit field name: `[a-zA-Z][0-9a-zA-Z_]*`.
    public static func isValidName(_ name: String) -> Bool {
        var bytes = name.utf8.makeIterator()
        guard let first = bytes.next(), first.isASCIILetter else { return false }
        while let byte = bytes.next() {
            guard byte.isASCIILetter || byte.isASCIIDigit || byte == UInt8(ascii: "_") else { return false }
        }
        return name.utf8.count <= 255
    }
}

extension UInt8 {
    @inlinable package var isASCIILetter: Bool { (self | 0x20) >= UInt8(ascii: "a") && (self | 0x20) <= UInt8(ascii: "z") }
    @inlinable package var isASCIIDigit: Bool { self >= UInt8(ascii: "0") && self <= UInt8(ascii: "9") }
}
