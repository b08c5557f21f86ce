import KQuery
import KQueryContainer

/// A Web Services `records/query` body read into a query and where to resume it:
/// `{"query": {"recordType", "filterBy", "sortBy"}, "zoneID", "zoneWide", "resultsLimit",
/// "continuationMarker", "desiredKeys"}`, and as a KQuery extension a `predicate` string (in
/// `query` or beside it) in place of `filterBy`.
package struct QueryRequest: Sendable {
    /// CloudKit answers at most this many records per page.
    static let maximumResults = 200

    var query: Query
    var cursor: QueryCursor?

    /// Apple's `systemFieldName` values, as the predicate engine names them.
    static let systemFieldNames: [String: String] = [
        "recordName": "___recordID", "share": "___share", "parent": "___parent", "createdUserRecordName": "___createdBy",
        "createdTimestamp": "___createTime", "modifiedTimestamp": "___modTime", "modifiedUserRecordName": "___modifiedBy",
    ]

    init(webServicesJSON body: JSON) throws(ServerError) {
        guard case .object = body else { throw ServerError.badRequest("a query request must be a JSON object") }
        guard let queryJSON = body["query"], case .object = queryJSON else { throw ServerError.badRequest("a query request needs a \"query\" object") }
        guard let recordType = queryJSON["recordType"]?.stringValue, !recordType.isEmpty else {
            throw ServerError.badRequest("query.recordType must be a non-empty string")
        }
        let condition: Condition
        if let predicate = queryJSON["predicate"] ?? body["predicate"] {
            guard let text = predicate.stringValue else { throw ServerError.badRequest("\"predicate\" must be a string") }
            do throws(InvalidPredicateError) { condition = try ValidatedPredicate(text, profile: .cloudkit).condition } catch {
                throw ServerError.badRequest("predicate: \(error.message)")
            }
        } else if let filters = queryJSON["filterBy"] {
            guard case .array(let elements) = filters else { throw ServerError.badRequest("query.filterBy must be an array") }
            do throws(WebServicesMappingError) {
                condition = try Condition(webServicesFilters: elements.map(Self.namingSystemField))
            } catch {
                throw ServerError.badRequest(error.message)
            }
        } else {
            condition = .constant(true)
        }
        var sortDescriptors: [SortDescriptor] = []
        if let sortBy = queryJSON["sortBy"] {
            guard case .array(let elements) = sortBy else { throw ServerError.badRequest("query.sortBy must be an array") }
            for (index, element) in elements.enumerated() { sortDescriptors.append(try Self.sortDescriptor(element, index: index)) }
        }
        var zoneID: ZoneID? = .default
        if let zoneJSON = body["zoneID"] {
            zoneID = try Self.zoneID(zoneJSON)
        } else if case .bool(true)? = body["zoneWide"] {
            zoneID = nil
        }
        var limit = Self.maximumResults
        if let limitJSON = body["resultsLimit"] {
            guard let value = limitJSON.int64Value, value >= 1 else { throw ServerError.badRequest("\"resultsLimit\" must be a positive integer") }
            limit = Int(min(value, Int64(Self.maximumResults)))
        }
        query = Query(recordType: recordType, condition: condition, sortDescriptors: sortDescriptors, resultsLimit: limit,
                      zoneID: zoneID, desiredKeys: try Self.desiredKeys(body["desiredKeys"]))
        if let marker = body["continuationMarker"], marker != .null {
            guard let text = marker.stringValue else { throw ServerError.badRequest("\"continuationMarker\" must be a string") }
            do throws(QueryError) { cursor = try QueryCursor(token: text) } catch { throw ServerError.badRequest("invalid continuationMarker") }
        }
    }

    /// A filter with `systemFieldName` rewritten as the `fieldName` the predicate engine reads.
    static func namingSystemField(_ filter: JSON) -> JSON {
        guard case .object(var members) = filter, let position = members.firstIndex(where: { $0.0 == "systemFieldName" }),
              let name = members[position].1.stringValue
        else { return filter }
        members[position] = ("fieldName", .string(systemFieldNames[name] ?? name))
        return .object(members)
    }

    static func sortDescriptor(_ json: JSON, index: Int) throws(ServerError) -> SortDescriptor {
        let name = json["fieldName"]?.stringValue ?? json["systemFieldName"]?.stringValue.map { systemFieldNames[$0] ?? $0 }
        guard case .object = json, let name, !name.isEmpty else { throw ServerError.badRequest("sortBy[\(index)] needs a \"fieldName\"") }
        var ascending = true
        if let value = json["ascending"] {
            guard case .bool(let flag) = value else { throw ServerError.badRequest("sortBy[\(index)].ascending must be true or false") }
            ascending = flag
        }
        let field = FieldReference(webServicesName: name)
        // (As filterBy names fields.)
        guard FieldKey.isValidName(field.name) else { throw ServerError.badRequest("sortBy[\(index)]: invalid field name '\(name)'") }
        guard let locationJSON = json["relativeLocation"] else { return SortDescriptor(key: .field(field), ascending: ascending) }
        // Apple documents a bare location dictionary; a typed field value is accepted too.
        let fieldJSON: JSON = locationJSON["value"] == nil ? .object([("value", locationJSON), ("type", .string("LOCATION"))]) : locationJSON
        guard case .location(let center)? = try? FieldValue(fieldJSON: fieldJSON) else {
            throw ServerError.badRequest("sortBy[\(index)].relativeLocation must be a location with latitude and longitude")
        }
        return SortDescriptor(key: .distance(field, from: center), ascending: ascending)
    }

    static func zoneID(_ json: JSON) throws(ServerError) -> ZoneID {
        do throws(RecordDecodingError) { return try ZoneID(json: json) } catch { throw ServerError.badRequest(error.message) }
    }

    static func desiredKeys(_ json: JSON?) throws(ServerError) -> [String]? {
        guard let json, json != .null else { return nil }
        guard case .array(let elements) = json else { throw ServerError.badRequest("\"desiredKeys\" must be an array of field names") }
        var keys: [String] = []
        for element in elements {
            guard let key = element.stringValue else { throw ServerError.badRequest("\"desiredKeys\" must be an array of field names") }
            keys.append(key)
        }
        return keys
    }
}
