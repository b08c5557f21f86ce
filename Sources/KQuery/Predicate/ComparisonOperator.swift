/// The comparison operators of the format-string syntax.
///
/// `ComparisonOperator.table` is the one operator table: the parser's spelling switches
/// (`Symbol.comparisonOperator`, `Keyword.comparisonOperator`) are checked against it by a test, the
/// printer writes `canonical`, the validator checks `cloudKit`, and the Web Services mapping reads
/// the comparator names.
public enum ComparisonOperator: String, Hashable, Sendable, CaseIterable {
    case equal, notEqual, lessThan, lessThanOrEqual, greaterThan, greaterThanOrEqual
    case between, `in`, contains, beginsWith, endsWith, like, matches, tokenMatches

    public struct Info: Sendable {
        /// How the printer writes it.
        public var canonical: String
        /// Every spelling the parser accepts (keywords case-insensitively).
        public var spellings: [String]
        /// Whether CloudKit accepts it at all (shape rules come on top, in the validator).
        public var cloudKit: Bool
        /// The operator that means the same with the operands swapped (`a < b` is `b > a`).
        public var mirrored: ComparisonOperator?
        /// The Web Services comparator of `field OP constant`, and of `NOT (field OP constant)`.
        public var comparator: String?
        public var negatedComparator: String?
    }

    public static let table: [ComparisonOperator: Info] = [
        .equal: Info(canonical: "==", spellings: ["==", "="], cloudKit: true, mirrored: .equal, comparator: "EQUALS", negatedComparator: "NOT_EQUALS"),
        .notEqual: Info(canonical: "!=", spellings: ["!=", "<>"], cloudKit: true, mirrored: .notEqual, comparator: "NOT_EQUALS", negatedComparator: "EQUALS"),
        .lessThan: Info(canonical: "<", spellings: ["<"], cloudKit: true, mirrored: .greaterThan, comparator: "LESS_THAN", negatedComparator: "GREATER_THAN_OR_EQUALS"),
        .lessThanOrEqual: Info(canonical: "<=", spellings: ["<=", "=<"], cloudKit: true, mirrored: .greaterThanOrEqual, comparator: "LESS_THAN_OR_EQUALS", negatedComparator: "GREATER_THAN"),
        .greaterThan: Info(canonical: ">", spellings: [">"], cloudKit: true, mirrored: .lessThan, comparator: "GREATER_THAN", negatedComparator: "LESS_THAN_OR_EQUALS"),
        .greaterThanOrEqual: Info(canonical: ">=", spellings: [">=", "=>"], cloudKit: true, mirrored: .lessThanOrEqual, comparator: "GREATER_THAN_OR_EQUALS", negatedComparator: "LESS_THAN"),
        .between: Info(canonical: "BETWEEN", spellings: ["BETWEEN"], cloudKit: true, mirrored: nil, comparator: nil, negatedComparator: nil),
        .in: Info(canonical: "IN", spellings: ["IN"], cloudKit: true, mirrored: .contains, comparator: "IN", negatedComparator: "NOT_IN"),
        .contains: Info(canonical: "CONTAINS", spellings: ["CONTAINS"], cloudKit: true, mirrored: .in, comparator: "LIST_CONTAINS", negatedComparator: "NOT_LIST_CONTAINS"),
        .beginsWith: Info(canonical: "BEGINSWITH", spellings: ["BEGINSWITH"], cloudKit: true, mirrored: nil, comparator: "BEGINS_WITH", negatedComparator: "NOT_BEGINS_WITH"),
        .endsWith: Info(canonical: "ENDSWITH", spellings: ["ENDSWITH"], cloudKit: false, mirrored: nil, comparator: nil, negatedComparator: nil),
        .like: Info(canonical: "LIKE", spellings: ["LIKE"], cloudKit: false, mirrored: nil, comparator: nil, negatedComparator: nil),
        .matches: Info(canonical: "MATCHES", spellings: ["MATCHES"], cloudKit: false, mirrored: nil, comparator: nil, negatedComparator: nil),
        .tokenMatches: Info(canonical: "TOKENMATCHES", spellings: ["TOKENMATCHES"], cloudKit: true, mirrored: .tokenMatches, comparator: "CONTAINS_ALL_TOKENS", negatedComparator: nil),
    ]

    public var info: Info { ComparisonOperator.infos[ordinal] }

    /// `info.cloudKit` and `info.mirrored`, read in place: the validator asks them for every
    /// comparison, and copying `Info` out retains its strings and arrays.
    var isCloudKitOperator: Bool { ComparisonOperator.infos[ordinal].cloudKit }
    var mirroredOperator: ComparisonOperator? { ComparisonOperator.infos[ordinal].mirrored }

    /// `table` as an array in `allCases` order, read on every comparison the validator lowers.
    /// The table covers every case; the test suite checks it.
    private static let infos: [Info] = allCases.map { table[$0] ?? Info(canonical: $0.rawValue, spellings: [], cloudKit: false) }

    private var ordinal: Int {
        switch self {
        case .equal: 0
        case .notEqual: 1
        case .lessThan: 2
        case .lessThanOrEqual: 3
        case .greaterThan: 4
        case .greaterThanOrEqual: 5
        case .between: 6
        case .in: 7
        case .contains: 8
        case .beginsWith: 9
        case .endsWith: 10
        case .like: 11
        case .matches: 12
        case .tokenMatches: 13
        }
    }

    /// Relational operators (the six that compare values).
    public var isRelational: Bool {
        switch self {
        case .equal, .notEqual, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual: true
        default: false
        }
    }

    /// String operators, which take the [c], [d] options in the extended profile.
    public var isStringOperator: Bool {
        switch self {
        case .beginsWith, .endsWith, .contains, .like, .matches: true
        default: false
        }
    }
}

/// ANY / ALL / NONE in front of a comparison (SOME is ANY).
public enum ComparisonModifier: String, Hashable, Sendable {
    case direct = ""
    case any = "ANY"
    case all = "ALL"
    case none = "NONE"
}

/// The `[cdln]` options after an operator.
public struct ComparisonOptions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let caseInsensitive = ComparisonOptions(rawValue: 1)
    public static let diacriticInsensitive = ComparisonOptions(rawValue: 2)
    public static let localeSensitive = ComparisonOptions(rawValue: 4)
    public static let normalized = ComparisonOptions(rawValue: 8)

    static let letters: [(Character, ComparisonOptions)] = [
        ("c", .caseInsensitive), ("d", .diacriticInsensitive), ("l", .localeSensitive), ("n", .normalized),
    ]

    /// `[cd]`, or the empty string when there are none.
    public var spelled: String {
        isEmpty ? "" : "[" + String(ComparisonOptions.letters.filter { contains($0.1) }.map(\.0)) + "]"
    }
}
