import KQueryDocuments
import KQueryTestSupport
import PropertyBased
import Testing

@Suite struct DocumentsChunkerTests {
    @Test func chunksCoverTheBytesWithinTheSizeLimits() async {
        await propertyCheck(count: 40, input: Gen.uint64()) { seed in
            let count = Int(seed % 1_500_000)
            let bytes = documentBytes(count: count, seed: seed)
            let ranges = Chunker.boundaries(bytes)
            #expect(ranges.first?.lowerBound ?? 0 == 0)
            #expect(ranges.last?.upperBound ?? 0 == count)
            for (previous, next) in zip(ranges, ranges.dropFirst()) { #expect(previous.upperBound == next.lowerBound) }
            for range in ranges.dropLast() { #expect((Chunker.minimumSize...Chunker.maximumSize).contains(range.count)) }
            #expect(Chunker.boundaries(bytes) == ranges)
        }
    }

    /// The figure: a 1-byte insertion in the middle of 20 MB changes at most 2 chunks.
    @Test(arguments: [10_000_000, 10_000_017, 3, 19_999_990])
    func oneByteInsertionChangesAtMostTwoChunks(at offset: Int) {
        let original = documentBytes(count: 20_000_000, seed: 37)
        var edited = original
        edited.insert(0x2A, at: offset)
        let before = Set(Chunker.chunks(original).map(\.hash))
        let after = Chunker.chunks(edited)
        let changed = after.filter { !before.contains($0.hash) }
        #expect(changed.count >= 1 && changed.count <= 2, "\(changed.count) chunks changed")
        #expect(after.reduce(0) { $0 + $1.size } == edited.count)
    }

    @Test func insertionsAnywhereChangeAtMostTwoChunks() async {
        let original = documentBytes(count: 2_000_000, seed: 9)
        let before = Set(Chunker.chunks(original).map(\.hash))
        await propertyCheck(count: 30, input: Gen.uint64()) { seed in
            let (offset, byte) = (Int(seed % 2_000_001), UInt8(truncatingIfNeeded: seed >> 40))
            var edited = original
            edited.insert(byte, at: offset)
            #expect(Chunker.chunks(edited).filter { !before.contains($0.hash) }.count <= 2)
        }
    }

    @Test func chunkReferencesRefuseMalformedText() {
        let hash = String(repeating: "a", count: 64)
        #expect(ChunkReference(text: "\(hash):10") == ChunkReference(hash: hash, size: 10))
        for bad in ["", ":", "\(hash)", "\(hash):-1", "\(hash):x", "AB:1", "\(hash):999999999", String(repeating: "g", count: 64) + ":1", "\(hash):1:2"] {
            #expect(ChunkReference(text: bad) == nil, "\(bad)")
        }
    }
}
