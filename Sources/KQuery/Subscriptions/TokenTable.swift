import CKQuerySupport

/// The token postings of one record type's token searches, found by the tokenizer's fingerprint.
///
/// Probing looks up every token of a changed record's text. A `Dictionary<String, _>` hashes each
/// token again (SipHash) and copies its postings out (a retain on a cold array); here the lookup
/// reuses the FNV fingerprint the tokenizer computed while lower-casing the token, and postings are
/// read in place. Tokens are numbered; a number is reused after its token's last use is gone.
struct TokenTable: Sendable {
    struct Posting: Sendable {
        var entry: UInt32
        /// The number of a second token the record must have, or `UInt32.max`.
        var requires: UInt32
        /// Whether a record with the token (and the required one) matches the entry: its predicate
        /// is the token search alone, on no other tokens.
        var decides = false
    }

    private var lookup = SlotHashTable()
    /// By token number; an empty name marks a free number.
    private var names: [String] = []
    /// Postings plus requirements naming the token: it is dropped when none remain.
    private var uses: [Int] = []
    private var postings: [[Posting]] = []
    private var free: [UInt32] = []

    var isEmpty: Bool { lookup.count == 0 }

    /// The number of `token`, whose fingerprint is `Tokenizer.fingerprint` of its UTF-8. The
    /// table's buckets hold 32 bits of each token's hash, so a name is read (a cache miss, at
    /// thousands of tokens) only when those bits match.
    func number(of token: String, fingerprint: UInt64) -> UInt32? {
        lookup.first(hash: Self.hash(fingerprint)) { names[Int($0)] == token }
    }

    /// Appends to `candidates` the entries whose token search `record`'s text could satisfy (those
    /// under one of its tokens whose required second token, if any, it has too), marked
    /// `QuerySubscriptionIndex.Found.decided` when their posting decides them.
    func probe(_ record: Record, into candidates: inout [UInt32]) {
        // The lookup reads the tables through pointers: held as arrays, each token looked up
        // would retain and release them.
        let probe = lookup.withBuckets { buckets in
            names.withUnsafeBufferPointer { names in
                var probe = Probe(buckets: buckets, names: names)
                record.fields.withEntries { fields in
                    for field in fields {
                        switch field.value {
                        case .string(let text): Tokenizer.scan(text, into: &probe)
                        case .list(.string, let members):
                            for case .string(let text) in members { Tokenizer.scan(text, into: &probe) }
                        default: break
                        }
                    }
                }
                return probe.found
            }
        }
        guard !probe.present.isEmpty else { return }
        postings.withUnsafeBufferPointer { postings in
            guard let base = postings.baseAddress else { return }
            // Each token's postings are a cold array: ask for all of them before reading any. The
            // array's storage address is read as a plain word (no retain, which would wait for it).
            for number in probe.present {
                let storage = UnsafeRawPointer(base + Int(number)).load(as: UInt.self)
                guard let address = UnsafeRawPointer(bitPattern: storage) else { continue }
                kquery_prefetch(address)
                kquery_prefetch(address + 64)
            }
        }
        for number in probe.present {
            forEachPosting(of: number) { posting in
                guard posting.requires == .max || probe.has(posting.requires) else { return }
                candidates.append(posting.decides ? posting.entry | QuerySubscriptionIndex.Found.decided : posting.entry)
            }
        }
    }

    /// The numbers of a record's tokens that have postings, once each.
    private struct Present {
        var present: [UInt32] = []
        /// Bit `n % 64` set for each present number n: most required tokens are ruled out by it.
        var mask: UInt64 = 0

        func has(_ number: UInt32) -> Bool {
            mask & 1 << UInt64(number & 63) != 0 && present.contains(number)
        }

        mutating func add(_ number: UInt32) {
            guard !has(number) else { return }
            present.append(number)
            mask |= 1 << UInt64(number & 63)
        }
    }

    /// Looks up each token of a record's text, collecting those that have postings.
    private struct Probe: Tokenizer.TokenSink {
        /// What lookups read, borrowed for the probe.
        let buckets: UnsafeBufferPointer<UInt64>
        let names: UnsafeBufferPointer<String>
        var found = Present()

        init(buckets: UnsafeBufferPointer<UInt64>, names: UnsafeBufferPointer<String>) {
            self.buckets = buckets
            self.names = names
            found.present.reserveCapacity(16)
        }

        mutating func add(_ token: String, fingerprint: UInt64) {
            let names = names
            guard let number = SlotHashTable.first(in: buckets, hash: TokenTable.hash(fingerprint), where: { names[Int($0)] == token }) else { return }
            found.add(number)
        }

        /// Looks an ASCII token up by its bytes, lower-cased into a temporary buffer: no string is made.
        mutating func addASCII(_ run: UnsafeBufferPointer<UInt8>) {
            let (buckets, names) = (buckets, names)
            let number: UInt32? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: run.count) { lowered in
                for j in run.indices { lowered[j] = TextFolding.asciiLower(run[j]) }
                let token = UnsafeBufferPointer(lowered)
                return SlotHashTable.first(in: buckets, hash: TokenTable.hash(Tokenizer.fingerprint(token))) { number in
                    var name = names[Int(number)]
                    return name.withUTF8 { $0.elementsEqual(token) }
                }
            }
            if let number { found.add(number) }
        }
    }

    /// Calls `body` with each posting under token `number`.
    func forEachPosting(of number: UInt32, _ body: (Posting) -> Void) {
        postings[Int(number)].withUnsafeBufferPointer { for posting in $0 { body(posting) } }
    }

    /// The token's number, counting one more use (a posting or a requirement).
    mutating func retain(_ token: String) -> UInt32 {
        let fingerprint = Tokenizer.fingerprint(token.utf8)
        if let number = number(of: token, fingerprint: fingerprint) {
            uses[Int(number)] += 1
            return number
        }
        let number: UInt32
        if let reused = free.popLast() {
            number = reused
            names[Int(number)] = token
            uses[Int(number)] = 1
        } else {
            number = UInt32(names.count)
            names.append(token)
            uses.append(1)
            postings.append([])
        }
        lookup.insert(number, hash: Self.hash(fingerprint))
        return number
    }

    /// Counts one use of `token` fewer, dropping it after its last.
    mutating func release(_ token: String) {
        let fingerprint = Tokenizer.fingerprint(token.utf8)
        guard let number = number(of: token, fingerprint: fingerprint) else { return }
        uses[Int(number)] -= 1
        guard uses[Int(number)] <= 0 else { return }
        lookup.remove(number, hash: Self.hash(fingerprint))
        names[Int(number)] = ""
        postings[Int(number)] = []
        free.append(number)
    }

    /// Files `entry` under `token` (retained).
    mutating func add(_ posting: Posting, under token: String) {
        let number = retain(token)
        postings[Int(number)].append(posting)
    }

    /// Removes `entry`'s postings under `token`, and releases the token.
    mutating func remove(entry: UInt32, under token: String) {
        if let number = number(of: token, fingerprint: Tokenizer.fingerprint(token.utf8)) {
            postings[Int(number)].removeAll { $0.entry == entry }
        }
        release(token)
    }

    fileprivate static func hash(_ fingerprint: UInt64) -> Int { Int(truncatingIfNeeded: fingerprint ^ fingerprint >> 32) }
}
