#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The fields that recently validated key paths name, so that the names every predicate repeats
/// (`price`, `artist`, ...) are resolved by one String comparison instead of checking, hashing and
/// interning their bytes again: resolving key paths was a tenth of parse+validate's time.
///
/// Each thread has its own cache, so a lookup takes no lock: with a shared cache behind a mutex,
/// the lock's two atomic instructions were most of a lookup's time.
///
/// Only valid names are kept. A hit needs the same UTF-8 length and `==`, which together mean the
/// same bytes: a kept name is ASCII, and a string canonically equivalent to an ASCII string but
/// spelled differently (`\u{212A}` KELVIN SIGN for `K`) is longer in UTF-8, since every non-ASCII
/// scalar takes two or more bytes and canonically decomposes to at most one ASCII scalar.
enum KeyPathCache {
    struct Slots {
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

    /// The thread-specific key of each thread's `Slots`; nil if the system has no key to give,
    /// and then nothing is cached.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, { freeSlots($0) }) == 0 ? key : nil
    }()

    /// This thread's cache, created on first use.
    private static func slots() -> UnsafeMutablePointer<Slots>? {
        guard let key else { return nil }
        if let existing = pthread_getspecific(key) { return existing.assumingMemoryBound(to: Slots.self) }
        let slots = UnsafeMutablePointer<Slots>.allocate(capacity: 1)
        slots.initialize(to: Slots())
        guard pthread_setspecific(key, slots) == 0 else {
            freeSlots(slots)
            return nil
        }
        return slots
    }

    /// The field `path` names, if this thread has resolved it recently.
    static func reference(for path: String) -> FieldReference? {
        slots()?.pointee.find(path, count: path.utf8.count)
    }

    /// Remembers that the valid field name `path` names `reference`.
    static func remember(_ path: String, _ reference: FieldReference) {
        slots()?.pointee.insert(path, count: path.utf8.count, reference: reference)
    }
}

/// Frees a thread's `KeyPathCache.Slots` (the thread-specific key's destructor).
private func freeSlots(_ pointer: UnsafeMutableRawPointer?) {
    guard let slots = pointer?.assumingMemoryBound(to: KeyPathCache.Slots.self) else { return }
    slots.deinitialize(count: 1)
    slots.deallocate()
}
