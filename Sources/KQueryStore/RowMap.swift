import KQuery

/// Record ID → row for one record table: an open-addressing hash table of rows that keeps no keys.
///
/// A slot holds a row and 32 bits of its record ID's hash (8 bytes); the ID itself is compared with the
/// table's record at that row when the hash bits agree. A `[RecordID: RowID]` dictionary held a
/// copy of every ID (48 bytes) and its row in twice as many buckets: about 108 bytes a record at a
/// million records, against 16 here. Linear probing, at most half full; a removal shifts the rest
/// of its run back (no tombstones), which the stored hash bits allow without reading any record.
struct RowMap: Sendable {
    /// `hash << 32 | (row + 1)`; 0 is an empty slot.
    private var slots: [UInt64] = []
    private(set) var count = 0

    init() {}

    /// The 32 hash bits kept for an ID.
    @inline(__always)
    static func hash(_ id: RecordID) -> UInt32 {
        var hasher = Hasher()
        hasher.combine(id)
        let value = UInt(bitPattern: hasher.finalize())
        return UInt32(truncatingIfNeeded: value ^ (value >> 32))
    }

    mutating func reserveCapacity(_ count: Int) {
        let needed = max(16, count * 2)
        if needed > slots.count { resize(to: needed) }
    }

    /// The row of `id`; `isID` tells whether the record at a row in the map has `id`.
    func row(of id: RecordID, isID: (RowID) -> Bool) -> RowID? {
        slot(of: id, isID: isID).map { RowID(truncatingIfNeeded: slots[$0]) &- 1 }
    }

    /// Where `id`'s entry is.
    private func slot(of id: RecordID, isID: (RowID) -> Bool) -> Int? {
        guard !slots.isEmpty else { return nil }
        let hash = Self.hash(id)
        return slots.withUnsafeBufferPointer { slots in
            let mask = slots.count - 1
            var index = Int(hash) & mask
            while true {
                let slot = slots[index]
                if slot == 0 { return nil }
                if UInt32(truncatingIfNeeded: slot >> 32) == hash, isID(RowID(truncatingIfNeeded: slot) &- 1) { return index }
                index = (index + 1) & mask
            }
        }
    }

    /// Adds `row` for an ID that is not in the map.
    mutating func insert(_ id: RecordID, row: RowID) {
        if (count + 1) * 2 > slots.count { resize(to: max(16, slots.count * 2)) }
        place(UInt64(Self.hash(id)) << 32 | UInt64(row + 1))
        count += 1
    }

    /// Removes `id` and returns its row, or nil if it is not in the map.
    mutating func remove(_ id: RecordID, isID: (RowID) -> Bool) -> RowID? {
        guard let index = slot(of: id, isID: isID) else { return nil }
        let mask = slots.count - 1
        let row = RowID(truncatingIfNeeded: slots[index]) &- 1
        // Shift back the entries after the hole that may move into it: those whose home slot is not
        // cyclically within (hole, their slot].
        var hole = index
        var next = (hole + 1) & mask
        while slots[next] != 0 {
            let home = Int(UInt32(truncatingIfNeeded: slots[next] >> 32)) & mask
            let staysPut = hole < next ? (home > hole && home <= next) : (home > hole || home <= next)
            if !staysPut {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = 0
        count -= 1
        return row
    }

    mutating func removeAll(keepingCapacity: Bool) {
        if keepingCapacity {
            for index in slots.indices { slots[index] = 0 }
        } else {
            slots = []
        }
        count = 0
    }

    private mutating func place(_ entry: UInt64) {
        let mask = slots.count - 1
        var index = Int(UInt32(truncatingIfNeeded: entry >> 32)) & mask
        while slots[index] != 0 { index = (index + 1) & mask }
        slots[index] = entry
    }

    private mutating func resize(to minimum: Int) {
        var capacity = 16
        while capacity < minimum { capacity *= 2 }
        let old = slots
        slots = Array(repeating: 0, count: capacity)
        for entry in old where entry != 0 { place(entry) }
    }

    /// Checks that every entry can be found from its home slot. For tests.
    func _checkInvariants() -> Bool {
        guard !slots.isEmpty else { return count == 0 }
        let mask = slots.count - 1
        var entries = 0
        for (index, entry) in slots.enumerated() where entry != 0 {
            entries += 1
            var probe = Int(UInt32(truncatingIfNeeded: entry >> 32)) & mask
            while probe != index {
                if slots[probe] == 0 { return false }
                probe = (probe + 1) & mask
            }
        }
        return entries == count
    }
}
