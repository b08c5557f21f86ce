import KQuery
import KQueryContainer

/// The user endpoints (SPEC §13; research sharing-users §1.8): `users/current` on any database,
/// and on the public database only `users/caller`, `users/discover` (GET: every discoverable user
/// but the caller, the local directory standing for the address book; POST: by `lookupInfos`),
/// `users/lookup/email` and `users/lookup/id`. Undiscoverable users are never revealed: a lookup
/// that names one finds nothing, as one naming nobody does.
extension DatabaseService {
    /// The operations only the public database answers.
    package static let publicUserOperations: Set<String> = ["users/caller", "users/discover", "users/lookup/email", "users/lookup/id"]

    /// A user endpoint's answer. `body` is nil for a GET.
    func users(_ operation: String, _ body: JSON?) throws(ServerError) -> ServiceAnswer {
        if Self.publicUserOperations.contains(operation), database.scope != .public {
            // CloudKit's words (MistKit #28, live): "endpoint not applicable in the database type 'privatedb'".
            throw ServerError.badRequest("endpoint not applicable in the database type '\(database.scope.name)db'")
        }
        guard let caller = database.userRecordName else {
            throw ServerError.authenticationRequired("\(operation) needs a signed-in user (ckWebAuthToken)")
        }
        switch operation {
        case "users/current":
            // The User dictionary; names only when the user is discoverable (WS GetCurrentUser).
            var members: [(String, JSON)] = [("userRecordName", .string(caller))]
            if let user = users[caller], user.discoverable {
                members += [("firstName", user.givenName.map(JSON.string) ?? .null), ("lastName", user.familyName.map(JSON.string) ?? .null)]
            }
            return ServiceAnswer(json: .object(members))
        case "users/caller":
            // Apple documents `{"users": [identity]}`, while OpenCloudKit and MistKit decode a bare
            // identity: the bare identity with `users` beside its keys reads both ways.
            let identity = users[caller]?.identityJSON
                ?? .object([("userRecordName", .string(caller)), ("lookupInfo", .object([("userRecordName", .string(caller))]))])
            guard case .object(let members) = identity else { return ServiceAnswer(json: identity) }
            return ServiceAnswer(json: .object(members + [("users", .array([identity]))]))
        case "users/discover":
            guard let body else {
                let found = users.users.filter { $0.discoverable && $0.name != caller }
                return ServiceAnswer(json: .object([("users", .array(found.map(\.identityJSON)))]))
            }
            try Self.requireObject(body)
            guard case .array(let elements)? = body["lookupInfos"] else {
                throw ServerError.badRequest("users/discover needs a \"lookupInfos\" array")
            }
            do throws(ContainerError) { try Self.bound(elements, operation, "lookupInfos") } catch { throw ServerError(error) }
            var found: [DirectoryUser] = []
            for (index, element) in elements.enumerated() {
                let lookupInfo = try LookupInfo(json: element, "lookupInfos[\(index)]")
                if let user = users.discoverable(matching: lookupInfo), !found.contains(user) { found.append(user) }
            }
            return ServiceAnswer(json: .object([("users", .array(found.map(\.identityJSON)))]))
        case "users/lookup/email", "users/lookup/id":
            let byEmail = operation == "users/lookup/email"
            let key = byEmail ? "emailAddress" : "userRecordName"
            try Self.requireObject(body ?? .null)
            guard case .array(let elements)? = body?["users"] else {
                throw ServerError.badRequest("\(operation) needs a \"users\" array of {\"\(key)\": ...}")
            }
            do throws(ContainerError) { try Self.bound(elements, operation, "users") } catch { throw ServerError(error) }
            var found: [DirectoryUser] = []
            for (index, element) in elements.enumerated() {
                guard case .object = element, let value = element[key]?.stringValue, !value.isEmpty else {
                    throw ServerError.badRequest("users[\(index)] needs a non-empty \"\(key)\" string")
                }
                let lookupInfo: LookupInfo = byEmail ? .emailAddress(value) : .userRecordName(value)
                if let user = users.discoverable(matching: lookupInfo), !found.contains(user) { found.append(user) }
            }
            return ServiceAnswer(json: .object([("users", .array(found.map { $0.lookupJSON(withEmailAddress: byEmail) }))]))
        default:
            throw ServerError.notFound("no operation '\(operation)'")
        }
    }
}
