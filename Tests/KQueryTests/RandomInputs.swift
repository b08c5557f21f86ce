@testable import KQuery

/// SplitMix64: a tiny deterministic generator, so every property-test failure is reproducible
/// from the seed that swift-property-based reports.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random ASTs of every node kind (not necessarily valid in any profile), for the printer.
enum RandomAST {
    static let fieldNames = ["a", "seats", "name", "tags", "in", "x_1", "location", "allTokens", "Contains", "chef", "2000", "_x"]
    static let strings = ["", "x", "it's", "say \"hi\"", "a\\b", "line\nbreak", "tab\t", "é", "😀", "\u{1}", "%@", "{ }", "NOT"]

    static func constant(_ rng: inout SplitMix) -> Constant {
        switch Int.random(in: 0..<9, using: &rng) {
        case 0: return .value(.int64(Int64.random(in: .min ... .max, using: &rng)))
        case 1: return .value(.int64(Int64.random(in: -100...100, using: &rng)))
        case 2: return .value(.double(Double.random(in: -1e6...1e6, using: &rng)))
        case 3: return .value(.string(strings.randomElement(using: &rng) ?? ""))
        case 4: return .value(.timestamp(Int64.random(in: -5_000_000_000_000...5_000_000_000_000, using: &rng)))
        case 5: return .value(.location(Location(latitude: Double.random(in: -90...90, using: &rng), longitude: Double.random(in: -180...180, using: &rng))))
        case 6: return .value(.reference(Reference(recordID: RecordID(recordName: ["r1", "rec \"2\""].randomElement(using: &rng) ?? "r"))))
        case 7: return .bool(Bool.random(using: &rng))
        default: return .null
        }
    }

    static func expression(_ rng: inout SplitMix) -> ExpressionSyntax {
        switch Int.random(in: 0..<10, using: &rng) {
        case 0, 1, 2: return .keyPath(fieldNames.randomElement(using: &rng) ?? "a", .synthesized)
        case 3, 4, 5: return .constant(constant(&rng), .synthesized)
        case 6: return .aggregate((0..<Int.random(in: 0...3, using: &rng)).map { _ in .constant(constant(&rng), .synthesized) }, .synthesized)
        case 7: return .function(["now", "tokenize", "distanceToLocation:fromLocation:"].randomElement(using: &rng) ?? "now",
                                 [.keyPath("a", .synthesized), .constant(constant(&rng), .synthesized)], .synthesized)
        case 8: return .evaluatedObject(.synthesized)
        default: return .variable(["v", "minimum"].randomElement(using: &rng) ?? "v", .synthesized)
        }
    }

    static func predicate(_ rng: inout SplitMix, depth: Int) -> PredicateSyntax {
        let choice = depth > 0 ? Int.random(in: 0..<8, using: &rng) : Int.random(in: 0..<3, using: &rng)
        switch choice {
        case 0, 1:
            let options: [ComparisonOptions] = [[], [.caseInsensitive], [.caseInsensitive, .diacriticInsensitive, .localeSensitive]]
            return .comparison(Comparison(
                modifier: [.direct, .direct, .any, .all, .none].randomElement(using: &rng) ?? .direct,
                expression(&rng), ComparisonOperator.allCases.randomElement(using: &rng) ?? .equal,
                options: options.randomElement(using: &rng) ?? [], expression(&rng)))
        case 2: return .constant(Bool.random(using: &rng), .synthesized)
        case 3, 4: return .and((0..<Int.random(in: 2...3, using: &rng)).map { _ in predicate(&rng, depth: depth - 1) }, .synthesized)
        case 5, 6: return .or((0..<Int.random(in: 2...3, using: &rng)).map { _ in predicate(&rng, depth: depth - 1) }, .synthesized)
        default: return .not(predicate(&rng, depth: depth - 1), .synthesized)
        }
    }
}
