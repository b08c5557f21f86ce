#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A query (CKQuery + CKQueryOperation's settings): record type, predicate, sort, page size.
public struct Query: Sendable {
    public var recordType: String
    public var predicate: CompiledPredicate
    public var sortDescriptors: [SortDescriptor]
    /// Records per page; nil for all of them.
    public var resultsLimit: Int?
    /// Only records in this zone; nil for every zone.
    public var zoneID: ZoneID?
    /// nil returns every field, `[]` only the system fields (SPEC §3).
    public var desiredKeys: [String]?

    public init(
        recordType: String, predicate: ValidatedPredicate, sortDescriptors: [SortDescriptor] = [],
        resultsLimit: Int? = nil, zoneID: ZoneID? = nil, desiredKeys: [String]? = nil
    ) {
        self.init(recordType: recordType, condition: predicate.condition, sortDescriptors: sortDescriptors,
                  resultsLimit: resultsLimit, zoneID: zoneID, desiredKeys: desiredKeys)
    }

    public init(
        recordType: String, condition: Condition, sortDescriptors: [SortDescriptor] = [],
        resultsLimit: Int? = nil, zoneID: ZoneID? = nil, desiredKeys: [String]? = nil
    ) {
        self.recordType = recordType
        self.predicate = CompiledPredicate(condition)
        self.sortDescriptors = sortDescriptors
        self.resultsLimit = resultsLimit
        self.zoneID = zoneID
        self.desiredKeys = desiredKeys
    }

    /// Identifies the query's shape, so a cursor from another query is refused rather than misread.
    /// Every part is spelled out (a zone or sort key interpolated as itself was printed by
    /// reflection: 5% of a server's query time).
    package var fingerprint: UInt64 {
        var text = recordType + "|" + predicate.condition.description + "|"
        if let zoneID { text += zoneID.zoneName + "\u{0}" + zoneID.ownerName }
        for descriptor in sortDescriptors {
            switch descriptor.key {
            case .field(let field): text += "|field " + field.description
            case .distance(let field, let from): text += "|distance " + field.description + " \(from.latitude) \(from.longitude)"
            }
            text += descriptor.ascending ? " ascending" : " descending"
        }
        return text.utf8.reduce(14_695_981_039_346_656_037 as UInt64) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }
    }

    /// Whether `record` is in this query's results (type, zone and predicate).
    public func matches(_ record: Record, now: Int64) -> Bool {
        isInScope(record) && predicate.matches(record, now: now)
    }

    /// Whether `record` has the query's record type and, when the query names one, its zone.
    package func isInScope(_ record: Record) -> Bool {
        record.recordType == recordType && (zoneID.map { $0 == record.recordID.zoneID } ?? true)
    }
}

/// One page of results, and where the next page starts.
public struct QueryResult: Sendable {
    public var records: [Record]
    /// nil when this page is the last.
    public var cursor: QueryCursor?

    public init(records: [Record], cursor: QueryCursor?) {
        self.records = records
        self.cursor = cursor
    }
}

/// A continuation marker: the position of the last record returned, in the query's order.
///
/// Resuming returns the records strictly after that position, so pages never overlap or skip,
/// even when records are saved between pages.
public struct QueryCursor: Hashable, Sendable {
    package let fingerprint: UInt64
    package let position: SortKey

    /// An opaque, URL-safe text form, for the command line and for clients.
    public var token: String {
        var members: [(String, JSON)] = [("q", .string(String(fingerprint, radix: 16)))]
        members.append(("k", .array(position.values.map { $0?.typedJSON ?? .null })))
        members.append(("r", .string(position.recordID.recordName)))
        if position.recordID.zoneID != .default {
            members.append(("z", .string(position.recordID.zoneID.zoneName)))
            members.append(("o", .string(position.recordID.zoneID.ownerName)))
        }
        let base64 = Data(JSON.object(members).serialized.utf8).base64EncodedString()
        return String(base64.compactMap { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 == "=" ? nil : $0 })
    }

    public init(token: String) throws(QueryError) {
        var base64 = String(token.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let text = String(data: data, encoding: .utf8),
              let json = try? JSON.parse(text), let fingerprintText = json["q"]?.stringValue,
              let fingerprint = UInt64(fingerprintText, radix: 16), case .array(let keys)? = json["k"],
              let recordName = json["r"]?.stringValue
        else { throw QueryError("invalid cursor") }
        var values: [FieldValue?] = []
        for key in keys {
            if case .null = key {
                values.append(nil)
            } else {
                guard let value = try? FieldValue(fieldJSON: key) else { throw QueryError("invalid cursor") }
                values.append(value)
            }
        }
        let zone = ZoneID(zoneName: json["z"]?.stringValue ?? ZoneID.defaultZoneName, ownerName: json["o"]?.stringValue ?? ZoneID.defaultOwnerName)
        self.fingerprint = fingerprint
        self.position = SortKey(values: values, recordID: RecordID(recordName: recordName, zoneID: zone))
    }

    package init(fingerprint: UInt64, position: SortKey) {
        self.fingerprint = fingerprint
        self.position = position
    }
}

public struct QueryError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension Query {
    /// Runs the query over `records` by a full scan (no index), returning one page.
    public func perform<Records: Sequence<Record>>(on records: Records, now: Int64, cursor: QueryCursor? = nil) throws(QueryError) -> QueryResult {
        if let cursor, !accepts(cursor) {
            throw QueryError("the cursor belongs to a different query")
        }
        var hits: [(key: SortKey, record: Record)] = []
        func consider(_ record: Record) {
            guard isInScope(record) else { return }
            let key = SortKey(record, sortDescriptors)
            if let cursor, SortOrder.compare(key, cursor.position, sortDescriptors) <= 0 { return }
            hits.append((key, record))
        }
        // Arrays are scanned in place through their buffer; other sequences one record at a time.
        if let array = records as? [Record] {
            array.withUnsafeBufferPointer { buffer in
                predicate.forEachMatch(in: buffer, now: now) { consider(buffer[$0]) }
            }
        } else {
            for record in records where predicate.matches(record, now: now) { consider(record) }
        }
        return page(of: &hits)
    }

    /// Whether `cursor` came from a page of this query.
    package func accepts(_ cursor: QueryCursor) -> Bool {
        cursor.fingerprint == fingerprint && cursor.position.values.count == sortDescriptors.count
    }

    /// Sorts the matches and cuts the page; shared by every executor.
    package func page(of matches: inout [(key: SortKey, record: Record)]) -> QueryResult {
        let descriptors = sortDescriptors
        matches.sort { SortOrder.compare($0.key, $1.key, descriptors) < 0 }
        var records = matches.map(\.record)
        var cursor: QueryCursor?
        if let limit = resultsLimit, records.count > limit {
            records.removeSubrange(limit...)
            cursor = QueryCursor(fingerprint: fingerprint, position: matches[limit - 1].key)
        }
        applyDesiredKeys(to: &records)
        return QueryResult(records: records, cursor: cursor)
    }

    /// Keeps only the desired keys' fields (all of them when `desiredKeys` is nil).
    package func applyDesiredKeys(to records: inout [Record]) {
        guard let desiredKeys else { return }
        for index in records.indices {
            var fields = Fields()
            for name in desiredKeys { fields[name] = records[index].fields[name] }
            records[index].fields = fields
        }
    }
}
