// Canonical decomposition (`String._nfd`) and full case folding (`Unicode.Scalar.Properties._caseFolded`)
// come from the standard library's `_Unicode` SPI: Swift 6.3 has no public API for either. They are
// the stdlib's own Unicode tables (the ones `String` comparison uses), available since Swift 5.7, and
// the toolchain's Regex engine (swift-experimental-string-processing) is built on the same SPI. The
// alternative for NFD, Foundation's `decomposedStringWithCanonicalMapping`, would pull all of Foundation
// (CoreFoundation and ICU) into KQuery, which otherwise needs only FoundationEssentials, and is slower.
@_spi(_Unicode) import Swift

/// Case and diacritic folding for string comparisons with NSPredicate options [c], [d], [cd].
///
/// - Case folding (`caseInsensitive`) is Unicode *full* case folding (CaseFolding.txt, statuses C and F,
///   from the standard library's tables): "É" → "é", "ß" → "ss", "ẞ" → "ss", final "ς" → "σ", "ſ" → "s",
///   "ﬁ" → "fi", "K" (Kelvin) → "k", "İ" → "i" + U+0307, "ǰ" → "j" + U+030C, Cherokee to upper case;
///   "ı" (dotless i) stays "ı" (no Turkic rules). So "ß"
///   always folds to "ss", on both sides: "Straße" and "STRASSE" are equal under [c]. Folding can change
///   the number of scalars, which matters for LIKE's `?`.
/// - Diacritic folding (`diacriticInsensitive`) is canonical decomposition (NFD) followed by removal of
///   every scalar whose General_Category is a mark (Mn, Mc, Me): "é" → "e", "ñ" → "n", "Å" (U+212B) →
///   "A", and also a kana's dakuten, Hebrew points, an Indic nukta, Arabic hamza above; lone marks
///   vanish. Compatibility decompositions are not applied ("ﬁ", "²" stay). Hangul syllables, which
///   NFD splits into conjoining jamo (letters, not marks), are recomposed, so Korean text is unchanged.
/// - With both, marks are removed before case folding, so U+0345 COMBINING GREEK YPOGEGRAMMENI goes
///   rather than becoming "ι" ("ᾳ" → "α", as Foundation's `folding(options:)` does).
/// - With neither option the string is returned as is. Without `diacriticInsensitive` no normalization
///   is applied: the result has the scalars of the input, case-folded one by one ("É" stays precomposed,
///   "E" + U+0301 stays decomposed).
///
/// Checked against Python's `str.casefold` and `unicodedata` NFD for every scalar they both know (the
/// only difference is the U+0345 rule above). Corelibs Foundation's `folding(options:)` differs for
/// Cherokee (it folds to lower case), for scalars newer than its tables, and strips fewer marks in
/// non-Latin scripts.
///
/// ASCII input takes a byte-level fast path, and is returned unchanged (no allocation) when it is
/// already folded. Scalars below U+2000 are folded through tables built on first use (about 2 ms per
/// combination of options).
public enum TextFolding {
    public static func fold(_ s: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> String {
        guard caseInsensitive || diacriticInsensitive else { return s }
        switch asciiState(s) {
        case .folded:
            return s
        case .hasUpper:
            return caseInsensitive ? asciiLowercased(s) : s
        case .nonASCII:
            return foldUnicode(s, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        }
    }

    // MARK: - ASCII

    enum ASCIIState { case folded, hasUpper, nonASCII }

    static func asciiState(_ s: String) -> ASCIIState {
        if let state = s.utf8.withContiguousStorageIfAvailable({ asciiState($0) }) { return state }
        var upper = false
        for b in s.utf8 {
            if b >= 0x80 { return .nonASCII }
            if b &- 0x41 < 26 { upper = true }
        }
        return upper ? .hasUpper : .folded
    }

    @inline(__always)
    static func asciiState(_ buf: UnsafeBufferPointer<UInt8>) -> ASCIIState {
        var or: UInt8 = 0
        var upper = false
        for b in buf {
            or |= b
            upper = upper || (b &- 0x41 < 26)
        }
        if or >= 0x80 { return .nonASCII }
        return upper ? .hasUpper : .folded
    }

    /// Lower-cases an all-ASCII string.
    static func asciiLowercased(_ s: String) -> String {
        var s = s
        return s.withUTF8 { buf in
            String(unsafeUninitializedCapacity: buf.count) { out in
                for i in 0..<buf.count { out[i] = asciiLower(buf[i]) }
                return buf.count
            }
        }
    }

    @inline(__always)
    static func asciiLower(_ b: UInt8) -> UInt8 {
        b &- 0x41 < 26 ? b | 0x20 : b
    }

    // MARK: - Unicode

    @inline(__always)
    static func isMark(_ u: Unicode.Scalar) -> Bool {
        if u.value < 0x300 { return false }
        switch u.properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark: return true
        default: return false
        }
    }

    /// The folding of text that may contain non-ASCII scalars.
    static func foldUnicode(_ s: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> String {
        var s = s
        return s.withUTF8 { foldUTF8($0, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive) }
    }

    /// The folding of valid UTF-8.
    ///
    /// Both foldings are computed scalar by scalar: case folding is defined per scalar, and NFD differs
    /// from the concatenation of the scalars' decompositions only in the order of marks, which are all
    /// removed. Scalars below U+2000 (Latin, Greek, Cyrillic, ..., Latin Extended Additional, Greek
    /// Extended) are looked up in a table built on first use; the others are folded one at a time.
    static func foldUTF8(_ buf: UnsafeBufferPointer<UInt8>, caseInsensitive: Bool, diacriticInsensitive: Bool) -> String {
        guard caseInsensitive || diacriticInsensitive else { return String(decoding: buf, as: UTF8.self) }
        var out = FoldedText(capacity: buf.count + 8, composeHangul: diacriticInsensitive)
        foldUTF8(buf, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive, into: &out)
        return out.finish()
    }

    /// Appends the folding of valid UTF-8 to `out` (whose `composeHangul` should be `diacriticInsensitive`).
    static func foldUTF8(_ buf: UnsafeBufferPointer<UInt8>, caseInsensitive: Bool, diacriticInsensitive: Bool, into out: inout FoldedText) {
        FoldTable.table(caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive).withBuffers { offsets, bytes in
            var i = 0
            let n = buf.count
            while i < n {
                let b = buf[i]
                if b < 0x80 {
                    out.append(Unicode.Scalar(caseInsensitive ? asciiLower(b) : b))
                    i += 1
                    continue
                }
                let (u, length) = decodeUTF8(buf, at: i)
                i += length
                if FoldTable.covers(u.value) {
                    let k = Int(u.value) - 0x80
                    out.append(utf8: UnsafeBufferPointer(rebasing: bytes[Int(offsets[k]) ..< Int(offsets[k + 1])]))
                } else {
                    foldScalar(u, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive, into: &out)
                }
            }
        }
    }

    /// Appends the folding of one scalar.
    static func foldScalar(_ u: Unicode.Scalar, caseInsensitive: Bool, diacriticInsensitive: Bool, into out: inout FoldedText) {
        if u.value < 0x80 {
            out.append(caseInsensitive ? Unicode.Scalar(asciiLower(UInt8(truncatingIfNeeded: u.value))) : u)
        } else if diacriticInsensitive {
            if u.value &- 0xAC00 < 11172 {
                // A Hangul syllable: NFD gives conjoining jamo, letters which recompose to it.
                out.append(u)
                return
            }
            for v in String(u)._nfd {
                if v.value < 0x80 {
                    out.append(caseInsensitive ? Unicode.Scalar(asciiLower(UInt8(truncatingIfNeeded: v.value))) : v)
                } else if isMark(v) {
                    // Marks go before case folding, so U+0345 COMBINING GREEK YPOGEGRAMMENI goes rather
                    // than folding to iota: "ᾳ" is "α", as with Foundation's `folding(options:)`.
                    continue
                } else if caseInsensitive {
                    caseFold(v, dropMarks: true, into: &out)
                } else {
                    out.append(v)
                }
            }
        } else if caseInsensitive {
            caseFold(u, dropMarks: false, into: &out)
        } else {
            out.append(u)
        }
    }

    /// Decodes the scalar whose lead byte (≥ 0x80) is at `i` of valid UTF-8, and its length in bytes.
    /// Truncated input (impossible for a Swift string) yields U+FFFD and the rest of the buffer.
    @inline(__always)
    static func decodeUTF8(_ buf: UnsafeBufferPointer<UInt8>, at i: Int) -> (Unicode.Scalar, Int) {
        let b0 = UInt32(buf[i])
        let length = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4
        guard i + length <= buf.count else { return ("\u{FFFD}", buf.count - i) }
        var v: UInt32
        switch length {
        case 2:
            v = (b0 & 0x1F) << 6 | (UInt32(buf[i + 1]) & 0x3F)
        case 3:
            v = (b0 & 0x0F) << 12 | (UInt32(buf[i + 1]) & 0x3F) << 6 | (UInt32(buf[i + 2]) & 0x3F)
        default:
            v = (b0 & 0x07) << 18 | (UInt32(buf[i + 1]) & 0x3F) << 12 | (UInt32(buf[i + 2]) & 0x3F) << 6
            v |= UInt32(buf[i + 3]) & 0x3F
        }
        return (Unicode.Scalar(v) ?? "\u{FFFD}", length)
    }

    /// Appends the full case folding of `u` (CaseFolding.txt, statuses C and F).
    @inline(__always)
    static func caseFold(_ u: Unicode.Scalar, dropMarks: Bool, into out: inout FoldedText) {
        let p = u.properties
        // Every scalar whose folding differs from it changes when case-mapped (checked for all scalars);
        // Changes_When_Casefolded alone would miss "ǰ", as it is defined on the NFD form.
        guard p.changesWhenCaseMapped else {
            out.append(u)
            return
        }
        appendFolded(p._caseFolded, dropMarks: dropMarks, into: &out)
    }

    @inline(__always)
    static func appendFolded(_ mapping: String, dropMarks: Bool, into out: inout FoldedText) {
        if dropMarks {
            // A case mapping can produce precomposed letters or marks (İ → i + U+0307): decompose again.
            for v in mapping._nfd where !isMark(v) { out.append(v) }
        } else {
            for v in mapping.unicodeScalars { out.append(v) }
        }
    }
}

/// The foldings of the scalars U+0080..<U+2000 (except the Hangul jamo block), for one combination of options.
struct FoldTable: Sendable {
    static let end: UInt32 = 0x2000

    @inline(__always)
    static func covers(_ v: UInt32) -> Bool {
        v < end && v &- 0x1100 >= 0x100
    }

    /// `offsets[v - 0x80] ..< offsets[v - 0x80 + 1]` is the folding of `v` in `bytes`.
    private let offsets: [UInt32]
    private let bytes: [UInt8]

    static let caseAndDiacritic = FoldTable(caseInsensitive: true, diacriticInsensitive: true)
    static let diacritic = FoldTable(caseInsensitive: false, diacriticInsensitive: true)
    static let caseOnly = FoldTable(caseInsensitive: true, diacriticInsensitive: false)

    static func table(caseInsensitive: Bool, diacriticInsensitive: Bool) -> FoldTable {
        caseInsensitive ? (diacriticInsensitive ? caseAndDiacritic : caseOnly) : diacritic
    }

    private init(caseInsensitive: Bool, diacriticInsensitive: Bool) {
        var offsets: [UInt32] = [0]
        offsets.reserveCapacity(Int(Self.end - 0x80) + 1)
        var bytes: [UInt8] = []
        for v in 0x80..<Self.end {
            if Self.covers(v), let u = Unicode.Scalar(v) {
                var out = FoldedText(capacity: 8, composeHangul: false)
                TextFolding.foldScalar(u, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive, into: &out)
                bytes += out.finishBytes()
            }
            offsets.append(UInt32(bytes.count))
        }
        self.offsets = offsets
        self.bytes = bytes
    }

    @inline(__always)
    func withBuffers<R>(_ body: (UnsafeBufferPointer<UInt32>, UnsafeBufferPointer<UInt8>) -> R) -> R {
        offsets.withUnsafeBufferPointer { offsets in
            bytes.withUnsafeBufferPointer { bytes in body(offsets, bytes) }
        }
    }
}

/// Accumulates folded scalars as UTF-8, recomposing Hangul syllables that NFD split into jamo.
struct FoldedText {
    private var bytes: [UInt8] = []
    /// A Hangul leading consonant or LV syllable waiting for a following vowel or trailing consonant.
    private var pendingHangul: UInt32 = 0
    private let composeHangul: Bool

    init(capacity: Int, composeHangul: Bool) {
        bytes.reserveCapacity(capacity)
        self.composeHangul = composeHangul
    }

    private static let sBase: UInt32 = 0xAC00, lBase: UInt32 = 0x1100, vBase: UInt32 = 0x1161, tBase: UInt32 = 0x11A7
    private static let lCount: UInt32 = 19, vCount: UInt32 = 21, tCount: UInt32 = 28, nCount: UInt32 = 21 * 28, sCount: UInt32 = 19 * 21 * 28

    @inline(__always)
    mutating func append(_ u: Unicode.Scalar) {
        let v = u.value
        if v < 0x80 && pendingHangul == 0 {
            bytes.append(UInt8(truncatingIfNeeded: v))
            return
        }
        appendSlow(v)
    }

    private mutating func appendSlow(_ v: UInt32) {
        typealias H = FoldedText
        if pendingHangul != 0 {
            let p = pendingHangul
            if p &- H.lBase < H.lCount, v &- H.vBase < H.vCount {
                // L + V -> LV
                pendingHangul = H.sBase + ((p - H.lBase) * H.vCount + (v - H.vBase)) * H.tCount
                return
            }
            if p &- H.sBase < H.sCount, (p - H.sBase) % H.tCount == 0, v &- (H.tBase + 1) < H.tCount - 1 {
                // LV + T -> LVT
                pendingHangul = p + (v - H.tBase)
                return
            }
            pendingHangul = 0
            encode(p)
        }
        if composeHangul, v &- H.lBase < H.lCount || (v &- H.sBase < H.sCount && (v - H.sBase) % H.tCount == 0) {
            pendingHangul = v
        } else {
            encode(v)
        }
    }

    private mutating func encode(_ v: UInt32) {
        switch v {
        case 0..<0x80:
            bytes.append(UInt8(truncatingIfNeeded: v))
        case 0x80..<0x800:
            bytes.append(UInt8(truncatingIfNeeded: 0xC0 | (v >> 6)))
            bytes.append(UInt8(truncatingIfNeeded: 0x80 | (v & 0x3F)))
        case 0x800..<0x10000:
            bytes.append(UInt8(truncatingIfNeeded: 0xE0 | (v >> 12)))
            bytes.append(UInt8(truncatingIfNeeded: 0x80 | ((v >> 6) & 0x3F)))
            bytes.append(UInt8(truncatingIfNeeded: 0x80 | (v & 0x3F)))
        default:
            bytes.append(UInt8(truncatingIfNeeded: 0xF0 | (v >> 18)))
            bytes.append(UInt8(truncatingIfNeeded: 0x80 | ((v >> 12) & 0x3F)))
            bytes.append(UInt8(truncatingIfNeeded: 0x80 | ((v >> 6) & 0x3F)))
            bytes.append(UInt8(truncatingIfNeeded: 0x80 | (v & 0x3F)))
        }
    }

    /// Appends UTF-8 that contains no Hangul jamo or syllables.
    @inline(__always)
    mutating func append(utf8: UnsafeBufferPointer<UInt8>) {
        if pendingHangul != 0 {
            encode(pendingHangul)
            pendingHangul = 0
        }
        bytes.append(contentsOf: utf8)
    }

    mutating func finishBytes() -> [UInt8] {
        if pendingHangul != 0 {
            encode(pendingHangul)
            pendingHangul = 0
        }
        return bytes
    }

    mutating func finish() -> String {
        String(decoding: finishBytes(), as: UTF8.self)
    }

    /// The text so far, leaving `self` empty (with its capacity) for reuse.
    mutating func take() -> String {
        let s = finish()
        bytes.removeAll(keepingCapacity: true)
        return s
    }
}
