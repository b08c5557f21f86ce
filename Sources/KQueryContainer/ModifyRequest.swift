import KQuery

/// A Web Services `records/modify` request body:
/// `{"operations": [{"operationType": "create", "record": {...}}], "atomic": true, "zoneID": {...}}`,
/// and, a KQuery extension, `"apnsToken"`: the token of the device making the change (what
/// `tokens/create` or `tokens/register` gave it), whose pushes about this change are skipped.
public struct ModifyRequest: Hashable, Sendable {
    public var operations: [RecordOperation]
    /// Whether each custom zone's operations apply all or none (default true).
    public var atomic: Bool
    /// The device making the change, by its `apnsToken`.
    public var device: String?

    public init(operations: [RecordOperation], atomic: Bool = true, device: String? = nil) {
        self.operations = operations
        self.atomic = atomic
        self.device = device
    }

    /// Reads a request body. The request's `zoneID` is the zone of records that name none, and of
    /// their references that name none (a reference points into its record's zone). A delete's
    /// record may omit `recordType`. Errors are BAD_REQUEST and name the operation.
    public init(webServicesJSON json: JSON) throws(ContainerError) {
        guard case .object = json else { throw ContainerError(.badRequest, "a modify request must be a JSON object, not \(json.kindName)") }
        guard case .array(let operationsJSON)? = json["operations"] else {
            throw ContainerError(.badRequest, "a modify request needs an \"operations\" array")
        }
        var zoneID: ZoneID?
        if let zoneJSON = json["zoneID"] {
            do throws(RecordDecodingError) { zoneID = try ZoneID(json: zoneJSON) } catch { throw ContainerError(.badRequest, error.message) }
        }
        switch json["atomic"] {
        case nil, .null?: atomic = true
        case .bool(let value)?: atomic = value
        case let other?: throw ContainerError(.badRequest, "\"atomic\" must be true or false, not \(other.serialized)")
        }
        switch json["apnsToken"] {
        case nil, .null?: device = nil
        case .string(let token)? where !token.isEmpty && token.utf8.count <= 4096: device = token
        case let other?: throw ContainerError(.badRequest, "\"apnsToken\" must be the device's token (a non-empty string), not \(other.serialized.prefix(40))")
        }
        operations = []
        for (index, operationJSON) in operationsJSON.enumerated() {
            func fail(_ message: String) -> ContainerError { ContainerError(.badRequest, "operations[\(index)]: \(message)") }
            guard case .object = operationJSON else { throw fail("an operation must be an object, not \(operationJSON.kindName)") }
            guard let typeJSON = operationJSON["operationType"] else { throw fail("no \"operationType\"") }
            guard let name = typeJSON.stringValue, let kind = RecordOperation.Kind(rawValue: name) else {
                throw fail("unknown operationType \(typeJSON.serialized) (expected one of \(RecordOperation.Kind.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            guard case .object(var members)? = operationJSON["record"] else { throw fail("no \"record\" object") }
            if (kind == .delete || kind == .forceDelete), !members.contains(where: { $0.0 == "recordType" }) {
                members.append(("recordType", .string("_deleted")))
            }
            let recordZone: ZoneID
            if let ownZone = members.first(where: { $0.0 == "zoneID" })?.1 {
                do throws(RecordDecodingError) { recordZone = try ZoneID(json: ownZone) } catch { throw fail(error.message) }
            } else {
                recordZone = zoneID ?? .default
                if let zoneID { members.append(("zoneID", zoneID.json)) }
            }
            if let position = members.firstIndex(where: { $0.0 == "fields" }), case .object(let fields) = members[position].1 {
                members[position].1 = .object(fields.map { ($0.0, Self.placingReferences($0.1, in: recordZone)) })
            }
            do throws(RecordDecodingError) {
                operations.append(RecordOperation(kind: kind, record: try Record(json: .object(members))))
            } catch {
                throw fail(error.message)
            }
        }
    }

    /// A field's JSON with `zoneID` added to the references (typed or shorthand, single or list)
    /// that name none.
    private static func placingReferences(_ json: JSON, in zone: ZoneID) -> JSON {
        switch json {
        case .object(var members):
            if let position = members.firstIndex(where: { $0.0 == "value" }) {
                members[position].1 = placingReferences(members[position].1, in: zone)
            } else if members.contains(where: { $0.0 == "recordName" }), !members.contains(where: { $0.0 == "zoneID" }) {
                members.append(("zoneID", zone.json))
            }
            return .object(members)
        case .array(let elements):
            return .array(elements.map { placingReferences($0, in: zone) })
        default:
            return json
        }
    }
}
