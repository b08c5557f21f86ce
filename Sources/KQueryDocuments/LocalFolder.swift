import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

private let systemWrite = write

/// An entry of the folder as a scan found it.
struct DiskEntry: Hashable, Sendable {
    var kind: ItemKind
    var size: Int64
    /// Nanoseconds since 1970.
    var mtime: Int64
}

/// The local folder: scanning it, and reading and writing inside it only. Every path is checked
/// name by name (no empty name, `.`, `..`, `/`, NUL, or more than 255 bytes of UTF-8), and the
/// real path of the directory it lands in must be inside the folder's real path, so a symbolic
/// link or a hostile name from the server never writes outside it.
struct LocalFolder: Sendable {
    let root: String
    /// Where downloads are written before they are renamed into place: beside the folder, on the
    /// same file system, never inside it.
    let staging: String

    init(root: String, staging: String) {
        var root = root
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        self.root = root
        self.staging = staging
    }

    /// Whether a name can be synced: a file or folder name, not a path.
    static func isSafeName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.utf8.contains(0) && name.utf8.count <= 255
    }

    /// Whether a path relative to the folder is made of safe names.
    static func isSafePath(_ path: String) -> Bool {
        let names = path.split(separator: "/", omittingEmptySubsequences: false)
        return !names.isEmpty && names.allSatisfy { isSafeName(String($0)) }
    }

    /// Names the folder never syncs: `*.nosync` (and what is inside), and names the sync itself
    /// uses while writing.
    static func isSynced(_ name: String) -> Bool { !name.hasSuffix(".nosync") }

    /// The absolute path of `relative`, checked: its names are safe and the real path of its
    /// existing parent is inside the folder.
    func absolute(_ relative: String) throws(DocumentsError) -> String {
        guard Self.isSafePath(relative) else { throw DocumentsError(.unsafeName, "'\(Self.printable(relative))' is not a safe path inside the folder") }
        let path = root + "/" + relative
        let parent = (path as NSString).deletingLastPathComponent
        guard let realRoot = Self.realPath(root), let realParent = Self.realPath(parent) else { return path }
        guard realParent == realRoot || realParent.hasPrefix(realRoot + "/") else {
            throw DocumentsError(.unsafeName, "'\(Self.printable(relative))' resolves outside the folder")
        }
        var info = stat()
        if lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFLNK {
            throw DocumentsError(.unsafeName, "'\(Self.printable(relative))' is a symbolic link")
        }
        return path
    }

    static func printable(_ text: String) -> String {
        String(text.replacingOccurrences(of: "\0", with: "\\0").prefix(120))
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Every synced entry under the folder by relative path (symbolic links, unsafe names and
    /// `*.nosync` left out).
    func scan() -> [String: DiskEntry] {
        var entries: [String: DiskEntry] = [:]
        scan(directory: root, prefix: "", into: &entries)
        return entries
    }

    private func scan(directory: String, prefix: String, into entries: inout [String: DiskEntry]) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where Self.isSafeName(name) && Self.isSynced(name) {
            let relative = prefix.isEmpty ? name : prefix + "/" + name
            let path = directory + "/" + name
            guard let entry = Self.entry(at: path) else { continue }
            entries[relative] = entry
            if entry.kind != .file { scan(directory: path, prefix: relative, into: &entries) }
        }
    }

    /// A regular file or a directory (a package when its extension says so); nil otherwise.
    static func entry(at path: String) -> DiskEntry? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        let mtime = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        switch info.st_mode & S_IFMT {
        case S_IFREG: return DiskEntry(kind: .file, size: Int64(info.st_size), mtime: mtime)
        case S_IFDIR:
            let ext = (path as NSString).pathExtension.lowercased()
            return DiskEntry(kind: ContentType.packageExtensions.contains(ext) ? .package : .folder, size: 0, mtime: mtime)
        default: return nil
        }
    }

    func read(_ relative: String) throws(DocumentsError) -> [UInt8] {
        let path = try absolute(relative)
        guard let data = FileManager.default.contents(atPath: path) else { throw DocumentsError(.localStorage, "\(path): cannot read it") }
        return [UInt8](data)
    }

    /// Writes a file whole: to the staging directory, synced, then renamed into place (a reader
    /// sees the old bytes or the new, never a mix), with the given modification time. Not
    /// `durable`: not synced, for a caller that syncs many files at once (`syncToDisk`) before
    /// its sync state says they were written.
func write(_ relative: String, bytes: [UInt8], modified milliseconds: Int64, durable: Bool = true) throws(DocumentsError) -> DiskEntry {
        let path = try absolute(relative)
        try makeDirectory((relative as NSString).deletingLastPathComponent)
        do { try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true) } catch {
            throw DocumentsError(.localStorage, "\(staging): cannot create it (\(error.localizedDescription))")
        }
        let temporary = staging + "/" + UUID().uuidString
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw DocumentsError(.localStorage, "\(temporary): cannot create it (errno \(errno))") }
        var written = 0
        let ok = bytes.withUnsafeBytes { buffer -> Bool in
            guard let base = buffer.baseAddress else { return true }
            while written < buffer.count {
                let count = systemWrite(descriptor, base + written, buffer.count - written)
                if count <= 0 { return false }
                written += count
            }
            return true
        }
        var times = [timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000),
                     timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000)]
        _ = futimens(descriptor, &times)
        let synced = !durable || fsync(descriptor) == 0
        close(descriptor)
        guard ok, synced, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw DocumentsError(.localStorage, "\(path): cannot write it (errno \(errno))")
        }
        guard let entry = Self.entry(at: path) else { throw DocumentsError(.localStorage, "\(path): gone after writing it") }
        return entry
    }

    /// Makes one file durable (`fsync`); one that is gone since needs nothing.
    func syncToDisk(_ relative: String) throws(DocumentsError) {
        let path = try absolute(relative)
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw DocumentsError(.localStorage, "\(path): cannot sync it to disk (errno \(errno))") }
    }

    /// `syncfs(2)`, looked up at run time: Glibc's Swift module leaves it out (it needs
    /// `_GNU_SOURCE`), and other systems lack it (then `sync()`).
    private static let syncfs: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()

    /// Makes every file written so far durable with one `syncfs` of the folder's file system: a
    /// file synced on its own cost a millisecond and more, most of a second device's first sync.
    func syncToDisk() throws(DocumentsError) {
        let descriptor = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw DocumentsError(.localStorage, "\(root): cannot open it (errno \(errno))") }
        defer { close(descriptor) }
        let synced: Bool
        if let syncfs = Self.syncfs { synced = syncfs(descriptor) == 0 } else {
            sync()
            synced = true
        }
        guard synced else { throw DocumentsError(.localStorage, "\(root): cannot sync it to disk (errno \(errno))") }
    }

    /// Creates a folder and its parents inside the folder.
    func makeDirectory(_ relative: String) throws(DocumentsError) {
        guard !relative.isEmpty else { return }
        var built = ""
        for name in relative.split(separator: "/") {
            built = built.isEmpty ? String(name) : built + "/" + name
            let path = try absolute(built)
            var info = stat()
            if lstat(path, &info) == 0 {
                guard (info.st_mode & S_IFMT) == S_IFDIR else { throw DocumentsError(.localStorage, "\(path): not a folder") }
                continue
            }
            guard mkdir(path, 0o755) == 0 || errno == EEXIST else { throw DocumentsError(.localStorage, "\(path): cannot create it (errno \(errno))") }
        }
    }

    func remove(_ relative: String) throws(DocumentsError) {
        let path = try absolute(relative)
        guard FileManager.default.fileExists(atPath: path) else { return }
        do { try FileManager.default.removeItem(atPath: path) } catch { throw DocumentsError(.localStorage, "\(path): cannot remove it") }
    }

    func move(_ from: String, to: String) throws(DocumentsError) {
        let source = try absolute(from)
        let target = try absolute(to)
        try makeDirectory((to as NSString).deletingLastPathComponent)
        guard rename(source, target) == 0 else { throw DocumentsError(.localStorage, "\(source): cannot move it to \(target) (errno \(errno))") }
    }
}
