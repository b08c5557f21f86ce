import KQuery

extension Subscription {
    /// The form a subscription is stored in: `{"subscriptionID", "kind", "recordType", "predicate",
    /// "zoneID", "options", "notificationInfo", "owner"}`, the predicate as extended-profile text
    /// (it was validated when saved; its printed text reads back as the same condition, which
    /// `storedJSON()` checks).
    package func storedJSON() throws(ContainerError) -> JSON {
        var members: [(String, JSON)] = [("subscriptionID", .string(subscriptionID))]
        switch kind {
        case .query(let recordType, let condition, let zoneID):
            let text = condition.description
            guard (try? ValidatedPredicate(text, profile: .extended))?.condition == condition else {
                throw ContainerError(.badRequest, "subscription '\(subscriptionID)': its predicate \(text) cannot be stored faithfully")
            }
            members += [("kind", .string("query")), ("recordType", .string(recordType)), ("predicate", .string(text))]
            if let zoneID { members.append(("zoneID", zoneID.json)) }
        case .recordZone(let zoneID, let recordType):
            members += [("kind", .string("zone")), ("zoneID", zoneID.json)]
            if let recordType { members.append(("recordType", .string(recordType))) }
        case .database(let recordType):
            members.append(("kind", .string("database")))
            if let recordType { members.append(("recordType", .string(recordType))) }
        }
        members += [("options", .int(Int64(options.rawValue))), ("notificationInfo", notificationInfo.json), ("owner", .string(owner))]
        return .object(members)
    }

    /// Reads `storedJSON()` back.
    package init(storedJSON json: JSON) throws(ContainerError) {
        func corrupt(_ what: String) -> ContainerError { ContainerError(.internalError, "a stored subscription is corrupt: \(what)") }
        guard let id = json["subscriptionID"]?.stringValue, let options = json["options"]?.int64Value,
              let owner = json["owner"]?.stringValue, let infoJSON = json["notificationInfo"]
        else { throw corrupt(json.serialized) }
        let zoneID = try json["zoneID"].map { zone throws(ContainerError) in
            do throws(RecordDecodingError) { return try ZoneID(json: zone) } catch { throw corrupt(error.message) }
        }
        let recordType = json["recordType"]?.stringValue
        let kind: Kind
        switch json["kind"]?.stringValue {
        case "query":
            guard let recordType, let text = json["predicate"]?.stringValue else { throw corrupt("subscription '\(id)'") }
            do {
                kind = .query(recordType: recordType, condition: try ValidatedPredicate(text, profile: .extended).condition, zoneID: zoneID)
            } catch {
                throw corrupt("subscription '\(id)': \(error)")
            }
        case "zone":
            guard let zoneID else { throw corrupt("subscription '\(id)' has no zone") }
            kind = .recordZone(zoneID: zoneID, recordType: recordType)
        case "database":
            kind = .database(recordType: recordType)
        default:
            throw corrupt("subscription '\(id)' has no kind")
        }
        let info: NotificationInfo
        do { info = try NotificationInfo(json: infoJSON) } catch { throw corrupt("subscription '\(id)': \(error.message)") }
        self.init(subscriptionID: id, kind: kind, options: SubscriptionOptions(rawValue: Int(options)), notificationInfo: info)
        self.owner = owner
    }
}
