import KQuery

// The Web Services JSON forms of the container's answers, written once for the command line and
// the server.

extension ContainerError {
    /// `{"serverErrorCode": "...", "reason": "..."}` (the server adds `uuid`).
    public var webServicesJSON: JSON {
        .object([("serverErrorCode", .string(code.rawValue)), ("reason", .string(reason))])
    }
}

extension RecordResult {
    /// A saved record in the Web Services form; a deletion as `{"recordName", "recordType", "zoneID",
    /// "deleted": true}` (SPEC §11: MistKit takes a result without `recordType` for an error); a failure as CloudKit's RecordFetchError `{"recordName", "zoneID", "serverErrorCode",
    /// "reason"}` (`zoneID` only outside the default zone).
    public func webServicesJSON(desiredKeys: [String]? = nil) -> JSON {
        switch self {
        case .saved(let record):
            return record.json(desiredKeys: desiredKeys)
        case .deleted(let id, let recordType):
            var members = Self.identity(id)
            members.insert(("recordType", .string(recordType)), at: 1)
            return .object(members + [("deleted", .bool(true))])
        case .failed(let id, let error):
            return .object(Self.identity(id) + [("serverErrorCode", .string(error.code.rawValue)), ("reason", .string(error.reason))])
        }
    }

    static func identity(_ id: RecordID) -> [(String, JSON)] {
        var members: [(String, JSON)] = [("recordName", .string(id.recordName))]
        if id.zoneID != .default { members.append(("zoneID", id.zoneID.json)) }
        return members
    }
}

extension ModifyResult {
    /// The `records/modify` response: `{"records": [...]}`, one entry per operation, in order.
    public func webServicesJSON(desiredKeys: [String]? = nil) -> JSON {
        .object([("records", .array(results.map { $0.webServicesJSON(desiredKeys: desiredKeys) }))])
    }
}

extension ZoneChanges {
    /// One zone of a `changes/zone` response: `{"zoneID", "records": [...], "syncToken",
    /// "moreComing"}`; a deleted record is `{"recordName", "recordType", "deleted": true}`.
    public func webServicesJSON(desiredKeys: [String]? = nil) -> JSON {
        let records: [JSON] = changes.map { change in
            switch change {
            case .changed(let record):
                return record.json(desiredKeys: desiredKeys)
            case .deleted(let id, let recordType):
                return .object([("recordName", .string(id.recordName)), ("recordType", .string(recordType)), ("deleted", .bool(true))])
            }
        }
        return .object([
            ("zoneID", zoneID.json), ("records", .array(records)), ("syncToken", .string(syncToken.text)), ("moreComing", .bool(moreComing)),
        ])
    }
}

extension DatabaseChanges {
    /// The `changes/database` response: `{"zones": [{"zoneID"}, {"zoneID", "deleted": true}],
    /// "syncToken", "moreComing"}`.
    public var webServicesJSON: JSON {
        let zones = changedZones.map { JSON.object([("zoneID", $0.json)]) }
            + deletedZones.map { JSON.object([("zoneID", $0.json), ("deleted", .bool(true))]) }
        return .object([("zones", .array(zones)), ("syncToken", .string(syncToken.text)), ("moreComing", .bool(moreComing))])
    }
}
