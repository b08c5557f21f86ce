import ArgumentParser
import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension PredicateProfile: ExpressibleByArgument {}

/// The flags every predicate-taking subcommand shares.
struct PredicateOptions: ParsableArguments {
    @Option(help: "Which rules apply: cloudkit (what CloudKit accepts) or extended.")
    var profile: PredicateProfile = .cloudkit

    @Option(name: .customLong("arg"), help: ArgumentHelp("A value for the next %@ / %K / %d ... as field JSON: 30, '\"text\"', '[1,2]', '{\"value\":1700000000000,\"type\":\"TIMESTAMP\"}'.", valueName: "JSON"))
    var arguments: [String] = []

    @Option(name: .customLong("var"), help: ArgumentHelp("A value for $NAME, as NAME=JSON.", valueName: "NAME=JSON"))
    var variables: [String] = []

    @Argument(help: "The predicate, or @PATH to read it from a file.")
    var predicate: String

    /// The predicate text, read from a file for `@PATH`.
    func predicateText() throws -> String {
        guard predicate.hasPrefix("@") else { return predicate }
        let path = String(predicate.dropFirst())
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("cannot read predicate file '\(path)'")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ValidationError("predicate file '\(path)' is not UTF-8")
        }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    func boundArguments() throws -> [Constant] {
        var constants: [Constant] = []
        for (index, text) in arguments.enumerated() {
            constants.append(try constant(text, what: "--arg \(index + 1)"))
        }
        return constants
    }

    func boundVariables() throws -> [String: Constant] {
        var values: [String: Constant] = [:]
        for assignment in variables {
            guard let equals = assignment.firstIndex(of: "="), equals != assignment.startIndex else {
                throw ValidationError("--var needs NAME=JSON, got '\(assignment)'")
            }
            values[String(assignment[..<equals])] = try constant(String(assignment[assignment.index(after: equals)...]), what: "--var \(assignment[..<equals])")
        }
        return values
    }

    private func constant(_ text: String, what: String) throws -> Constant {
        do {
            return try Constant(json: try JSON.parse(text))
        } catch let error as JSONError {
            throw ValidationError("\(what): invalid JSON '\(text)': \(error)")
        } catch {
            throw ValidationError("\(what): \(error)")
        }
    }

    /// Parses, binds and validates; an invalid predicate is reported with its caret and exits 1.
    func validated() throws -> ValidatedPredicate {
        let text = try predicateText()
        let arguments = try boundArguments()
        let variables = try boundVariables()
        do {
            return try ValidatedPredicate(text, arguments: arguments, variables: variables, profile: profile)
        } catch {
            Terminal.writeError(error.rendered(in: text, color: Terminal.colorOnStandardError))
            throw ExitCode(1)
        }
    }
}
