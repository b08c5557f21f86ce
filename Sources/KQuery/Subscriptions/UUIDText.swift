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
                let digits = UnsafeRawPointer(("0123456789ABCDEF" as StaticString).utf8Start)
                // Each byte's two digits at its place in the text (after 4, 6, 8 and 10 bytes, a dash).
                let places: (UInt64, UInt64) = (0x100E_0B09_0604_0200, 0x2220_1E1C_1A18_1513)
                withUnsafeBytes(of: places) { places in
                    for index in 0..<16 {
                        let byte = bytes[index], place = Int(places[index])
                        text[place] = digits.load(fromByteOffset: Int(byte >> 4), as: UInt8.self)
                        text[place + 1] = digits.load(fromByteOffset: Int(byte & 0x0F), as: UInt8.self)
                    }
                }
                (text[8], text[13], text[18], text[23]) = (UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "-"))
                return 36
            }
        }
    }
}
