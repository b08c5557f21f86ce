import PropertyBased
import Testing
@testable import KQuery

/// `Record.writeJSON` (what a server writes query results with) gives the very bytes of
/// `json(desiredKeys:).serializedBytes`, for records with every field kind, zone, system field and
/// set of desired keys.
@Suite("Record JSON writer")
struct RecordJSONWriterTests {
    static let strings = ["", "x", "it's", "say \"hi\"", "a\\b", "line\nbreak", "tab\t", "cr\r", "é", "😀", "\u{1}\u{1f}", "%@", "long " + String(repeating: "words ", count: 40)]
    static let names = ["a", "b", "title", "Title", "_x", "x_1", "price", "z", "é"].filter { FieldKey.isValidName($0) }

    static func pick<T>(_ values: [T], _ rng: inout SplitMix) -> T { values[Int(rng.next() % UInt64(values.count))] }
    static func maybe<T>(_ value: T, _ rng: inout SplitMix) -> T? { rng.next() % 2 == 0 ? value : nil }

    static func double(_ rng: inout SplitMix) -> Double {
        pick([0, -0.0, 1, -1.5, 0.1, 1e300, -2.5e-300, 123456789.125, Double(Int64.max), .leastNonzeroMagnitude], &rng)
    }

    static func zone(_ rng: inout SplitMix) -> ZoneID {
        pick([.default, ZoneID(zoneName: "Notes"), ZoneID(zoneName: "z \"q\"", ownerName: "_owner")], &rng)
    }

    static func scalar(_ type: FieldType, _ rng: inout SplitMix) -> FieldValue {
        switch type {
        case .string: .string(pick(strings, &rng))
        case .int64: .int64(pick([0, 1, -1, 42, .max, .min, 1_704_164_645_000], &rng))
        case .double: .double(double(&rng))
        case .timestamp: .timestamp(pick([0, 1_704_164_645_000, -86_400_000], &rng))
        case .bytes: .bytes((0..<Int(rng.next() % 6)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
        case .location:
            .location(Location(latitude: 48.5, longitude: -2.25, altitude: maybe(double(&rng), &rng), horizontalAccuracy: maybe(5, &rng),
                               verticalAccuracy: maybe(1.5, &rng), course: maybe(90, &rng), speed: maybe(0.5, &rng), timestamp: maybe(1_700_000_000_000, &rng)))
        case .reference:
            referenceValue(&rng)
        case .assetID: .assetID(pick(["asset-1", #"{"fileChecksum":"abc","size":3}"#, "[1]"], &rng))
        }
    }

    static func referenceValue(_ rng: inout SplitMix) -> FieldValue {
        let name = pick(strings.filter { !$0.isEmpty }, &rng)
        let zoneID = zone(&rng)
        return .reference(Reference(recordID: RecordID(recordName: name, zoneID: zoneID), action: pick([.none, .deleteSelf, .validate], &rng)))
    }

    static let types: [FieldType] = [.string, .int64, .double, .timestamp, .bytes, .location, .reference, .assetID]

    static func record(_ rng: inout SplitMix) -> Record {
        let type = pick(["Item", "Note \"x\""], &rng)
        let name = pick(strings.filter { !$0.isEmpty }, &rng)
        let zoneID = zone(&rng)
        var record = Record(recordType: type, recordID: RecordID(recordName: name, zoneID: zoneID))
        for _ in 0..<Int(rng.next() % 7) {
            let type = pick(types, &rng)
            record[pick(names, &rng)] = rng.next() % 4 == 0 ? .list(type, (0..<Int(rng.next() % 4)).map { _ in scalar(type, &rng) }) : scalar(type, &rng)
        }
        record.creationDate = maybe(1_700_000_000_000, &rng)
        record.creatorUserRecordName = maybe("_creator", &rng)
        record.modificationDate = maybe(-5, &rng)
        record.lastModifiedUserRecordName = maybe("_modifier \"m\"", &rng)
        record.recordChangeTag = maybe("k3", &rng)
        record.parent = maybe(Reference(recordID: RecordID(recordName: "folder", zoneID: zone(&rng))), &rng)
        record.share = maybe(Reference(recordID: RecordID(recordName: "share-1", zoneID: record.recordID.zoneID)), &rng)
        return record
    }

    @Test func writesTheTreesBytes() async {
        await propertyCheck(count: 3000, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            let record = Self.record(&rng)
            let desiredKeys: [String]? = switch rng.next() % 3 {
            case 0: nil
            case 1: []
            default: (0..<Int(rng.next() % 4)).map { _ in Self.pick(Self.names + ["missing"], &rng) }
            }
            var written: [UInt8] = [9]   // appended after what is already there
            record.writeJSON(desiredKeys: desiredKeys, to: &written)
            #expect(written == [9] + record.json(desiredKeys: desiredKeys).serializedBytes, "\(record) desiredKeys \(String(describing: desiredKeys))")
        }
    }

    @Test func aRecordWithEverything() throws {
        var record = Record(recordType: "T", recordID: RecordID(recordName: "r", zoneID: ZoneID(zoneName: "Z")))
        record["n"] = .int64(3)
        record["d"] = .double(2)
        record["s"] = .string("q\"")
        record.creationDate = 5
        record.lastModifiedUserRecordName = "_u"
        record.parent = Reference(recordID: RecordID(recordName: "p", zoneID: ZoneID(zoneName: "Other")))
        var written: [UInt8] = []
        record.writeJSON(to: &written)
        #expect(String(decoding: written, as: UTF8.self) == #"{"recordName":"r","recordType":"T","zoneID":{"zoneName":"Z","ownerRecordName":"__defaultOwner__"},"fields":{"d":{"value":2.0,"type":"DOUBLE"},"n":{"value":3,"type":"INT64"},"s":{"value":"q\"","type":"STRING"}},"created":{"timestamp":5,"deviceID":"2"},"modified":{"userRecordName":"_u","deviceID":"2"},"parent":{"recordName":"p","zoneID":{"zoneName":"Other","ownerRecordName":"__defaultOwner__"}}}"#)
    }
}
