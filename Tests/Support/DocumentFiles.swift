import Foundation

/// Bytes from a fixed seed (xorshift), so every run chunks and syncs the same data.
public func documentBytes(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { buffer in
        var index = 0
        while index + 8 <= buffer.count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            buffer.storeBytes(of: state, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < buffer.count {
            buffer[index] = UInt8(truncatingIfNeeded: state >> (index % 8 * 8))
            index += 1
        }
    }
    return bytes
}

/// Writes a file under a folder (parents made), stamped with a modification time in seconds.
public func putFile(_ root: String, _ path: String, _ bytes: [UInt8], modified seconds: Int) throws {
    let full = root + "/" + path
    try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    try Data(bytes).write(to: URL(fileURLWithPath: full))
    try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: Double(seconds))], ofItemAtPath: full)
}

public func putFile(_ root: String, _ path: String, _ text: String, modified seconds: Int) throws {
    try putFile(root, path, Array(text.utf8), modified: seconds)
}

/// A folder's files and folders by relative path (folders as nil).
public func folderTree(_ root: String) -> [String: [UInt8]?] {
    var tree: [String: [UInt8]?] = [:]
    guard let enumerator = FileManager.default.enumerator(atPath: root) else { return tree }
    while let path = enumerator.nextObject() as? String {
        var isDirectory: ObjCBool = false
        FileManager.default.fileExists(atPath: root + "/" + path, isDirectory: &isDirectory)
        tree[path] = isDirectory.boolValue ? .some(nil) : .some(FileManager.default.contents(atPath: root + "/" + path).map { [UInt8]($0) })
    }
    return tree
}
