import KQuery

extension ContainerDatabase {
    /// The zone ID as stored: in a private database, a custom zone owned by `__defaultOwner__`
    /// (CKCurrentUserDefaultName, and what Web Services means by an omitted `ownerRecordName`) is
    /// the user's own zone, so both spellings name one zone. Answers name zones this way: the
    /// owner's real name, whichever spelling the request used.
    package func canonical(_ zoneID: ZoneID) -> ZoneID {
        guard scope == .private, !zoneID.isDefaultZone, zoneID.ownerName == ZoneID.defaultOwnerName, let userRecordName else { return zoneID }
        return ZoneID(zoneName: zoneID.zoneName, ownerName: userRecordName)
    }

    func canonical(_ id: RecordID) -> RecordID {
        RecordID(recordName: id.recordName, zoneID: canonical(id.zoneID))
    }

    /// The record with its ID and its references' IDs canonical.
    func canonical(_ record: Record) -> Record {
        // Only a private database's zones have two spellings.
        guard scope == .private else { return record }
        var record = record
        record.recordID = canonical(record.recordID)
        if var parent = record.parent {
            parent.recordID = canonical(parent.recordID)
            record.parent = parent
        }
        for (key, value) in record.fields {
            switch value {
            case .reference(var reference):
                reference.recordID = canonical(reference.recordID)
                record.fields[key] = .reference(reference)
            case .list(.reference, let members):
                record.fields[key] = .list(.reference, members.map { member in
                    guard case .reference(var reference) = member else { return member }
                    reference.recordID = canonical(reference.recordID)
                    return .reference(reference)
                })
            default:
                break
            }
        }
        return record
    }

    func canonical(_ subscription: Subscription) -> Subscription {
        var subscription = subscription
        switch subscription.kind {
        case .query(let recordType, let condition, let zoneID):
            subscription.kind = .query(recordType: recordType, condition: condition, zoneID: zoneID.map(canonical))
        case .recordZone(let zoneID, let recordType):
            subscription.kind = .recordZone(zoneID: canonical(zoneID), recordType: recordType)
        case .database:
            break
        }
        return subscription
    }
}
