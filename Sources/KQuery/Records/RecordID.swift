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
        if lhs.zoneName != rhs.zoneName { return lhs.zoneName.utf8.lexicographicallyPrecedes(rhs.zoneName.utf8) }
        return lhs.ownerName.utf8.lexicographicallyPrecedes(rhs.ownerName.utf8)
    }
}

/// A record's identity: its name within a zone.
public struct RecordID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var recordName: String
    public var zoneID: ZoneID

    public init(recordName: String, zoneID: ZoneID = .default) {
        self.recordName = recordName
        self.zoneID = zoneID
    }

    /// Record IDs order by recordName (UTF-8 byte order), then zone: the tie-break of every sort.
    public static func < (lhs: RecordID, rhs: RecordID) -> Bool {
        if lhs.recordName != rhs.recordName {
            return lhs.recordName.utf8.lexicographicallyPrecedes(rhs.recordName.utf8)
        }
        return lhs.zoneID < rhs.zoneID
    }

    public var description: String {
        zoneID == .default ? recordName : "\(recordName)@\(zoneID.zoneName):\(zoneID.ownerName)"
    }
}
