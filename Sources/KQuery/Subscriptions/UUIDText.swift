#if canImport(Glibc)
import Glibc
#endif

/// Fresh notification IDs: random (version 4) UUIDs in `UUID().uuidString`'s upper-case form.
///
/// Made from the system's randomness (getentropy): FoundationEssentials' `UUID()` opened a file
/// for its randomness on every call here, a tenth of a 200-record modify.
public enum UUIDText {
    /// Random bytes fetched 256 at a time (getentropy's most): one system call per 16 IDs rather
    /// than two per ID (the calls were a tenth of a one-record modify).
    private static let pool = Locked(RandomPool())

    private struct RandomPool {
        var bytes = [UInt8](repeating: 0, count: 256)
        var next = 256

        mutating func take16() -> (UInt64, UInt64) {
            if next + 16 > bytes.count {
                bytes.withUnsafeMutableBytes { buffer in
                    #if canImport(Glibc)
                    guard getentropy(buffer.baseAddress, buffer.count) != 0 else { return }
                    #endif
                    // Where getentropy is missing or fails: eight bytes a call.
                    var generator = SystemRandomNumberGenerator()
                    for offset in stride(from: 0, to: buffer.count, by: 8) {
                        buffer.storeBytes(of: generator.next() as UInt64, toByteOffset: offset, as: UInt64.self)
                    }
                }
                next = 0
            }
            defer { next += 16 }
            return bytes.withUnsafeBytes { ($0.loadUnaligned(fromByteOffset: next, as: UInt64.self), $0.loadUnaligned(fromByteOffset: next + 8, as: UInt64.self)) }
        }
    }

    public static func random() -> String {
        let (high, low) = pool.withLock { $0.take16() }
        var bytes = (high, low)
        return withUnsafeMutableBytes(of: &bytes) { bytes in
            bytes[6] = bytes[6] & 0x0F | 0x40
            bytes[8] = bytes[8] & 0x3F | 0x80
            return String(unsafeUninitializedCapacity: 36) { text in
                let digits: StaticString = "0123456789ABCDEF"
                var written = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        text[written] = UInt8(ascii: "-")
                        written += 1
                    }
                    text[written] = digits.utf8Start[Int(byte >> 4)]
                    text[written + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    written += 2
                }
                return written
            }
        }
    }
}
