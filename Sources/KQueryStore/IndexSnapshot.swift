import KQuery

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A record table's indexes as bytes, kept in the database file so that opening it loads them
/// instead of rebuilding them (at a million records the builds took longer than reading the records).
///
/// A snapshot describes the table exactly as a fresh open files it: rows `0..<count` in the order
/// the file hands the records over. It is written right after an open built the indexes, and is
/// used only when it still matches:
/// - its generation is the file's (every write to the file moves the generation, in the same
///   transaction; `DatabaseFile`);
/// - the table has the same number of records, whose names hash the same in the same order;
/// - the same indexes are declared and the same fields are searchable (`signature`);
/// - its checksum holds and every part decodes, every row within the table.
/// Otherwise the indexes are built as before and a new snapshot replaces it.
///
/// Layout (integers little-endian, fixed width):
///
///     "KQIX" version(1) count(8) namesHash(8) signature(str) sectionCount(4)
///     section: kind(1) [field(str), not for tokens] body
///       equality (1):  scalars, members: n(4) { key postings }
///       range (2):     scalars, members: n(8) { value(RecordCoding) row(4) }
///       spatial (3):   levels(4) { n(4) { cell(8) postings } }
///       tokens (4):    n(4) { token(str) postings }
///     checksum(8) of everything before it
///
/// where str is length(4) + UTF-8 and postings is count(4) + rows(4 each), ascending.
/// Map keys are written sorted by their bytes, so one table's snapshot is always the same bytes.
enum IndexSnapshot {
    static let magic: [UInt8] = Array("KQIX".utf8)
    static let version: UInt8 = 1

    /// What the table's indexes were built from: the declarations and the searchable fields.
    static func signature(_ declarations: [IndexDeclaration], searchableFields: [FieldKey]?) -> String {
        let indexes = declarations.map { "\($0.field.webServicesName)=\($0.index.rawValue)" }.sorted()
        let searchable = searchableFields.map { $0.map(\.name).sorted().joined(separator: ",") } ?? "*"
        return indexes.joined(separator: ";") + "|" + searchable
    }

    // MARK: Writing

    static func encode(_ table: RecordTable, signature: String) -> [UInt8] {
        var out = Writer()
        out.bytes(magic)
        out.byte(version)
        out.u64(UInt64(table.count))
        out.u64(table.loadedNamesHash)
        out.string(signature)
        let (hash, ordered, spatial, tokens) = table.indexedFields
        let fields = { (list: [FieldReference]) in list.sorted { $0.webServicesName.utf8.lexicographicallyPrecedes($1.webServicesName.utf8) } }
        out.u32(UInt32(hash.count + ordered.count + spatial.count + (tokens ? 1 : 0)))
        for field in fields(hash) {
            guard let index = table.hashIndexes[field] else { continue }
            out.byte(1)
            out.string(field.webServicesName)
            for part in [index.scalars, index.members] {
                let entries = part.map { key, postings in
                    var bytes = Writer()
                    writeKey(key, to: &bytes)
                    return (key: bytes.out, rows: postings.rows)
                }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
                out.u32(UInt32(entries.count))
                for entry in entries {
                    out.bytes(entry.key)
                    out.postings(entry.rows)
                }
            }
        }
        for field in fields(ordered) {
            guard let index = table.orderedIndexes[field] else { continue }
            out.byte(2)
            out.string(field.webServicesName)
            for part in [index.scalars, index.members] {
                out.u64(UInt64(part.count))
                part.forEach(from: part.startPosition, to: part.endPosition) { entry in
                    RecordCoding.writeValue(entry.value, to: &out.out)
                    out.u32(entry.row)
                    return true
                }
            }
        }
        for field in fields(spatial) {
            guard let index = table.spatialIndexes[field] else { continue }
            out.byte(3)
            out.string(field.webServicesName)
            out.u32(UInt32(index.levels.count))
            for level in index.levels {
                out.u32(UInt32(level.count))
                for cell in level.keys.sorted() {
                    out.u64(cell)
                    out.postings(level[cell]?.rows ?? [])
                }
            }
        }
        if let index = table.tokenIndex {
            out.byte(4)
            let tokens = index.postings.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            out.u32(UInt32(tokens.count))
            for token in tokens {
                out.string(token)
                out.postings(index.postings[token]?.rows ?? [])
            }
        }
        let sum = out.out.withUnsafeBytes { checksum($0) }
        out.u64(sum)
        return out.out
    }

    private static func writeKey(_ key: IndexKey, to out: inout Writer) {
        switch key {
        case .integer(let x): out.byte(0); out.u64(UInt64(bitPattern: x))
        case .double(let bits): out.byte(1); out.u64(bits)
        case .timestamp(let x): out.byte(2); out.u64(UInt64(bitPattern: x))
        case .string(let text): out.byte(3); out.string(text.string)
        case .reference(let id):
            out.byte(4)
            out.string(id.recordName)
            out.string(id.zoneID.zoneName)
            out.string(id.zoneID.ownerName)
        case .bytes(let bytes): out.byte(5); out.u32(UInt32(bytes.count)); out.bytes(bytes)
        case .assetID(let text): out.byte(6); out.string(text.string)
        }
    }

    // MARK: Reading

    static func decode(_ snapshot: [UInt8], count: Int, namesHash: UInt64, signature: String) -> Result<RecordTable.Indexes, Mismatch> {
        snapshot.withUnsafeBytes { bytes in
            Result { () throws(Mismatch) in try decode(bytes, count: count, namesHash: namesHash, signature: signature) }
        }
    }

    /// Why a snapshot was not used.
    struct Mismatch: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The indexes a snapshot holds, for a table of `count` records whose names hashed to
    /// `namesHash` as they were filed, built from `signature`. Throws when anything does not match
    /// or does not decode; never traps, whatever the bytes.
    static func decode(_ bytes: UnsafeRawBufferPointer, count: Int, namesHash: UInt64, signature: String) throws(Mismatch) -> RecordTable.Indexes {
        guard bytes.count >= magic.count + 1 + 8 else { throw Mismatch("too short") }
        let body = UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count - 8)])
        var stored: UInt64 = 0
        withUnsafeMutableBytes(of: &stored) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[(bytes.count - 8)...])) }
        guard UInt64(littleEndian: stored) == checksum(body) else { throw Mismatch("its checksum does not match") }
        var reader = Reader(bytes: body)
        guard try reader.take(magic.count).elementsEqual(magic), try reader.byte() == version else { throw Mismatch("unknown snapshot format") }
        guard try reader.u64() == UInt64(count) else { throw Mismatch("the table's record count differs") }
        guard try reader.u64() == namesHash else { throw Mismatch("the table's records differ") }
        guard try reader.string() == signature else { throw Mismatch("other indexes are declared") }
        var indexes = RecordTable.Indexes()
        let sections = try reader.u32()
        for _ in 0..<sections {
            let kind = try reader.byte()
            switch kind {
            case 1:
                let field = FieldReference(webServicesName: try reader.string())
                let scalars = try reader.postingsByKey(below: count, readKey)
                let members = try reader.postingsByKey(below: count, readKey)
                indexes.hash[field] = HashIndex(scalars: scalars, members: members)
            case 2:
                let field = FieldReference(webServicesName: try reader.string())
                var parts: [SortedEntries] = []
                for _ in 0..<2 {
                    let n = try reader.u64()
                    guard n <= UInt64(reader.remaining) else { throw Mismatch("a range index's length runs past the end") }
                    var entries: [SortedEntries.Entry] = []
                    entries.reserveCapacity(Int(n))
                    for _ in 0..<n {
                        let value = try reader.value()
                        let row = try reader.u32()
                        guard Int(row) < count else { throw Mismatch("a row is out of range") }
                        entries.append(SortedEntries.Entry(value: value, row: row))
                    }
                    parts.append(SortedEntries(sorted: entries))
                }
                indexes.ordered[field] = OrderedIndex(scalars: parts[0], members: parts[1])
            case 3:
                let field = FieldReference(webServicesName: try reader.string())
                guard try reader.u32() == UInt32(SpatialIndex.cellSizes.count) else { throw Mismatch("a spatial index has other levels") }
                var levels: [[UInt64: Postings]] = []
                for _ in SpatialIndex.cellSizes.indices {
                    levels.append(try reader.postingsByKey(below: count) { reader throws(Mismatch) in try reader.u64() })
                }
                indexes.spatial[field] = SpatialIndex(levels: levels)
            case 4:
                indexes.token = TokenIndex(postings: try reader.postingsByKey(below: count) { reader throws(Mismatch) in try reader.string() })
            default:
                throw Mismatch("unknown section \(kind)")
            }
        }
        guard reader.remaining == 0 else { throw Mismatch("trailing bytes") }
        return indexes
    }

    private static func readKey(_ reader: inout Reader) throws(Mismatch) -> IndexKey {
        switch try reader.byte() {
        case 0: return .integer(Int64(bitPattern: try reader.u64()))
        case 1: return .double(try reader.u64())
        case 2: return .timestamp(Int64(bitPattern: try reader.u64()))
        case 3: return .string(ByteString(try reader.string()))
        case 4:
            let name = try reader.string()
            return .reference(RecordID(recordName: name, zoneID: ZoneID(zoneName: try reader.string(), ownerName: try reader.string())))
        case 5: return .bytes(Array(try reader.take(Int(try reader.u32()))))
        case 6: return .assetID(ByteString(try reader.string()))
        case let tag: throw Mismatch("unknown key tag \(tag)")
        }
    }

    // MARK: Primitives

    /// A 64-bit checksum, four lanes of eight bytes at a time (a byte-at-a-time hash of a
    /// 50 MB snapshot would cost as much as loading it).
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        let prime: UInt64 = 0x9E37_79B9_7F4A_7C15
        var lanes: (UInt64, UInt64, UInt64, UInt64) = (1, 2, 3, 4)
        var offset = 0
        @inline(__always) func mix(_ lane: UInt64, _ word: UInt64) -> UInt64 {
            let x = (lane ^ word) &* prime
            return x ^ (x >> 29)
        }
        while offset + 32 <= bytes.count {
            lanes.0 = mix(lanes.0, bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            lanes.1 = mix(lanes.1, bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
            lanes.2 = mix(lanes.2, bytes.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self))
            lanes.3 = mix(lanes.3, bytes.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self))
            offset += 32
        }
        var sum = mix(mix(mix(mix(UInt64(bytes.count), lanes.0), lanes.1), lanes.2), lanes.3)
        while offset < bytes.count {
            sum = mix(sum, UInt64(bytes[offset]))
            offset += 1
        }
        return sum
    }

    struct Writer {
        var out: [UInt8] = []

        mutating func byte(_ value: UInt8) { out.append(value) }
        mutating func bytes(_ value: [UInt8]) { out.append(contentsOf: value) }
        mutating func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        mutating func u64(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }

        mutating func string(_ text: String) {
            var text = text
            text.withUTF8 { utf8 in
                u32(UInt32(utf8.count))
                out.append(contentsOf: utf8)
            }
        }

        mutating func postings(_ rows: [RowID]) {
            u32(UInt32(rows.count))
            #if _endian(little)
            rows.withUnsafeBytes { out.append(contentsOf: $0) }
            #else
            for row in rows { u32(row) }
            #endif
        }
    }

    struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        var remaining: Int { bytes.count - offset }

        mutating func take(_ n: Int) throws(Mismatch) -> UnsafeRawBufferPointer {
            guard n >= 0, n <= remaining else { throw Mismatch("it ends early") }
            defer { offset += n }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + n)])
        }

        mutating func byte() throws(Mismatch) -> UInt8 { try take(1)[0] }
        mutating func u32() throws(Mismatch) -> UInt32 { UInt32(littleEndian: try take(4).loadUnaligned(as: UInt32.self)) }
        mutating func u64() throws(Mismatch) -> UInt64 { UInt64(littleEndian: try take(8).loadUnaligned(as: UInt64.self)) }

        mutating func string() throws(Mismatch) -> String {
            let utf8 = try take(Int(try u32()))
            guard let text = utf8.withMemoryRebound(to: UInt8.self, RecordCoding.validString) else { throw Mismatch("a string is not valid UTF-8") }
            return text
        }

        mutating func value() throws(Mismatch) -> FieldValue {
            var values = RecordCoding.Reader(bytes: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            do {
                let value = try RecordCoding.readValue(from: &values)
                offset += values.offset
                return value
            } catch {
                throw Mismatch("a value does not decode: \(error)")
            }
        }

        /// A count, then that many keys (read by `key`) each followed by its posting list: an
        /// equality index's part, a spatial level, the token index.
        mutating func postingsByKey<Key: Hashable>(
            below limit: Int, _ key: (inout Reader) throws(Mismatch) -> Key
        ) throws(Mismatch) -> [Key: Postings] {
            let n = Int(try u32())
            var map: [Key: Postings] = [:]
            map.reserveCapacity(min(n, remaining))
            for _ in 0..<n {
                let keyRead = try key(&self)
                map[keyRead] = try postings(below: limit)
            }
            return map
        }

        /// A posting list: ascending rows, each below `limit`.
        mutating func postings(below limit: Int) throws(Mismatch) -> Postings {
            let n = Int(try u32())
            guard n <= remaining / 4 else { throw Mismatch("a posting list runs past the end") }
            let raw = try take(n * 4)
            let rows = [RowID](unsafeUninitializedCapacity: n) { buffer, initialized in
                for i in 0..<n { buffer[i] = RowID(littleEndian: raw.loadUnaligned(fromByteOffset: i * 4, as: RowID.self)) }
                initialized = n
            }
            var previous: Int64 = -1
            for row in rows {
                guard Int64(row) > previous, Int(row) < limit else { throw Mismatch("a posting list is not ascending rows of the table") }
                previous = Int64(row)
            }
            return Postings(sortedRows: rows)
        }
    }
}
