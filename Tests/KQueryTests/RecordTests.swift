import Testing
@testable import KQuery

@Suite("Records and JSON")
struct RecordTests {
    @Test func typedAndShorthandForms() throws {
        let records = try Fixtures.records("restaurants.ndjson")
        #expect(records.count == 6)
        #expect(records.filter { $0.recordType == "Restaurant" }.count == 5)
        let p1 = try #require(records.first { $0.recordID.recordName == "p1" })
        let p2 = try #require(records.first { $0.recordID.recordName == "p2" })
        #expect(p1["seats"] == .int64(40))
        #expect(p2["seats"] == .int64(12))
        #expect(p1["score"] == .double(4.2))
        #expect(p2["score"] == .double(4.8))
        #expect(p1["tags"] == .list(.string, [.string("wine"), .string("terrace")]))
        #expect(p2["tags"] == .list(.string, [.string("omakase")]))
        #expect(p1["opened"] == .timestamp(1_262_304_000_000))
        #expect(p2["chef"] == .reference(Reference(recordID: RecordID(recordName: "kai"))))
        #expect(p2["location"] == .location(Location(latitude: 48.8534692, longitude: 2.3790793)))
        #expect(p1.creationDate == 1_600_000_000_000)
        #expect(p1.creatorUserRecordName == "_owner")
        let p3 = try #require(records.first { $0.recordID.recordName == "p3" })
        #expect(p3["seats"] == .double(25))
    }

    @Test func largeIntegersStayExact() throws {
        let record = try Record(json: JSON.parse(#"{"recordName":"r","recordType":"T","fields":{"n":9007199254740993,"m":{"value":-9223372036854775808,"type":"INT64"}}}"#))
        #expect(record["n"] == .int64(9_007_199_254_740_993))
        #expect(record["m"] == .int64(.min))
    }

    @Test func writesTheWebServicesForm() throws {
        let text = #"{"recordName":"r","recordType":"T","zoneID":{"zoneName":"Z","ownerRecordName":"_u"},"fields":{"b":{"value":"AQID","type":"BYTES"},"l":{"value":[1,2],"type":"INT64_LIST"},"t":{"value":5,"type":"TIMESTAMP"}},"created":{"timestamp":1,"userRecordName":"_u","deviceID":"2"},"recordChangeTag":"3"}"#
        let record = try Record(json: JSON.parse(text))
        #expect(record["b"] == .bytes([1, 2, 3]))
        #expect(record.json().serialized == text)
        #expect(try Record(json: record.json()) == record)
        #expect(record.json(desiredKeys: []).serialized.contains(#""fields":{}"#))
    }

    /// Malformed records: the message names what is wrong.
    @Test(arguments: [
        (#"{"recordType":"T"}"#, "recordName"),
        (#"{"recordName":"r"}"#, "recordType"),
        (#"{"recordName":"r","recordType":"T","fields":{"1bad":"x"}}"#, "invalid field name '1bad'"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":{"value":"x","type":"INT64"}}}"#, "field 'a': expected an integer for INT64"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":{"value":1.5,"type":"INT64"}}}"#, "expected an integer"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":{"value":1,"type":"NUMBER"}}}"#, "unknown field type 'NUMBER'"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":[1,"x"]}}"#, "mixes"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":{"latitude":95,"longitude":0}}}"#, "outside"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":{"value":"%%%","type":"BYTES"}}}"#, "base64"),
        (#"{"recordName":"r","recordType":"T","fields":{"a":{"foo":1}}}"#, "cannot infer"),
        (#"[1]"#, "must be a JSON object"),
    ])
    func decodingErrors(text: String, fragment: String) throws {
        do {
            _ = try Record(json: JSON.parse(text))
            Issue.record("accepted \(text)")
        } catch let error as RecordDecodingError {
            #expect(error.message.contains(fragment), "\(error.message)")
        }
    }

    /// A bad line fails the whole file with its line number: nothing is half-loaded.
    @Test func fileErrorsNameTheLine() {
        let text = """
            {"recordName":"a","recordType":"T","fields":{}}

            {"recordName":"b","recordType":"T","fields":{"x": }}
            """
        do {
            _ = try RecordFile.parse(text, path: "data.ndjson")
            Issue.record("accepted")
        } catch {
            #expect(error.description.hasPrefix("data.ndjson:3: "), "\(error)")
        }
        #expect(throws: RecordFileError.self) { try RecordFile.parse("[{\"recordName\":\"a\"}]") }
        #expect(throws: RecordFileError.self) { try RecordFile.load(path: "/nonexistent/file.ndjson") }
    }

    @Test func jsonArrayFiles() throws {
        let records = try RecordFile.parse(#"[{"recordName":"a","recordType":"T"},{"recordName":"b","recordType":"T","fields":{"n":1}}]"#)
        #expect(records.map(\.recordID.recordName) == ["a", "b"])
    }

    @Test(arguments: [
        ("{\"a\":1", "1:7"), ("[1,]", "1:4"), ("{\"a\" 1}", "1:6"), ("\"\\x\"", "1:2"), ("01", "1:1"), ("[1]x", "1:4"),
        ("\n\n  tru", "3:3"), (String(repeating: "[", count: 1000), "1:257"),
    ])
    func jsonErrors(text: String, position: String) {
        do {
            _ = try JSON.parse(text)
            Issue.record("parsed \(text)")
        } catch {
            #expect("\(error.line):\(error.column)" == position, "\(error)")
        }
    }

    @Test func timestampsRoundTrip() {
        for ms: Int64 in [0, 1, -1, 999, 1_714_564_800_000, -62_135_596_800_000, 253_402_300_799_999, 951_782_400_000,
                          253_402_300_800_000, -62_135_596_800_001, 7_260_978_307_200_000, -8_999_999_999_999_999, .max, .min] {
            #expect(Timestamp.parseISO8601(Timestamp.iso8601(ms)) == ms, "\(ms) \(Timestamp.iso8601(ms))")
        }
        #expect(Timestamp.iso8601(951_782_400_000) == "2000-02-29T00:00:00Z")
        #expect(Timestamp.parseISO8601("2001-02-29") == nil)
        #expect(Timestamp.parseISO8601("2024-01-01T00:00:00-05:00") == 1_704_085_200_000)
        // Years outside 0000–9999 in ISO 8601's expanded form (the fuzzer found the old printer's
        // "232061-03-29" unreadable); instants past 64-bit milliseconds are refused, not wrapped.
        #expect(Timestamp.iso8601(7_260_978_307_200_000) == "+232061-03-29T18:40:00Z")
        #expect(Timestamp.iso8601(-62_135_596_800_001) == "0000-12-31T23:59:59.999Z")
        #expect(Timestamp.iso8601(-62_167_219_200_001) == "-0001-12-31T23:59:59.999Z")
        #expect(Timestamp.parseISO8601("-0001-12-31T23:59:59.999Z") == -62_167_219_200_001)
        #expect(Timestamp.iso8601(253_402_300_800_000) == "+10000-01-01T00:00:00Z")
        #expect(Timestamp.parseISO8601("+10000-01-01") == 253_402_300_800_000)
        #expect(Timestamp.parseISO8601("+2024-01-01") == 1_704_067_200_000)
        #expect(Timestamp.parseISO8601("232061-03-29") == nil)
        #expect(Timestamp.parseISO8601("+999999999-12-31") == nil)
        #expect(Timestamp.parseISO8601("+123-01-01") == nil)
    }

    @Test func fieldsStaySorted() {
        var fields = Fields()
        for name in ["zeta", "alpha", "mid", "alpha"] { fields[name] = .string(name) }
        fields["mid"] = nil
        #expect(fields.count == 2)
        #expect(fields["alpha"] == .string("alpha"))
        #expect(fields["mid"] == nil)
        #expect(fields.sortedNames == ["alpha", "zeta"])
    }
}

@Suite("Record parent and share")
struct RecordParentShareTests {
    /// Web Services `parent` and `share` become the `___parent` and `___share` system fields.
    @Test func parentAndShareRoundTrip() throws {
        let json = try JSON.parse("""
            {"recordName":"n1","recordType":"Note","zoneID":{"zoneName":"Notes","ownerRecordName":"_u"},"fields":{},\
            "parent":{"recordName":"folder"},"share":{"recordName":"s1","zoneID":{"zoneName":"Shares","ownerRecordName":"_u"}}}
            """)
        let record = try Record(json: json)
        #expect(record.parent?.recordID == RecordID(recordName: "folder", zoneID: ZoneID(zoneName: "Notes", ownerName: "_u")))
        #expect(record.share?.recordID == RecordID(recordName: "s1", zoneID: ZoneID(zoneName: "Shares", ownerName: "_u")))
        #expect(try Record(json: record.json()) == record)
        #expect(record.json()["parent"]?.serialized == #"{"recordName":"folder"}"#)
        #expect(record.value(of: .parent) == .reference(Reference(recordID: record.parent!.recordID)))
        #expect(throws: RecordDecodingError.self) { try Record(json: try JSON.parse(#"{"recordName":"n","recordType":"T","parent":"folder"}"#)) }
    }

    @Test(arguments: ["_private", "price$usd", "a1_$"])
    func fieldNamesCloudKitAccepts(name: String) throws {
        let record = try Record(json: try JSON.parse(#"{"recordName":"n","recordType":"T","fields":{"\#(name)":{"value":1}}}"#))
        #expect(record[name] == .int64(1))
    }

    @Test(arguments: ["1a", "$a", "a-b", "a.b", ""])
    func fieldNamesCloudKitRefuses(name: String) {
        #expect(throws: RecordDecodingError.self) {
            try Record(json: try JSON.parse(#"{"recordName":"n","recordType":"T","fields":{"\#(name)":{"value":1}}}"#))
        }
    }
}
