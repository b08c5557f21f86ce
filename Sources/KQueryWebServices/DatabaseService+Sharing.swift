import KQuery
import KQueryContainer

/// `records/resolve` and `records/accept` (SPEC §13; research sharing-users §1.6), on the public
/// database with a signed-in user: `{shortGUIDs: [{value, shouldFetchRootRecord?,
/// rootRecordDesiredKeys?}]}` answers `{results: [...]}`, one result or per-item error each.
extension DatabaseService {
    package static let shareOperations: Set<String> = ["records/resolve", "records/accept"]

    func resolveShares(_ body: JSON, accepting: Bool) throws(ServerError) -> ServiceAnswer {
        guard database.scope == .public else {
            throw ServerError.badRequest("endpoint not applicable in the database type '\(database.scope.name)db'")
        }
        guard let caller = database.userRecordName else {
            throw ServerError.authenticationRequired("\(accepting ? "records/accept" : "records/resolve") needs a signed-in user (ckWebAuthToken)")
        }
        guard case .array(let items)? = body["shortGUIDs"] else { throw ServerError.badRequest("a \"shortGUIDs\" array is required") }
        guard items.count <= ContainerDatabase.maximumOperations else {
            throw ServerError.badRequest("at most \(ContainerDatabase.maximumOperations) shortGUIDs, not \(items.count)")
        }
        let known = users[caller]
        let identity = ShareCaller(userRecordName: caller, emailAddresses: known?.emailAddress.map { [$0] } ?? [],
                                   phoneNumbers: known?.phoneNumber.map { [$0] } ?? [])
        var results: [JSON] = []
        for (index, item) in items.enumerated() {
            guard let value = item["value"]?.stringValue ?? item.stringValue else {
                throw ServerError.badRequest("shortGUIDs[\(index)] needs a \"value\" string")
            }
            let fetchRoot = item["shouldFetchRootRecord"] == .bool(true)
            let desiredKeys: [String]?
            do throws(ContainerError) { desiredKeys = try keys(item["rootRecordDesiredKeys"]) } catch { throw ServerError(error) }
            do throws(ContainerError) {
                let metadata = try database.container.resolveShare(
                    shortGUID: value, environment: database.environment, caller: identity, fetchRoot: fetchRoot, accepting: accepting,
                    isVerified: isVerified)
                results.append(result(metadata, shortGUID: .object([("value", .string(value)), ("shouldFetchRootRecord", .bool(fetchRoot))]),
                                      desiredKeys: desiredKeys))
            } catch {
                results.append(.object([("shortGUID", .object([("value", .string(value))]))] + error.webServicesMembers))
            }
        }
        return ServiceAnswer(json: .object([("results", .array(results))]))
    }

    /// Whether a user of the directory owns the email address or phone number.
    private func isVerified(_ emailAddress: String?, _ phoneNumber: String?) -> Bool {
        users.users.contains { user in
            (emailAddress.map(user.hasEmailAddress) ?? false) || (phoneNumber.map(user.hasPhoneNumber) ?? false)
        }
    }

    private func result(_ metadata: ShareMetadata, shortGUID: JSON, desiredKeys: [String]?) -> JSON {
        let owner = users[metadata.owner]?.identityJSON ?? .object([("userRecordName", .string(metadata.owner))])
        // A caller the share cannot identify yet sees whom it invited, not the share.
        guard metadata.potentialMatches.isEmpty else {
            return .object([
                ("shortGUID", shortGUID), ("containerIdentifier", .string(database.container.containerIdentifier)),
                ("environment", .string(database.environment.name)), ("ownerIdentity", owner),
                ("potentialMatchList", .array(metadata.potentialMatches)),
            ])
        }
        var share = metadata.share.json()
        if case .object(var members) = share {
            members.append(("currentUserParticipant", metadata.participant))
            share = .object(members)
        }
        var members: [(String, JSON)] = [
            ("shortGUID", shortGUID), ("containerIdentifier", .string(database.container.containerIdentifier)),
            ("environment", .string(database.environment.name)), ("databaseScope", .string(metadata.isOwner ? "PRIVATE" : "SHARED")),
            ("zoneID", metadata.zoneID.json),
        ]
        if let root = metadata.rootRecordName { members.append(("rootRecordName", .string(root))) }
        if let root = metadata.rootRecord { members.append(("rootRecord", root.json(desiredKeys: desiredKeys))) }
        members += [
            ("share", share), ("ownerIdentity", owner),
            ("participantType", metadata.participant["type"] ?? .string("UNKNOWN")),
            ("participantStatus", metadata.participant["acceptanceStatus"] ?? .string("UNKNOWN")),
            ("participantPermission", metadata.participant["permission"] ?? .string("UNKNOWN")),
        ]
        return .object(members)
    }
}
