import KQuery

/// The values of one user field across a table's records, by dense position: one contiguous array
/// of a single kind, strings' bytes in one arena (or, while a column has few distinct strings, a
/// code per position into a dictionary of them), and a presence bitmap.
///
/// A full scan reads a column as a loop over contiguous memory instead of chasing every record's
/// field pointer (the record-at-a-time scan was bound by those cache misses). A column holds one
/// scalar kind; once its records hold another kind, a list, bytes, a reference or an asset ID, it
/// becomes `.mixed`, keeps only presence, and scans that need its values fall back to the records.
/// The layout (plain arrays, no pointers per value) is also what a memory-compact table and a
/// mapped snapshot would store.
struct Column: Sendable {
    enum Kind: Sendable, Equatable {
        /// No record has held a value yet.
        case empty
        case int64, double, timestamp, string, location
        /// Values of more than one kind, or of a kind the columns do not hold.
        case mixed
    }

    private(set) var kind = Kind.empty
    private(set) var count = 0
    /// Bit `p` is set when the record at position `p` has the field.
    private(set) var present: [UInt64] = []
    /// INT64 and TIMESTAMP values.
    private(set) var integers: [Int64] = []
    /// DOUBLE values, and a location's latitude.
    private(set) var numbers: [Double] = []
    private(set) var longitudes: [Double] = []
    /// A `.string` column's bytes by position, once it has left its dictionary (`dictionary` nil).
    private(set) var strings = SpanArena<UInt8>()
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
    func withStrings<T>(_ body: (StringReader) -> T) -> T {
        (dictionary?.values ?? strings).withReader { spans in
            codes.withUnsafeBufferPointer { codes in
                body(StringReader(spans: spans, codes: dictionary == nil ? nil : codes))
            }
        }
    }

    /// The string at `position` of a `.string` column, as bytes (for tests and checks).
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
        codes.trimExcessCapacity()
    }

    mutating func appendAbsent() {
        if count & 63 == 0 { present.append(0) }
        count += 1
        switch kind {
        case .empty, .mixed: break
        case .int64, .timestamp: integers.append(0)
        case .double: numbers.append(0)
        case .location:
            numbers.append(0)
            longitudes.append(0)
        case .string:
            if dictionary != nil { codes.append(0) } else { strings.append(EmptyCollection()) }
        }
    }

    mutating func set(_ value: FieldValue?, at position: Int) {
        guard let value else {
            if kind == .string, dictionary == nil { strings.replace(at: position, with: EmptyCollection()) }
            present[position &>> 6] &= ~(1 &<< UInt64(position & 63))
            return
        }
        present[position &>> 6] |= 1 &<< UInt64(position & 63)
        let valueKind = Self.kind(of: value)
        if kind == .empty { adopt(valueKind) }
        guard valueKind == kind else { return becomeMixed() }
        switch value {
        case .int64(let x), .timestamp(let x): integers[position] = x
        case .double(let x): numbers[position] = x
        case .location(let location):
            numbers[position] = location.latitude
            longitudes[position] = location.longitude
        case .string(var text): text.withUTF8 { setString($0, at: position) }
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
        if position != last {
            set(bit: isPresent(last), at: position)
            switch kind {
            case .empty, .mixed: break
            case .int64, .timestamp: integers[position] = integers[last]
            case .double: numbers[position] = numbers[last]
            case .location:
                numbers[position] = numbers[last]
                longitudes[position] = longitudes[last]
            case .string:
                if dictionary != nil { codes[position] = codes[last] } else { strings.move(from: last, to: position) }
            }
        }
        set(bit: false, at: last)
        count = last
        if count & 63 == 0 { present.removeLast() }
        switch kind {
        case .empty, .mixed: break
        case .int64, .timestamp: integers.removeLast()
        case .double: numbers.removeLast()
        case .location:
            numbers.removeLast()
            longitudes.removeLast()
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
        case .empty, .mixed: break
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

    private mutating func becomeMixed() {
        kind = .mixed
        integers = []
        numbers = []
        longitudes = []
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

/// A table's columns: one per user field any of its records has held, plus each record's search
/// tokens, computed once when the record is saved (a token scan compares token numbers instead of
/// tokenizing every record's text on every query). Tokens are kept only once a token scan has asked
/// for them (`trackTokens`): tokenizing every save made opening a million records twice as slow.
struct Columns: Sendable {
    private(set) var columns: [Column] = []
    private(set) var keys: [FieldKey] = []
    private var indexByKey: [FieldKey: Int] = [:]
    /// Each distinct token's number.
    private(set) var tokenNumbers: [String: UInt32] = [:]
    /// Each record's token numbers, sorted, when `tracksTokens`.
    private(set) var tokens = SpanArena<UInt32>()
    private(set) var tracksTokens = false
    private(set) var count = 0

    /// Where the column of `key` is in `columns`, or nil when no record has held the field.
    func index(of key: FieldKey) -> Int? { indexByKey[key] }

    /// `recordTokens` are the record's search tokens, needed when `tracksTokens`.
    mutating func append(_ record: Record, tokens recordTokens: Set<String>?) {
        for index in columns.indices { columns[index].appendAbsent() }
        if tracksTokens { tokens.append(EmptyCollection()) }
        count += 1
        replace(at: count - 1, with: record, tokens: recordTokens)
    }

    mutating func replace(at position: Int, with record: Record, tokens recordTokens: Set<String>?) {
        var found = 0
        for index in columns.indices {
            let value = record.fields[keys[index]]
            if value != nil { found += 1 }
            columns[index].set(value, at: position)
        }
        // Usually every field has its column already: no lookup per field then.
        if found < record.fields.count {
            for (key, value) in record.fields where indexByKey[key] == nil {
                indexByKey[key] = columns.count
                keys.append(key)
                var column = Column(count: count)
                column.set(value, at: position)
                columns.append(column)
            }
        }
        if tracksTokens { setTokens(recordTokens ?? [], at: position) }
    }

    /// Starts keeping the tokens of `records` (the table's, by position), or computes them again
    /// (the searchable fields changed).
    mutating func trackTokens(of records: [Record], searchableFields: [FieldKey]?) {
        tracksTokens = true
        tokenNumbers = [:]
        tokens = SpanArena(count: count)
        for (position, record) in records.enumerated() { setTokens(record.searchTokens(in: searchableFields), at: position) }
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

    /// Gives back the room the columns grew into beyond what they hold (after a load).
    mutating func trimExcessCapacity() {
        for index in columns.indices { columns[index].trimExcessCapacity() }
        tokens.trimExcessCapacity()
    }

    /// Removes the last position, moving its values to `position` first (the table's swap-remove).
    mutating func removeLast(movingTo position: Int) {
        for index in columns.indices { columns[index].removeLast(movingTo: position) }
        if tracksTokens {
            if position != count - 1 { tokens.move(from: count - 1, to: position) }
            tokens.removeLast()
        }
        count -= 1
    }
}

extension Array where Element: BitwiseCopyable {
    /// Reallocates to about `count` when more than an eighth of the capacity is unused (one copy
    /// of the elements; nothing to do for an array appended to in step with its reservation).
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
