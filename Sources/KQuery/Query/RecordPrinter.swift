/// Renders records for people and for programs: the one place result text is made, shared by the
/// command line and the shell.
public struct RecordPrinter: Sendable {
    public enum Format: String, Sendable, CaseIterable {
        /// One Web Services record JSON per line.
        case ndjson
        /// One recordName per line.
        case names
        /// Aligned columns with a row count.
        case table
        /// The number of records.
        case count
    }

    public var format: Format
    public var color: Bool
    /// Longest cell in a table, in characters.
    public var maximumCellWidth = 40

    public init(format: Format, color: Bool = false) {
        self.format = format
        self.color = color
    }

    public func render(_ records: [Record]) -> String {
        switch format {
        case .ndjson: return records.map { $0.json().serialized + "\n" }.joined()
        case .names: return records.map { $0.recordID.recordName + "\n" }.joined()
        case .count: return "\(records.count)\n"
        case .table: return table(records)
        }
    }

    private func table(_ records: [Record]) -> String {
        var names: [String] = []
        var seen = Set<String>()
        for record in records {
            for name in record.fields.sortedNames where seen.insert(name).inserted { names.append(name) }
        }
        names.sort()
        let header = ["recordName"] + names
        var rows: [[String]] = [header]
        for record in records {
            rows.append([record.recordID.recordName] + names.map { record.fields[$0].map(cell) ?? "" })
        }
        var widths = header.map { _ in 0 }
        for row in rows {
            for (index, text) in row.enumerated() { widths[index] = max(widths[index], text.count) }
        }
        var out = ""
        for (rowIndex, row) in rows.enumerated() {
            let line = row.enumerated().map { index, text in
                index == row.count - 1 ? text : text + String(repeating: " ", count: widths[index] - text.count)
            }.joined(separator: "  ")
            out += (rowIndex == 0 && color ? "\u{1B}[1m" + line + "\u{1B}[0m" : line) + "\n"
            if rowIndex == 0 { out += widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n" }
        }
        out += "(\(records.count) record\(records.count == 1 ? "" : "s"))\n"
        return out
    }

    /// A value as one short table cell.
    func cell(_ value: FieldValue) -> String {
        let text: String
        switch value {
        case .string(let s): text = s.map { $0 == "\n" || $0 == "\t" ? " " : $0 }.reduce(into: "") { $0.append($1) }
        case .int64(let i): text = String(i)
        case .double(let d): text = d.description
        case .timestamp(let ms): text = Timestamp.iso8601(ms)
        case .bytes(let bytes): text = "<\(bytes.count) bytes>"
        case .location(let l): text = "(\(l.latitude), \(l.longitude))"
        case .reference(let r): text = "→" + r.recordID.recordName
        case .assetID: text = "<asset>"
        case .list(_, let values): text = "[" + values.map(cell).joined(separator: ", ") + "]"
        }
        return text.count > maximumCellWidth ? String(text.prefix(maximumCellWidth - 1)) + "…" : text
    }
}
