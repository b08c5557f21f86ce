import Foundation
import KQuery

extension Schema {
    /// Reads a schema from a `.ckdb` file in the CloudKit Schema Language.
    public init(contentsOfFile path: String) throws(SchemaFileError) {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw SchemaFileError(path: path, problem: .unreadable)
        }
        do {
            self = try Schema(text: text)
        } catch {
            throw SchemaFileError(path: path, problem: .invalid(error))
        }
    }
}

/// A schema file that cannot be read, or does not parse: `path: cannot read file`, or
/// `path:line:column: message`.
public struct SchemaFileError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Problem: Hashable, Sendable {
        /// Missing, unreadable, or not UTF-8.
        case unreadable
        case invalid(SchemaTextError)
    }

    public var path: String
    public var problem: Problem

    public var description: String {
        switch problem {
        case .unreadable: "\(path): cannot read file"
        case .invalid(let error): "\(path):\(error.line):\(error.column): \(error.message)"
        }
    }
}
