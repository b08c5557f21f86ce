#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A record or field value that cannot be read from JSON; the message names the field.
public struct RecordDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension Record {
    /// Reads a record in the CloudKit Web Services form, accepting the shorthand field form too (SPEC §1).
    public init(json: JSON) throws(RecordDecodingError) {
        guard case .object = json else { throw RecordDecodingError("a record must be a JSON object, not \(json.kindName)") }
        guard let recordName = json["recordName"]?.stringValue, !recordName.isEmpty else {
            throw RecordDecodingError("record has no \"recordName\" string")
        }
        guard let recordType = json["recordType"]?.stringValue, !recordType.isEmpty else {
            throw RecordDecodingError("record '\(recordName)' has no \"recordType\" string")
        }
        let zoneID = try json["zoneID"].map { zone throws(RecordDecodingError) in try ZoneID(json: zone) } ?? .default
        var fields = Fields()
        if let fieldsJSON = json["fields"] {
            guard case .object(let members) = fieldsJSON else {
                throw RecordDecodingError("record '\(recordName)': \"fields\" must be an object")
            }
            for (name, valueJSON) in members {
                guard !SharingKeys.isReserved(name) else {
                    throw RecordDecodingError("record '\(recordName)': field names starting with ___ are CloudKit's ('\(name)')")
                }
                guard SharingKeys.isValidFieldName(name, recordType: recordType) else {
                    throw RecordDecodingError("record '\(recordName)': invalid field name '\(name)' (letters, digits, _ and $, starting with a letter or _, at most 255 characters)")
                }
                do {
                    if let value = try FieldValue(fieldJSON: valueJSON) { fields[name] = value }
                } catch {
                    throw RecordDecodingError("record '\(recordName)', field '\(name)': \(error.message)")
                }
            }
        }
        self.init(recordType: recordType, recordID: RecordID(recordName: recordName, zoneID: zoneID), fields: fields)
        if let created = json["created"] {
            creationDate = created["timestamp"]?.int64Value
            creatorUserRecordName = created["userRecordName"]?.stringValue
        }
        if let modified = json["modified"] {
            modificationDate = modified["timestamp"]?.int64Value
            lastModifiedUserRecordName = modified["userRecordName"]?.stringValue
        }
        recordChangeTag = json["recordChangeTag"]?.stringValue
        // A JavaScript client writes a cleared parent as null: no parent.
        parent = try json["parent"].flatMap { $0 == .null ? nil : $0 }.map { json throws(RecordDecodingError) in
            try Reference(systemJSON: json, key: "parent", of: recordID)
        }
        share = try json["share"].map { json throws(RecordDecodingError) in try Reference(systemJSON: json, key: "share", of: recordID) }
        try readSharingKeys(json)
    }

    /// The CloudKit Web Services form. `desiredKeys` nil writes every field, `[]` none (SPEC §3).
    public func json(desiredKeys: [String]? = nil) -> JSON {
        var members: [(String, JSON)] = [("recordName", .string(recordID.recordName)), ("recordType", .string(recordType))]
        if recordID.zoneID != .default { members.append(("zoneID", recordID.zoneID.json)) }
        var fieldMembers: [(String, JSON)] = []
        let names = desiredKeys.map { $0.filter { fields[$0] != nil } } ?? fields.sortedNames
        var holdsReserved = false
        for name in names {
            // Sharing keys are written beside the fields (SPEC §13), never among them.
            if SharingKeys.isReserved(name) {
                holdsReserved = true
                continue
            }
            if let value = fields[name] { fieldMembers.append((name, value.typedJSON)) }
        }
        members.append(("fields", .object(fieldMembers)))
        if let created = Self.stampJSON(creationDate, creatorUserRecordName) { members.append(("created", created)) }
        if let modified = Self.stampJSON(modificationDate, lastModifiedUserRecordName) { members.append(("modified", modified)) }
        if let recordChangeTag { members.append(("recordChangeTag", .string(recordChangeTag))) }
        if let parent { members.append(("parent", parent.systemJSON(of: recordID))) }
        if let share { members.append(("share", share.systemJSON(of: recordID))) }
        if holdsReserved || (desiredKeys != nil && fields.sortedNames.contains(where: SharingKeys.isReserved)) { members += sharingMembers }
        return .object(members)
    }

    /// Appends the bytes of `json(desiredKeys:).serializedBytes` to `out`, the same bytes, without
    /// building the JSON tree first: a server writes its query results this way (building and
    /// freeing the tree was about a tenth of a query's time).
    public func writeJSON(desiredKeys: [String]? = nil, to out: inout [UInt8]) {
        out.append(contentsOf: #"{"recordName":"#.utf8)
        JSON.writeString(recordID.recordName, to: &out)
        out.append(contentsOf: #","recordType":"#.utf8)
        JSON.writeString(recordType, to: &out)
        if recordID.zoneID != .default {
            out.append(contentsOf: #","zoneID":"#.utf8)
            recordID.zoneID.writeJSON(to: &out)
        }
        out.append(contentsOf: #","fields":{"#.utf8)
        var first = true
        func member(_ name: String, _ value: FieldValue) {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            JSON.writeString(name, to: &out)
            out.append(UInt8(ascii: ":"))
            value.writeTypedJSON(to: &out)
        }
        var holdsReserved = false
        if let desiredKeys {
            for name in desiredKeys where !SharingKeys.isReserved(name) { if let value = fields[name] { member(name, value) } }
            holdsReserved = fields[SharingKeys.shortGUID.1] != nil || recordType == SharingKeys.shareRecordType
        } else {
            for (name, value) in fields.map({ ($0.key.name, $0.value) }).sorted(by: { $0.0 < $1.0 }) {
                // Sharing keys are written beside the fields (SPEC §13), never among them.
                if SharingKeys.isReserved(name) {
                    holdsReserved = true
                    continue
                }
                member(name, value)
            }
        }
        out.append(UInt8(ascii: "}"))
        Self.writeStamp("created", creationDate, creatorUserRecordName, to: &out)
        Self.writeStamp("modified", modificationDate, lastModifiedUserRecordName, to: &out)
        if let recordChangeTag {
            out.append(contentsOf: #","recordChangeTag":"#.utf8)
            JSON.writeString(recordChangeTag, to: &out)
        }
        if let parent {
            out.append(contentsOf: #","parent":"#.utf8)
            parent.systemJSON(of: recordID).write(to: &out)
        }
        if let share {
            out.append(contentsOf: #","share":"#.utf8)
            share.systemJSON(of: recordID).write(to: &out)
        }
        if holdsReserved {
            for (key, value) in sharingMembers {
                out.append(UInt8(ascii: ","))
                JSON.writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
    }

    /// `,"created":{...}` as `stampJSON` has it, or nothing when neither part is known.
    private static func writeStamp(_ key: String, _ timestamp: Int64?, _ user: String?, to out: inout [UInt8]) {
        guard timestamp != nil || user != nil else { return }
        out.append(UInt8(ascii: ","))
        JSON.writeString(key, to: &out)
        out.append(contentsOf: ":{".utf8)
        if let timestamp {
            out.append(contentsOf: #""timestamp":"#.utf8)
            JSON.writeInteger(timestamp, to: &out)
        }
        if let user {
            if timestamp != nil { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #""userRecordName":"#.utf8)
            JSON.writeString(user, to: &out)
        }
        out.append(contentsOf: #","deviceID":"#.utf8)
        JSON.writeString(deviceID, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// The `deviceID` of every `created` and `modified` stamp. CloudKit names the device that made
    /// the change there, and clients (MistKit) decode a stamp without one as malformed. KQuery keeps
    /// no device per record (a device is known to it only by its APNs token, a credential of the
    /// web courier that must not be shown to other readers), so every stamp carries one fixed,
    /// opaque placeholder; clients only read it as a string.
    public static let deviceID = "2"

    /// `{"timestamp": ..., "userRecordName": ..., "deviceID": ...}` with whichever of the first two
    /// is known, or nil when neither is.
    private static func stampJSON(_ timestamp: Int64?, _ user: String?) -> JSON? {
        var members: [(String, JSON)] = []
        if let timestamp { members.append(("timestamp", .int(timestamp))) }
        if let user { members.append(("userRecordName", .string(user))) }
        return members.isEmpty ? nil : .object(members + [("deviceID", .string(deviceID))])
    }
}

extension Reference {
    /// A record's `parent` or `share`: `{"recordName": ..., "zoneID": ...}`, in the record's zone
    /// when no zone is given.
    init(systemJSON json: JSON, key: String, of recordID: RecordID) throws(RecordDecodingError) {
        guard case .object = json, let name = json["recordName"]?.stringValue, !name.isEmpty else {
            throw RecordDecodingError("record '\(recordID.recordName)': \"\(key)\" must be an object with a \"recordName\" string")
        }
        let zone = try json["zoneID"].map { zone throws(RecordDecodingError) in try ZoneID(json: zone) } ?? recordID.zoneID
        self.init(recordID: RecordID(recordName: name, zoneID: zone))
    }

    func systemJSON(of recordID: RecordID) -> JSON {
        var members: [(String, JSON)] = [("recordName", .string(self.recordID.recordName))]
        if self.recordID.zoneID != recordID.zoneID { members.append(("zoneID", self.recordID.zoneID.json)) }
        return .object(members)
    }
}

extension ZoneID {
    package init(json: JSON) throws(RecordDecodingError) {
        guard case .object = json, let zoneName = json["zoneName"]?.stringValue else {
            throw RecordDecodingError("\"zoneID\" must be an object with a \"zoneName\" string")
        }
        self.init(zoneName: zoneName, ownerName: json["ownerRecordName"]?.stringValue ?? ZoneID.defaultOwnerName)
    }

    package var json: JSON { .object([("zoneName", .string(zoneName)), ("ownerRecordName", .string(ownerName))]) }

    /// Appends `json`'s serialized bytes to `out`.
    func writeJSON(to out: inout [UInt8]) {
        out.append(contentsOf: #"{"zoneName":"#.utf8)
        JSON.writeString(zoneName, to: &out)
        out.append(contentsOf: #","ownerRecordName":"#.utf8)
        JSON.writeString(ownerName, to: &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension FieldValue {
    /// Reads a field's JSON: `{"value": ..., "type": "..."}`, or a bare value whose type is inferred.
    /// Returns nil for JSON null (the field is absent).
    public init?(fieldJSON json: JSON) throws(RecordDecodingError) {
        if case .object = json, let value = json["value"] {
            if case .null = value { return nil }
            if let typeJSON = json["type"] {
                guard let typeName = typeJSON.stringValue else { throw RecordDecodingError("\"type\" must be a string") }
                try self.init(json: value, typeName: typeName)
            } else {
                try self.init(inferring: value)
            }
            return
        }
        if case .null = json { return nil }
        try self.init(inferring: json)
    }

    /// Reads a value of the named Web Services type (`STRING`, `INT64_LIST`, ...).
    public init(json: JSON, typeName: String) throws(RecordDecodingError) {
        // Clients also spell assets ASSET and ASSET_LIST (MistKit's request enum); answers say ASSETID.
        let typeName = typeName == "ASSET" ? "ASSETID" : typeName == "ASSET_LIST" ? "ASSETID_LIST" : typeName
        if typeName.hasSuffix("_LIST") {
            guard let type = FieldType(rawValue: String(typeName.dropLast(5))) else {
                throw RecordDecodingError("unknown field type '\(typeName)'")
            }
            guard case .array(let elements) = json else { throw RecordDecodingError("\(typeName) value must be an array, not \(json.kindName)") }
            var values: [FieldValue] = []
            values.reserveCapacity(elements.count)
            for element in elements { values.append(try FieldValue(json: element, type: type)) }
            self = .list(type, values)
            return
        }
        guard let type = FieldType(rawValue: typeName) else { throw RecordDecodingError("unknown field type '\(typeName)'") }
        self = try FieldValue(json: json, type: type)
    }

    init(json: JSON, type: FieldType) throws(RecordDecodingError) {
        func mismatch() -> RecordDecodingError { RecordDecodingError("expected \(type.expectation) for \(type.rawValue), found \(json.kindName)") }
        switch type {
        case .string:
            guard let s = json.stringValue else { throw mismatch() }
            self = .string(s)
        case .int64:
            switch json {
            case .int(let i): self = .int64(i)
            case .bool(let b): self = .int64(b ? 1 : 0)
            default: throw mismatch()
            }
        case .double:
            guard let d = json.doubleValue else { throw mismatch() }
            self = .double(d)
        case .timestamp:
            guard let ms = json.int64Value else { throw mismatch() }
            self = .timestamp(ms)
        case .bytes:
            guard let s = json.stringValue else { throw mismatch() }
            guard let data = Data(base64Encoded: s) else { throw RecordDecodingError("BYTES value is not valid base64") }
            self = .bytes([UInt8](data))
        case .location: self = .location(try Location(json: json))
        case .reference: self = .reference(try Reference(json: json))
        case .assetID:
            switch json {
            case .string(let s): self = .assetID(s)
            case .object: self = .assetID(json.serialized)
            default: throw mismatch()
            }
        }
    }

    /// The shorthand form: string → STRING, integer → INT64, other number → DOUBLE, boolean → INT64,
    /// {latitude, longitude} → LOCATION, {recordName} → REFERENCE, array → list of the element type.
    public init(inferring json: JSON) throws(RecordDecodingError) {
        switch json {
        case .string(let s): self = .string(s)
        case .int(let i): self = .int64(i)
        case .double(let d): self = .double(d)
        case .bool(let b): self = .int64(b ? 1 : 0)
        case .object:
            if json["latitude"] != nil, json["longitude"] != nil {
                self = .location(try Location(json: json))
            } else if json["recordName"] != nil {
                self = .reference(try Reference(json: json))
            } else if json["receipt"] != nil || json["fileChecksum"] != nil || json["$file"] != nil {
                // An asset dictionary: Apple's own example and CloudKit JS save one with no "type"
                // (`$file`: a local file the command line uploads first).
                self = .assetID(json.serialized)
            } else {
                throw RecordDecodingError("cannot infer a field type for an object without latitude/longitude, recordName or an asset's receipt")
            }
        case .array(let elements):
            var values: [FieldValue] = []
            values.reserveCapacity(elements.count)
            for element in elements {
                if case .array = element { throw RecordDecodingError("lists cannot contain lists") }
                if case .null = element { throw RecordDecodingError("lists cannot contain null") }
                values.append(try FieldValue(inferring: element))
            }
            let types = Set(values.map(\.type))
            if types.count <= 1 {
                self = .list(types.first ?? .string, values)
            } else if types == [.int64, .double] {
                self = .list(.double, values.map { if case .int64(let i) = $0 { .double(Double(i)) } else { $0 } })
            } else {
                throw RecordDecodingError("a list mixes \(types.map(\.rawValue).sorted().joined(separator: " and "))")
            }
        case .null: throw RecordDecodingError("null has no field type")
        }
    }

    /// `{"value": ..., "type": "..."}`.
    public var typedJSON: JSON { .object([("value", valueJSON), ("type", .string(typeName))]) }

    /// Appends `typedJSON`'s serialized bytes to `out`: strings and numbers written straight in,
    /// the rarer kinds through their JSON.
    func writeTypedJSON(to out: inout [UInt8]) {
        out.append(contentsOf: #"{"value":"#.utf8)
        switch self {
        case .string(let s): JSON.writeString(s, to: &out)
        case .int64(let i), .timestamp(let i): JSON.writeInteger(i, to: &out)
        case .double(let d): out.append(contentsOf: JSON.format(d).utf8)
        default: valueJSON.write(to: &out)
        }
        out.append(contentsOf: #","type":"#.utf8)
        JSON.writeString(typeName, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// The bare JSON value, as the `value` member of the typed form.
    public var valueJSON: JSON {
        switch self {
        case .string(let s): .string(s)
        case .int64(let i): .int(i)
        case .double(let d): .double(d)
        case .timestamp(let ms): .int(ms)
        case .bytes(let bytes): .string(Data(bytes).base64EncodedString())
        case .location(let location): location.json
        case .reference(let reference): reference.json
        case .assetID(let s): (try? JSON.parse(s)).flatMap { if case .object = $0 { $0 } else { nil } } ?? .string(s)
        case .list(_, let values): .array(values.map(\.valueJSON))
        }
    }
}

extension FieldType {
    var expectation: String {
        switch self {
        case .string: "a string"
        case .int64: "an integer"
        case .double: "a number"
        case .timestamp: "an integer of milliseconds"
        case .bytes: "a base64 string"
        case .location: "an object with latitude and longitude"
        case .reference: "an object with recordName"
        case .assetID: "a string or an asset object"
        }
    }
}

extension Location {
    init(json: JSON) throws(RecordDecodingError) {
        guard case .object = json, let latitude = json["latitude"]?.doubleValue, let longitude = json["longitude"]?.doubleValue else {
            throw RecordDecodingError("a LOCATION needs numeric latitude and longitude")
        }
        guard (-90...90).contains(latitude), (-180...180).contains(longitude) else {
            throw RecordDecodingError("location (\(latitude), \(longitude)) is outside latitude -90...90 / longitude -180...180")
        }
        self.init(
            latitude: latitude, longitude: longitude, altitude: json["altitude"]?.doubleValue,
            horizontalAccuracy: json["horizontalAccuracy"]?.doubleValue, verticalAccuracy: json["verticalAccuracy"]?.doubleValue,
            course: json["course"]?.doubleValue, speed: json["speed"]?.doubleValue, timestamp: json["timestamp"]?.int64Value)
    }

    var json: JSON {
        var members: [(String, JSON)] = [("latitude", .double(latitude)), ("longitude", .double(longitude))]
        let optionals: [(String, Double?)] = [
            ("altitude", altitude), ("horizontalAccuracy", horizontalAccuracy), ("verticalAccuracy", verticalAccuracy),
            ("course", course), ("speed", speed),
        ]
        for case (let name, let value?) in optionals { members.append((name, .double(value))) }
        if let timestamp { members.append(("timestamp", .int(timestamp))) }
        return .object(members)
    }
}

extension Reference {
    init(json: JSON) throws(RecordDecodingError) {
        guard case .object = json, let recordName = json["recordName"]?.stringValue, !recordName.isEmpty else {
            throw RecordDecodingError("a REFERENCE needs a \"recordName\" string")
        }
        let zoneID = try json["zoneID"].map { zone throws(RecordDecodingError) in try ZoneID(json: zone) } ?? .default
        var action = Action.none
        if let actionJSON = json["action"] {
            guard let name = actionJSON.stringValue, let parsed = Action(rawValue: name) else {
                throw RecordDecodingError("reference action must be NONE, DELETE_SELF or VALIDATE")
            }
            action = parsed
        }
        self.init(recordID: RecordID(recordName: recordName, zoneID: zoneID), action: action)
    }

    var json: JSON {
        var members: [(String, JSON)] = [("recordName", .string(recordID.recordName))]
        if recordID.zoneID != .default { members.append(("zoneID", recordID.zoneID.json)) }
        members.append(("action", .string(action.rawValue)))
        return .object(members)
    }
}
