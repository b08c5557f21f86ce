import Foundation
import Testing
@testable import KQuery

/// Files under Tests/KQueryTests/Fixtures.
enum Fixtures {
    static func url(_ name: String) -> URL {
        let base = name as NSString
        return Bundle.module.url(forResource: "Fixtures/" + base.deletingPathExtension, withExtension: base.pathExtension)
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/" + name)
    }

    static func text(_ name: String) throws -> String {
        try String(contentsOf: url(name), encoding: .utf8)
    }

    static func json(_ name: String) throws -> JSON {
        try JSON.parse(try text(name))
    }

    static func records(_ name: String) throws -> [Record] {
        try RecordFile.load(path: url(name).path)
    }

    /// The repository root (for Grammar/ and Samples/).
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

/// Parses, validates and evaluates a predicate over records, returning the matching names.
func matchingNames(
    _ predicate: String, in records: [Record], arguments: [Constant] = [], profile: PredicateProfile = .cloudkit, now: Int64 = 0
) throws -> [String] {
    let compiled = CompiledPredicate(try ValidatedPredicate(predicate, arguments: arguments, profile: profile))
    return records.filter { compiled.matches($0, now: now) }.map(\.recordID.recordName).sorted()
}

/// The error a predicate gets, or nil when it is valid.
func predicateError(_ text: String, profile: PredicateProfile = .cloudkit) -> InvalidPredicateError? {
    do {
        _ = try ValidatedPredicate(text, profile: profile)
        return nil
    } catch {
        return error
    }
}
