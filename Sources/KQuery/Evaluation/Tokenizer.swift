/// CloudKit-style tokens for full-text search (`TOKENMATCHES`, `allTokens`).
///
/// A token is a maximal run of scalars whose General_Category is a letter (L*), a number (N*) or a
/// mark (M*); everything else separates tokens. So punctuation, symbols, emoji, spaces and apostrophes
/// split words: "wine-bar" is "wine" and "bar", "don't" is "don" and "t", "18.5" is "18" and "5".
/// Scripts written without spaces (CJK, Thai) form one token per run, since no dictionary-based
/// segmentation is done. Each token is folded with `TextFolding.fold(_:caseInsensitive: true,
/// diacriticInsensitive: true)` ("Élégant" → "elegant", "Straße" → "strasse"); no stemming is done
/// ("sessions" stays "sessions"). Tokens that are stop words after folding are dropped, as are runs
/// that fold to nothing (a lone combining mark).
///
/// ASCII runs are scanned and lower-cased byte by byte; runs containing non-ASCII scalars are
/// classified with scalar properties and folded through `TextFolding`.
public enum Tokenizer {
    /// The stop words: a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with
    public static let stopWords: Set<String> = [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
        "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they",
        "this", "to", "was", "will", "with",
    ]

    /// Tokens of `text`: Unicode word segmentation as maximal runs of letters, digits and marks,
    /// each folded to lower case with diacritics stripped, stop words removed (after folding).
    /// Order of first occurrence, duplicates removed.
    public static func tokens(of text: String) -> [String] {
        var sink = OrderedTokens()
        let expected = min(text.utf8.count / 4 + 1, 32)
        sink.tokens.reserveCapacity(expected)
        sink.fingerprints.reserveCapacity(expected)
        scan(text, into: &sink)
        return sink.tokens
    }

    /// Appends the tokens of `text` to `set` (for building a record's token set from several fields
    /// without intermediate arrays).
    public static func addTokens(of text: String, to set: inout Set<String>) {
        var sink = SetTokens(set: set)
        set = []  // keep `sink.set` uniquely referenced while inserting
        scan(text, into: &sink)
        set = sink.set
    }

    /// `addTokens(of:to:)` over text given as UTF-8 bytes, which must be valid UTF-8 (a store's
    /// column holds its strings so, and making a `String` of each to tokenize it cost as much again).
    package static func addTokens(inUTF8 text: UnsafeBufferPointer<UInt8>, to set: inout Set<String>) {
        var sink = SetTokens(set: set)
        set = []  // keep `sink.set` uniquely referenced while inserting
        wordBits.withUnsafeBufferPointer { scan(text, $0, into: &sink) }
        set = sink.set
    }

    /// Calls `body` with each token of `text`, in order, repeats included (a caller that files
    /// tokens by row drops a row's repeats itself). For building token indexes from stored text
    /// without a `Set` per record.
    package static func forEachToken(in text: String, _ body: (String) -> Void) {
        var text = text
        text.withUTF8 { forEachToken(inUTF8: $0, body) }
    }

    /// `forEachToken(in:_:)` over text given as UTF-8 bytes, which must be valid UTF-8 (as a
    /// `String`'s are).
    package static func forEachToken(inUTF8 text: UnsafeBufferPointer<UInt8>, _ body: (String) -> Void) {
        withoutActuallyEscaping(body) { body in
            var sink = EachToken(body: body)
            wordBits.withUnsafeBufferPointer { scan(text, $0, into: &sink) }
        }
    }

    // MARK: - Sinks

    /// Hands each token to a closure.
    struct EachToken: TokenSink {
        let body: (String) -> Void
        mutating func add(_ token: String, fingerprint: UInt64) { body(token) }
        /// No fingerprint: nothing here compares tokens.
        mutating func addASCII(_ run: UnsafeBufferPointer<UInt8>) {
            body(String(unsafeUninitializedCapacity: run.count) { out in
                for j in 0..<run.count { out[j] = TextFolding.asciiLower(run[j]) }
                return run.count
            })
        }
    }

    protocol TokenSink {
        /// `fingerprint` is `Tokenizer.fingerprint` of the token's UTF-8.
        mutating func add(_ token: String, fingerprint: UInt64)
        /// Adds a run of ASCII letters and digits, not yet lower-cased, that is not a stop word.
        /// The default makes the token's string; a sink that only looks tokens up can read the
        /// bytes instead.
        mutating func addASCII(_ run: UnsafeBufferPointer<UInt8>)
    }

    /// FNV-1a of UTF-8 bytes.
    @inline(__always)
    static func fingerprint<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }

    struct OrderedTokens: TokenSink {
        var tokens: [String] = []
        /// A cheap hash of each token's UTF-8, to skip most string comparisons in the linear check.
        var fingerprints: [UInt64] = []
        /// Built once there are enough tokens for linear duplicate checks to be slower than hashing.
        var seen: Set<String>? = nil

        mutating func add(_ token: String, fingerprint: UInt64) {
            if seen != nil {
                if seen?.insert(token).inserted == true { tokens.append(token) }
                return
            }
            // Folded tokens are canonically decomposed (Hangul aside, recomposed), so equal tokens have
            // equal bytes and equal fingerprints.
            for (j, f) in fingerprints.enumerated() where f == fingerprint && tokens[j] == token { return }
            tokens.append(token)
            fingerprints.append(fingerprint)
            if tokens.count == 32 { seen = Set(tokens) }
        }
    }

    struct SetTokens: TokenSink {
        var set: Set<String>
        mutating func add(_ token: String, fingerprint: UInt64) { set.insert(token) }
    }

    // MARK: - Scanning

    static func scan<Sink: TokenSink>(_ text: String, into sink: inout Sink) {
        var text = text
        let wordBits = Tokenizer.wordBits
        wordBits.withUnsafeBufferPointer { wordBits in
            text.withUTF8 { scan($0, wordBits, into: &sink) }
        }
    }

    static func scan<Sink: TokenSink>(_ buf: UnsafeBufferPointer<UInt8>, _ wordBits: UnsafeBufferPointer<UInt64>, into sink: inout Sink) {
        let n = buf.count
        var scratch = FoldedText(capacity: 0, composeHangul: true)
        var i = 0
        while i < n {
            // Skip separators.
            let b = buf[i]
            if b < 0x80 {
                if !isASCIIWordByte(b) { i += 1; continue }
            } else {
                let (u, length) = TextFolding.decodeUTF8(buf, at: i)
                if !isWordScalar(u, wordBits) { i += length; continue }
            }
            // A run of word scalars.
            let start = i
            var ascii = true
            while i < n {
                let b = buf[i]
                if b < 0x80 {
                    guard isASCIIWordByte(b) else { break }
                    i += 1
                } else {
                    let (u, length) = TextFolding.decodeUTF8(buf, at: i)
                    guard isWordScalar(u, wordBits) else { break }
                    ascii = false
                    i += length
                }
            }
            let run = UnsafeBufferPointer(rebasing: buf[start..<i])
            if ascii {
                addASCII(run, to: &sink)
            } else {
                TextFolding.foldUTF8(run, caseInsensitive: true, diacriticInsensitive: true, into: &scratch)
                let token = scratch.take()
                if !token.isEmpty && !isStopWord(token) { sink.add(token, fingerprint: fingerprint(token.utf8)) }
            }
        }
    }

    @inline(__always)
    static func isASCIIWordByte(_ b: UInt8) -> Bool {
        (b | 0x20) &- 0x61 < 26 || b &- 0x30 < 10
    }

    @inline(__always)
    static func isWordScalar(_ u: Unicode.Scalar, _ wordBits: UnsafeBufferPointer<UInt64>) -> Bool {
        let v = u.value
        if v < wordBitsEnd {
            return wordBits[Int(v >> 6)] & (1 << UInt64(v & 63)) != 0
        }
        return hasWordCategory(u)
    }

    /// `isWordScalar` for the scalars below `wordBitsEnd`, one bit each.
    static let wordBitsEnd: UInt32 = 0x2000
    static let wordBits: [UInt64] = {
        var bits = [UInt64](repeating: 0, count: Int(wordBitsEnd / 64))
        for v in 0..<wordBitsEnd {
            if let u = Unicode.Scalar(v), hasWordCategory(u) { bits[Int(v >> 6)] |= 1 << UInt64(v & 63) }
        }
        return bits
    }()

    static func hasWordCategory(_ u: Unicode.Scalar) -> Bool {
        switch u.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
             .decimalNumber, .letterNumber, .otherNumber,
             .nonspacingMark, .spacingMark, .enclosingMark:
            return true
        default:
            return false
        }
    }

    /// Drops an ASCII run if it is a stop word, and else adds it.
    @inline(__always)
    static func addASCII<Sink: TokenSink>(_ run: UnsafeBufferPointer<UInt8>, to sink: inout Sink) {
        let n = run.count
        if n <= 5 {
            var key: UInt64 = 0
            for j in 0..<n { key |= UInt64(TextFolding.asciiLower(run[j])) << (8 * UInt64(j)) }
            if isStopWordKey(key) { return }
        }
        sink.addASCII(run)
    }

    /// Whether a folded token is a stop word.
    @inline(__always)
    static func isStopWord(_ token: String) -> Bool {
        let utf8 = token.utf8
        guard utf8.count <= 5 else { return false }
        var key: UInt64 = 0
        var j: UInt64 = 0
        for b in utf8 {
            key |= UInt64(b) << (8 * j)
            j += 1
        }
        return isStopWordKey(key)
    }

    /// The stop words packed little-endian into integers (all are at most 5 ASCII bytes), in an
    /// open-addressing hash table of 128 slots (0 is empty; no stop word packs to 0).
    static let stopWordTable: [UInt64] = {
        var table = [UInt64](repeating: 0, count: 128)
        for word in stopWords {
            var key: UInt64 = 0
            for (j, b) in word.utf8.enumerated() { key |= UInt64(b) << (8 * UInt64(j)) }
            var slot = stopWordSlot(key)
            while table[slot] != 0 { slot = (slot + 1) & 127 }
            table[slot] = key
        }
        return table
    }()

    @inline(__always)
    static func stopWordSlot(_ key: UInt64) -> Int {
        Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> 57)
    }

    @inline(__always)
    static func isStopWordKey(_ key: UInt64) -> Bool {
        stopWordTable.withUnsafeBufferPointer { table in
            var slot = stopWordSlot(key)
            while true {
                let k = table[slot]
                if k == key { return true }
                if k == 0 { return false }
                slot = (slot + 1) & 127
            }
        }
    }
}

extension Tokenizer.TokenSink {
    /// Lower-cases the run into a new string, and adds it.
    @inline(__always)
    mutating func addASCII(_ run: UnsafeBufferPointer<UInt8>) {
        let n = run.count
        var hash: UInt64 = 0
        let token = String(unsafeUninitializedCapacity: n) { out in
            for j in 0..<n { out[j] = TextFolding.asciiLower(run[j]) }
            hash = Tokenizer.fingerprint(UnsafeBufferPointer(rebasing: out[0..<n]))
            return n
        }
        add(token, fingerprint: hash)
    }
}
