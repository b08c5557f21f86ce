import KQuery

/// A row of a record table: stable for the life of the record, reused after it is deleted.
typealias RowID = UInt32

/// A field value as an equality index keys it: two values have the same key exactly when the
/// evaluator finds them equal (SPEC §2.4).
///
/// Numbers are keyed by value, not by type (`3` and `3.0` are equal), strings and asset IDs by
/// their UTF-8 bytes (Swift's `String ==` uses canonical equivalence, CloudKit does not), references
/// by the record ID they point at.
enum IndexKey: Hashable, Sendable {
    case integer(Int64)
    /// A double that is not an exact integer (or beyond INT64's range): its bit pattern.
    case double(UInt64)
    case timestamp(Int64)
    case string(ByteString)
    case reference(RecordID)
    case bytes([UInt8])
    case assetID(ByteString)

    /// The key of a scalar value; nil for values no equality index holds (locations, lists, NaN).
    init?(_ value: FieldValue) {
        switch value {
        case .int64(let x): self = .integer(x)
        case .double(let x):
            if x.isNaN { return nil }
            if let exact = Int64(exactly: x) { self = .integer(exact) } else { self = .double(x.bitPattern) }
        case .timestamp(let x): self = .timestamp(x)
        case .string(let x): self = .string(ByteString(x))
        case .reference(let x): self = .reference(x.recordID)
        case .bytes(let x): self = .bytes(x)
        case .assetID(let x): self = .assetID(ByteString(x))
        case .location, .list: return nil
        }
    }
}

/// A string compared and hashed by its UTF-8 bytes.
struct ByteString: Hashable, Sendable {
    let string: String

    init(_ string: String) { self.string = string }

    static func == (lhs: ByteString, rhs: ByteString) -> Bool { lhs.string.utf8.elementsEqual(rhs.string.utf8) }
    func hash(into hasher: inout Hasher) {
        var copy = string
        copy.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}

/// A sorted, duplicate-free list of rows: one posting list of an index.
struct Postings: Sendable {
    private(set) var rows: [RowID] = []

    init() {}

    /// Rows already ascending with no repeats.
    init(sortedRows: [RowID]) { rows = sortedRows }

    var count: Int { rows.count }
    var isEmpty: Bool { rows.isEmpty }

    /// Rows mostly arrive in increasing order (new rows get new IDs), so appending is the fast path.
    mutating func insert(_ row: RowID) {
        if let last = rows.last, last >= row {
            let index = position(of: row)
            if index < rows.count, rows[index] == row { return }
            rows.insert(row, at: index)
        } else {
            rows.append(row)
        }
    }

    mutating func remove(_ row: RowID) {
        let index = position(of: row)
        if index < rows.count, rows[index] == row { rows.remove(at: index) }
    }

    private func position(of row: RowID) -> Int {
        var low = 0
        var high = rows.count
        while low < high {
            let mid = (low + high) >> 1
            if rows[mid] < row { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Rows in both sorted lists. A short list against a long one searches the long one (galloping)
    /// instead of walking it: a rare token with a common one costs the rare one's length.
    static func intersection(_ a: [RowID], _ b: [RowID]) -> [RowID] {
        let (short, long) = a.count <= b.count ? (a, b) : (b, a)
        if short.count * 16 < long.count { return gallopingIntersection(short, long) }
        var result: [RowID] = []
        result.reserveCapacity(min(a.count, b.count))
        var i = 0
        var j = 0
        while i < a.count, j < b.count {
            let (x, y) = (a[i], b[j])
            if x == y { result.append(x); i += 1; j += 1 } else if x < y { i += 1 } else { j += 1 }
        }
        return result
    }

    private static func gallopingIntersection(_ short: [RowID], _ long: [RowID]) -> [RowID] {
        var result: [RowID] = []
        var low = 0
        for row in short {
            // Double the step until past `row`, then binary search in the last step.
            var step = 1
            var high = low
            while high < long.count, long[high] < row {
                low = high + 1
                high += step
                step *= 2
            }
            high = min(high, long.count)
            while low < high {
                let mid = (low + high) / 2
                if long[mid] < row { low = mid + 1 } else { high = mid }
            }
            if low == long.count { break }
            if long[low] == row { result.append(row) }
        }
        return result
    }

    /// Rows in any of the sorted lists.
    static func union(_ lists: [[RowID]]) -> [RowID] {
        if lists.count == 1 { return lists[0] }
        return sortedUnique(lists.flatMap { $0 })
    }

    /// `rows` sorted, without repeats.
    static func sortedUnique(_ rows: [RowID]) -> [RowID] {
        var all = rows
        all.sort()
        var result: [RowID] = []
        result.reserveCapacity(all.count)
        for row in all where result.last != row { result.append(row) }
        return result
    }
}

/// An equality index over one field: value → rows, kept apart for scalar values and list members
/// (a scalar test never matches a list field, and a membership test never a scalar one).
struct HashIndex: Sendable {
    private(set) var scalars: [IndexKey: Postings] = [:]
    private(set) var members: [IndexKey: Postings] = [:]

    init() {}

    /// An index read back from a snapshot (`IndexSnapshot`).
    init(scalars: [IndexKey: Postings], members: [IndexKey: Postings]) {
        self.scalars = scalars
        self.members = members
    }

    mutating func insert(_ value: FieldValue, row: RowID) {
        if case .list(_, let elements) = value {
            for element in elements {
                if let key = IndexKey(element) { members[key, default: Postings()].insert(row) }
            }
        } else if let key = IndexKey(value) {
            scalars[key, default: Postings()].insert(row)
        }
    }

    mutating func remove(_ value: FieldValue, row: RowID) {
        if case .list(_, let elements) = value {
            for element in elements {
                guard let key = IndexKey(element) else { continue }
                members[key]?.remove(row)
                if members[key]?.isEmpty == true { members[key] = nil }
            }
        } else if let key = IndexKey(value) {
            scalars[key]?.remove(row)
            if scalars[key]?.isEmpty == true { scalars[key] = nil }
        }
    }

    func rows(equalTo key: IndexKey, members isMember: Bool) -> [RowID] {
        (isMember ? members[key] : scalars[key])?.rows ?? []
    }

    func count(equalTo key: IndexKey, members isMember: Bool) -> Int {
        (isMember ? members[key] : scalars[key])?.count ?? 0
    }
}
