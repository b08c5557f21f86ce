import Crypto

/// Content-defined chunking as FastCDC (Xia et al., USENIX ATC 2016): a gear rolling hash
/// (`h = h << 1 + gear[byte]`, so the top bits depend on the last 64 bytes) cuts where its top
/// bits are zero. Normalized chunking (level 2) uses a harder mask before the average size and an
/// easier one after it, which narrows the sizes around the average. Boundaries depend only on the
/// nearby bytes, so inserting a byte moves at most the boundaries around it: the chunk holding
/// the insertion changes, and the next when the insertion falls in its hash window.
public enum Chunker {
    public static let minimumSize = 16 * 1024
    public static let averageSize = 64 * 1024
    public static let maximumSize = 256 * 1024
    /// 18 top bits before the average size (cuts rarer than 1 in 2^16), 14 after.
    static let hardMask: UInt64 = ~0 << (64 - 18)
    static let easyMask: UInt64 = ~0 << (64 - 14)

    /// 256 fixed pseudo-random words (splitmix64 from a fixed seed): every device must cut alike.
    static let gear: [UInt64] = {
        var state: UInt64 = 0x4b51_7565_7279_4344
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()

    /// The length of the chunk starting at `bytes` (at most `count` bytes long).
    @inline(__always)
    static func cut(_ bytes: UnsafePointer<UInt8>, count: Int, gear: UnsafePointer<UInt64>) -> Int {
        if count <= minimumSize { return count }
        let limit = min(count, maximumSize)
        let normal = min(limit, averageSize)
        var hash: UInt64 = 0
        var index = minimumSize
        while index < normal {
            hash = (hash << 1) &+ gear[Int(bytes[index])]
            if hash & hardMask == 0 { return index + 1 }
            index += 1
        }
        while index < limit {
            hash = (hash << 1) &+ gear[Int(bytes[index])]
            if hash & easyMask == 0 { return index + 1 }
            index += 1
        }
        return limit
    }

    /// The chunks of `buffer`, as ranges of offsets covering it in order.
    public static func boundaries(_ buffer: UnsafeBufferPointer<UInt8>) -> [Range<Int>] {
        guard let base = buffer.baseAddress, !buffer.isEmpty else { return [] }
        var ranges: [Range<Int>] = []
        ranges.reserveCapacity(buffer.count / averageSize + 1)
        gear.withUnsafeBufferPointer { table in
            guard let gear = table.baseAddress else { return }
            var start = 0
            while start < buffer.count {
                let length = cut(base + start, count: buffer.count - start, gear: gear)
                ranges.append(start..<(start + length))
                start += length
            }
        }
        return ranges
    }

    public static func boundaries(_ bytes: [UInt8]) -> [Range<Int>] {
        bytes.withUnsafeBufferPointer { boundaries($0) }
    }

    /// The chunks of `bytes` with their SHA-256 names.
    public static func chunks(_ bytes: [UInt8]) -> [ChunkReference] {
        bytes.withUnsafeBufferPointer { buffer in
            boundaries(buffer).map { range in ChunkReference(hash: sha256(UnsafeBufferPointer(rebasing: buffer[range])), size: range.count) }
        }
    }

    /// Lower-case hex of the SHA-256 of `bytes`.
    public static func sha256(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        hex(SHA256.hash(data: UnsafeRawBufferPointer(bytes)))
    }

    public static func sha256(_ bytes: [UInt8]) -> String { bytes.withUnsafeBufferPointer { sha256($0) } }

    static func hex(_ digest: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for byte in digest {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// A file's content hash: SHA-256 over its chunks' names, so it follows from the chunk list.
    public static func contentHash(_ chunks: [ChunkReference]) -> String {
        sha256(Array(chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",").utf8))
    }
}

/// One chunk of a file: the SHA-256 (hex) of its bytes, which names the chunk on the server, and
/// its length.
public struct ChunkReference: Hashable, Sendable, Codable {
    public var hash: String
    public var size: Int

    public init(hash: String, size: Int) {
        self.hash = hash
        self.size = size
    }

    /// `hash:size`, the form item records list.
    public var text: String { "\(hash):\(size)" }

    public init?(text: String) {
        let parts = text.split(separator: ":")
        guard parts.count == 2, parts[0].utf8.count == 64, parts[0].utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }),
              let size = Int(parts[1]), size >= 0, size <= Chunker.maximumSize
        else { return nil }
        hash = String(parts[0])
        self.size = size
    }
}
