import KQuery

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The compact binary form a database file keeps records in: about ten times faster to write and
/// to read than their JSON, which matters when a million records are imported or loaded at open.
///
/// Layout (integers little-endian, lengths and counts as LEB128 varints, strings as length + UTF-8):
///
///     version(1) recordType recordName zoneName ownerName
///     presence(1: bit 0 creationDate, 1 creator, 2 modificationDate, 3 modifier, 4 changeTag,
///              5 parent, 6 share)
///     [creationDate i64] [creator str] [modificationDate i64] [modifier str] [changeTag str]
///     [parent: recordName zoneName ownerName] [share: recordName zoneName ownerName]
///     fieldCount { name tag(1) value }
///
/// A value's tag is its `FieldType` code, plus 0x80 for a list (then: count, then that many
/// members without tags). Decoding checks every length against the bytes left and throws on
/// anything malformed: a corrupt file gives an error, never a crash.
package enum RecordCoding {
    static let version: UInt8 = 1

    package static func encode(_ record: Record) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(version)
        writeString(record.recordType, to: &out)
        writeString(record.recordID.recordName, to: &out)
        writeString(record.recordID.zoneID.zoneName, to: &out)
        writeString(record.recordID.zoneID.ownerName, to: &out)
        var presence: UInt8 = 0
        if record.creationDate != nil { presence |= 1 }
        if record.creatorUserRecordName != nil { presence |= 2 }
        if record.modificationDate != nil { presence |= 4 }
        if record.lastModifiedUserRecordName != nil { presence |= 8 }
        if record.recordChangeTag != nil { presence |= 16 }
        if record.parent != nil { presence |= 32 }
        if record.share != nil { presence |= 64 }
        out.append(presence)
        if let value = record.creationDate { writeInt64(value, to: &out) }
        if let value = record.creatorUserRecordName { writeString(value, to: &out) }
        if let value = record.modificationDate { writeInt64(value, to: &out) }
        if let value = record.lastModifiedUserRecordName { writeString(value, to: &out) }
        if let value = record.recordChangeTag { writeString(value, to: &out) }
        for reference in [record.parent, record.share] {
            guard let id = reference?.recordID else { continue }
            writeString(id.recordName, to: &out)
            writeString(id.zoneID.zoneName, to: &out)
            writeString(id.zoneID.ownerName, to: &out)
        }
        writeVarint(UInt64(record.fields.count), to: &out)
        for (key, value) in record.fields {
            writeString(key.name, to: &out)
            writeValue(value, to: &out)
        }
        return out
    }

    /// Field keys of the record decoded last, by position: records of a type mostly repeat the same
    /// field names in the same order, so a byte comparison replaces interning each name again.
    package struct FieldNames {
        package init() {}
        fileprivate var names: [(bytes: [UInt8], key: FieldKey)] = []
        /// The record type and zone of the record decoded last (most records repeat them): the
        /// same strings again, not validated and made anew.
        fileprivate var recordType: (bytes: [UInt8], value: String) = ([], "")
        fileprivate var zone: (bytes: [UInt8], value: ZoneID) = ([], .default)
    }

    /// The value `bytes` gave last time when they are the same bytes, else `make()`, remembered.
    private static func reusing<Value>(
        _ cache: inout (bytes: [UInt8], value: Value), _ bytes: UnsafeRawBufferPointer, _ make: () throws(RecordDecodingError) -> Value
    ) throws(RecordDecodingError) -> Value {
        if Self.equal(cache.bytes, bytes) { return cache.value }
        let value = try make()
        cache = (Array(bytes), value)
        return value
    }

    package static func decode(_ bytes: UnsafeRawBufferPointer) throws(RecordDecodingError) -> Record {
        var names = FieldNames()
        return try decode(bytes, names: &names)
    }

    package static func decode(_ bytes: UnsafeRawBufferPointer, names: inout FieldNames) throws(RecordDecodingError) -> Record {
        var reader = Reader(bytes: bytes)
        guard try reader.byte() == version else { throw RecordDecodingError("unknown record encoding version") }
        let typeBytes = try reader.rawBytes(try reader.count())
        let recordType = try reusing(&names.recordType, typeBytes) { () throws(RecordDecodingError) in try Reader.validString(typeBytes) }
        let recordName = try reader.string()
        // The zone's two names as they lie, length-prefixed: one comparison for both.
        let zoneStart = reader.offset
        let zoneName = try reader.rawBytes(try reader.count())
        let ownerName = try reader.rawBytes(try reader.count())
        let zone = try reusing(&names.zone, UnsafeRawBufferPointer(rebasing: bytes[zoneStart..<reader.offset])) { () throws(RecordDecodingError) in
            ZoneID(zoneName: try Reader.validString(zoneName), ownerName: try Reader.validString(ownerName))
        }
        var record = Record(recordType: recordType, recordID: RecordID(recordName: recordName, zoneID: zone))
        let presence = try reader.byte()
        if presence & 1 != 0 { record.creationDate = try reader.int64() }
        if presence & 2 != 0 { record.creatorUserRecordName = try reader.string() }
        if presence & 4 != 0 { record.modificationDate = try reader.int64() }
        if presence & 8 != 0 { record.lastModifiedUserRecordName = try reader.string() }
        if presence & 16 != 0 { record.recordChangeTag = try reader.string() }
        if presence & 32 != 0 { record.parent = try reader.reference() }
        if presence & 64 != 0 { record.share = try reader.reference() }
        let count = try reader.count()
        var fields = Fields()
        fields.reserveCapacity(count)
        for position in 0..<count {
            let nameBytes = try reader.rawBytes(try reader.count())
            let key: FieldKey
            if position < names.names.count, Self.equal(names.names[position].bytes, nameBytes) {
                key = names.names[position].key
            } else {
                // The names `Record(json:)` takes, a share's `cloudkit.*` ones included.
                guard let name = String(validating: nameBytes, as: UTF8.self), SharingKeys.isValidFieldName(name, recordType: recordType) else {
                    throw RecordDecodingError("invalid field name '\(String(decoding: nameBytes, as: UTF8.self))'")
                }
                key = FieldKey(name)
                let entry = (bytes: Array(nameBytes), key: key)
                if position < names.names.count { names.names[position] = entry } else { names.names.append(entry) }
            }
            fields.appendUnordered(key, try readValue(from: &reader))
        }
        guard reader.isAtEnd else { throw RecordDecodingError("trailing bytes after the record") }
        fields.sortAppended()
        record.fields = fields
        return record
    }

    /// The string the bytes spell, or nil when they are not valid UTF-8. `String(validating:as:)`
    /// ran its generic validation unspecialized, looking type metadata up at run time for every
    /// string (6% of opening a file); decoding is specialized, and a repair shows as bytes that
    /// differ from the input.
    static func validString(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var text = String(decoding: bytes, as: UTF8.self)
        let same = text.withUTF8 { decoded in
            guard decoded.count == bytes.count else { return false }
            guard let a = decoded.baseAddress, let b = bytes.baseAddress else { return true }   // both empty
            return memcmp(a, b, bytes.count) == 0
        }
        return same ? text : nil
    }

    /// Byte equality without the generic sequence comparison (once per field of every record).
    private static func equal(_ stored: [UInt8], _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard stored.count == bytes.count else { return false }
        return stored.withUnsafeBytes { stored in
            guard let a = stored.baseAddress, let b = bytes.baseAddress else { return true }   // both empty
            return memcmp(a, b, stored.count) == 0
        }
    }

    // MARK: Values

    /// One value with its tag (as a record's field is written): the form an index snapshot keeps
    /// its keys in.
    static func writeValue(_ value: FieldValue, to out: inout [UInt8]) {
        if case .list(let type, let members) = value {
            out.append(code(type) | 0x80)
            writeVarint(UInt64(members.count), to: &out)
            for member in members { writePayload(member, to: &out) }
        } else {
            out.append(code(value.type))
            writePayload(value, to: &out)
        }
    }

    /// A value written by `writeValue`.
    static func readValue(from reader: inout Reader) throws(RecordDecodingError) -> FieldValue {
        let tag = try reader.byte()
        let type = try fieldType(tag & 0x7F)
        guard tag & 0x80 != 0 else { return try readPayload(type, from: &reader) }
        let count = try reader.count()
        var members: [FieldValue] = []
        members.reserveCapacity(count)
        for _ in 0..<count { members.append(try readPayload(type, from: &reader)) }
        return .list(type, members)
    }

    private static let types: [FieldType] = [.string, .int64, .double, .timestamp, .bytes, .location, .reference, .assetID]

    private static func code(_ type: FieldType) -> UInt8 {
        UInt8(types.firstIndex(of: type) ?? 0)
    }

    private static func fieldType(_ code: UInt8) throws(RecordDecodingError) -> FieldType {
        guard Int(code) < types.count else { throw RecordDecodingError("unknown field type code \(code)") }
        return types[Int(code)]
    }

    private static func writePayload(_ value: FieldValue, to out: inout [UInt8]) {
        switch value {
        case .string(let text), .assetID(let text): writeString(text, to: &out)
        case .int64(let number), .timestamp(let number): writeInt64(number, to: &out)
        case .double(let number): writeInt64(Int64(bitPattern: number.bitPattern), to: &out)
        case .bytes(let bytes):
            writeVarint(UInt64(bytes.count), to: &out)
            out.append(contentsOf: bytes)
        case .location(let location):
            writeInt64(Int64(bitPattern: location.latitude.bitPattern), to: &out)
            writeInt64(Int64(bitPattern: location.longitude.bitPattern), to: &out)
            let optionals = [location.altitude, location.horizontalAccuracy, location.verticalAccuracy, location.course, location.speed]
            var presence: UInt8 = location.timestamp == nil ? 0 : 32
            for (bit, value) in optionals.enumerated() where value != nil { presence |= 1 << UInt8(bit) }
            out.append(presence)
            for case let value? in optionals { writeInt64(Int64(bitPattern: value.bitPattern), to: &out) }
            if let timestamp = location.timestamp { writeInt64(timestamp, to: &out) }
        case .reference(let reference):
            writeString(reference.recordID.recordName, to: &out)
            writeString(reference.recordID.zoneID.zoneName, to: &out)
            writeString(reference.recordID.zoneID.ownerName, to: &out)
            writeString(reference.action.rawValue, to: &out)
        case .list:
            break  // lists are written by the caller, member by member
        }
    }

    private static func readPayload(_ type: FieldType, from reader: inout Reader) throws(RecordDecodingError) -> FieldValue {
        switch type {
        case .string: return .string(try reader.string())
        case .assetID: return .assetID(try reader.string())
        case .int64: return .int64(try reader.int64())
        case .timestamp: return .timestamp(try reader.int64())
        case .double: return .double(try reader.double())
        case .bytes: return .bytes(try reader.bytes(try reader.count()))
        case .location:
            var location = Location(latitude: try reader.double(), longitude: try reader.double())
            let presence = try reader.byte()
            if presence & 1 != 0 { location.altitude = try reader.double() }
            if presence & 2 != 0 { location.horizontalAccuracy = try reader.double() }
            if presence & 4 != 0 { location.verticalAccuracy = try reader.double() }
            if presence & 8 != 0 { location.course = try reader.double() }
            if presence & 16 != 0 { location.speed = try reader.double() }
            if presence & 32 != 0 { location.timestamp = try reader.int64() }
            return .location(location)
        case .reference:
            let name = try reader.string()
            let zone = ZoneID(zoneName: try reader.string(), ownerName: try reader.string())
            let actionName = try reader.string()
            guard let action = Reference.Action(rawValue: actionName) else { throw RecordDecodingError("unknown reference action '\(actionName)'") }
            return .reference(Reference(recordID: RecordID(recordName: name, zoneID: zone), action: action))
        }
    }

    // MARK: Primitives

    static func writeVarint(_ value: UInt64, to out: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            out.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        out.append(UInt8(value))
    }

    static func writeInt64(_ value: Int64, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    static func writeString(_ text: String, to out: inout [UInt8]) {
        var text = text
        text.withUTF8 { utf8 in
            writeVarint(UInt64(utf8.count), to: &out)
            out.append(contentsOf: utf8)
        }
    }

    /// Reads the encoding's primitives, checking each against the bytes left.
    struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        var isAtEnd: Bool { offset == bytes.count }

        mutating func byte() throws(RecordDecodingError) -> UInt8 {
            guard offset < bytes.count else { throw RecordDecodingError("the record ends early") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func varint() throws(RecordDecodingError) -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let byte = try self.byte()
                guard shift < 64 else { throw RecordDecodingError("a length is too long") }
                value |= UInt64(byte & 0x7F) << shift
                if byte < 0x80 { return value }
                shift += 7
            }
        }

        /// A length or count, which can never exceed the bytes left.
        mutating func count() throws(RecordDecodingError) -> Int {
            let value = try varint()
            guard value <= UInt64(bytes.count - offset) else { throw RecordDecodingError("a length runs past the end of the record") }
            return Int(value)
        }

        mutating func int64() throws(RecordDecodingError) -> Int64 {
            guard bytes.count - offset >= 8 else { throw RecordDecodingError("the record ends early") }
            var value: Int64 = 0
            withUnsafeMutableBytes(of: &value) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + 8)])) }
            offset += 8
            return Int64(littleEndian: value)
        }

        mutating func double() throws(RecordDecodingError) -> Double {
            Double(bitPattern: UInt64(bitPattern: try int64()))
        }

        mutating func bytes(_ count: Int) throws(RecordDecodingError) -> [UInt8] {
            guard bytes.count - offset >= count else { throw RecordDecodingError("the record ends early") }
            defer { offset += count }
            return Array(bytes[offset..<(offset + count)])
        }

        /// The next `count` bytes, in place.
        mutating func rawBytes(_ count: Int) throws(RecordDecodingError) -> UnsafeRawBufferPointer {
            guard bytes.count - offset >= count else { throw RecordDecodingError("the record ends early") }
            defer { offset += count }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
        }

        mutating func string() throws(RecordDecodingError) -> String {
            try Self.validString(try rawBytes(try count()))
        }

        static func validString(_ raw: UnsafeRawBufferPointer) throws(RecordDecodingError) -> String {
            guard let text = raw.withMemoryRebound(to: UInt8.self, RecordCoding.validString) else {
                throw RecordDecodingError("a string is not valid UTF-8")
            }
            return text
        }

        /// A parent or share reference: recordName, zoneName, ownerName.
        mutating func reference() throws(RecordDecodingError) -> Reference {
            let name = try string()
            let zone = ZoneID(zoneName: try string(), ownerName: try string())
            return Reference(recordID: RecordID(recordName: name, zoneID: zone))
        }
    }
}
