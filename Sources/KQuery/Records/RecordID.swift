/// A record zone's identity: its name and the user record name of its owner.
public struct ZoneID: Hashable, Sendable, Comparable {
    public static let defaultZoneName = "_defaultZone"
    public static let defaultOwnerName = "__defaultOwner__"
    public static let `default` = ZoneID()

    public var zoneName: String
    public var ownerName: String

    public init(zoneName: String = ZoneID.defaultZoneName, ownerName: String = ZoneID.defaultOwnerName) {
        self.zoneName = zoneName
        self.ownerName = ownerName
    }

    public var isDefaultZone: Bool { zoneName == ZoneID.defaultZoneName }

    public static func < (lhs: ZoneID, rhs: ZoneID) -> Bool {
        let zone = ValueOrder.compareBytes(lhs.zoneName, rhs.zoneName)
        if zone != 0 { return zone < 0 }
        return ValueOrder.compareBytes(lhs.ownerName, rhs.ownerName) < 0
    }
}

/// A record's identity: its name within a zone.
public struct RecordID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var recordName: String
    public var zoneID: ZoneID

    /// The longest record name saved, in UTF-16 units: CloudKit's "must not exceed 255
    /// characters" (`CKRecord.ID`). Subscription IDs, stored and indexed as names are, share it.
    public static let maximumNameLength = 255

    public init(recordName: String, zoneID: ZoneID = .default) {
        self.recordName = recordName
        self.zoneID = zoneID
    }

    /// Record IDs order by recordName (UTF-8 byte order), then zone: the tie-break of every sort.
    public static func < (lhs: RecordID, rhs: RecordID) -> Bool {
        // memcmp on the UTF-8 bytes: the sort of every query ends here.
        let name = ValueOrder.compareBytes(lhs.recordName, rhs.recordName)
        if name != 0 { return name < 0 }
        return lhs.zoneID < rhs.zoneID
    }

    public var description: String {
        zoneID == .default ? recordName : "\(recordName)@\(zoneID.zoneName):\(zoneID.ownerName)"
    }
}
