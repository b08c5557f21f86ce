/// A parsed predicate: the typed AST of the format-string syntax (see `Grammar/Predicate.ebnf`).
///
/// Node kinds mirror grammar rules one to one. The AST is profile-neutral: a predicate that parses
/// may still be rejected by `PredicateValidator` for the profile in use.
public enum PredicateSyntax: Hashable, Sendable {
    /// TRUEPREDICATE or FALSEPREDICATE.
    case constant(Bool, SourceSpan)
    case comparison(Comparison)
    case and([PredicateSyntax], SourceSpan)
    case or([PredicateSyntax], SourceSpan)
    indirect case not(PredicateSyntax, SourceSpan)

    public var span: SourceSpan {
        switch self {
        case .constant(_, let span), .and(_, let span), .or(_, let span), .not(_, let span): span
        case .comparison(let comparison): comparison.span
        }
    }
}

/// `[modifier] left operator[options] right`.
///
/// A value type whose fields live in one shared, immutable box: the parser and the validator pass
/// comparisons around by copying one reference instead of the ~130 bytes of fields (copying them
/// was a tenth of parse+validate's time), and the box is the one allocation a comparison needs.
public struct Comparison: Hashable, Sendable {
    /// Immutable, so reads need no exclusivity checks; a setter (only binding uses them) makes a new box.
    private final class Storage: Sendable {
        let modifier: ComparisonModifier
        let left: ExpressionSyntax
        let op: ComparisonOperator
        let options: ComparisonOptions
        let right: ExpressionSyntax
        let span: SourceSpan
        let operatorSpan: SourceSpan

        init(
            _ modifier: ComparisonModifier, _ left: ExpressionSyntax, _ op: ComparisonOperator, _ options: ComparisonOptions,
            _ right: ExpressionSyntax, _ span: SourceSpan, _ operatorSpan: SourceSpan
        ) {
            self.modifier = modifier
            self.left = left
            self.op = op
            self.options = options
            self.right = right
            self.span = span
            self.operatorSpan = operatorSpan
        }
    }

    private var storage: Storage

    public var modifier: ComparisonModifier {
        get { storage.modifier }
        set { self = Comparison(modifier: newValue, left, op, options: options, right, span: span, operatorSpan: operatorSpan) }
    }
    public var left: ExpressionSyntax {
        _read { yield storage.left }
        set { self = Comparison(modifier: modifier, newValue, op, options: options, right, span: span, operatorSpan: operatorSpan) }
    }
    public var op: ComparisonOperator {
        get { storage.op }
        set { self = Comparison(modifier: modifier, left, newValue, options: options, right, span: span, operatorSpan: operatorSpan) }
    }
    public var options: ComparisonOptions {
        get { storage.options }
        set { self = Comparison(modifier: modifier, left, op, options: newValue, right, span: span, operatorSpan: operatorSpan) }
    }
    public var right: ExpressionSyntax {
        _read { yield storage.right }
        set { self = Comparison(modifier: modifier, left, op, options: options, newValue, span: span, operatorSpan: operatorSpan) }
    }
    /// The whole comparison.
    public var span: SourceSpan {
        get { storage.span }
        set { self = Comparison(modifier: modifier, left, op, options: options, right, span: newValue, operatorSpan: operatorSpan) }
    }
    /// The operator (errors about the operator point here).
    public var operatorSpan: SourceSpan {
        get { storage.operatorSpan }
        set { self = Comparison(modifier: modifier, left, op, options: options, right, span: span, operatorSpan: newValue) }
    }

    public init(
        modifier: ComparisonModifier = .direct, _ left: ExpressionSyntax, _ op: ComparisonOperator,
        options: ComparisonOptions = [], _ right: ExpressionSyntax,
        span: SourceSpan = .synthesized, operatorSpan: SourceSpan = .synthesized
    ) {
        storage = Storage(modifier, left, op, options, right, span, operatorSpan)
    }

    public static func == (lhs: Comparison, rhs: Comparison) -> Bool {
        if lhs.storage === rhs.storage { return true }
        let (l, r) = (lhs.storage, rhs.storage)
        return l.modifier == r.modifier && l.op == r.op && l.options == r.options && l.left == r.left && l.right == r.right
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(storage.modifier)
        hasher.combine(storage.left)
        hasher.combine(storage.op)
        hasher.combine(storage.options)
        hasher.combine(storage.right)
    }
}

/// An operand of a comparison.
public enum ExpressionSyntax: Hashable, Sendable {
    /// A field name (or a dotted key path, which only the validator rejects).
    case keyPath(String, SourceSpan)
    /// SELF: the record itself (CloudKit uses it for `SELF CONTAINS 'text'`).
    case evaluatedObject(SourceSpan)
    case constant(Constant, SourceSpan)
    /// `{a, b, ...}`.
    case aggregate([ExpressionSyntax], SourceSpan)
    /// `name(args)`, including selector-style names such as `distanceToLocation:fromLocation:`.
    case function(String, [ExpressionSyntax], SourceSpan)
    /// A format argument (`%@`, `%K`, `%d`, `%1$@`, ...) not yet bound.
    indirect case argument(FormatArgument, SourceSpan)
    /// A substitution variable `$name` not yet bound.
    case variable(String, SourceSpan)

    public var span: SourceSpan {
        switch self {
        case .keyPath(_, let span), .evaluatedObject(let span), .constant(_, let span), .aggregate(_, let span),
            .function(_, _, let span), .argument(_, let span), .variable(_, let span):
            span
        }
    }
}

/// A constant value in a predicate.
public enum Constant: Hashable, Sendable {
    /// `nil` / `NULL`.
    case null
    /// `TRUE`/`YES`, `FALSE`/`NO`. CloudKit stores booleans as INT64 1 and 0, and compares them so.
    case bool(Bool)
    /// A string, number, date, location or reference.
    case value(FieldValue)
}

/// A format specifier: `%@`, `%K`, `%d`, `%i`, `%ld`, `%f`, `%s`, optionally positional (`%2$@`).
public struct FormatArgument: Hashable, Sendable {
    public enum Kind: String, Hashable, Sendable {
        case object = "@"
        case keyPath = "K"
        case integer = "d"
        case double = "f"
        case string = "s"
    }

    public var kind: Kind
    /// 0-based index into the argument list.
    public var index: Int
    /// The `N$` of a positional specifier, as written (1-based).
    public var position: Int?
    /// The exact spelling (`%ld`, `%i`, ...), printed back unchanged.
    public var spelling: String
}
