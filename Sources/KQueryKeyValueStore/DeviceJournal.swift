import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One key as a device holds it: its value (nil: removed), when it was written (the writing
/// device's clock, milliseconds since 1970: `localModificationDate`), whether the server has yet
/// to take it, and the change tag of the server's version this device last saw.
struct DeviceEntry: Hashable, Sendable {
    var value: PropertyListValue?
    /// The value's binary property list (what the limits measure and the server stores).
    var bytes: Data?
    var date: Int64
    var pending: Bool
    var tag: String?
}

/// What a device remembers about its sync: the user it last synced as, the zone change token,
/// whether the first download happened, and whether a change of user awaits its download.
struct DeviceMeta: Hashable, Sendable {
    var user: String?
    var token: String?
    var initialSynced = false
    var accountChanged = false
}

/// A store's state on one device: an append-only file in the device directory, one record per
/// change, written with one `write(2)` before the change is visible: a write survives kill -9 of
/// the writer (the kernel has it) without waiting for the disk, which keeps a `set` in
/// microseconds. Each record is `length, checksum, payload`; a torn or damaged tail is cut off at
/// open. The file is rewritten whole (to a temporary file, synced, renamed) when it holds much
/// more than the live state.
final class DeviceJournal {
    let path: String
    private var descriptor: Int32
    private var fileBytes: Int
    private var liveBytes = 0

    private(set) var entries: [String: DeviceEntry] = [:]
    private(set) var meta = DeviceMeta()

    init(path: String) throws(KeyValueStoreError) {
        self.path = path
        let directory = (path as NSString).deletingLastPathComponent
        do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw KeyValueStoreError(.deviceStorage, "\(directory): cannot create the device directory (\(error.localizedDescription))")
        }
        let existing = FileManager.default.contents(atPath: path) ?? Data()
        let kept = Self.replay(existing, entries: &entries, meta: &meta)
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw KeyValueStoreError(.deviceStorage, "\(path): cannot open the store file (errno \(errno))") }
        if kept < existing.count { _ = ftruncate(descriptor, off_t(kept)) }
        fileBytes = kept
        liveBytes = entries.values.reduce(0) { $0 + 64 + ($1.bytes?.count ?? 0) }
    }

    deinit { close(descriptor) }

    // MARK: Changes

    func put(_ key: String, _ entry: DeviceEntry) throws(KeyValueStoreError) {
        try append(Self.entryRecord(key, entry))
        if let old = entries[key] { liveBytes -= 64 + (old.bytes?.count ?? 0) }
        liveBytes += 64 + (entry.bytes?.count ?? 0)
        entries[key] = entry
    }

    func forget(_ key: String) throws(KeyValueStoreError) {
        guard let old = entries[key] else { return }
        var payload: [UInt8] = [3]
        Self.appendString(key, lengthSize: 2, to: &payload)
        try append(payload)
        liveBytes -= 64 + (old.bytes?.count ?? 0)
        entries[key] = nil
    }

    func setMeta(_ meta: DeviceMeta) throws(KeyValueStoreError) {
        guard meta != self.meta else { return }
        try append(Self.metaRecord(meta))
        self.meta = meta
    }

    /// Forgets every entry (a change of user), in one rewrite.
    func replaceAll(entries: [String: DeviceEntry], meta: DeviceMeta) throws(KeyValueStoreError) {
        self.entries = entries
        self.meta = meta
        try rewrite()
    }

    // MARK: File

    private func append(_ payload: [UInt8]) throws(KeyValueStoreError) {
        var record: [UInt8] = []
        record.reserveCapacity(payload.count + 8)
        Self.appendLittleEndian(UInt32(payload.count), to: &record)
        Self.appendLittleEndian(Self.checksum(payload[...]), to: &record)
        record.append(contentsOf: payload)
        try writeAll(record, to: descriptor)
        fileBytes += record.count
        if fileBytes > 4 * liveBytes + (1 << 20) { try rewrite() }
    }

    private func writeAll(_ bytes: [UInt8], to descriptor: Int32) throws(KeyValueStoreError) {
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { buffer in
                write(descriptor, buffer.baseAddress! + written, buffer.count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw KeyValueStoreError(.deviceStorage, "\(path): cannot write the store file (errno \(errno))")
            }
            written += result
        }
    }

    /// The live state alone, to a new file that replaces the old one only once it is on disk.
    private func rewrite() throws(KeyValueStoreError) {
        var out: [UInt8] = []
        func add(_ payload: [UInt8]) {
            Self.appendLittleEndian(UInt32(payload.count), to: &out)
            Self.appendLittleEndian(Self.checksum(payload[...]), to: &out)
            out.append(contentsOf: payload)
        }
        add(Self.metaRecord(meta))
        for key in entries.keys.sorted() { if let entry = entries[key] { add(Self.entryRecord(key, entry)) } }
        let temporary = path + ".new"
        let file = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard file >= 0 else { throw KeyValueStoreError(.deviceStorage, "\(temporary): cannot create (errno \(errno))") }
        do {
            try writeAll(out, to: file)
        } catch {
            close(file)
            throw error
        }
        fsync(file)
        close(file)
        guard rename(temporary, path) == 0 else { throw KeyValueStoreError(.deviceStorage, "\(path): cannot replace the store file (errno \(errno))") }
        let directory = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_CLOEXEC)
        if directory >= 0 { fsync(directory); close(directory) }
        close(descriptor)
        descriptor = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard descriptor >= 0 else { throw KeyValueStoreError(.deviceStorage, "\(path): cannot reopen the store file (errno \(errno))") }
        fileBytes = out.count
        liveBytes = entries.values.reduce(0) { $0 + 64 + ($1.bytes?.count ?? 0) }
    }

    // MARK: Records

    private static func entryRecord(_ key: String, _ entry: DeviceEntry) -> [UInt8] {
        var payload: [UInt8] = [1]
        appendString(key, lengthSize: 2, to: &payload)
        var flags: UInt8 = 0
        if entry.bytes != nil { flags |= 1 }
        if entry.pending { flags |= 2 }
        if entry.tag != nil { flags |= 4 }
        payload.append(flags)
        appendLittleEndian(UInt64(bitPattern: entry.date), to: &payload)
        appendString(entry.tag ?? "", lengthSize: 2, to: &payload)
        let bytes = entry.bytes ?? Data()
        appendLittleEndian(UInt32(bytes.count), to: &payload)
        payload.append(contentsOf: bytes)
        return payload
    }

    private static func metaRecord(_ meta: DeviceMeta) -> [UInt8] {
        var payload: [UInt8] = [2]
        var flags: UInt8 = 0
        if meta.initialSynced { flags |= 1 }
        if meta.user != nil { flags |= 2 }
        if meta.token != nil { flags |= 4 }
        if meta.accountChanged { flags |= 8 }
        payload.append(flags)
        appendString(meta.user ?? "", lengthSize: 2, to: &payload)
        appendString(meta.token ?? "", lengthSize: 4, to: &payload)
        return payload
    }

    /// Applies the file's records in order; returns how many bytes of it were whole records.
    static func replay(_ data: Data, entries: inout [String: DeviceEntry], meta: inout DeviceMeta) -> Int {
        let bytes = [UInt8](data)
        var position = 0
        while bytes.count - position >= 8 {
            let length = Int(readLittleEndian32(bytes, position))
            let sum = readLittleEndian32(bytes, position + 4)
            guard length > 0, length <= bytes.count - position - 8 else { break }
            let payload = bytes[(position + 8)..<(position + 8 + length)]
            guard checksum(payload) == sum, apply(payload, entries: &entries, meta: &meta) else { break }
            position += 8 + length
        }
        return position
    }

    private static func apply(_ payload: ArraySlice<UInt8>, entries: inout [String: DeviceEntry], meta: inout DeviceMeta) -> Bool {
        var reader = Reader(bytes: payload)
        guard let kind = reader.byte() else { return false }
        switch kind {
        case 1:
            guard let key = reader.string(lengthSize: 2), let flags = reader.byte(), let date = reader.integer(size: 8),
                  let tag = reader.string(lengthSize: 2), let count = reader.integer(size: 4), let bytes = reader.bytes(Int(count)) else { return false }
            var entry = DeviceEntry(value: nil, bytes: nil, date: Int64(bitPattern: date), pending: flags & 2 != 0, tag: flags & 4 != 0 ? tag : nil)
            if flags & 1 != 0 {
                let data = Data(bytes)
                // A value this device wrote itself; one that does not decode is dropped, not trusted.
                guard let value = try? PropertyListValue(propertyListBytes: data) else { return true }
                entry.value = value
                entry.bytes = data
            }
            entries[key] = entry
        case 2:
            guard let flags = reader.byte(), let user = reader.string(lengthSize: 2), let token = reader.string(lengthSize: 4) else { return false }
            meta = DeviceMeta(user: flags & 2 != 0 ? user : nil, token: flags & 4 != 0 ? token : nil, initialSynced: flags & 1 != 0,
                              accountChanged: flags & 8 != 0)
        case 3:
            guard let key = reader.string(lengthSize: 2) else { return false }
            entries[key] = nil
        default: return false
        }
        return true
    }

    private struct Reader {
        var bytes: ArraySlice<UInt8>
        mutating func byte() -> UInt8? { bytes.popFirst() }
        mutating func bytes(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, bytes.count >= count else { return nil }
            defer { bytes = bytes.dropFirst(count) }
            return bytes.prefix(count)
        }
        mutating func integer(size: Int) -> UInt64? {
            guard let raw = bytes(size) else { return nil }
            return raw.reversed().reduce(0) { $0 << 8 | UInt64($1) }
        }
        mutating func string(lengthSize: Int) -> String? {
            guard let count = integer(size: lengthSize), let raw = bytes(Int(count)) else { return nil }
            return String(validating: raw, as: UTF8.self)
        }
    }

    private static func appendString(_ text: String, lengthSize: Int, to out: inout [UInt8]) {
        let utf8 = Array(text.utf8)
        if lengthSize == 2 { appendLittleEndian(UInt16(truncatingIfNeeded: utf8.count), to: &out) } else { appendLittleEndian(UInt32(utf8.count), to: &out) }
        out.append(contentsOf: utf8)
    }

    private static func appendLittleEndian<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    private static func readLittleEndian32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
    }

    /// FNV-1a: catches a torn or damaged record, which is all it is for.
    private static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var hash: UInt32 = 2_166_136_261
        for byte in bytes { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        return hash
    }
}

/// Entry points for the fuzz target: the device journal's reader on arbitrary bytes.
public enum KeyValueStoreProbe {
    /// Replays `bytes` as a journal file; returns how many entries it held.
    @discardableResult
    public static func replayJournal(_ bytes: Data) -> Int {
        var entries: [String: DeviceEntry] = [:]
        var meta = DeviceMeta()
        _ = DeviceJournal.replay(bytes, entries: &entries, meta: &meta)
        return entries.count
    }
}
