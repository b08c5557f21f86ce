import KQuery
import KQueryContainer
import KQueryStore

/// What a Web Services operation answers: the JSON body, its HTTP status, and how many pushes the
/// operation queued (for the request log) and for whom (the web courier wakes their polls).
package struct ServiceAnswer: Sendable {
    /// The answer as a JSON tree, or already serialized (a query's records are written straight
    /// to bytes).
    private var content: Content
    package var status: Int
    package var pushes: Int
    package var pushedTo: Set<OutboxRecipient>

    private enum Content: Sendable {
        case json(JSON)
        case serialized([UInt8])
    }

    package init(json: JSON, status: Int = 200, pushes: [OutboxNotification] = []) {
        content = .json(json)
        self.status = status
        self.pushes = pushes.count
        pushedTo = Set(pushes.lazy.map(\.recipient))
    }

    /// An answer whose JSON text is `bytes` (valid JSON, as `JSON.serializedBytes` writes it).
    package init(serialized bytes: [UInt8], status: Int = 200, pushes: [OutboxNotification] = []) {
        content = .serialized(bytes)
        self.status = status
        self.pushes = pushes.count
        pushedTo = Set(pushes.lazy.map(\.recipient))
    }

    /// The answer's JSON (read back from its bytes when it was written as bytes).
    package var json: JSON {
        switch content {
        case .json(let json): json
        case .serialized(let bytes): (try? bytes.withUnsafeBufferPointer { buffer throws(JSONError) in try JSON.parse(bytes: buffer) }) ?? .null
        }
    }

    /// The answer's JSON text as UTF-8.
    package var serializedBytes: [UInt8] {
        switch content {
        case .json(let json): json.serializedBytes
        case .serialized(let bytes): bytes
        }
    }
}

/// CloudKit Web Services' database operations over one container database: each reads the
/// request's Web Services JSON, calls the container, and encodes its answer. Knows nothing of HTTP.
package struct DatabaseService: Sendable {
    package let database: ContainerDatabase
    /// The `.ckdb` schema records and queries must fit, if the server was given one.
    package let schema: Schema?
    /// Without a schema, the one the container learns from its saves (CloudKit's development
    /// behaviour: a field's first save fixes its type).
    package let learnedSchema: LearnedSchema?
    /// The local users, for the user endpoints.
    package let users: UserDirectory
    /// The server's asset URLs: records read through it show download URLs, and `assets/upload`
    /// is served (nil: assets are shown as stored and uploads are refused).
    package let assetLinks: AssetLinks?

    package init(
        database: ContainerDatabase, schema: Schema? = nil, learnedSchema: LearnedSchema? = nil, users: UserDirectory = UserDirectory(),
        assetLinks: AssetLinks? = nil
    ) {
        self.database = database
        self.schema = schema
        self.learnedSchema = learnedSchema
        self.users = users
        self.assetLinks = assetLinks
    }

    /// The links that present this database's records' assets, when it may hold any.
    private var presentsAssets: AssetLinks? { database.container.holdsAssets ? assetLinks : nil }

    /// The record type of the public database's user records (CKRecordTypeUserRecord).
    package static let usersRecordType = "Users"

    /// Refuses a request body that is not a JSON object (every operation that takes a body).
    package static func requireObject(_ body: JSON) throws(ServerError) {
        guard case .object = body else { throw ServerError.badRequest("the request body must be a JSON object") }
    }

    /// Runs an operation. `body` is `.null` for a GET (which takes no body): `users/discover`
    /// answers GET and POST differently.
    package func run(_ operation: String, _ body: JSON) throws(ServerError) -> ServiceAnswer {
        if operation == "users/current" || Self.publicUserOperations.contains(operation) {
            return try users(operation, body == .null ? nil : body)
        }
        if operation.hasSuffix("/list") {
            // GET operations take no body.
        } else {
            try Self.requireObject(body)
        }
        if operation == "records/query" { return try query(body) }
        do throws(ContainerError) {
            switch operation {
            case "records/modify": return try modify(body)
            case "records/lookup": return try lookup(body)
            case "records/changes": return try recordChanges(body)
            case "changes/zone": return try zoneChanges(body)
            case "changes/database": return try databaseChanges(body, tokenKey: "syncToken")
            case "zones/changes": return try databaseChanges(body, tokenKey: "metaSyncToken")
            case "zones/list": return ServiceAnswer(json: .object([("zones", .array(try database.zones().map(zoneJSON)))]))
            case "zones/lookup": return try lookupZones(body)
            case "zones/modify": return try modifyZones(body)
            case "subscriptions/list": return ServiceAnswer(json: .object([("subscriptions", .array(try database.subscriptions().map(\.webServicesJSON)))]))
            case "subscriptions/lookup": return try lookupSubscriptions(body)
            case "subscriptions/modify": return try modifySubscriptions(body)
            case "records/resolve", "records/accept":
                do throws(ServerError) { return try resolveShares(body, accepting: operation == "records/accept") } catch {
                    throw ContainerError(ContainerError.Code(rawValue: error.serverErrorCode) ?? .badRequest, error.reason)
                }
            case "assets/upload": return try requestAssetUploads(body)
            case "assets/rereference": return try rereferenceAssets(body)
            default: throw ContainerError(.notFound, "no operation '\(operation)'")
            }
        } catch {
            throw ServerError(error)
        }
    }

    // MARK: Records

    func query(_ body: JSON) throws(ServerError) -> ServiceAnswer {
        try query(try queryRequest(body))
    }

    /// A `records/query` body read (`queryRequest`) answered.
    package func query(_ request: QueryRequest) throws(ServerError) -> ServiceAnswer {
        let result: QueryResult
        do throws(ContainerError) { result = try database.query(request.query, cursor: request.cursor) } catch { throw ServerError(error) }
        return answer(request, result)
    }

    /// `query` without holding a thread while the storage works (`ContainerDatabase.queryWithoutBlocking`);
    /// nil: call `query`.
    package func queryWithoutBlocking(_ request: QueryRequest) async throws(ServerError) -> ServiceAnswer? {
        let result: QueryResult?
        do throws(ContainerError) { result = try await database.queryWithoutBlocking(request.query, cursor: request.cursor) } catch { throw ServerError(error) }
        return result.map { answer(request, $0) }
    }

    /// A `records/query` body read and checked against the schema.
    package func queryRequest(_ body: JSON) throws(ServerError) -> QueryRequest {
        let request = try QueryRequest(webServicesJSON: body)
        // CloudKit's user records are fetched by name, never queried (CKRecordTypeUserRecord).
        guard request.query.recordType != Self.usersRecordType else {
            throw ServerError.badRequest("Type is not marked indexable: \(Self.usersRecordType) records cannot be queried; look one up by its userRecordName")
        }
        try schema?.check(request.query)
        return request
    }

    private func answer(_ request: QueryRequest, _ result: QueryResult) -> ServiceAnswer {
        var result = result
        if let links = presentsAssets { result.records = result.records.map(links.presenting) }
        // `{"records":[...],"continuationMarker":"..."}`, the records written straight to bytes.
        var out: [UInt8] = []
        out.reserveCapacity(64 + 512 * result.records.count)
        out.append(contentsOf: #"{"records":["#.utf8)
        for (index, record) in result.records.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            record.writeJSON(desiredKeys: request.query.desiredKeys, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        if let cursor = result.cursor {
            out.append(contentsOf: #","continuationMarker":"#.utf8)
            JSON.string(cursor.token).write(to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return ServiceAnswer(serialized: out)
    }

    /// An atomic failure answers HTTP 400 ATOMIC_ERROR, with every operation's result in
    /// `records` (the culprit's own code, its siblings ATOMIC_ERROR).
    func modify(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        let request = try prepareModify(body)
        return answer(request, try commit(request))
    }

    /// A `records/modify` request read and checked against the schema, ready to commit.
    package struct PreparedModify: Sendable {
        var operations: [RecordOperation]
        var atomic: Bool
        /// The device making the change (the modify's `apnsToken`), which its pushes skip.
        package var device: String?
        var desiredKeys: [String]?

        /// The records the modify reads (each operation's).
        package var recordIDs: [RecordID] { operations.map(\.record.recordID) }
    }

    /// Reads a `records/modify` body and fits its records to the schema (no container access but
    /// the learned schema's).
    package func prepareModify(_ body: JSON) throws(ContainerError) -> PreparedModify {
        let request = try ModifyRequest(webServicesJSON: body)
        // CloudKit makes each user's record itself: "you can't create new user records" (CKRecordTypeUserRecord).
        if database.scope == .public,
           let index = request.operations.firstIndex(where: { $0.kind == .create && $0.record.recordType == Self.usersRecordType }) {
            throw ContainerError(.badRequest, "operations[\(index)]: records of type \(Self.usersRecordType) cannot be created; each user's exists already, named by their userRecordName")
        }
        let desiredKeys: [String]?
        do throws(ServerError) { desiredKeys = try QueryRequest.desiredKeys(body["desiredKeys"]) } catch {
            throw ContainerError(.badRequest, error.reason)
        }
        var operations = request.operations
        if let schema {
            operations = try schema.conforming(operations)
        } else if let learnedSchema {
            operations = try learnedSchema.conforming(operations)
        }
        return PreparedModify(operations: operations, atomic: request.atomic, device: request.device, desiredKeys: desiredKeys)
    }

    /// Applies a prepared modify; with `durably: false` the caller waits for durability itself.
    package func commit(_ request: PreparedModify, durably: Bool = true) throws(ContainerError) -> ModifyResult {
        try database.modify(request.operations, atomic: request.atomic, device: request.device, durably: durably)
    }

    /// The `records/modify` answer for a committed modify.
    package func answer(_ request: PreparedModify, _ result: ModifyResult) -> ServiceAnswer {
        var result = result
        if let links = presentsAssets { result.results = result.results.map { links.presenting($0) } }
        let json = result.webServicesJSON(desiredKeys: request.desiredKeys)
        if request.atomic, result.results.contains(where: { $0.error?.code == .atomicError }) {
            var error = ServerError("ATOMIC_ERROR", "an operation of an atomic zone failed, so none of that zone's were applied", httpStatus: 400)
            error.extra["records"] = json["records"]
            return ServiceAnswer(json: error.webServicesJSON, status: 400, pushes: result.notifications)
        }
        return ServiceAnswer(json: json, pushes: result.notifications)
    }

    /// Refuses a request naming more items than CloudKit answers in one response (200, Apple's
    /// Data Size Limits): each is a read, and 60,000 in a body of 2 MB kept a server busy for minutes.
    static func bound(_ items: [JSON], _ operation: String, _ what: String) throws(ContainerError) {
        guard items.count <= ContainerDatabase.maximumOperations else {
            throw ContainerError(.limitExceeded, "\(operation) takes at most \(ContainerDatabase.maximumOperations) \(what), not \(items.count)")
        }
    }

    func lookup(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let elements)? = body["records"] else { throw ContainerError(.badRequest, "a lookup request needs a \"records\" array") }
        try Self.bound(elements, "records/lookup", "records")
        let zone = try body["zoneID"].map(zoneID) ?? .default
        var ids: [RecordID] = []
        for (index, element) in elements.enumerated() {
            guard let name = element["recordName"]?.stringValue, !name.isEmpty else {
                throw ContainerError(.badRequest, "records[\(index)] needs a \"recordName\"")
            }
            ids.append(RecordID(recordName: name, zoneID: try element["zoneID"].map(zoneID) ?? zone))
        }
        let desiredKeys = try keys(body["desiredKeys"])
        var results = try database.lookup(ids)
        if let links = presentsAssets { results = results.map { links.presenting($0) } }
        return ServiceAnswer(json: .object([("records", .array(results.map { $0.webServicesJSON(desiredKeys: desiredKeys) }))]))
    }

    // MARK: Changes

    func recordChanges(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard let zoneJSON = body["zoneID"] else { throw ContainerError(.badRequest, "records/changes needs a \"zoneID\"") }
        var changes = try database.zoneChanges(try zoneID(zoneJSON), since: try token(body["syncToken"]), resultsLimit: try limit(body["resultsLimit"]))
        if let links = presentsAssets { changes.changes = changes.changes.map { links.presenting($0) } }
        return ServiceAnswer(json: changes.webServicesJSON(desiredKeys: try keys(body["desiredKeys"])))
    }

    func zoneChanges(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let zones)? = body["zones"] else { throw ContainerError(.badRequest, "changes/zone needs a \"zones\" array") }
        try Self.bound(zones, "changes/zone", "zones")
        let sharedLimit = try limit(body["resultsLimit"])
        let sharedKeys = try keys(body["desiredKeys"])
        var answers: [JSON] = []
        for (index, entry) in zones.enumerated() {
            guard let zoneJSON = entry["zoneID"] else { throw ContainerError(.badRequest, "zones[\(index)] needs a \"zoneID\"") }
            let zone = try zoneID(zoneJSON)
            do throws(ContainerError) {
                let entryLimit = entry["resultsLimit"] == nil ? sharedLimit : try limit(entry["resultsLimit"])
                let entryKeys = entry["desiredKeys"] == nil ? sharedKeys : try keys(entry["desiredKeys"])
                var changes = try database.zoneChanges(zone, since: try token(entry["syncToken"]), resultsLimit: entryLimit)
                if let links = presentsAssets { changes.changes = changes.changes.map { links.presenting($0) } }
                answers.append(changes.webServicesJSON(desiredKeys: entryKeys))
            } catch {
                answers.append(.object([("zoneID", zone.json)] + error.webServicesMembers))
            }
        }
        return ServiceAnswer(json: .object([("zones", .array(answers))]))
    }

    /// `changes/database` (`syncToken`) and its older form `zones/changes` (`metaSyncToken`).
    func databaseChanges(_ body: JSON, tokenKey: String) throws(ContainerError) -> ServiceAnswer {
        let changes = try database.databaseChanges(since: try token(body[tokenKey]), resultsLimit: try limit(body["resultsLimit"]))
        guard case .object(var members) = changes.webServicesJSON else { return ServiceAnswer(json: changes.webServicesJSON) }
        if tokenKey != "syncToken", let position = members.firstIndex(where: { $0.0 == "syncToken" }) {
            members[position].0 = tokenKey
        }
        return ServiceAnswer(json: .object(members))
    }

    // MARK: Zones

    func zoneJSON(_ zone: ZoneID) -> JSON {
        .object([("zoneID", zone.json), ("atomic", .bool(!zone.isDefaultZone))])
    }

    func lookupZones(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let elements)? = body["zones"] else { throw ContainerError(.badRequest, "zones/lookup needs a \"zones\" array") }
        try Self.bound(elements, "zones/lookup", "zones")
        var answers: [JSON] = []
        for element in elements {
            // Apple sends zone IDs; a zone dictionary (`{"zoneID": {...}}`) is read too.
            let zone = try zoneID(element["zoneID"] ?? element)
            if let found = try database.zone(zone) {
                answers.append(zoneJSON(found))
            } else {
                answers.append(.object([("zoneID", zone.json)] + ContainerError(.zoneNotFound, "zone '\(zone.zoneName)' does not exist").webServicesMembers))
            }
        }
        return ServiceAnswer(json: .object([("zones", .array(answers))]))
    }

    func modifyZones(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let operations)? = body["operations"] else { throw ContainerError(.badRequest, "zones/modify needs an \"operations\" array") }
        try Self.bound(operations, "zones/modify", "operations")
        var parsed: [(String, ZoneID)] = []
        for (index, operation) in operations.enumerated() {
            guard let type = operation["operationType"]?.stringValue, type == "create" || type == "delete" else {
                throw ContainerError(.badRequest, "operations[\(index)]: operationType must be \"create\" or \"delete\"")
            }
            guard let zoneJSON = operation["zone"] else { throw ContainerError(.badRequest, "operations[\(index)] needs a \"zone\"") }
            parsed.append((type, try zoneID(zoneJSON["zoneID"] ?? zoneJSON)))
        }
        var answers: [JSON] = []
        var pushes: [OutboxNotification] = []
        for (type, requested) in parsed {
            // `__defaultOwner__` means the caller: the answer names the real owner, as lists and lookups do.
            let zone = database.canonical(requested)
            do throws(ContainerError) {
                if type == "create" {
                    try database.createZone(zone)
                    answers.append(zoneJSON(zone))
                } else {
                    pushes += try database.deleteZone(zone)
                    answers.append(.object([("zoneID", zone.json), ("deleted", .bool(true))]))
                }
            } catch {
                answers.append(.object([("zoneID", zone.json)] + error.webServicesMembers))
            }
        }
        return ServiceAnswer(json: .object([("zones", .array(answers))]), pushes: pushes)
    }

    // MARK: Subscriptions

    func lookupSubscriptions(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let elements)? = body["subscriptions"] else {
            throw ContainerError(.badRequest, "subscriptions/lookup needs a \"subscriptions\" array")
        }
        try Self.bound(elements, "subscriptions/lookup", "subscriptions")
        var answers: [JSON] = []
        for (index, element) in elements.enumerated() {
            guard let id = element["subscriptionID"]?.stringValue ?? element.stringValue else {
                throw ContainerError(.badRequest, "subscriptions[\(index)] needs a \"subscriptionID\"")
            }
            if let found = try database.subscription(id) {
                answers.append(found.webServicesJSON)
            } else {
                answers.append(.object([("subscriptionID", .string(id))] + ContainerError(.notFound, "subscription '\(id)' does not exist").webServicesMembers))
            }
        }
        return ServiceAnswer(json: .object([("subscriptions", .array(answers))]))
    }

    func modifySubscriptions(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let operations)? = body["operations"] else {
            throw ContainerError(.badRequest, "subscriptions/modify needs an \"operations\" array")
        }
        for (index, operation) in operations.enumerated() {
            guard let type = operation["operationType"]?.stringValue, ["create", "update", "delete"].contains(type) else {
                throw ContainerError(.badRequest, "operations[\(index)]: operationType must be \"create\", \"update\" or \"delete\"")
            }
            guard case .object? = operation["subscription"] else { throw ContainerError(.badRequest, "operations[\(index)] needs a \"subscription\" object") }
        }
        var answers: [JSON] = []
        // The operations of each run of `subscriptionsPerTransaction` share one transaction, each
        // applied or refused alone (`Container.batchingWrites`): each its own transaction was a
        // commit, a disk sync, a subscription (100,000 through a node took 113 s on PostgreSQL).
        for start in stride(from: 0, to: operations.count, by: Self.subscriptionsPerTransaction) {
            let run = operations[start..<min(start + Self.subscriptionsPerTransaction, operations.count)]
            var runAnswers: [JSON] = []
            do throws(ContainerError) {
                try database.container.batchingWrites {
                    for operation in run { runAnswers.append(modifySubscription(operation)) }
                }
                try database.container.waitUntilDurable()
            } catch {
                // None of the run's changes committed.
                runAnswers = run.map { operation in
                    .object([("subscriptionID", .string(operation["subscription"]?["subscriptionID"]?.stringValue ?? ""))] + error.webServicesMembers)
                }
            }
            answers += runAnswers
        }
        return ServiceAnswer(json: .object([("subscriptions", .array(answers))]))
    }

    /// The most subscription operations of one request that share a transaction (holding the
    /// container's writes meanwhile).
    static let subscriptionsPerTransaction = 200

    /// One checked operation of `subscriptions/modify` applied: its answer.
    private func modifySubscription(_ operation: JSON) -> JSON {
        let subscriptionJSON = operation["subscription"] ?? .object([])
        let id = subscriptionJSON["subscriptionID"]?.stringValue ?? ""
        do throws(ContainerError) {
            if operation["operationType"]?.stringValue == "delete" {
                try database.deleteSubscription(id)
                return .object([("subscriptionID", .string(id)), ("deleted", .bool(true))])
            }
            let subscription: Subscription
            do throws(SubscriptionError) { subscription = try Subscription(webServicesJSON: subscriptionJSON) } catch {
                throw ContainerError(.badRequest, error.message)
            }
            return try database.saveSubscription(subscription).webServicesJSON
        } catch {
            return .object([("subscriptionID", .string(id))] + error.webServicesMembers)
        }
    }

    // MARK: Assets

    /// `assets/upload`: `{zoneID?, tokens: [{recordName?, recordType?, fieldName}]}` answers
    /// `{tokens: [{recordName, fieldName, url}]}` in request order.
    func requestAssetUploads(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard let assetLinks else { throw ContainerError(.notFound, "assets/upload is served by kquery serve") }
        guard case .array(let tokens)? = body["tokens"] else { throw ContainerError(.badRequest, "assets/upload needs a \"tokens\" array") }
        var requests: [AssetFieldRequest] = []
        for (index, token) in tokens.enumerated() {
            guard case .object = token else { throw ContainerError(.badRequest, "tokens[\(index)] must be an object, not \(token.kindName)") }
            guard let fieldName = token["fieldName"]?.stringValue else { throw ContainerError(.badRequest, "tokens[\(index)] needs a \"fieldName\" string") }
            let recordName = try optionalString(token["recordName"], "tokens[\(index)].recordName")
            let recordType = try optionalString(token["recordType"], "tokens[\(index)].recordType")
            requests.append(AssetFieldRequest(recordName: recordName, recordType: recordType, fieldName: fieldName))
        }
        let tickets = try database.requestAssetUploads(requests, in: try body["zoneID"].map(zoneID) ?? .default)
        let answers: [JSON] = tickets.map { ticket in
            .object([("recordName", .string(ticket.binding.recordName)), ("fieldName", .string(ticket.binding.fieldName)),
                     ("url", .string(assetLinks.upload(ticket.token)))])
        }
        return ServiceAnswer(json: .object([("tokens", .array(answers))]))
    }

    /// `assets/rereference`: `{zoneID?, assets: [{recordName, fieldName}]}` answers `{assets: [...]}`,
    /// a fresh asset dictionary (with a receipt) or a per-item error for each, in order.
    func rereferenceAssets(_ body: JSON) throws(ContainerError) -> ServiceAnswer {
        guard case .array(let items)? = body["assets"] else { throw ContainerError(.badRequest, "assets/rereference needs an \"assets\" array") }
        try Self.bound(items, "assets/rereference", "assets")
        var fields: [(recordName: String, fieldName: String, index: Int?)] = []
        for (index, item) in items.enumerated() {
            guard let recordName = item["recordName"]?.stringValue, !recordName.isEmpty, let fieldName = item["fieldName"]?.stringValue else {
                throw ContainerError(.badRequest, "assets[\(index)] needs \"recordName\" and \"fieldName\" strings")
            }
            var position: Int?
            if let indexJSON = item["index"], indexJSON != .null {
                guard let value = indexJSON.int64Value, value >= 0, value < Int64(Int32.max) else {
                    throw ContainerError(.badRequest, "assets[\(index)].index must be a non-negative integer")
                }
                position = Int(value)
            }
            fields.append((recordName, fieldName, position))
        }
        let results = try database.rereferenceAssets(fields, in: try body["zoneID"].map(zoneID) ?? .default)
        let answers: [JSON] = zip(fields, results).map { field, result in
            switch result {
            case .success(let asset): asset.webServicesJSON
            case .failure(let error): .object([("recordName", .string(field.recordName)), ("fieldName", .string(field.fieldName))] + error.webServicesMembers)
            }
        }
        return ServiceAnswer(json: .object([("assets", .array(answers))]))
    }

    func optionalString(_ json: JSON?, _ name: String) throws(ContainerError) -> String? {
        switch json {
        case nil, .null?: return nil
        case .string(let text)? where !text.isEmpty: return text
        case let other?: throw ContainerError(.badRequest, "\(name) must be a non-empty string, not \(other.serialized.prefix(40))")
        }
    }

    // MARK: Reading request members

    func zoneID(_ json: JSON) throws(ContainerError) -> ZoneID {
        do throws(RecordDecodingError) { return try ZoneID(json: json) } catch { throw ContainerError(.badRequest, error.message) }
    }

    func token(_ json: JSON?) throws(ContainerError) -> SyncToken? {
        guard let json, json != .null else { return nil }
        guard let text = json.stringValue else { throw ContainerError(.badRequest, "a sync token must be a string") }
        return SyncToken(text: text)
    }

    func limit(_ json: JSON?) throws(ContainerError) -> Int {
        guard let json, json != .null else { return ContainerDatabase.maximumChangesLimit }
        guard let value = json.int64Value, value >= 1 else { throw ContainerError(.badRequest, "\"resultsLimit\" must be a positive integer") }
        return Int(min(value, Int64(ContainerDatabase.maximumChangesLimit)))
    }

    func keys(_ json: JSON?) throws(ContainerError) -> [String]? {
        do throws(ServerError) { return try QueryRequest.desiredKeys(json) } catch { throw ContainerError(.badRequest, error.reason) }
    }
}
