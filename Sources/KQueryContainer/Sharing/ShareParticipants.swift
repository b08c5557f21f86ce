import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A share's participants as stored (SPEC §13): the JSON dictionaries CloudKit's clients send and
/// read, normalized to the spellings CloudKit emits (`USER`, `INVITED`; `PRIVATE_USER` and
/// `PENDING` are read as those), each with a `participantId`.
enum ShareParticipants {
    static let types = ["OWNER", "ADMINISTRATOR", "USER", "PUBLIC_USER"]
    static let permissions = ["NONE", "READ_ONLY", "READ_WRITE"]
    static let statuses = ["INVITED", "ACCEPTED", "REMOVED"]
    /// With the owner (CKShare's limit).
    static let maximum = 100

    /// The owner's participant entry.
    static func owner(_ userRecordName: String) -> JSON {
        .object([
            ("participantId", .string("owner")), ("type", .string("OWNER")), ("permission", .string("READ_WRITE")),
            ("acceptanceStatus", .string("ACCEPTED")), ("userIdentity", .object([("userRecordName", .string(userRecordName))])),
        ])
    }

    /// Reads a client's participants (owner entries dropped: the owner is the database's user) and
    /// returns them normalized, the owner first.
    static func normalized(_ text: String?, owner: String, previous: [JSON]) throws(ContainerError) -> [JSON] {
        var result = [Self.owner(owner)]
        guard let text else { return result + previous.filter { $0["type"]?.stringValue != "OWNER" } }
        guard case .array(let entries)? = try? JSON.parse(text) else { throw ContainerError(.badRequest, "\"participants\" must be an array") }
        let invited = entries.filter { $0["type"]?.stringValue != "OWNER" }.count
        guard invited < maximum else {
            throw ContainerError(.badRequest, "TOO_MANY_PARTICIPANTS: a share has at most \(maximum) participants with its owner, not \(invited + 1)")
        }
        for (index, entry) in entries.enumerated() {
            guard case .object(var members) = entry else { throw ContainerError(.badRequest, "participants[\(index)] must be an object") }
            func set(_ key: String, _ value: JSON) {
                if let at = members.firstIndex(where: { $0.0 == key }) { members[at].1 = value } else { members.append((key, value)) }
            }
            func choice(_ key: String, _ allowed: [String], default value: String, aliases: [String: String] = [:]) throws(ContainerError) -> String {
                guard let given = entry[key] else { return value }
                guard let text = given.stringValue.map({ aliases[$0] ?? $0 }), allowed.contains(text) else {
                    throw ContainerError(.badRequest, "participants[\(index)].\(key) must be one of \(allowed.joined(separator: ", "))")
                }
                return text
            }
            let type = try choice("type", types, default: "USER", aliases: ["PRIVATE_USER": "USER"])
            if type == "OWNER" { continue }
            set("type", .string(type))
            set("permission", .string(try choice("permission", permissions, default: "READ_ONLY")))
            set("acceptanceStatus", .string(try choice("acceptanceStatus", statuses, default: "INVITED", aliases: ["PENDING": "INVITED"])))
            guard case .object? = entry["userIdentity"], entry["userIdentity"]?["userRecordName"]?.stringValue != nil
                || entry["userIdentity"]?["lookupInfo"] != nil else {
                throw ContainerError(.badRequest, "participants[\(index)] needs a userIdentity with a userRecordName or lookupInfo")
            }
            // A participant the share had keeps its ID and, unless changed, its acceptance.
            let match = previous.first { same($0, entry) }
            let id = entry["participantId"]?.stringValue ?? match?["participantId"]?.stringValue ?? UUID().uuidString
            set("participantId", .string(id))
            if entry["acceptanceStatus"] == nil, let status = match?["acceptanceStatus"] { set("acceptanceStatus", status) }
            if let known = match?["userIdentity"]?["userRecordName"], entry["userIdentity"]?["userRecordName"] == nil,
               case .object(var identity)? = entry["userIdentity"] {
                identity.append(("userRecordName", known))
                set("userIdentity", .object(identity))
            }
            result.append(.object(members))
        }
        return result
    }

    /// Whether two participant entries name the same person (ID, user record name, email or phone).
    static func same(_ a: JSON, _ b: JSON) -> Bool {
        if let x = a["participantId"]?.stringValue, x == b["participantId"]?.stringValue { return true }
        let paths: [[String]] = [["userIdentity", "userRecordName"], ["userIdentity", "lookupInfo", "userRecordName"],
                                 ["userIdentity", "lookupInfo", "emailAddress"], ["userIdentity", "lookupInfo", "phoneNumber"]]
        for path in paths {
            var x: JSON? = a, y: JSON? = b
            for key in path {
                x = x?[key]
                y = y?[key]
            }
            if let x = x?.stringValue, let y = y?.stringValue, x.lowercased() == y.lowercased() { return true }
        }
        return false
    }
}
