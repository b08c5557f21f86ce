import CKQuerySupport
import KQuery

/// The values of one field across a table's records, by dense position: one contiguous array of a
/// single kind, strings' bytes in one arena (or, while a column has few distinct strings, a code
/// per position into a dictionary of them), and a presence bitmap. The columns are the only copy
/// of a table's records (`Columns.record(at:recordType:)` makes a record from them).
///
/// A full scan reads a column as a loop over contiguous memory instead of chasing every record's
/// field pointer (the record-at-a-time scan was bound by those cache misses). A column holds one
/// scalar kind; once its records hold another kind, a list, bytes, a reference or an asset ID, it
/// becomes `.mixed` and keeps each value whole, and scans that need its values test the records.
struct Column: Sendable {
    enum Kind: Sendable, Equatable {
        /// No record has held a value yet.
        case empty
        case int64, double, timestamp, string, location
        /// Values of more than one kind, or of a kind the columns do not hold in arrays of their own.
        case mixed
    }

    private(set) var kind = Kind.empty
    private(set) var count = 0
    /// Bit `p` is set when the record at position `p` has the field.
    private(set) var present: [UInt64] = []
    /// How many records have the field: when all do, reading a record's value skips the bitmap.
    private(set) var presentCount = 0
    /// INT64 and TIMESTAMP values.
    private(set) var integers: [Int64] = []
    /// DOUBLE values, and a location's latitude.
    private(set) var numbers: [Double] = []
    private(set) var longitudes: [Double] = []
    /// A `.string` column's bytes by position, once it has left its dictionary (`dictionary` nil).
    private(set) var strings = SpanArena<UInt8>()
    /// A location column's optional parts (altitude, accuracies...), by position; empty while no
    /// location of the column has any.
    private(set) var details: [Location.DetailsBox?] = []
    /// A mixed column's values, whole, by position (nil where absent).
    private(set) var values: [FieldValue?] = []
    /// A `.string` column's distinct values while they are few (`isFewDistinct`): each position
    /// holds its value's code in `codes`. A code is 4 bytes where a value in the arena took its
    /// bytes and 12 more; a scan tests each distinct value once instead of every record's.
    private(set) var dictionary: StringDictionary?
    private(set) var codes: [UInt32] = []

    /// A column of `count` positions, none holding a value.
    init(count: Int) {
        self.count = count
        present = Array(repeating: 0, count: (count + 63) / 64)
    }

    @inline(__always)
    static func isSet(_ bits: UnsafeBufferPointer<UInt64>, _ position: Int) -> Bool {
        bits[position &>> 6] & (1 &<< UInt64(position & 63)) != 0
    }

    @inline(__always)
    func isPresent(_ position: Int) -> Bool {
        present.withUnsafeBufferPointer { Self.isSet($0, position) }
    }

    /// Calls `body` with each present string's position and UTF-8 bytes, in position order (a
    /// `.string` column; nothing otherwise).
    func forEachString(_ body: (Int, UnsafeBufferPointer<UInt8>) -> Void) {
        guard kind == .string else { return }
        present.withUnsafeBufferPointer { present in
            withStrings { string in
                for position in 0..<count where Self.isSet(present, position) { body(position, string(position)) }
            }
        }
    }

    /// Calls `body` with a reader of a `.string` column's bytes by position, valid only during
    /// the call (an absent value reads as empty).
    @inline(__always)
    func withStrings<T>(_ body: (StringReader) -> T) -> T {
        (dictionary?.values ?? strings).withReader { spans in
            codes.withUnsafeBufferPointer { codes in
                body(StringReader(spans: spans, codes: dictionary == nil ? nil : codes))
            }
        }
    }

    /// The string at `position` of a `.string` column, as bytes (for tests and checks).
    @inline(__always)
    func withString<T>(at position: Int, _ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
        withStrings { body($0(position)) }
    }

    /// Calls `body` with each present integer's position and value, in position order (an INT64
    /// or TIMESTAMP column; nothing otherwise).
    func forEachInteger(_ body: (Int, Int64) -> Void) {
        guard kind == .int64 || kind == .timestamp else { return }
        present.withUnsafeBufferPointer { present in
            integers.withUnsafeBufferPointer { integers in
                for position in 0..<count where Self.isSet(present, position) { body(position, integers[position]) }
            }
        }
    }

    /// The value at `position`, as the record there holds it. Inlined: called on a column reached
    /// through a pointer, the call copied the column (every array retained) to pass it.
    /// (`ColumnReader.value(at:)` is the same switch over pointers: reading through one made here
    /// copied the column, every array retained, for each value, and tripled a save's cost of
    /// making the record it replaces.)
    @inline(__always)
    func value(at position: Int) -> FieldValue? {
        guard isPresent(position) else { return nil }
        switch kind {
        case .empty: return nil
        case .int64: return .int64(integers[position])
        case .timestamp: return .timestamp(integers[position])
        case .double: return .double(numbers[position])
        case .location:
            return .location(Location(latitude: numbers[position], longitude: longitudes[position],
                                      detailsBox: details.isEmpty ? nil : details[position]))
        case .string:
            if let string = dictionary?.strings[Int(codes[position])] { return .string(string) }
            return .string(withString(at: position) { String(decoding: $0, as: UTF8.self) })
        case .mixed: return values[position]
        }
    }

    /// A `.string` column's arrays as pointers, for `ColumnReader`: the arena's (the dictionary's
    /// while the column keeps one), and the codes and dictionary strings then. Out of line, on the
    /// column in place: read through a pointer, the dictionary was copied (its arrays retained).
    @inline(never)
    fileprivate func stringBases() -> (UnsafePointer<Int>, UnsafePointer<UInt32>, UnsafePointer<UInt8>, UnsafePointer<UInt32>?, UnsafePointer<String>?) {
        switch dictionary {
        case .some(let dictionary):
            (dictionary.values.starts.unsafeBase, dictionary.values.lengths.unsafeBase, dictionary.values.elements.unsafeBase,
             codes.unsafeBase, dictionary.strings.unsafeBase)
        case .none:
            (strings.starts.unsafeBase, strings.lengths.unsafeBase, strings.elements.unsafeBase, nil, nil)
        }
    }

    static func kind(of value: FieldValue) -> Kind {
        switch value {
        case .int64: .int64
        case .double: .double
        case .timestamp: .timestamp
        case .string: .string
        case .location: .location
        case .bytes, .reference, .assetID, .list: .mixed
        }
    }

    /// Gives back the room its arrays grew into beyond what they hold.
    mutating func trimExcessCapacity() {
        present.trimExcessCapacity()
        integers.trimExcessCapacity()
        numbers.trimExcessCapacity()
        longitudes.trimExcessCapacity()
        strings.trimExcessCapacity()
        values.trimExcessCapacity()
        details.trimExcessCapacity()
        codes.trimExcessCapacity()
    }

    mutating func appendAbsent() {
        if count & 63 == 0 { present.append(0) }
        count += 1
        switch kind {
        case .empty: break
        case .mixed: values.append(nil)
        case .int64, .timestamp: integers.append(0)
        case .double: numbers.append(0)
        case .location:
            numbers.append(0)
            longitudes.append(0)
            if !details.isEmpty { details.append(nil) }
        case .string:
            if dictionary != nil { codes.append(0) } else { strings.append(EmptyCollection()) }
        }
    }

    mutating func set(_ value: FieldValue?, at position: Int) {
        if let value { set(present: value, at: position) } else { setAbsent(at: position) }
    }

    mutating func setAbsent(at position: Int) {
        switch kind {
        case .string where dictionary == nil: strings.replace(at: position, with: EmptyCollection())
        case .mixed: values[position] = nil
        case .location where !details.isEmpty: details[position] = nil
        default: break
        }
        if isPresent(position) { presentCount -= 1 }
        present[position &>> 6] &= ~(1 &<< UInt64(position & 63))
    }

    /// Sets a value read where it lies (a record's field): a string's bytes are copied into the
    /// column, so the string itself is never retained.
    mutating func set(present value: borrowing FieldValue, at position: Int) {
        let valueKind = Self.kind(of: value)
        if kind == .empty { adopt(valueKind) }
        if valueKind != kind, kind != .mixed { becomeMixed() }
        if !isPresent(position) { presentCount += 1 }
        present[position &>> 6] |= 1 &<< UInt64(position & 63)
        if kind == .mixed {
            values[position] = copy value
            return
        }
        switch value {
        case .int64(let x), .timestamp(let x): integers[position] = x
        case .double(let x): numbers[position] = x
        case .location(let location):
            numbers[position] = location.latitude
            longitudes[position] = location.longitude
            let box = location.detailsBox
            if box != nil, details.isEmpty { details = Array(repeating: nil, count: count) }
            if !details.isEmpty { details[position] = box }
        case .string(let text):
            if let done: Void = text.utf8.withContiguousStorageIfAvailable({ setString($0, at: position) }) { return done }
            var contiguous = text
            contiguous.withUTF8 { setString($0, at: position) }
        case .bytes, .reference, .assetID, .list: break
        }
    }

    private mutating func setString(_ bytes: UnsafeBufferPointer<UInt8>, at position: Int) {
        guard dictionary != nil else { return strings.replace(at: position, with: bytes) }
        if let code = dictionary?.code(of: bytes) { codes[position] = code }
        if let distinct = dictionary?.count, !Self.isFewDistinct(distinct, of: count) { leaveDictionary() }
    }

    /// Whether `distinct` strings among `count` values are few enough to keep in a dictionary: a
    /// field of names, categories or states, not one of free text.
    static func isFewDistinct(_ distinct: Int, of count: Int) -> Bool {
        distinct <= 4_096 || distinct <= count / 4
    }

    /// Keeps the strings by position from now on (too many are distinct).
    private mutating func leaveDictionary() {
        var arena = SpanArena<UInt8>()
        arena.reserveCapacity(count)
        present.withUnsafeBufferPointer { present in
            withStrings { string in
                for position in 0..<count {
                    if Self.isSet(present, position) { arena.append(string(position)) } else { arena.append(EmptyCollection()) }
                }
            }
        }
        strings = arena
        dictionary = nil
        codes = []
    }

    /// Removes the last position, moving its value to `position` first (the table's swap-remove).
    mutating func removeLast(movingTo position: Int) {
        let last = count - 1
        if isPresent(position) { presentCount -= 1 }
        if position != last {
            set(bit: isPresent(last), at: position)
            switch kind {
            case .empty: break
            case .mixed: values.swapAt(position, last)
            case .int64, .timestamp: integers[position] = integers[last]
            case .double: numbers[position] = numbers[last]
            case .location:
                numbers[position] = numbers[last]
                longitudes[position] = longitudes[last]
                if !details.isEmpty { details.swapAt(position, last) }
            case .string:
                if dictionary != nil { codes[position] = codes[last] } else { strings.move(from: last, to: position) }
            }
        }
        set(bit: false, at: last)
        count = last
        if count & 63 == 0 { present.removeLast() }
        switch kind {
        case .empty: break
        case .mixed: values.removeLast()
        case .int64, .timestamp: integers.removeLast()
        case .double: numbers.removeLast()
        case .location:
            numbers.removeLast()
            longitudes.removeLast()
            if !details.isEmpty { details.removeLast() }
        case .string:
            if dictionary != nil { codes.removeLast() } else { strings.removeLast() }
        }
    }

    private mutating func set(bit: Bool, at position: Int) {
        let mask: UInt64 = 1 &<< UInt64(position & 63)
        if bit { present[position &>> 6] |= mask } else { present[position &>> 6] &= ~mask }
    }

    private mutating func adopt(_ newKind: Kind) {
        kind = newKind
        switch newKind {
        case .empty: break
        case .mixed: values = Array(repeating: nil, count: count)
        case .int64, .timestamp: integers = Array(repeating: 0, count: count)
        case .double: numbers = Array(repeating: 0, count: count)
        case .location:
            numbers = Array(repeating: 0, count: count)
            longitudes = Array(repeating: 0, count: count)
        case .string:
            dictionary = StringDictionary()
            codes = Array(repeating: 0, count: count)
        }
    }

    /// Keeps every value whole from now on, those held so far included.
    private mutating func becomeMixed() {
        var whole: [FieldValue?] = []
        whole.reserveCapacity(count)
        for position in 0..<count { whole.append(value(at: position)) }
        kind = .mixed
        values = whole
        integers = []
        numbers = []
        longitudes = []
        details = []
        strings = SpanArena()
        dictionary = nil
        codes = []
    }
}

/// A string column's distinct values, each with a code (its place in `values`), found by a hash of
/// their bytes: an open-addressing table of codes that keeps no second copy of the strings.
struct StringDictionary: Sendable {
    /// The distinct values by code.
    private(set) var values = SpanArena<UInt8>()
    /// The same values as strings, by code: a record made from the columns takes its string from
    /// here (a retain) rather than decode and check its bytes again (one allocation for a string
    /// of more than 15 bytes). Few, as the dictionary's values are (`Column.isFewDistinct`).
    private(set) var strings: [String] = []
    /// `code + 1` at a value's slot; 0 is an empty slot.
    private var slots: [UInt32] = Array(repeating: 0, count: 16)

    var count: Int { values.count }

    /// The code of `bytes`, added if new.
    mutating func code(of bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        if (count + 1) * 2 > slots.count { grow() }
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: Self.hash(bytes)) & mask
        while slots[slot] != 0 {
            let code = slots[slot] - 1
            if values.withValues(at: Int(code), { $0.count == bytes.count && ValueOrder.compareBytes($0, bytes) == 0 }) { return code }
            slot = (slot + 1) & mask
        }
        let code = UInt32(truncatingIfNeeded: count)
        values.append(bytes)
        strings.append(String(decoding: bytes, as: UTF8.self))
        slots[slot] = code + 1
        return code
    }

    /// Eight bytes at a time, each word mixed in by a multiply: the values are short, and any
    /// stable spread does (a byte at a time made a million records' open 15% slower).
    private static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var hash = UInt64(truncatingIfNeeded: bytes.count) &* 0x9E37_79B9_7F4A_7C15
        guard let base = bytes.baseAddress else { return hash }
        let raw = UnsafeRawPointer(base)
        var offset = 0
        while offset + 8 <= bytes.count {
            hash = (hash ^ raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
            hash ^= hash >> 32
            offset += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while offset < bytes.count {
            tail |= UInt64(bytes[offset]) << shift
            shift += 8
            offset += 1
        }
        hash = (hash ^ tail) &* 0xC4CE_B9FE_1A85_EC53
        return hash ^ (hash >> 29)
    }

    private mutating func grow() {
        var grown = [UInt32](repeating: 0, count: slots.count * 2)
        let mask = grown.count - 1
        for code in 0..<count {
            var slot = Int(truncatingIfNeeded: values.withValues(at: code, Self.hash)) & mask
            while grown[slot] != 0 { slot = (slot + 1) & mask }
            grown[slot] = UInt32(truncatingIfNeeded: code) + 1
        }
        slots = grown
    }
}

/// A string column's bytes by position, through unsafe buffers: from the arena by position, or
/// through each position's code from the dictionary's arena.
struct StringReader {
    let spans: SpanReader<UInt8>
    /// The codes by position, when the column keeps a dictionary.
    let codes: UnsafeBufferPointer<UInt32>?

    @inline(__always)
    func callAsFunction(_ position: Int) -> UnsafeBufferPointer<UInt8> {
        spans(codes.map { Int($0[position]) } ?? position)
    }
}

/// A table's columns as they were when a query read them: the records the query returns read
/// their fields from here when first needed (`Fields(provider:position:)`, the position being the
/// record's place in the page), without making them for every result.
///
/// Records are values: a record returned must keep its fields while the table changes. Before
/// the table changes, it `detach`es its live snapshots: each makes the fields of the records it
/// gave out and lets go of the columns. Holding them, it would make the table copy every column
/// it changes (the arrays would be shared).
final class ColumnsSnapshot: FieldsProvider {
    private struct State {
        var columns: Columns?
        /// The fields of the records given out, by place in the page, once made.
        var made: [Fields] = []

        /// Makes the fields of the records at `positions` and lets go of the columns (once).
        mutating func make(_ positions: [Int]) {
            guard let columns else { return }
            columns.withReader { reader in
                reader.prefetch(.fields, of: positions)
                made = positions.map { reader.fields(at: $0) }
            }
            self.columns = nil
        }
    }
    private let state: Locked<State>
    /// The table positions of the records given out, in page order.
    private let positions: [Int]

    /// A snapshot of `columns` for the records at `positions`.
    init(_ columns: Columns, positions: [Int]) {
        state = Locked(State(columns: columns))
        self.positions = positions
    }

    /// The first record's fields asked for makes every given-out record's, through one reader: a
    /// page's records are written out together (the server writes each to JSON), and a lazy record
    /// asks again each time its fields are read. Made one by one through the columns, they cost a
    /// served query more than the query itself.
    func fields(at index: Int) -> Fields {
        state.withLock { state in
            state.make(positions)
            return state.made[index]
        }
    }

    func value(of key: FieldKey, at index: Int) -> FieldValue? {
        state.withLock { state in
            if let columns = state.columns { return columns.value(of: key, at: positions[index]) }
            return state.made[index][key]
        }
    }

    /// Makes the fields of the records given out and lets go of the columns (before the table
    /// changes them).
    func detach() {
        state.withLock { state in state.make(positions) }
    }

    /// The records at `positions` (the snapshot's), of `recordType`: their IDs and system fields
    /// made now, their fields read from here when first needed.
    ///
    /// At a million records, each column a record has a value in is a cache miss: every line the
    /// page's records need is asked for first, so that the misses overlap (`ColumnsReader.prefetch`;
    /// read one record after another, the served query was 1.5 times slower than with whole
    /// records).
    func records(recordType: String) -> [Record] {
        state.withLock { state in
            state.columns?.withReader(fields: false) { reader in
                reader.prefetch(.idAndSystemFields, of: positions)
                var records: [Record] = []
                records.reserveCapacity(positions.count)
                for (index, position) in positions.enumerated() {
                    records.append(Record(taking: recordType, recordID: reader.recordID(at: position), fields: Fields(provider: self, position: index)))
                    reader.setSystemFields(of: &records[index], at: position)
                }
                return records
            } ?? []
        }
    }
}

/// Reads a table's record IDs from its columns through pointers into their arrays, valid only
/// during `Columns.withRecordIDs` or `withReader` (the columns are alive and unchanged then).
struct RecordIDReader {
    private let names: UnsafePointer<String>
    private let zoneNumbers: UnsafePointer<UInt32>?
    private let zones: [ZoneID]

    fileprivate init(names: [String], zoneNumbers: [UInt32], zones: [ZoneID]) {
        self.names = names.unsafeBase
        self.zoneNumbers = zoneNumbers.isEmpty ? nil : zoneNumbers.unsafeBase
        self.zones = zones
    }

    @inline(__always)
    func recordID(at position: Int) -> RecordID {
        RecordID(recordName: names[position], zoneID: zones[Int(zoneNumbers?[position] ?? 0)])
    }

    /// Asks the CPU to start loading the record ID at `position` (a prefetch never faults).
    @inline(__always)
    func prefetch(at position: Int) {
        kquery_prefetch(names + position)
        if let zoneNumbers { kquery_prefetch(zoneNumbers + position) }
    }

    /// Whether the record at `a` comes before the one at `b` by record ID (name bytes, then zone).
    @inline(__always)
    func precedes(_ a: Int, _ b: Int) -> Bool {
        let order = ValueOrder.compareBytes(names[a], names[b])
        if order != 0 { return order < 0 }
        guard let zoneNumbers else { return false }
        let (zoneA, zoneB) = (zoneNumbers[a], zoneNumbers[b])
        return zoneA != zoneB && zones[Int(zoneA)] < zones[Int(zoneB)]
    }
}

/// Reads a table's records from its columns through pointers into their arrays, valid only during
/// `Columns.withReader` (the columns are alive and unchanged then).
struct ColumnsReader {
    private let user: [(key: FieldKey, column: ColumnReader)]
    /// In `SystemField` order, inline (an array a reader was a fifth of making a small page).
    private let system: InlineArray<7, ColumnReader>
    private let hasSystemValues: Bool
    private let ids: RecordIDReader

    fileprivate init(_ columns: Columns, keyOrder: [Int], hasSystemValues: Bool, ids: RecordIDReader) {
        // Each column read where it lies: `columns.columns[index]` and `map` copied it, every
        // array retained and released.
        user = columns.columns.withUnsafeBufferPointer { user in
            keyOrder.map { (columns.keys[$0], ColumnReader(user.baseAddress.unsafelyUnwrapped + $0)) }
        }
        // Read only when some record has a system field besides its ID.
        system = !hasSystemValues ? InlineArray(repeating: .empty) : columns.system.withUnsafeBufferPointer { system in
            InlineArray { ColumnReader(system.baseAddress.unsafelyUnwrapped + $0) }
        }
        self.hasSystemValues = hasSystemValues
        self.ids = ids
    }

    @inline(__always)
    func recordID(at position: Int) -> RecordID { ids.recordID(at: position) }

    /// The user fields of the record at `position`, made in key order.
    func fields(at position: Int) -> Fields {
        var fields = Fields()
        fields.reserveCapacity(user.count)
        user.withUnsafeBufferPointer { user in
            for index in user.indices {
                if let value = user[index].column.value(at: position) { fields.appendUnordered(user[index].key, value) }
            }
        }
        fields.sortAppended()
        return fields
    }

    func record(at position: Int, recordType: String) -> Record {
        var record = Record(taking: recordType, recordID: recordID(at: position), fields: fields(at: position))
        setSystemFields(of: &record, at: position)
        return record
    }

    /// What `prefetch` asks for: a record's ID and system fields (what a query's page makes at
    /// once), its user fields (made when first read), or both.
    struct Parts: OptionSet {
        let rawValue: UInt8
        static let idAndSystemFields = Parts(rawValue: 1)
        static let fields = Parts(rawValue: 2)
    }

    /// Asks the CPU to start loading every line that making `parts` of the records at `positions`
    /// reads: first each record's ID and its value's place in each column, then (their starts
    /// read by then) the bytes of the strings that lie in an arena. A query's page asks for every
    /// line before it makes anything, so that the misses overlap instead of coming one after
    /// another; a lazy page asks for its records' fields only once one is read (a page whose
    /// fields are never read would have loaded them for nothing).
    func prefetch(_ parts: Parts, of positions: [Int]) {
        for position in positions { prefetchSlots(parts, at: position) }
        for position in positions { prefetchStrings(parts, at: position) }
    }

    private func prefetchSlots(_ parts: Parts, at position: Int) {
        if parts.contains(.idAndSystemFields) {
            ids.prefetch(at: position)
            if hasSystemValues {
                for index in system.indices { system[index].prefetch(at: position) }
            }
        }
        if parts.contains(.fields) {
            user.withUnsafeBufferPointer { user in
                for index in user.indices { user[index].column.prefetch(at: position) }
            }
        }
    }

    private func prefetchStrings(_ parts: Parts, at position: Int) {
        if parts.contains(.idAndSystemFields), hasSystemValues {
            for index in system.indices { system[index].prefetchString(at: position) }
        }
        if parts.contains(.fields) {
            user.withUnsafeBufferPointer { user in
                for index in user.indices { user[index].column.prefetchString(at: position) }
            }
        }
    }

    /// Sets `record`'s system fields from those of the record at `position`.
    func setSystemFields(of record: inout Record, at position: Int) {
        if hasSystemValues { Columns.setSystemFields(of: &record) { system[$0.rawValue].value(at: position) } }
    }
}

/// One column's arrays, as pointers (see `ColumnsReader`).
struct ColumnReader {
    private let kind: Column.Kind
    /// Nil when every record has the field.
    private let present: UnsafePointer<UInt64>?
    private let integers: UnsafePointer<Int64>
    private let numbers: UnsafePointer<Double>
    private let longitudes: UnsafePointer<Double>
    private let starts: UnsafePointer<Int>
    private let lengths: UnsafePointer<UInt32>
    private let bytes: UnsafePointer<UInt8>
    /// A string column's codes, while it keeps a dictionary (`starts`, `lengths` and `bytes` are
    /// then the dictionary's).
    private let codes: UnsafePointer<UInt32>?
    /// The dictionary's values as strings, by code (with `codes`).
    private let dictionaryStrings: UnsafePointer<String>?
    private let details: UnsafePointer<Location.DetailsBox?>?
    private let values: UnsafePointer<FieldValue?>

    /// A reader of a column no record has a value in: it reads nothing (every value is absent,
    /// and its pointers, never read, point nowhere).
    static var empty: ColumnReader { ColumnReader() }

    private init() {
        let nowhere = UnsafeRawPointer(bitPattern: 64).unsafelyUnwrapped
        kind = .empty
        present = nil
        integers = nowhere.assumingMemoryBound(to: Int64.self)
        numbers = nowhere.assumingMemoryBound(to: Double.self)
        longitudes = nowhere.assumingMemoryBound(to: Double.self)
        starts = nowhere.assumingMemoryBound(to: Int.self)
        lengths = nowhere.assumingMemoryBound(to: UInt32.self)
        bytes = nowhere.assumingMemoryBound(to: UInt8.self)
        codes = nil
        dictionaryStrings = nil
        details = nil
        values = nowhere.assumingMemoryBound(to: FieldValue?.self)
    }

    /// The column `column` points to, read in place (a `Column` passed by value was copied).
    init(_ column: UnsafePointer<Column>) {
        guard column.pointee.kind != .empty else {
            self = .empty
            return
        }
        kind = column.pointee.kind
        present = column.pointee.presentCount == column.pointee.count ? nil : column.pointee.present.unsafeBase
        integers = column.pointee.integers.unsafeBase
        numbers = column.pointee.numbers.unsafeBase
        longitudes = column.pointee.longitudes.unsafeBase
        (starts, lengths, bytes, codes, dictionaryStrings) = column.pointee.stringBases()
        details = column.pointee.details.isEmpty ? nil : column.pointee.details.unsafeBase
        values = column.pointee.values.unsafeBase
    }

    /// Asks the CPU to start loading the value at `position` (`ColumnsReader.prefetch(_:of:)`).
    @inline(__always)
    func prefetch(at position: Int) {
        if let present { kquery_prefetch(present + (position &>> 6)) }
        switch kind {
        case .empty: break
        case .int64, .timestamp: kquery_prefetch(integers + position)
        case .double: kquery_prefetch(numbers + position)
        case .location:
            kquery_prefetch(numbers + position)
            kquery_prefetch(longitudes + position)
            if let details { kquery_prefetch(details + position) }
        case .string:
            if let codes {
                kquery_prefetch(codes + position)
            } else {
                kquery_prefetch(starts + position)
                kquery_prefetch(lengths + position)
            }
        case .mixed: kquery_prefetch(values + position)
        }
    }

    /// Asks the CPU to start loading the bytes of the string at `position`, when they lie in the
    /// column's arena (a dictionary's strings are made already); reads the string's start.
    @inline(__always)
    func prefetchString(at position: Int) {
        if kind == .string, codes == nil { kquery_prefetch(bytes + starts[position]) }
    }

    /// As `Column.value(at:)`.
    @inline(__always)
    func value(at position: Int) -> FieldValue? {
        if let present, present[position &>> 6] & (1 &<< UInt64(position & 63)) == 0 { return nil }
        switch kind {
        case .empty: return nil
        case .int64: return .int64(integers[position])
        case .timestamp: return .timestamp(integers[position])
        case .double: return .double(numbers[position])
        case .location:
            return .location(Location(latitude: numbers[position], longitude: longitudes[position], detailsBox: details?[position]))
        case .string:
            if let codes, let dictionaryStrings { return .string(dictionaryStrings[Int(codes[position])]) }
            return .string(String(decoding: UnsafeBufferPointer(start: bytes + starts[position], count: Int(lengths[position])), as: UTF8.self))
        case .mixed: return values[position]
        }
    }
}

extension Array {
    /// The address of the array's elements, for a reader that outlives the call (`ColumnsReader`):
    /// valid only while the array is alive and unchanged. An empty array gives an address that
    /// must not be read.
    fileprivate var unsafeBase: UnsafePointer<Element> {
        withUnsafeBufferPointer { $0.baseAddress ?? UnsafePointer(bitPattern: MemoryLayout<Element>.alignment).unsafelyUnwrapped }
    }
}

/// Variable-length values (a string's bytes, a record's token numbers) by position, in one
/// contiguous arena: no allocation per value, and a scan reads them in order.
///
/// Replacing or moving a value leaves its old elements unused in the arena; when they outnumber the
/// live ones the arena is rewritten.
struct SpanArena<Element: BitwiseCopyable & Sendable>: Sendable {
    private(set) var starts: [Int] = []
    private(set) var lengths: [UInt32] = []
    private(set) var elements: [Element] = []
    private var unused = 0

    init() {}

    init(count: Int) {
        starts = Array(repeating: 0, count: count)
        lengths = Array(repeating: 0, count: count)
    }

    var count: Int { starts.count }

    mutating func reserveCapacity(_ count: Int) {
        starts.reserveCapacity(count)
        lengths.reserveCapacity(count)
    }

    mutating func append(_ values: some Collection<Element>) {
        starts.append(elements.count)
        lengths.append(UInt32(truncatingIfNeeded: values.count))
        elements.append(contentsOf: values)
    }

    mutating func replace(at position: Int, with values: some Collection<Element>) {
        unused += Int(lengths[position])
        starts[position] = elements.count
        lengths[position] = UInt32(truncatingIfNeeded: values.count)
        elements.append(contentsOf: values)
        compactIfWasteful()
    }

    mutating func move(from source: Int, to destination: Int) {
        unused += Int(lengths[destination])
        starts[destination] = starts[source]
        lengths[destination] = lengths[source]
        starts[source] = 0
        lengths[source] = 0
    }

    mutating func removeLast() {
        unused += Int(lengths[count - 1])
        starts.removeLast()
        lengths.removeLast()
        compactIfWasteful()
    }

    /// Calls `body` with the values at `position`.
    func withValues<T>(at position: Int, _ body: (UnsafeBufferPointer<Element>) -> T) -> T {
        elements.withUnsafeBufferPointer { all in
            body(UnsafeBufferPointer(rebasing: all[starts[position]..<starts[position] + Int(lengths[position])]))
        }
    }

    /// Calls `body` with a reader of the values by position, valid only during the call (for a
    /// loop over many positions without reaching the arrays once per position).
    func withReader<T>(_ body: (SpanReader<Element>) -> T) -> T {
        starts.withUnsafeBufferPointer { starts in
            lengths.withUnsafeBufferPointer { lengths in
                elements.withUnsafeBufferPointer { body(SpanReader(starts: starts, lengths: lengths, elements: $0)) }
            }
        }
    }

    /// Gives back the room its arrays grew into beyond what they hold (a load's appends double
    /// them: a million records' text left about a third of its arena empty).
    mutating func trimExcessCapacity() {
        starts.trimExcessCapacity()
        lengths.trimExcessCapacity()
        elements.trimExcessCapacity()
    }

    private mutating func compactIfWasteful() {
        guard unused > 4096, unused > elements.count / 2 else { return }
        var packed: [Element] = []
        packed.reserveCapacity(elements.count - unused)
        for position in 0..<count {
            let start = packed.count
            packed.append(contentsOf: elements[starts[position]..<starts[position] + Int(lengths[position])])
            starts[position] = start
        }
        elements = packed
        unused = 0
    }
}

/// A table's records, column by column: each record's name and zone, one column per system field
/// and one per user field any record has held, plus each record's search tokens, computed once
/// when the record is saved (a token scan compares token numbers instead of tokenizing every
/// record's text on every query). Tokens are kept only once a token scan has asked for them
/// (`trackTokens`): tokenizing every save made opening a million records twice as slow.
struct Columns: Sendable {
    private(set) var columns: [Column] = []
    private(set) var keys: [FieldKey] = []
    private var indexByKey: [FieldKey: Int] = [:]
    /// The user columns' indexes in key order: a record's fields are made in that order.
    private var keyOrder: [Int] = []
    /// Each record's name, by position.
    private(set) var names: [String] = []
    /// Each record's zone, as its number in `zones`; empty while every record is in the default
    /// zone (number 0).
    private var zoneNumbers: [UInt32] = []
    private(set) var zones: [ZoneID] = [.default]
    private var zoneNumberByID: [ZoneID: UInt32] = [.default: 0]
    /// The system fields besides the record ID, a column each, in `SystemField` order.
    private(set) var system = Array(repeating: Column(count: 0), count: SystemField.allCases.count)
    /// Whether any record has held a system field besides its ID (when none has, making a record
    /// reads none of their columns).
    private var hasSystemValues = false
    /// Each distinct token's number.
    private(set) var tokenNumbers: [String: UInt32] = [:]
    /// Each record's token numbers, sorted, when `tracksTokens`.
    private(set) var tokens = SpanArena<UInt32>()
    private(set) var tracksTokens = false
    private(set) var count = 0

    /// The system columns: timestamps, user record names and the change tag as strings, and the
    /// parent and share as references.
    enum SystemField: Int, CaseIterable {
        case creationDate, creator, modificationDate, modifier, changeTag, parent, share
    }

    /// Where the column of `key` is in `columns`, or nil when no record has held the field.
    func index(of key: FieldKey) -> Int? { indexByKey[key] }

    /// `recordTokens` are the record's search tokens, needed when `tracksTokens`.
    mutating func append(_ record: Record, tokens recordTokens: Set<String>?) {
        for index in columns.indices { columns[index].appendAbsent() }
        for index in system.indices { system[index].appendAbsent() }
        names.append(record.recordID.recordName)
        if !zoneNumbers.isEmpty { zoneNumbers.append(0) }
        if tracksTokens { tokens.append(EmptyCollection()) }
        count += 1
        replace(at: count - 1, with: record, tokens: recordTokens)
    }

    mutating func replace(at position: Int, with record: Record, tokens recordTokens: Set<String>?) {
        // The record's fields and the columns, both in key order, walked together; each value
        // read where it lies (copying it retained its string, made on the thread that decoded it).
        var found = 0
        var next = 0
        record.fields.forEachField { key, value in
            while next < keyOrder.count, keys[keyOrder[next]] < key {
                columns[keyOrder[next]].setAbsent(at: position)
                next += 1
            }
            guard next < keyOrder.count, keys[keyOrder[next]] == key else { return }
            columns[keyOrder[next]].set(present: value, at: position)
            found += 1
            next += 1
        }
        while next < keyOrder.count {
            columns[keyOrder[next]].setAbsent(at: position)
            next += 1
        }
        // Usually every field has its column already: no lookup per field then.
        if found < record.fields.count {
            for (key, value) in record.fields where indexByKey[key] == nil {
                indexByKey[key] = columns.count
                keys.append(key)
                var column = Column(count: count)
                column.set(value, at: position)
                columns.append(column)
                keyOrder = keys.indices.sorted { keys[$0] < keys[$1] }
            }
        }
        names[position] = record.recordID.recordName
        setZone(record.recordID.zoneID, at: position)
        setSystemFields(of: record, at: position)
        if tracksTokens { setTokens(recordTokens ?? [], at: position) }
    }

    private mutating func setZone(_ zone: ZoneID, at position: Int) {
        if zoneNumbers.isEmpty, zone == zones[0] { return }
        let number: UInt32
        if let known = zoneNumberByID[zone] {
            number = known
        } else {
            number = UInt32(truncatingIfNeeded: zones.count)
            zones.append(zone)
            zoneNumberByID[zone] = number
        }
        if zoneNumbers.isEmpty { zoneNumbers = Array(repeating: 0, count: count) }
        zoneNumbers[position] = number
    }

    private mutating func setSystemFields(of record: Record, at position: Int) {
        guard hasSystemValues || record.creationDate != nil || record.creatorUserRecordName != nil || record.modificationDate != nil
                || record.lastModifiedUserRecordName != nil || record.recordChangeTag != nil || record.parent != nil || record.share != nil
        else { return }
        hasSystemValues = true
        system[SystemField.creationDate.rawValue].set(record.creationDate.map(FieldValue.timestamp), at: position)
        system[SystemField.creator.rawValue].set(record.creatorUserRecordName.map(FieldValue.string), at: position)
        system[SystemField.modificationDate.rawValue].set(record.modificationDate.map(FieldValue.timestamp), at: position)
        system[SystemField.modifier.rawValue].set(record.lastModifiedUserRecordName.map(FieldValue.string), at: position)
        system[SystemField.changeTag.rawValue].set(record.recordChangeTag.map(FieldValue.string), at: position)
        system[SystemField.parent.rawValue].set(record.parent.map(FieldValue.reference), at: position)
        system[SystemField.share.rawValue].set(record.share.map(FieldValue.reference), at: position)
    }

    // MARK: Reading

    /// The zone of the record at `position`.
    @inline(__always)
    func zoneNumber(at position: Int) -> UInt32 { zoneNumbers.isEmpty ? 0 : zoneNumbers[position] }

    /// The number of `zone` if a record has been in it.
    func zoneNumber(of zone: ZoneID) -> UInt32? { zoneNumberByID[zone] }

    func recordID(at position: Int) -> RecordID {
        RecordID(recordName: names[position], zoneID: zones[Int(zoneNumber(at: position))])
    }

    /// Whether the record at `position` has `id`.
    @inline(__always)
    func hasID(_ id: RecordID, at position: Int) -> Bool {
        names[position] == id.recordName && zones[Int(zoneNumber(at: position))] == id.zoneID
    }

    /// The user fields of the record at `position`, each column read in place (`columns[index]`
    /// copied the column, retaining every array of it).
    func fields(at position: Int) -> Fields {
        var fields = Fields()
        fields.reserveCapacity(columns.count)
        columns.withUnsafeBufferPointer { columns in
            keys.withUnsafeBufferPointer { keys in
                for index in keyOrder {
                    if let value = columns[index].value(at: position) { fields.appendUnordered(keys[index], value) }
                }
            }
        }
        fields.sortAppended()
        return fields
    }

    /// The record at `position`, of `recordType`, as it was saved (one record: many are made
    /// through `withReader`).
    func record(at position: Int, recordType: String) -> Record {
        var record = Record(taking: recordType, recordID: recordID(at: position), fields: fields(at: position))
        setSystemFields(of: &record, at: position)
        return record
    }

    /// The records at `positions`, whole, in that order: every line they are made from asked for
    /// first, so that the cache misses overlap (a small page: `Database.largestWholePage`).
    func records(at positions: [Int], recordType: String) -> [Record] {
        withReader { reader in
            reader.prefetch([.idAndSystemFields, .fields], of: positions)
            return positions.map { reader.record(at: $0, recordType: recordType) }
        }
    }

    private func setSystemFields(of record: inout Record, at position: Int) {
        guard hasSystemValues else { return }
        Self.setSystemFields(of: &record) { systemValue($0, at: position) }
    }

    /// Sets `record`'s system fields from `value`, which reads each system column at the record's
    /// position (through the columns, or a reader's pointers).
    @inline(__always)
    fileprivate static func setSystemFields(of record: inout Record, _ value: (SystemField) -> FieldValue?) {
        if case .timestamp(let x)? = value(.creationDate) { record.creationDate = x }
        if case .string(let x)? = value(.creator) { record.creatorUserRecordName = x }
        if case .timestamp(let x)? = value(.modificationDate) { record.modificationDate = x }
        if case .string(let x)? = value(.modifier) { record.lastModifiedUserRecordName = x }
        if case .string(let x)? = value(.changeTag) { record.recordChangeTag = x }
        if case .reference(let x)? = value(.parent) { record.parent = x }
        if case .reference(let x)? = value(.share) { record.share = x }
    }

    private func systemValue(_ field: SystemField, at position: Int) -> FieldValue? {
        guard hasSystemValues else { return nil }
        return system.withUnsafeBufferPointer { $0[field.rawValue].value(at: position) }
    }

    /// One user field of the record at `position`, its column read in place.
    func value(of key: FieldKey, at position: Int) -> FieldValue? {
        guard let index = indexByKey[key] else { return nil }
        return columns.withUnsafeBufferPointer { $0[index].value(at: position) }
    }

    /// Calls `body` with a reader of the columns, for making many records: it reads the columns'
    /// arrays through pointers taken once. Read through the columns' structs, every array was
    /// retained and released for each value (more than half the time of making a record).
    /// Without `fields`, the reader reads record IDs and system fields alone (and is cheaper to
    /// make).
    func withReader<T>(fields: Bool = true, _ body: (ColumnsReader) -> T) -> T {
        withExtendedLifetime(self) {
            body(ColumnsReader(self, keyOrder: fields ? keyOrder : [], hasSystemValues: hasSystemValues,
                               ids: RecordIDReader(names: names, zoneNumbers: zoneNumbers, zones: zones)))
        }
    }

    /// Calls `body` with a reader of the record IDs alone (for sorting and for making many
    /// records whose fields are read later), cheaper to make than `withReader`'s.
    func withRecordIDs<T>(_ body: (RecordIDReader) -> T) -> T {
        withExtendedLifetime(self) { body(RecordIDReader(names: names, zoneNumbers: zoneNumbers, zones: zones)) }
    }

    /// The value a predicate sees for `field` in the record at `position` (as `Record.value(of:)`).
    func value(of field: FieldReference, at position: Int) -> FieldValue? {
        func system(_ field: SystemField) -> FieldValue? { systemValue(field, at: position) }
        func user(_ field: SystemField) -> FieldValue? {
            guard case .string(let name)? = system(field) else { return nil }
            return .reference(Reference(recordID: RecordID(recordName: name)))
        }
        switch field {
        case .user(let key): return value(of: key, at: position)
        case .recordID: return .reference(Reference(recordID: recordID(at: position)))
        case .creationDate: return system(.creationDate)
        case .modificationDate: return system(.modificationDate)
        case .creatorUserRecordID: return user(.creator)
        case .lastModifiedUserRecordID: return user(.modifier)
        case .recordChangeTag: return system(.changeTag)
        case .parent: return system(.parent)
        case .share: return system(.share)
        }
    }

    // MARK: Tokens

    /// Starts keeping each record's tokens, or computes them again (the searchable fields changed).
    mutating func trackTokens(searchableFields: [FieldKey]?) {
        tracksTokens = true
        tokenNumbers = [:]
        tokens = SpanArena(count: count)
        for position in 0..<count { setTokens(searchTokens(at: position, in: searchableFields), at: position) }
    }

    /// The search tokens of the record at `position` (as `Record.searchTokens(in:)`).
    func searchTokens(at position: Int, in searchableFields: [FieldKey]?) -> Set<String> {
        var tokens = Set<String>()
        columns.withUnsafeBufferPointer { columns in
            for index in columns.indices where columns[index].kind == .string || columns[index].kind == .mixed {
                if let searchableFields, !searchableFields.contains(keys[index]) { continue }
                guard columns[index].isPresent(position) else { continue }
                if columns[index].kind == .string {
                    columns[index].withString(at: position) { Tokenizer.addTokens(inUTF8: $0, to: &tokens) }
                } else {
                    columns[index].value(at: position)?.forEachSearchableText { Tokenizer.addTokens(of: $0, to: &tokens) }
                }
            }
        }
        return tokens
    }

    private mutating func setTokens(_ recordTokens: Set<String>, at position: Int) {
        var numbers: [UInt32] = []
        numbers.reserveCapacity(recordTokens.count)
        for token in recordTokens {
            if let number = tokenNumbers[token] {
                numbers.append(number)
            } else {
                let number = UInt32(truncatingIfNeeded: tokenNumbers.count)
                tokenNumbers[token] = number
                numbers.append(number)
            }
        }
        numbers.sort()
        tokens.replace(at: position, with: numbers)
    }

    // MARK: Room and removal

    mutating func reserveCapacity(_ count: Int) {
        names.reserveCapacity(count)
    }

    /// Gives back the room the columns grew into beyond what they hold (after a load).
    mutating func trimExcessCapacity() {
        for index in columns.indices { columns[index].trimExcessCapacity() }
        for index in system.indices { system[index].trimExcessCapacity() }
        tokens.trimExcessCapacity()
        names.trimExcessCapacity()
        zoneNumbers.trimExcessCapacity()
    }

    /// Removes the last position, moving its values to `position` first (the table's swap-remove).
    mutating func removeLast(movingTo position: Int) {
        for index in columns.indices { columns[index].removeLast(movingTo: position) }
        for index in system.indices { system[index].removeLast(movingTo: position) }
        names.swapAt(position, count - 1)
        names.removeLast()
        if !zoneNumbers.isEmpty {
            zoneNumbers[position] = zoneNumbers[count - 1]
            zoneNumbers.removeLast()
        }
        if tracksTokens {
            if position != count - 1 { tokens.move(from: count - 1, to: position) }
            tokens.removeLast()
        }
        count -= 1
    }
}

extension Array {
    /// Reallocates to about `count` when more than an eighth of the capacity is unused (one copy
    /// of the elements; nothing to do for an array appended to in step with its reservation).
    /// `array = Array(array)` would not: the new array shares the old one's buffer.
    mutating func trimExcessCapacity() {
        guard capacity - count > count / 8 + 64 else { return }
        let count = count
        self = withUnsafeBufferPointer { old in
            Array(unsafeUninitializedCapacity: count) { buffer, initialized in
                _ = buffer.initialize(fromContentsOf: old)
                initialized = count
            }
        }
    }
}
