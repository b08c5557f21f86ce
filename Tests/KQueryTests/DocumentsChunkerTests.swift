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

    /// Insertions at 300 places (fixed, so the test is the same every run): content-defined
    /// boundaries resynchronize right after the edit. Normalized chunking can cascade when an
    /// insertion makes a new cut in the easy-mask part of a chunk (the next chunk then starts in
    /// the hard-mask regime), measured at about 1 insertion in 1,000; never past 4 chunks.
    @Test func insertionsAnywhereRarelyChangeMoreThanTwoChunks() {
        let original = documentBytes(count: 1_000_000, seed: 9)
        let before = Set(Chunker.boundaries(original).map { Array(original[$0]) })
        let places = documentBytes(count: 300 * 8, seed: 77).withUnsafeBytes { Array($0.bindMemory(to: UInt64.self)) }
        var counts: [Int] = []
        for place in places {
            var edited = original
            edited.insert(UInt8(truncatingIfNeeded: place >> 32), at: Int(place % 1_000_001))
            counts.append(Chunker.boundaries(edited).filter { !before.contains(Array(edited[$0])) }.count)
        }
        #expect(counts.allSatisfy { (1...4).contains($0) }, "\(counts.filter { $0 > 2 })")
        #expect(counts.filter { $0 > 2 }.count <= 3, "\(counts.filter { $0 > 2 })")
    }

    @Test func chunkReferencesRefuseMalformedText() {
        let hash = String(repeating: "a", count: 64)
        #expect(ChunkReference(text: "\(hash):10") == ChunkReference(hash: hash, size: 10))
        for bad in ["", ":", "\(hash)", "\(hash):-1", "\(hash):x", "AB:1", "\(hash):999999999", String(repeating: "g", count: 64) + ":1", "\(hash):1:2"] {
            #expect(ChunkReference(text: bad) == nil, "\(bad)")
        }
    }
}
