#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A problem in a records file, with the 1-based line it is on.
public struct RecordFileError: Error, Hashable, Sendable, CustomStringConvertible {
    public var path: String
    public var line: Int
    public var message: String
    public var description: String { "\(path):\(line): \(message)" }
}

/// Reads records from NDJSON (one record per line) or a JSON array of records.
///
/// Loading is all or nothing: the first malformed line or record fails the whole file, so a caller
/// never works on half a data set.
public enum RecordFile {
    /// The largest file read (1 GiB): CloudKit records are at most 1 MB each.
    public static let maximumSize = 1 << 30

    public static func load(path: String) throws(RecordFileError) -> [Record] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw RecordFileError(path: path, line: 0, message: "cannot read file: \(SourceText.describe(error))")
        }
        guard data.count <= maximumSize else { throw RecordFileError(path: path, line: 0, message: "file is larger than 1 GiB") }
        return try data.withUnsafeBytes { raw in
            Result { () throws(RecordFileError) in try parse(raw.bindMemory(to: UInt8.self), path: path) }
        }.get()
    }

    public static func parse(_ text: String, path: String = "<input>") throws(RecordFileError) -> [Record] {
        var text = text
        return try text.withUTF8 { bytes in Result { () throws(RecordFileError) in try parse(bytes, path: path) } }.get()
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String) throws(RecordFileError) -> [Record] {
        var first = 0
        while first < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[first]) { first += 1 }
        if first < bytes.count, bytes[first] == UInt8(ascii: "[") {
            let document: JSON
            do {
                document = try JSON.parse(bytes: bytes)
            } catch {
                throw RecordFileError(path: path, line: error.line, message: "\(error.message) (column \(error.column))")
            }
            guard case .array(let elements) = document else { throw RecordFileError(path: path, line: 1, message: "expected an array") }
            var records: [Record] = []
            records.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                do {
                    records.append(try Record(json: element))
                } catch {
                    throw RecordFileError(path: path, line: 1, message: "record #\(index + 1): \(error.message)")
                }
            }
            return records
        }
        var records: [Record] = []
        var lineNumber = 0
        var lineStart = 0
        while lineStart < bytes.count {
            lineNumber += 1
            var lineEnd = lineStart
            while lineEnd < bytes.count, bytes[lineEnd] != 0x0A { lineEnd += 1 }
            let line = UnsafeBufferPointer(rebasing: bytes[lineStart..<lineEnd])
            lineStart = lineEnd + 1
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            let json: JSON
            do {
                json = try JSON.parse(bytes: line)
            } catch {
                throw RecordFileError(path: path, line: lineNumber, message: "\(error.message) (column \(error.column))")
            }
            do {
                records.append(try Record(json: json))
            } catch {
                throw RecordFileError(path: path, line: lineNumber, message: error.message)
            }
        }
        return records
    }
}

extension SourceText {
    /// A one-line description of a system error.
    static func describe(_ error: any Error) -> String {
        if let cocoa = error as? CocoaError, let underlying = cocoa.underlying as? POSIXError {
            return underlying.code == .ENOENT ? "no such file" : "\(underlying.code)"
        }
        return "\(error)".split(separator: "\n").first.map(String.init) ?? "unknown error"
    }
}
