/// A hash table of slot numbers whose keys live elsewhere (in the arrays the slots index): each
/// bucket holds a slot and 32 bits of its key's hash, and the caller compares keys. Linear probing,
/// deletion by backward shift (no tombstones), never more than half full.
///
/// A `Dictionary` keyed by the same values would store every key a second time (an ID string, a
/// predicate, an identity): at a million subscriptions that alone is a few hundred bytes each.
/// Here a key costs 16 bytes at most (an 8-byte bucket at half load).
struct SlotHashTable: Sendable {
    /// 0 is empty; otherwise the hash in the high 32 bits and slot + 1 in the low 32.
    private var buckets: [UInt64] = []
    private(set) var count = 0

    /// The slot whose key hashes to `hash` and that `matches` accepts.
    func first(hash: Int, where matches: (UInt32) -> Bool) -> UInt32? {
        buckets.withUnsafeBufferPointer { Self.first(in: $0, hash: hash, where: matches) }
    }

    /// Calls `body` with the buckets, for lookups by `first(in:hash:where:)` that hold no reference.
    func withBuckets<R>(_ body: (UnsafeBufferPointer<UInt64>) -> R) -> R {
        buckets.withUnsafeBufferPointer(body)
    }

    /// `first(hash:where:)` in a table's buckets.
    static func first(in buckets: UnsafeBufferPointer<UInt64>, hash: Int, where matches: (UInt32) -> Bool) -> UInt32? {
        guard !buckets.isEmpty else { return nil }
        let mask = buckets.count - 1
        let fingerprint = UInt32(truncatingIfNeeded: hash)
        var position = Int(fingerprint) & mask
        while true {
            let bucket = buckets[position]
            if bucket == 0 { return nil }
            if UInt32(truncatingIfNeeded: bucket >> 32) == fingerprint {
                let slot = UInt32(truncatingIfNeeded: bucket) &- 1
                if matches(slot) { return slot }
            }
            position = (position + 1) & mask
        }
    }

    /// Adds `slot` (which must be below `UInt32.max`) under `hash`.
    mutating func insert(_ slot: UInt32, hash: Int) {
        if (count + 1) * 2 > buckets.count { grow() }
        place(UInt64(UInt32(truncatingIfNeeded: hash)) << 32 | UInt64(slot + 1))
        count += 1
    }

    /// Removes `slot`, filed under `hash`; nothing happens when it is absent.
    mutating func remove(_ slot: UInt32, hash: Int) {
        guard !buckets.isEmpty else { return }
        let mask = buckets.count - 1
        let target = UInt64(UInt32(truncatingIfNeeded: hash)) << 32 | UInt64(slot + 1)
        var hole = Int(UInt32(truncatingIfNeeded: hash)) & mask
        while buckets[hole] != target {
            if buckets[hole] == 0 { return }
            hole = (hole + 1) & mask
        }
        // Backward shift: move up each following bucket whose home is not between the hole and it.
        var position = hole
        while true {
            position = (position + 1) & mask
            let bucket = buckets[position]
            if bucket == 0 { break }
            let home = Int(bucket >> 32) & mask
            if (position - home) & mask >= (position - hole) & mask {
                buckets[hole] = bucket
                hole = position
            }
        }
        buckets[hole] = 0
        count -= 1
    }

    private mutating func place(_ bucket: UInt64) {
        let mask = buckets.count - 1
        var position = Int(bucket >> 32) & mask
        while buckets[position] != 0 { position = (position + 1) & mask }
        buckets[position] = bucket
    }

    private mutating func grow() {
        let old = buckets
        buckets = Array(repeating: 0, count: max(16, old.count * 2))
        for bucket in old where bucket != 0 { place(bucket) }
    }
}

/// Values stored once and referred to by a small number, with a use count so a value no longer
/// used is freed (owners, notification infos and zones repeat across most subscriptions).
struct InternTable<Value: Hashable & Sendable>: Sendable {
    private var ids: [Value: UInt32] = [:]
    private var values: [Value?] = []
    private var uses: [UInt32] = []
    private var free: [UInt32] = []

    var isEmpty: Bool { ids.isEmpty }

    func id(of value: Value) -> UInt32? { ids[value] }

    subscript(id: UInt32) -> Value? { Int(id) < values.count ? values[Int(id)] : nil }

    /// Calls `body` with the storage of the values, by number (to prefetch them).
    func withValues<R>(_ body: (UnsafeBufferPointer<Value?>) -> R) -> R {
        values.withUnsafeBufferPointer(body)
    }

    /// The value's number, counting one more use.
    mutating func retain(_ value: Value) -> UInt32 {
        if let id = ids[value] {
            uses[Int(id)] += 1
            return id
        }
        let id: UInt32
        if let reused = free.popLast() {
            id = reused
            values[Int(id)] = value
            uses[Int(id)] = 1
        } else {
            id = UInt32(values.count)
            values.append(value)
            uses.append(1)
        }
        ids[value] = id
        return id
    }

    /// Counts one use fewer, freeing the value after its last.
    mutating func release(_ id: UInt32) {
        guard Int(id) < values.count, uses[Int(id)] > 0 else { return }
        uses[Int(id)] -= 1
        guard uses[Int(id)] == 0, let value = values[Int(id)] else { return }
        ids[value] = nil
        values[Int(id)] = nil
        free.append(id)
    }
}
