/// Where a node came from in the predicate text: a range of UTF-8 byte offsets.
///
/// Spans are metadata, not identity: two spans always compare equal, so ASTs parsed from
/// differently spaced text (or built in code) are equal when they mean the same thing.
public struct SourceSpan: Hashable, Sendable {
    public var start: Int
    public var end: Int

    public init(start: Int, end: Int) {
        self.start = start
        self.end = end
    }

    /// A span for nodes built in code rather than parsed.
    public static let synthesized = SourceSpan(start: 0, end: 0)

    public static func == (lhs: SourceSpan, rhs: SourceSpan) -> Bool { true }
    public func hash(into hasher: inout Hasher) {}

    func through(_ other: SourceSpan) -> SourceSpan { SourceSpan(start: start, end: max(end, other.end)) }
}

/// An invalid predicate: what is wrong and where.
///
/// Messages echo Apple's CloudKit wording where it has one (`Unsupported operator: ...`,
/// `Unsupported comparison options: [c]`, ...). `rendered(in:)` is the one place errors become text.
public struct InvalidPredicateError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public var span: SourceSpan

    public init(_ message: String, at span: SourceSpan) {
        self.message = message
        self.span = span
    }

    public var description: String { message }

    /// `1:7: message`: the error on one line, with its position in `source`.
    public func located(in source: String) -> String {
        let (line, column) = SourceText.lineAndColumn(of: visibleSpan(in: source).start, in: source)
        return "\(line):\(column): \(message)"
    }

    /// The span without the spaces at its ends: positions and carets belong on visible characters.
    private func visibleSpan(in source: String) -> SourceSpan {
        let bytes = Array(source.utf8)
        var start = min(span.start, bytes.count)
        while start < min(span.end, bytes.count), bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        var end = min(span.end, bytes.count)
        while end > start + 1, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return SourceSpan(start: start, end: Swift.max(start + 1, end))
    }

    /// `1:7: message`, the source line, and a caret under the spot.
    public func rendered(in source: String, color: Bool = false) -> String {
        let span = visibleSpan(in: source)
        let start = span.start
        let (line, column) = SourceText.lineAndColumn(of: start, in: source)
        let text = SourceText.line(containing: start, in: source)
        let shown = text.count > 200 ? String(text.prefix(200)) + "…" : text
        let caretColumn = min(column - 1, shown.count)
        let width = max(1, min(span.end - span.start, shown.count - caretColumn))
        let caret = String(repeating: " ", count: caretColumn) + "^" + String(repeating: "~", count: max(0, width - 1))
        let (red, bold, reset) = color ? ("\u{1B}[31m", "\u{1B}[1m", "\u{1B}[0m") : ("", "", "")
        return "\(bold)\(red)error:\(reset)\(bold) \(line):\(column): \(message)\(reset)\n  \(shown.replacingTabs)\n  \(red)\(caret)\(reset)"
    }
}

extension String {
    fileprivate var replacingTabs: String { String(map { $0 == "\t" ? " " : $0 }) }
}
