import KQuery

/// How the database answers one query: where candidate records come from, what is still tested on
/// each, and how the results are ordered. `description` says it in words (`kquery query --explain`).
///
/// The planner (SQLite's `where.c` in miniature): the predicate's top-level conjuncts are matched
/// against the record type's indexes; each usable one becomes a probe with an exact row count
/// (posting sizes, or positions in a range index). The smallest probe supplies the candidates,
/// other small exact probes are intersected with it, and a probe that answers its conjunct exactly
/// removes that conjunct from the per-record test. With a sort on a field that has a range index
/// and no selective probe, the plan walks that index in order and stops once the page is full.
public struct QueryPlan: Sendable, CustomStringConvertible {
    /// Where candidates come from.
    enum Access: Sendable {
        /// Every record of the type.
        case scan
        /// The rows of the first probe, intersected with the others.
        case probes([Probe])
        /// The range index of the first sort key, in sort order.
        case sortedWalk(FieldReference)
        /// Nothing can match (an empty IN list, a token search without tokens, FALSEPREDICATE).
        case empty
    }

    let recordType: String
    let access: Access
    /// The conjuncts no probe answers exactly: tested on every candidate.
    let residual: Condition
    let tableSize: Int
    /// Index builds this plan caused (automatic indexing), for the explanation.
    let builtIndexes: [String]

    public var description: String {
        var lines = ["QUERY \(recordType) (\(tableSize) records)"]
        for built in builtIndexes { lines.append("  build \(built) (on demand)") }
        switch access {
        case .scan:
            lines.append("  scan every record")
        case .empty:
            lines.append("  nothing can match: no record is read")
        case .probes(let probes):
            for (index, probe) in probes.enumerated() {
                let verb = index == 0 ? "search" : "intersect with"
                lines.append("  \(verb) \(probe.indexName): \(probe.condition) (\(probe.estimate) rows\(probe.isExact ? "" : ", a superset"))")
            }
        case .sortedWalk(let field):
            lines.append("  walk the range index on \(field.name) in sort order, stopping when the page is full")
        }
        if case .empty = access { return lines.joined(separator: "\n") }
        if residual != .constant(true) {
            lines.append("  test each candidate: \(residual)")
        }
        return lines.joined(separator: "\n")
    }
}

/// One use of an index for one conjunct.
struct Probe: Sendable {
    enum Lookup: Sendable {
        case recordIDs([RecordID])
        /// Rows with any of these keys.
        case hash(FieldReference, keys: [IndexKey], members: Bool)
        /// Rows with every one of these keys among a list field's members.
        case hashAll(FieldReference, keys: [IndexKey])
        case range(FieldReference, lower: RangeBound?, upper: RangeBound?, members: Bool)
        case prefix(FieldReference, String, members: Bool)
        case tokens(TokenMatch, [String])
        case spatial(FieldReference, level: Int, cells: [UInt64])
    }

    var lookup: Lookup
    /// The conjunct this probe serves.
    var condition: Condition
    /// How many rows it returns (exact for every kind but spatial, which counts whole cells).
    var estimate: Int
    /// Whether its rows are exactly those where the conjunct holds.
    var isExact: Bool

    var indexName: String {
        switch lookup {
        case .recordIDs: "the record ID lookup"
        case .hash(let field, _, _), .hashAll(let field, _): "the equality index on \(field.name)"
        case .range(let field, _, _, _), .prefix(let field, _, _): "the range index on \(field.name)"
        case .tokens: "the token index"
        case .spatial(let field, let level, let cells): "the spatial index on \(field.name) (\(cells.count) cells of \(SpatialIndex.cellSizes[level])°)"
        }
    }
}

/// One end of a range: a value, and whether the value itself is in the range.
struct RangeBound: Sendable {
    var value: FieldValue
    var inclusive: Bool
}
