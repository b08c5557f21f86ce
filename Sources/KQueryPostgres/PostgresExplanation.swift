import KQuery

/// The statements a query would run, as `PostgresTransaction.explain` collects them.
final class PostgresExplanation {
    struct Statement {
        var purpose: String
        var sql: String
        var parameters: [PostgresParameter]
        /// PostgreSQL's EXPLAIN of the statement as a cursor, a line a step.
        var plan: [String]
    }

    var statements: [Statement] = []

    /// In words, for people: each statement with its values and PostgreSQL's plan.
    func description(of query: Query) -> String {
        var lines = [
            "PostgreSQL: SQL reads the candidates for a '\(query.recordType)' query in its order, a batch at a time;",
            "each is decoded and the predicate evaluated on it (the evaluator has the last word).",
        ]
        if statements.isEmpty {
            lines.append("No statement runs: the predicate can match no record.")
        }
        for (index, statement) in statements.enumerated() {
            lines.append("")
            lines.append(statements.count == 1 ? "Statement: \(statement.purpose)" : "Statement \(index + 1) of \(statements.count): \(statement.purpose)")
            for line in statement.sql.split(separator: "\n") { lines.append("  " + line) }
            for (number, parameter) in statement.parameters.enumerated() { lines.append("  $\(number + 1) = \(parameter.literal)") }
            lines.append("Plan:")
            for line in statement.plan { lines.append("  " + line) }
        }
        return lines.joined(separator: "\n")
    }
}
