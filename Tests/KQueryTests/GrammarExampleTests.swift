import Foundation
import Testing
@testable import KQuery

/// Keeps Grammar/ and the parser in step: every example's verdict must hold.
@Suite("Grammar examples")
struct GrammarExampleTests {
    /// (profile section, line number, text) for each example line.
    static func examples(_ file: String) throws -> [(String, Int, String)] {
        let url = Fixtures.repositoryRoot.appendingPathComponent("Grammar/examples/\(file)")
        let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        var section = "cloudkit"
        var out: [(String, Int, String)] = []
        for (index, line) in lines.enumerated() {
            if line.hasPrefix("#") || (line.isEmpty && file == "valid.txt") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
                continue
            }
            out.append((section, index + 1, String(line)))
        }
        return out
    }

    static func arguments(for text: String) -> [Constant] {
        let count = text.components(separatedBy: "%").count - 1
        if text.contains("%K") { return [.value(.string("name")), .value(.string("Le"))] }
        if text.contains("BETWEEN %@") || text.contains("IN %@") { return [.value(.list(.int64, [.int64(1), .int64(2)]))] }
        if text.contains("%d") { return [.value(.int64(1)), .value(.double(2)), .value(.string("x"))] }
        return Array(repeating: .value(.int64(1)), count: count)
    }

    @Test func validExamples() throws {
        let examples = try Self.examples("valid.txt")
        #expect(examples.count > 90)
        for (section, line, text) in examples {
            let profile = PredicateProfile(rawValue: section) ?? .cloudkit
            let variables: [String: Constant] = ["minimum": .value(.int64(3))]
            do {
                let validated = try ValidatedPredicate(text, arguments: Self.arguments(for: text), variables: variables, profile: profile)
                // Valid in cloudkit means valid in extended too.
                if profile == .cloudkit {
                    _ = try ValidatedPredicate(text, arguments: Self.arguments(for: text), variables: variables, profile: .extended)
                    _ = try validated.condition.webServicesFilters(now: 0)
                }
            } catch {
                Issue.record("valid.txt:\(line) [\(section)] rejected: \(text)\n\(error)")
            }
        }
    }

    @Test func invalidExamples() throws {
        let examples = try Self.examples("invalid.txt")
        #expect(examples.count > 60)
        for (section, line, text) in examples {
            let profiles: [PredicateProfile] = section == "both" ? [.cloudkit, .extended] : [PredicateProfile(rawValue: section) ?? .cloudkit]
            for profile in profiles {
                do {
                    _ = try ValidatedPredicate(text, arguments: text.contains("%@ %@") ? [.value(.int64(1)), .value(.int64(2))] : [], profile: profile)
                    Issue.record("invalid.txt:\(line) [\(profile)] accepted: \(text)")
                } catch {
                    let rendered = error.rendered(in: text)
                    #expect(rendered.hasPrefix("error: 1:"), "\(rendered)")
                    #expect(rendered.contains("^"), "\(rendered)")
                }
            }
        }
    }
}
