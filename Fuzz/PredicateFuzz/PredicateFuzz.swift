import KQuery

/// libFuzzer entry point: feeds arbitrary bytes through the whole predicate pipeline (parse, print,
/// re-parse, bind, validate in both profiles, Web Services mapping, compile, evaluate) and traps
/// if the printer's round-trip promise breaks. Any crash, hang or sanitizer report is a bug.
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    // The one-call path (parse, validate) must agree with the two-step one below.
    let direct = try? ValidatedPredicate(text)
    guard let parsed = try? PredicateParser.parse(text) else {
        precondition(direct == nil, "ValidatedPredicate accepted what the parser refuses:\n\(text)")
        return 0
    }
    precondition(direct == (try? ValidatedPredicate(parsed)), "one-call and two-step validation differ:\n\(text)")
    let printed = parsed.canonicalText
    guard let reparsed = try? PredicateParser.parse(printed), reparsed == parsed, reparsed.canonicalText == printed else {
        preconditionFailure("round trip failed:\n\(text)\n\(printed)")
    }
    let arguments: [Constant] = [.value(.string("name")), .value(.int64(3)), .value(.list(.int64, [.int64(1), .int64(2)]))]
    for profile in PredicateProfile.allCases {
        for candidate in [[], arguments] {
            guard let validated = try? ValidatedPredicate(parsed, arguments: candidate, variables: ["v": .value(.int64(1))], profile: profile) else { continue }
            _ = try? validated.condition.webServicesFilters(now: 0)
            let compiled = CompiledPredicate(validated)
            for record in FuzzRecords.all { _ = compiled.matches(record, now: 1_000) }
        }
    }
    return 0
}

enum FuzzRecords {
    static let all: [Record] = [
        Record(recordType: "T", recordName: "a", fields: [
            "a": .int64(1), "name": .string("Le Petit Zinc"), "tags": .list(.string, [.string("wine"), .string("é")]),
            "location": .location(Location(latitude: 48.85, longitude: 2.35)), "seats": .double(25),
            "t": .timestamp(5), "chef": .reference(Reference(recordID: RecordID(recordName: "r1"))),
        ]),
        Record(recordType: "T", recordName: "b", fields: ["a": .string("x"), "tags": .string("wine")]),
        Record(recordType: "T", recordName: "c"),
    ]
}
