import KQuery

/// A range index over one field: (value, row) entries in sort order, for `<`, `>`, BETWEEN,
/// BEGINSWITH and sorted walks. Scalar values and list members are kept apart, as in `HashIndex`.
///
/// Values order as sorts order them (`SortOrder`): numbers (INT64 and DOUBLE together, exactly),
/// then timestamps, strings (UTF-8 byte order), references, ... so the entries of one comparable
/// kind are contiguous and a range test reads one run of entries. NaN has no place in that order
/// and is not indexed (a range test never matches it).
struct OrderedIndex: Sendable {
    private(set) var scalars = SortedEntries()
    private(set) var members = SortedEntries()

    init() {}

    /// An index read back from a snapshot (`IndexSnapshot`).
    init(scalars: SortedEntries, members: SortedEntries) {
        self.scalars = scalars
        self.members = members
    }

    mutating func insert(_ value: FieldValue, row: RowID) {
        if case .list(_, let elements) = value {
            for element in Self.distinctMembers(elements) { members.insert(SortedEntries.Entry(value: element, row: row)) }
        } else if Self.isIndexable(value) {
            scalars.insert(SortedEntries.Entry(value: value, row: row))
        }
    }

    mutating func remove(_ value: FieldValue, row: RowID) {
        if case .list(_, let elements) = value {
            for element in Self.distinctMembers(elements) { members.remove(SortedEntries.Entry(value: element, row: row)) }
        } else if Self.isIndexable(value) {
            scalars.remove(SortedEntries.Entry(value: value, row: row))
        }
    }

    /// Installs scalar entries built in bulk (`SortedEntries(bulk:)`).
    mutating func setScalars(_ entries: SortedEntries) { scalars = entries }

    static func isIndexable(_ value: FieldValue) -> Bool {
        switch value {
        case .double(let x): !x.isNaN
        case .list: false
        default: true
        }
    }

    /// A list's members without NaN and without repeats (one entry per row and value).
    private static func distinctMembers(_ elements: [FieldValue]) -> [FieldValue] {
        var result: [FieldValue] = []
        for element in elements where isIndexable(element) {
            if !result.contains(where: { SortOrder.compare($0, element) == 0 }) { result.append(element) }
        }
        return result
    }
}

/// Entries kept sorted in chunks of at most `chunkCapacity`: a two-level B+ tree. Inserting or
/// removing moves at most one chunk's entries, and lookups are two binary searches.
struct SortedEntries: Sendable {
    struct Entry: Sendable {
        var value: FieldValue
        var row: RowID

        /// Sort order, then row: a total order on entries.
        static func order(_ a: Entry, _ b: Entry) -> Int {
            let order = SortOrder.compare(a.value, b.value)
            if order != 0 { return order }
            return a.row < b.row ? -1 : (a.row == b.row ? 0 : 1)
        }
    }

    /// Where an entry is: chunk, then offset in it. `(chunks.count, 0)` is the end.
    struct Position: Comparable, Sendable {
        var chunk: Int
        var offset: Int

        static func < (a: Position, b: Position) -> Bool { (a.chunk, a.offset) < (b.chunk, b.offset) }
    }

    static let chunkCapacity = 512

    private(set) var chunks: [[Entry]] = []
    private(set) var count = 0

    var startPosition: Position { Position(chunk: 0, offset: 0) }
    var endPosition: Position { Position(chunk: chunks.count, offset: 0) }

    /// Builds from unsorted entries in one sort (faster than inserting one by one).
    init(bulk entries: [Entry] = []) {
        self.init(sorted: entries.sorted { Entry.order($0, $1) < 0 })
    }

    /// Builds from entries already in entry order.
    init(sorted: [Entry]) {
        var start = 0
        while start < sorted.count {
            let end = min(start + Self.chunkCapacity / 2, sorted.count)
            chunks.append(Array(sorted[start..<end]))
            start = end
        }
        count = sorted.count
    }

    /// The first position whose entry is not before `entry` in entry order.
    private func position(of entry: Entry) -> Position {
        firstPosition { Entry.order($0, entry) >= 0 }
    }

    /// The first position whose entry satisfies `isAtOrAfter`, which must be false for a prefix of
    /// the entries and true for the rest.
    func firstPosition(where isAtOrAfter: (Entry) -> Bool) -> Position {
        var low = 0
        var high = chunks.count
        while low < high {
            let mid = (low + high) >> 1
            if let last = chunks[mid].last, isAtOrAfter(last) { high = mid } else { low = mid + 1 }
        }
        guard low < chunks.count else { return endPosition }
        let chunk = chunks[low]
        var lowOffset = 0
        var highOffset = chunk.count
        while lowOffset < highOffset {
            let mid = (lowOffset + highOffset) >> 1
            if isAtOrAfter(chunk[mid]) { highOffset = mid } else { lowOffset = mid + 1 }
        }
        return Position(chunk: low, offset: lowOffset)
    }

    mutating func insert(_ entry: Entry) {
        if chunks.isEmpty {
            chunks.append([entry])
            count = 1
            return
        }
        var at = position(of: entry)
        if at.chunk == chunks.count { at = Position(chunk: chunks.count - 1, offset: chunks[chunks.count - 1].count) }
        if at.offset < chunks[at.chunk].count, Entry.order(chunks[at.chunk][at.offset], entry) == 0 { return }
        chunks[at.chunk].insert(entry, at: at.offset)
        count += 1
        if chunks[at.chunk].count > Self.chunkCapacity {
            let upper = Array(chunks[at.chunk][(Self.chunkCapacity / 2)...])
            chunks[at.chunk].removeSubrange((Self.chunkCapacity / 2)...)
            chunks.insert(upper, at: at.chunk + 1)
        }
    }

    mutating func remove(_ entry: Entry) {
        let at = position(of: entry)
        guard at.chunk < chunks.count, at.offset < chunks[at.chunk].count, Entry.order(chunks[at.chunk][at.offset], entry) == 0 else { return }
        chunks[at.chunk].remove(at: at.offset)
        count -= 1
        if chunks[at.chunk].isEmpty { chunks.remove(at: at.chunk) }
    }

    /// How many entries lie in `[from, to)`.
    func distance(from: Position, to: Position) -> Int {
        if from >= to { return 0 }
        if from.chunk == to.chunk { return to.offset - from.offset }
        var total = chunks[from.chunk].count - from.offset
        for chunk in (from.chunk + 1)..<min(to.chunk, chunks.count) { total += chunks[chunk].count }
        if to.chunk < chunks.count { total += to.offset }
        return total
    }

    /// Calls `body` with the entries of `[from, to)` in order, until it returns false.
    func forEach(from: Position, to: Position, _ body: (Entry) -> Bool) {
        var chunk = from.chunk
        var offset = from.offset
        while chunk < chunks.count, Position(chunk: chunk, offset: offset) < to {
            let entries = chunks[chunk]
            let stop = chunk == to.chunk ? to.offset : entries.count
            while offset < stop {
                if !body(entries[offset]) { return }
                offset += 1
            }
            chunk += 1
            offset = 0
        }
    }

    /// Calls `body` with the entries before `before`, last first, until it returns false.
    func forEachReversed(before: Position, _ body: (Entry) -> Bool) {
        var chunk = min(before.chunk, chunks.count)
        var offset = chunk < chunks.count ? before.offset : 0
        while true {
            if offset == 0 {
                if chunk == 0 { return }
                chunk -= 1
                offset = chunks[chunk].count
                continue
            }
            offset -= 1
            if !body(chunks[chunk][offset]) { return }
        }
    }

    /// Checks the structure's invariants: chunks non-empty and within capacity, entries strictly
    /// increasing across chunk boundaries, `count` right. For tests.
    func _checkInvariants() -> Bool {
        var previous: Entry?
        var total = 0
        for chunk in chunks {
            guard !chunk.isEmpty, chunk.count <= Self.chunkCapacity else { return false }
            for entry in chunk {
                if let previous, Entry.order(previous, entry) >= 0 { return false }
                previous = entry
            }
            total += chunk.count
        }
        return total == count
    }
}
