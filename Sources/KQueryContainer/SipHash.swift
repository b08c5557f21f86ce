/// SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012): a keyed hash
/// made to authenticate short messages, here sync tokens, with a secret kept in the container file.
/// Without the secret a client cannot forge a token or move one to another database or zone.
package struct SipHash {
    private var v0: UInt64
    private var v1: UInt64
    private var v2: UInt64
    private var v3: UInt64

    /// The 64-bit tag of `message` under the 128-bit key `(k0, k1)`.
    package static func tag(_ message: [UInt8], key k0: UInt64, _ k1: UInt64) -> UInt64 {
        var state = SipHash(v0: 0x736f_6d65_7073_6575 ^ k0, v1: 0x646f_7261_6e64_6f6d ^ k1,
                            v2: 0x6c79_6765_6e65_7261 ^ k0, v3: 0x7465_6462_7974_6573 ^ k1)
        let whole = message.count / 8 * 8
        var offset = 0
        while offset < whole {
            var word: UInt64 = 0
            for byte in 0..<8 { word |= UInt64(message[offset + byte]) << (8 * byte) }
            state.compress(word)
            offset += 8
        }
        var last = UInt64(truncatingIfNeeded: message.count) << 56
        for byte in 0..<(message.count - whole) { last |= UInt64(message[whole + byte]) << (8 * byte) }
        state.compress(last)
        state.v2 ^= 0xff
        for _ in 0..<4 { state.round() }
        return state.v0 ^ state.v1 ^ state.v2 ^ state.v3
    }

    private mutating func compress(_ word: UInt64) {
        v3 ^= word
        round()
        round()
        v0 ^= word
    }

    private mutating func round() {
        v0 &+= v1; v1 = v1.rotated(13); v1 ^= v0; v0 = v0.rotated(32)
        v2 &+= v3; v3 = v3.rotated(16); v3 ^= v2
        v0 &+= v3; v3 = v3.rotated(21); v3 ^= v0
        v2 &+= v1; v1 = v1.rotated(17); v1 ^= v2; v2 = v2.rotated(32)
    }
}

extension UInt64 {
    fileprivate func rotated(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
