import KQuery

/// The records of one record type, and the indexes over them.
///
/// Records live only in `columns`, field by field at dense positions: a full scan reads the
/// columns (`ColumnScan`), and a record is made from them when a query returns it or tests what no
/// column answers (`record(atPosition:)`). Indexes refer to rows, whose IDs stay put while records
/// move: deleting swaps the last record's column values into the hole and updates `positions`.
///
/// Deleting leaves the record's row in the equality, token and spatial postings (a common token's
/// list, or a coarse spatial cell's, holds a large share of all rows, and editing it moves them
/// all); readers skip dead rows (`isLive`), row IDs are never reused, and once dead rows pass a
/// quarter of the live ones the table renumbers its rows and rebuilds its indexes. A moved
/// location likewise leaves its old cells stale until then (spatial probes are re-checked
/// exactly). The range index, cheap to edit, drops a deleted row at once.
struct RecordTable: Sendable {
    let recordType: String
    /// The records, column by column, and their search tokens, at the records' positions.
    private(set) var columns = Columns()
    /// Dense position → row.
    private(set) var rowIDs: [RowID] = []
    /// Row → dense position, or -1 for a deleted row.
    private var positions: [Int32] = []
    /// Deleted rows and moved locations since the last compaction (stale entries in postings).
    private(set) var deadRows = 0
    /// The fewest dead rows that trigger a compaction (small in tests, to exercise it).
    var minimumDeadRows = 64
    /// Record ID → row.
    private(set) var rowsByID = RowMap()

    private(set) var hashIndexes: [FieldReference: HashIndex] = [:]
    private(set) var orderedIndexes: [FieldReference: OrderedIndex] = [:]
    private(set) var spatialIndexes: [FieldReference: SpatialIndex] = [:]
    private(set) var tokenIndex: TokenIndex?
    /// With a schema: the fields tokens come from (SEARCHABLE); nil: every string field.
    private(set) var searchableFields: [FieldKey]?
    /// A hash of the record names in the order `insertLoaded` filed them: what an index snapshot
    /// checks its rows against (`IndexSnapshot`).
    private(set) var loadedNamesHash: UInt64 = 0xCBF2_9CE4_8422_2325

    init(recordType: String, searchableFields: [FieldKey]? = nil) {
        self.recordType = recordType
        self.searchableFields = searchableFields
    }

    var count: Int { columns.count }

    mutating func reserveCapacity(_ count: Int) {
        columns.reserveCapacity(count)
        rowIDs.reserveCapacity(count)
        positions.reserveCapacity(count)
        rowsByID.reserveCapacity(count)
    }

    /// Gives back the room a load's appends left in the columns (records, rows and the ID map
    /// were reserved at their size).
    mutating func trimExcessCapacity() {
        columns.trimExcessCapacity()
    }

    /// The row of the record with `id`, if the table holds it.
    func row(of id: RecordID) -> RowID? {
        positions.withUnsafeBufferPointer { positions in
            rowsByID.row(of: id) { columns.hasID(id, at: Int(positions[Int($0)])) }
        }
    }

    func contains(_ id: RecordID) -> Bool { row(of: id) != nil }

    func record(at row: RowID) -> Record? {
        guard Int(row) < positions.count else { return nil }
        let position = positions[Int(row)]
        return position < 0 ? nil : record(atPosition: Int(position))
    }

    /// The record at dense `position`, made from the columns.
    func record(atPosition position: Int) -> Record {
        columns.record(at: position, recordType: recordType)
    }

    /// Every record, in position order.
    var records: [Record] { columns.withReader { reader in (0..<count).map { reader.record(at: $0, recordType: recordType) } } }

    /// The dense position of live `row`.
    @inline(__always)
    func position(of row: RowID) -> Int { Int(positions[Int(row)]) }

    /// Whether `row` holds a record (postings may name deleted rows).
    @inline(__always)
    func isLive(_ row: RowID) -> Bool { Int(row) < positions.count && positions[Int(row)] >= 0 }

    // MARK: Changes

    /// Inserts a record read from the file at open, hashing its name into `loadedNamesHash`.
    mutating func insertLoaded(_ record: borrowing Record) {
        var hash = loadedNamesHash
        var name = record.recordID.recordName
        name.withUTF8 { utf8 in
            for byte in utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        }
        loadedNamesHash = (hash ^ 0xFF) &* 0x100_0000_01B3   // the end of a name
        insert(record)
    }

    mutating func insert(_ record: borrowing Record) {
        let row = RowID(positions.count)
        positions.append(Int32(count))
        rowIDs.append(row)
        rowsByID.insert(record.recordID, row: row)
        let tokens = needsTokens ? record.searchTokens(in: searchableFields) : nil
        columns.append(record, tokens: tokens)
        addToIndexes(record, row: row, tokens: tokens)
    }

    /// Replaces a record in place; index entries change only where its indexed values did (a long
    /// posting list, such as a common token's, is expensive to edit).
    /// `stored`, when given, is the record the table holds with that ID, made from it moments ago
    /// (a save resolving its change): its values are read from it rather than from the columns
    /// again.
    mutating func replace(_ record: Record, stored: Record? = nil) {
        if !replaceExisting(record, stored: stored) { insert(record) }
    }

    /// Replaces the record with `record`'s ID, as `replace` does, if the table holds one; false
    /// (and nothing changed) if it does not.
    mutating func replaceExisting(_ record: Record, stored: Record? = nil) -> Bool {
        guard let row = row(of: record.recordID) else { return false }
        replace(record, row: row, stored: stored)
        return true
    }

    private mutating func replace(_ record: Record, row: RowID, stored: Record?) {
        let position = Int(positions[Int(row)])
        // The indexes change first: they read the record replaced from the columns.
        func oldValue(_ field: FieldReference) -> FieldValue? { stored.map { $0.value(of: field) } ?? columns.value(of: field, at: position) }
        let tokens = needsTokens ? record.searchTokens(in: searchableFields) : nil
        if tokenIndex != nil, let tokens {
            let before = stored?.searchTokens(in: searchableFields) ?? columns.searchTokens(at: position, in: searchableFields)
            if before != tokens {
                tokenIndex?.remove(before.subtracting(tokens), row: row)
                tokenIndex?.insert(tokens.subtracting(before), row: row)
            }
        }
        for field in Array(hashIndexes.keys) {
            let (before, after) = (oldValue(field), record.value(of: field))
            guard !Self.identical(before, after) else { continue }
            if let before { hashIndexes[field]?.remove(before, row: row) }
            if let after { hashIndexes[field]?.insert(after, row: row) }
        }
        for field in Array(orderedIndexes.keys) {
            let (before, after) = (oldValue(field), record.value(of: field))
            guard !Self.identical(before, after) else { continue }
            if let before { orderedIndexes[field]?.remove(before, row: row) }
            if let after { orderedIndexes[field]?.insert(after, row: row) }
        }
        for field in Array(spatialIndexes.keys) {
            let (before, after) = (oldValue(field), record.value(of: field))
            guard !Self.identical(before, after) else { continue }
            // The old cells keep the row until the next compaction: a spatial probe is always
            // followed by the exact distance test, and a coarse cell's list is too long to edit.
            if let after { spatialIndexes[field]?.insert(after, row: row) }
            deadRows += 1
        }
        columns.replace(at: position, with: record, tokens: tokens)
    }

    mutating func remove(_ id: RecordID) {
        let removed = positions.withUnsafeBufferPointer { positions in
            rowsByID.remove(id) { columns.hasID(id, at: Int(positions[Int($0)])) }
        }
        guard let row = removed else { return }
        let position = Int(positions[Int(row)])
        for field in Array(orderedIndexes.keys) {
            if let value = columns.value(of: field, at: position) { orderedIndexes[field]?.remove(value, row: row) }
        }
        let last = count - 1
        if position != last {
            rowIDs.swapAt(position, last)
            positions[Int(rowIDs[position])] = Int32(position)
        }
        rowIDs.removeLast()
        columns.removeLast(movingTo: position)
        positions[Int(row)] = -1
        deadRows += 1
        if deadRows > max(minimumDeadRows, count / 4) { compact() }
    }

    /// Renumbers the rows densely and rebuilds every index, dropping dead rows from postings.
    mutating func compact() {
        positions = Array(0..<Int32(count))
        rowIDs = Array(0..<RowID(count))
        rowsByID.removeAll(keepingCapacity: true)
        for position in 0..<count { rowsByID.insert(columns.recordID(at: position), row: RowID(position)) }
        let (hash, ordered, spatial, tokens) = (Array(hashIndexes.keys), Array(orderedIndexes.keys), Array(spatialIndexes.keys), tokenIndex != nil)
        dropIndexes()
        for field in hash { buildHashIndex(on: field) }
        for field in ordered { buildOrderedIndex(on: field) }
        for field in spatial { buildSpatialIndex(on: field) }
        if tokens { buildTokenIndex() }
        deadRows = 0
    }

    /// Whether two values are the same to the byte: `==` on strings uses canonical equivalence,
    /// but indexes key strings by their UTF-8 bytes.
    static func identical(_ a: FieldValue?, _ b: FieldValue?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (.string(let x)?, .string(let y)?), (.assetID(let x)?, .assetID(let y)?): return x.utf8.elementsEqual(y.utf8)
        case (.double(let x)?, .double(let y)?): return x.bitPattern == y.bitPattern
        case (.reference(let x)?, .reference(let y)?):
            return x.recordID.recordName.utf8.elementsEqual(y.recordID.recordName.utf8) && x.recordID.zoneID == y.recordID.zoneID
        case (.list(let xType, let xs)?, .list(let yType, let ys)?):
            return xType == yType && xs.count == ys.count && zip(xs, ys).allSatisfy { identical($0, $1) }
        default: return a == b
        }
    }

    // MARK: Indexes

    var indexedFields: (hash: [FieldReference], ordered: [FieldReference], spatial: [FieldReference], tokens: Bool) {
        (Array(hashIndexes.keys), Array(orderedIndexes.keys), Array(spatialIndexes.keys), tokenIndex != nil)
    }

    mutating func buildHashIndex(on field: FieldReference) {
        guard hashIndexes[field] == nil else { return }
        var index = HashIndex()
        for position in 0..<count {
            if let value = columns.value(of: field, at: position) { index.insert(value, row: rowIDs[position]) }
        }
        hashIndexes[field] = index
    }

    mutating func buildOrderedIndex(on field: FieldReference) {
        guard orderedIndexes[field] == nil else { return }
        if let index = orderedIndexFromIntegerColumn(field) {
            orderedIndexes[field] = index
            return
        }
        var scalars: [SortedEntries.Entry] = []
        var index = OrderedIndex()
        for position in 0..<count {
            guard let value = columns.value(of: field, at: position) else { continue }
            if case .list = value {
                index.insert(value, row: rowIDs[position])
            } else if OrderedIndex.isIndexable(value) {
                scalars.append(SortedEntries.Entry(value: value, row: rowIDs[position]))
            }
        }
        index.setScalars(SortedEntries(bulk: scalars))
        orderedIndexes[field] = index
    }

    /// The range index of an INT64 or TIMESTAMP column, sorted as (integer, row) pairs rather than
    /// as field values compared through their sort order (the same order: one kind, numbers).
    private func orderedIndexFromIntegerColumn(_ field: FieldReference) -> OrderedIndex? {
        guard case .user(let key) = field, let index = columns.index(of: key) else { return nil }
        let column = columns.columns[index]
        let make: (Int64) -> FieldValue
        switch column.kind {
        case .int64: make = { .int64($0) }
        case .timestamp: make = { .timestamp($0) }
        case .empty, .double, .string, .location, .mixed: return nil
        }
        var pairs: [(value: Int64, row: RowID)] = []
        pairs.reserveCapacity(count)
        column.forEachInteger { position, value in pairs.append((value, rowIDs[position])) }
        pairs.sort { $0.value != $1.value ? $0.value < $1.value : $0.row < $1.row }
        var ordered = OrderedIndex()
        ordered.setScalars(SortedEntries(sorted: pairs.map { SortedEntries.Entry(value: make($0.value), row: $0.row) }))
        return ordered
    }

    mutating func buildSpatialIndex(on field: FieldReference) {
        guard spatialIndexes[field] == nil else { return }
        var index = SpatialIndex()
        for position in 0..<count {
            if let value = columns.value(of: field, at: position) { index.insert(value, row: rowIDs[position]) }
        }
        spatialIndexes[field] = index
    }

    /// Builds the token index a column at a time: a string column's texts are tokenized in place
    /// from its arena (no `String` per text, no token `Set` per record), each token filed under its
    /// row with one hash. A mixed column's values are read whole. At a million
    /// records this was the largest part of opening a file with a SEARCHABLE index.
    mutating func buildTokenIndex() {
        guard tokenIndex == nil else { return }
        var rowsByToken: [String: [RowID]] = [:]
        var textColumns = 0
        for index in columns.columns.indices {
            let key = columns.keys[index]
            if let searchableFields, !searchableFields.contains(key) { continue }
            let column = columns.columns[index]
            switch column.kind {
            case .string:
                textColumns += 1
                column.forEachString { position, bytes in
                    let row = rowIDs[position]
                    Tokenizer.forEachToken(inUTF8: bytes) { rowsByToken[$0, default: []].appendUnlessLast(row) }
                }
            case .mixed:
                textColumns += 1
                for position in 0..<count {
                    let row = rowIDs[position]
                    column.value(at: position)?.forEachSearchableText { text in
                        Tokenizer.forEachToken(in: text) { rowsByToken[$0, default: []].appendUnlessLast(row) }
                    }
                }
            case .empty, .int64, .double, .timestamp, .location:
                continue
            }
        }
        // One text column read in row order files each token's rows in order, once each (a row's
        // repeats are adjacent). Otherwise a token's rows are sorted and repeats dropped.
        let inOrder = textColumns <= 1 && zip(rowIDs, rowIDs.dropFirst()).allSatisfy { $0 < $1 }
        tokenIndex = TokenIndex(rowsByToken: rowsByToken, sorted: inOrder)
    }

    /// Installs a token index built elsewhere from this table's records (`buildTokenIndex` on a copy).
    mutating func setTokenIndex(_ index: TokenIndex) { tokenIndex = index }

    /// Switches the fields tokens come from (a schema was declared or dropped): the token index,
    /// if any, is rebuilt.
    mutating func setSearchableFields(_ fields: [FieldKey]?) {
        guard fields != searchableFields else { return }
        searchableFields = fields
        if columns.tracksTokens { columns.trackTokens(searchableFields: fields) }
        if tokenIndex != nil {
            tokenIndex = nil
            buildTokenIndex()
        }
    }

    /// Indexes made elsewhere for this table (read from a snapshot).
    struct Indexes {
        var hash: [FieldReference: HashIndex] = [:]
        var ordered: [FieldReference: OrderedIndex] = [:]
        var spatial: [FieldReference: SpatialIndex] = [:]
        var token: TokenIndex?
    }

    /// Replaces the table's indexes with `indexes`, which must describe its rows as they are.
    mutating func install(_ indexes: Indexes) {
        hashIndexes = indexes.hash
        orderedIndexes = indexes.ordered
        spatialIndexes = indexes.spatial
        tokenIndex = indexes.token
    }

    mutating func dropIndexes() {
        hashIndexes = [:]
        orderedIndexes = [:]
        spatialIndexes = [:]
        tokenIndex = nil
    }

    /// The loops run over copies of the key lists: iterating a dictionary's own `keys` while
    /// mutating its values would share its storage and copy every index on each change.
    /// Whether a save must tokenize the record: for the token index, or the columns' tokens.
    private var needsTokens: Bool { tokenIndex != nil || columns.tracksTokens }

    /// Makes the columns keep every record's tokens, for token scans.
    mutating func trackTokens() {
        guard !columns.tracksTokens else { return }
        columns.trackTokens(searchableFields: searchableFields)
    }

    private mutating func addToIndexes(_ record: Record, row: RowID, tokens: Set<String>?) {
        for field in Array(hashIndexes.keys) {
            if let value = record.value(of: field) { hashIndexes[field]?.insert(value, row: row) }
        }
        for field in Array(orderedIndexes.keys) {
            if let value = record.value(of: field) { orderedIndexes[field]?.insert(value, row: row) }
        }
        for field in Array(spatialIndexes.keys) {
            if let value = record.value(of: field) { spatialIndexes[field]?.insert(value, row: row) }
        }
        if let tokens { tokenIndex?.insert(tokens, row: row) }
    }
}

/// An inverted index: token → rows whose searchable text contains it.
struct TokenIndex: Sendable {
    private(set) var postings: [String: Postings] = [:]

    init() {}

    /// An index read back from a snapshot (`IndexSnapshot`).
    init(postings: [String: Postings]) { self.postings = postings }

    /// From each token's rows; unless `sorted` (ascending, no repeats), they are sorted and
    /// repeats dropped first.
    init(rowsByToken: [String: [RowID]], sorted: Bool) {
        postings.reserveCapacity(rowsByToken.count)
        for (token, rows) in rowsByToken {
            postings[token] = Postings(sortedRows: sorted ? rows : Postings.sortedUnique(rows))
        }
    }

    mutating func insert(_ tokens: Set<String>, row: RowID) {
        for token in tokens { postings[token, default: Postings()].insert(row) }
    }

    mutating func remove(_ tokens: Set<String>, row: RowID) {
        for token in tokens {
            postings[token]?.remove(row)
            if postings[token]?.isEmpty == true { postings[token] = nil }
        }
    }

    func rows(_ token: String) -> [RowID] { postings[token]?.rows ?? [] }
    func count(_ token: String) -> Int { postings[token]?.count ?? 0 }
}

extension Array where Element == RowID {
    /// Appends `row` unless it is already the last (a token repeated in one text).
    @inline(__always)
    mutating func appendUnlessLast(_ row: RowID) {
        if last != row { append(row) }
    }
}
