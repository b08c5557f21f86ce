import ArgumentParser
import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

struct Check: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Validate a predicate and print its canonical form or its Web Services filterBy list.",
        discussion: "Exit status: 0 valid, 1 invalid predicate (error with position and caret on stderr), 2 usage error."
    )

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case text, filterBy
    }

    @OptionGroup var predicateOptions: PredicateOptions

    @Option(help: "text: the canonical predicate; filterBy: the CloudKit Web Services filter list as JSON.")
    var format: Format = .text

    func run() throws {
        let validated = try predicateOptions.validated()
        switch format {
        case .text:
            print(validated.predicate.canonicalText)
        case .filterBy:
            let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
            do {
                print(JSON.array(try validated.condition.webServicesFilters(now: now)).serialized)
            } catch {
                Terminal.writeError("error: \(error.message)")
                throw ExitCode(1)
            }
        }
    }
}
