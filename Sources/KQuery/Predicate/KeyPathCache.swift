import Synchronization

/// The fields that recently validated key paths name, so that the names every predicate repeats
/// (`price`, `artist`, ...) are resolved by one String comparison instead of checking, hashing and
/// interning their bytes again: resolving key paths was a tenth of parse+validate's time.
///
/// Only valid names are kept. A hit needs the same UTF-8 length and `==`, which together mean the
/// same bytes: a kept name is ASCII, and a string canonically equivalent to an ASCII string but
/// spelled differently (`\u{212A}` KELVIN SIGN for `K`) is longer in UTF-8, since every non-ASCII
/// scalar takes two or more bytes and canonically decomposes to at most one ASCII scalar.
enum KeyPathCache {
    private struct Slots {
        /// 16 buckets by UTF-8 length (modulo 16) of 4 names each, most recent first.
        var names = [String](repeating: "", count: 64)
        var counts = [Int](repeating: -1, count: 64)
        var references = [FieldReference](repeating: .recordID, count: 64)

        func find(_ path: String, count: Int) -> FieldReference? {
            let first = (count & 15) &* 4
            for slot in first..<(first + 4) where counts[slot] == count && names[slot] == path {
                return references[slot]
            }
            return nil
        }

        mutating func insert(_ path: String, count: Int, reference: FieldReference) {
            let first = (count & 15) &* 4
            for slot in stride(from: first + 3, to: first, by: -1) {
                names[slot] = names[slot - 1]
                counts[slot] = counts[slot - 1]
                references[slot] = references[slot - 1]
            }
            (names[first], counts[first], references[first]) = (path, count, reference)
        }
    }

    private static let slots = Mutex(Slots())

    /// The field `path` names, if it has been resolved recently.
    static func reference(for path: String) -> FieldReference? {
        let count = path.utf8.count
        return slots.withLock { $0.find(path, count: count) }
    }

    /// Remembers that the valid field name `path` names `reference`.
    static func remember(_ path: String, _ reference: FieldReference) {
        let count = path.utf8.count
        slots.withLock { $0.insert(path, count: count, reference: reference) }
    }
}
