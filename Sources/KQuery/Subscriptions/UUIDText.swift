/// Fresh notification IDs: random (version 4) UUIDs in `UUID().uuidString`'s upper-case form.
///
/// Made from `SystemRandomNumberGenerator` (the getrandom system call): FoundationEssentials'
/// `UUID()` opened a file for its randomness on every call here, a tenth of a 200-record modify.
public enum UUIDText {
    public static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<2).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        let digits = Array("0123456789ABCDEF".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
