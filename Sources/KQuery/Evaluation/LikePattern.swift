/// An NSPredicate `LIKE` pattern: `?` matches exactly one character, `*` matches zero or more
/// characters, and everything else is literal, including regular-expression metacharacters
/// (`.`, `[`, `(`, `+`, `^`, `$`, ...). A backslash escapes a following `?`, `*` or `\`; a backslash
/// before anything else, or at the end, is itself a literal backslash. The match is of the whole string.
///
/// "Character" means Unicode scalar: `?` matches one scalar, so it matches "é" when the "é" is
/// precomposed (U+00E9) but not when it is "e" + U+0301 (two scalars), and literals compare scalar by
/// scalar without normalization. With `diacriticInsensitive` both sides are decomposed and stripped of
/// marks first (see `TextFolding`), so that difference disappears. With `caseInsensitive` both sides are
/// case-folded, which can change the number of scalars ("ß" folds to "ss", so `LIKE[c] "stra?e"` does
/// not match "Straße", while `LIKE[c] "strasse"` does).
///
/// Matching works on UTF-8 and is O(n·m) in the worst case, never exponential: the pattern is split at
/// its stars into pieces; the first piece is anchored at the start, the last at the end, and each piece
/// in between is matched at its leftmost position after the previous one (which is optimal, since each
/// piece has a fixed number of scalars). UTF-8 never contains the byte 0xFF, which stands for `?`
/// inside a piece.
public struct LikePattern: Sendable {
    public let pattern: String
    public let caseInsensitive: Bool
    public let diacriticInsensitive: Bool

    /// The folded pattern before the first star (the whole pattern when there is no star).
    private let head: [UInt8]
    /// The non-empty pieces between stars.
    private let middle: [[UInt8]]
    /// The piece after the last star.
    private let tail: [UInt8]
    private let hasStar: Bool

    private static let anyScalar: UInt8 = 0xFF

    public init(_ pattern: String, caseInsensitive: Bool = false, diacriticInsensitive: Bool = false) {
        self.pattern = pattern
        self.caseInsensitive = caseInsensitive
        self.diacriticInsensitive = diacriticInsensitive
        // Folding leaves `\`, `?` and `*` alone, so escapes can be read after it.
        let folded = Array(TextFolding.fold(pattern, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive).utf8)
        var pieces: [[UInt8]] = [[]]
        var i = 0
        while i < folded.count {
            let b = folded[i]
            switch b {
            case UInt8(ascii: "\\"):
                if i + 1 < folded.count, [UInt8(ascii: "?"), UInt8(ascii: "*"), UInt8(ascii: "\\")].contains(folded[i + 1]) {
                    pieces[pieces.count - 1].append(folded[i + 1])
                    i += 2
                    continue
                }
                pieces[pieces.count - 1].append(b)
            case UInt8(ascii: "?"):
                pieces[pieces.count - 1].append(Self.anyScalar)
            case UInt8(ascii: "*"):
                pieces.append([])
            default:
                pieces[pieces.count - 1].append(b)
            }
            i += 1
        }
        hasStar = pieces.count > 1
        head = pieces[0]
        tail = hasStar ? pieces[pieces.count - 1] : []
        middle = hasStar ? pieces[1..<(pieces.count - 1)].filter { !$0.isEmpty } : []
    }

    public func matches(_ s: String) -> Bool {
        var subject = s
        var lower = false
        if caseInsensitive || diacriticInsensitive {
            switch TextFolding.asciiState(subject) {
            case .folded:
                break
            case .hasUpper:
                // ASCII has no diacritics; case-fold byte by byte while comparing instead of copying.
                lower = caseInsensitive
            case .nonASCII:
                subject = TextFolding.foldUnicode(subject, caseInsensitive: caseInsensitive,
                                                  diacriticInsensitive: diacriticInsensitive)
            }
        }
        return subject.withUTF8 { buf in
            lower ? match(buf, lower: true) : match(buf, lower: false)
        }
    }

    @inline(__always)
    private func match(_ s: UnsafeBufferPointer<UInt8>, lower: Bool) -> Bool {
        let n = s.count
        guard hasStar else {
            return Self.matchForward(head, s, from: 0, limit: n, lower: lower) == n
        }
        guard let headEnd = Self.matchForward(head, s, from: 0, limit: n, lower: lower),
              let tailStart = Self.matchBackward(tail, s, end: n, lowerBound: headEnd, lower: lower)
        else { return false }
        var position = headEnd
        for piece in middle {
            guard let end = Self.find(piece, s, from: position, limit: tailStart, lower: lower) else { return false }
            position = end
        }
        return true
    }

    @inline(__always)
    private static func load(_ s: UnsafeBufferPointer<UInt8>, _ i: Int, lower: Bool) -> UInt8 {
        lower ? TextFolding.asciiLower(s[i]) : s[i]
    }

    /// The length of the UTF-8 sequence with this lead byte.
    @inline(__always)
    private static func sequenceLength(_ lead: UInt8) -> Int {
        lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4
    }

    /// Matches `piece` at `from`, without passing `limit`; returns where the match ends.
    private static func matchForward(_ piece: [UInt8], _ s: UnsafeBufferPointer<UInt8>, from: Int, limit: Int, lower: Bool) -> Int? {
        var i = from
        for e in piece {
            guard i < limit else { return nil }
            if e == anyScalar {
                i += sequenceLength(s[i])
            } else {
                guard load(s, i, lower: lower) == e else { return nil }
                i += 1
            }
        }
        return i <= limit ? i : nil
    }

    /// Matches `piece` so that it ends at `end`, without going below `lowerBound` (a scalar boundary);
    /// returns where the match starts.
    private static func matchBackward(_ piece: [UInt8], _ s: UnsafeBufferPointer<UInt8>, end: Int, lowerBound: Int, lower: Bool) -> Int? {
        var i = end
        for e in piece.reversed() {
            guard i > lowerBound else { return nil }
            i -= 1
            if e == anyScalar {
                while i > lowerBound && s[i] & 0xC0 == 0x80 { i -= 1 }
            } else {
                guard load(s, i, lower: lower) == e else { return nil }
            }
        }
        return i
    }

    /// The end of the leftmost match of `piece` (non-empty) starting at or after `from` and ending at or before `limit`.
    private static func find(_ piece: [UInt8], _ s: UnsafeBufferPointer<UInt8>, from: Int, limit: Int, lower: Bool) -> Int? {
        // Every element of a piece consumes at least one byte.
        let lastStart = limit - piece.count
        guard from <= lastStart else { return nil }
        let first = piece[0]
        var start = from
        if first == anyScalar {
            while start <= lastStart {
                if s[start] & 0xC0 != 0x80, let end = matchForward(piece, s, from: start, limit: limit, lower: lower) {
                    return end
                }
                start += 1
            }
        } else {
            // A literal first byte is a lead byte, so a match of it starts on a scalar boundary.
            while start <= lastStart {
                if load(s, start, lower: lower) == first, let end = matchForward(piece, s, from: start, limit: limit, lower: lower) {
                    return end
                }
                start += 1
            }
        }
        return nil
    }
}
