import Hummingbird
import KQuery
import KQueryContainer
import KQueryWebServices

import Foundation

/// The console (SPEC §17): `/console` serves its pages (HTML, CSS and JavaScript modules shipped
/// as the target's resources) and `/console/api/` the JSON they read, behind `ConsoleAccess`.
/// The pages act through the Web Services endpoints as any client does (a record saved in the
/// console is a `records/modify`, so its pushes fire); the API adds what no client may ask:
/// the request, change and push logs, subscription verdicts, queries as any local user.
extension CloudKitServer {
    static let consolePath = "/console"

    /// The console's pages: each is `index.html`, which reads its URL and shows that page.
    static let consolePages = ["records", "requests", "subscriptions", "zones"]

    func consoleRoutes(_ router: Router<ServerContext>, _ journals: ConsoleJournals) {
        let console = router.group(RouterPath(Self.consolePath)).add(middleware: ConsoleAccess(token: configuration.consoleToken))
        console.get { _, _ in try ConsoleFiles.response("index.html") }
        for page in Self.consolePages {
            console.get(RouterPath(page)) { _, _ in try ConsoleFiles.response("index.html") }
        }
        console.get("static/:file") { _, context in try ConsoleFiles.response(context.parameters.get("file") ?? "") }
        console.get("api/overview") { _, _ in await self.consoleAnswer { () throws(ServerError) in try self.consoleOverview() } }
        console.post("api/signin") { request, _ in
            await self.consoleAnswer(request) { json throws(ServerError) in try self.consoleSignIn(json) }
        }
        console.post("api/check") { request, _ in
            await self.consoleAnswer(request) { json throws(ServerError) in Self.consoleCheck(json) }
        }
        console.post("api/query") { request, _ in
            await self.consoleAnswer(request) { json throws(ServerError) in try self.consoleQuery(json, request) }
        }
        console.get("api/requests") { request, _ in
            await self.consoleAnswer { () throws(ServerError) in try Self.log(journals.requests, request) { $0.json($0.entry.jsonMembers) } }
        }
        console.get("api/changes") { request, _ in
            let user = request.uri.queryParameters.get("user")
            return await self.consoleAnswer { () throws(ServerError) in try Self.log(journals.changes, request) { $0.json($0.entry.jsonMembers(actingAs: user)) } }
        }
        console.get("api/pushes") { request, _ in
            await self.consoleAnswer { () throws(ServerError) in try Self.log(journals.pushes, request) { $0.json($0.entry.jsonMembers) } }
        }
        console.post("api/requests/clear") { _, _ in
            journals.requests.clear()
            return Self.response(ServiceAnswer(json: .object([])))
        }
        console.post("api/pushes/clear") { _, _ in
            journals.pushes.clear()
            return Self.response(ServiceAnswer(json: .object([])))
        }
        console.get("api/explain") { request, _ in
            await self.consoleAnswer { () throws(ServerError) in try self.consoleExplain(request, changes: journals.changes) }
        }
        console.post("api/testpush") { request, _ in
            await self.consoleAnswer(request) { json throws(ServerError) in try self.consoleTestPush(json) }
        }
        console.get("api/export") { request, _ in await self.consoleExport(request) }
        console.post("api/import") { request, _ in
            await self.consoleAnswer { () async throws(ServerError) -> JSON in try await self.consoleImport(request) }
        }
        console.post("api/reset") { request, _ in
            await self.consoleAnswer { () async throws(ServerError) -> JSON in try await self.consoleReset(request) }
        }
        console.get("api/schema") { request, _ in
            await self.consoleAnswer { () throws(ServerError) in try self.consoleSchema(request) }
        }
        console.get("api/zones") { request, _ in
            await self.consoleAnswer { () throws(ServerError) in try self.consoleZones(request) }
        }
        console.post("api/zones/changes") { request, _ in
            await self.consoleAnswer(request) { json throws(ServerError) in try self.consoleZoneChanges(json) }
        }
        console.get("api/subscriptions") { request, _ in
            await self.consoleAnswer { () throws(ServerError) in try self.consoleSubscriptions(request) }
        }
    }

    // MARK: Answers

    /// Runs a console API call and writes its JSON or its error, as the Web Services routes do.
    func consoleAnswer(_ body: () async throws(ServerError) -> JSON) async -> Response {
        do throws(ServerError) { return Self.response(ServiceAnswer(json: try await body())) } catch {
            return Self.response(ServiceAnswer(json: error.webServicesJSON, status: error.httpStatus))
        }
    }

    /// A console API call with a JSON object body.
    func consoleAnswer(_ request: Request, _ body: @escaping (JSON) throws(ServerError) -> JSON) async -> Response {
        await consoleAnswer { () async throws(ServerError) -> JSON in
            let buffer: ByteBuffer
            do { buffer = try await request.body.collect(upTo: configuration.maximumBodySize) } catch {
                throw ServerError.tooLarge(configuration.maximumBodySize)
            }
            let json = try Body(bytes: Array(buffer.readableBytesView)).json()
            try DatabaseService.requireObject(json)
            return try body(json)
        }
    }

    /// `?after=N`: the log's entries numbered after N (all without it), newest first.
    static func log<Entry>(_ journal: ConsoleJournal<Entry>, _ request: Request, _ json: (ConsoleJournal<Entry>.Stamped) -> JSON) throws(ServerError) -> JSON {
        var after = 0
        if let text = request.uri.queryParameters.get("after") {
            guard let number = Int(text), number >= 0 else { throw ServerError.badRequest("\"after\" must be a whole number of at least 0, not '\(text)'") }
            after = number
        }
        return .object([("entries", .array(journal.entries(after: after).map(json)))])
    }

    // MARK: Overview and signing in

    /// The containers of the data directory, the local users, and the API token the pages use.
    func consoleOverview() throws(ServerError) -> JSON {
        var failures: [String] = []
        let containers = containers.allContainers(failures: &failures).map(\.containerIdentifier)
        let users = try configuration.userDirectory().users.map(\.name)
        return .object([
            ("containers", .array(containers.map(JSON.string))), ("users", .array(users.map(JSON.string))),
            ("environments", .array(["development", "production"].map(JSON.string))),
        ])
    }

    /// `{"user": "_alice"}`: a web auth token of that user and an API token this server takes, for
    /// the pages' own Web Services requests as that user (a console credential is all it needs:
    /// the console acts as any local user, SPEC §17).
    func consoleSignIn(_ json: JSON) throws(ServerError) -> JSON {
        let user = try Self.consoleUser(json["user"])
        guard let user else { throw ServerError.badRequest("signin needs a \"user\" to act as") }
        return .object([
            ("user", .string(user)), ("webAuthToken", .string(webAuthToken(user: user))),
            ("apiToken", .string(configuration.apiTokens.sorted().first ?? "console")),
        ])
    }

    /// A user record name from a console request: nil when absent or empty.
    static func consoleUser(_ value: JSON?) throws(ServerError) -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let name)? where name.isEmpty: return nil
        case .string(let name)? where name.utf8.count <= 255 && !name.contains(where: { $0.isNewline || $0 == "/" }): return name
        case let other?: throw ServerError.badRequest("\"user\" must be a user record name, not \(other.serialized.prefix(40))")
        }
    }

    // MARK: Records

    /// The database a console request names (`container`, `environment`, `database`, `user`).
    /// A private or shared database is a user's: the console opens it only when told whom to
    /// act as, so no one's private records show unless that user was asked for.
    func consoleDatabase(_ field: (String) -> String?) throws(ServerError) -> (container: Container, database: ContainerDatabase, user: String?) {
        let containerIdentifier = field("container") ?? ""
        guard let environment = ContainerEnvironment(name: field("environment") ?? "development") else {
            throw ServerError.badRequest("\"environment\" must be development or production")
        }
        guard let scope = DatabaseScope(name: field("database") ?? "public") else {
            throw ServerError.badRequest("\"database\" must be public, private or shared")
        }
        let user = try Self.consoleUser(field("user").map(JSON.string))
        if scope != .public, user == nil {
            throw ServerError.badRequest("the \(scope.name) database is a user's: name the \"user\" to act as")
        }
        let container = try containers.container(containerIdentifier)
        do throws(ContainerError) {
            return (container, try container.database(scope, environment: environment, user: user), user)
        } catch {
            throw ServerError(error)
        }
    }

    /// `{"container", "environment", "database", "user", "zone", "type", "q", "sort", "limit",
    /// "continuationMarker"}`: the records a predicate in KQuery's language selects, run as the
    /// Web Services `records/query` it maps to (so the schema's index rules apply as for a client).
    /// A predicate that does not parse answers 400 with the message and caret `kquery query` prints.
    func consoleQuery(_ json: JSON, _ request: Request) throws(ServerError) -> JSON {
        for name in ["container", "environment", "database", "user", "zone", "type", "q", "sort"] {
            if let value = json[name], value != .null, value.stringValue == nil {
                throw ServerError.badRequest("\"\(name)\" must be a string, not \(value.serialized.prefix(40))")
            }
        }
        let (container, database, _) = try consoleDatabase { json[$0]?.stringValue }
        guard let recordType = json["type"]?.stringValue, !recordType.isEmpty else { throw ServerError.badRequest("query needs a record \"type\"") }
        let predicate = try Self.consolePredicate(json["q"]?.stringValue ?? "")
        let filters: [JSON]
        do throws(WebServicesMappingError) { filters = try predicate.condition.webServicesFilters(now: Int64(Date().timeIntervalSince1970 * 1000)) } catch {
            throw ServerError.badRequest("the predicate has no Web Services form: \(error.message)")
        }
        var query: [(String, JSON)] = [("recordType", .string(recordType)), ("filterBy", .array(filters))]
        if let sort = json["sort"]?.stringValue, !sort.isEmpty {
            let parts = sort.split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 1 || ["asc", "desc"].contains(parts[1]) else { throw ServerError.badRequest("\"sort\" is FIELD or FIELD:asc or FIELD:desc, not '\(sort)'") }
            query.append(("sortBy", .array([.object([("fieldName", .string(parts[0])), ("ascending", .bool(parts.count == 1 || parts[1] == "asc"))])])))
        }
        var body: [(String, JSON)] = [("query", .object(query)), ("resultsLimit", json["limit"] ?? .int(50))]
        if let zone = json["zone"]?.stringValue, !zone.isEmpty { body.append(("zoneID", .object([("zoneName", .string(zone))]))) }
        if let marker = json["continuationMarker"], marker != .null { body.append(("continuationMarker", marker)) }
        let service = DatabaseService(
            database: database, schema: configuration.schema, learnedSchema: nil, users: UserDirectory(),
            assetLinks: assetLinks(request, containerIdentifier: container.containerIdentifier))
        return try service.run("records/query", .object(body)).json
    }

    /// A predicate of a console request (empty: every record), validated in the cloudkit profile
    /// as `kquery query` validates it; refused with the message and caret `kquery query` prints.
    static func consolePredicate(_ text: String) throws(ServerError) -> ValidatedPredicate {
        do throws(InvalidPredicateError) {
            return try ValidatedPredicate(text.isEmpty ? "TRUEPREDICATE" : text, profile: .cloudkit)
        } catch {
            throw ServerError.badRequest(error.rendered(in: text))
        }
    }

    /// `{"q": PREDICATE}`: whether it is valid (the pages check as you type): `{"valid": true,
    /// "predicate": its normal form}` or `{"valid": false, "error": message and caret}`. A
    /// verdict, not a refusal, so it answers 200 either way.
    static func consoleCheck(_ json: JSON) -> JSON {
        do throws(ServerError) {
            let predicate = try consolePredicate(json["q"]?.stringValue ?? "")
            return .object([("valid", .bool(true)), ("predicate", .string(predicate.condition.description))])
        } catch {
            return .object([("valid", .bool(false)), ("error", .string(error.reason))])
        }
    }

    /// `{"container", "environment", "user"}`: queues a push to the user, as a database
    /// subscription's (`met`) with an alert, for the web courier and APNs to deliver as any other.
    func consoleTestPush(_ json: JSON) throws(ServerError) -> JSON {
        let (container, database, user) = try consoleDatabase { name in name == "database" ? "private" : json[name]?.stringValue }
        guard let user else { throw ServerError.badRequest("a test push goes to a \"user\"") }
        let subscriptionID = "kquery-console-test"
        let context = PushContext(containerIdentifier: container.containerIdentifier, environment: database.environment, database: .private, userRecordName: user)
        let payload = PushPayload.database(
            subscriptionID: subscriptionID, zoneID: nil, notificationInfo: NotificationInfo(alertBody: "Test push from the kquery console"), context: context)
        let queued: OutboxNotification
        do throws(ContainerError) { queued = try container.enqueue(payload, to: user, database: database.key, subscriptionID: subscriptionID) } catch {
            throw ServerError(error)
        }
        journal(queued: [queued], containerIdentifier: container.containerIdentifier)
        Task { await courier.pushesQueued() }
        apns?.pushesQueued()
        return .object([("queued", queued.webServicesJSON)])
    }

    // MARK: Data

    /// The largest container file the console imports.
    static let importLimit = 256 * 1024 * 1024

    /// `?container=C`: the container as a container file (every database, zone, record, change
    /// history, subscription, pending push and asset), to download.
    func consoleExport(_ request: Request) async -> Response {
        let identifier = request.uri.queryParameters.get("container") ?? ""
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-export-\(UUIDText.random()).container").path
        defer { Self.removeContainerFile(file) }
        do throws(ServerError) {
            let container = try containers.container(identifier)
            try await blockingWork.run { () throws(ServerError) in
                do throws(ContainerError) { _ = try ContainerCopy.export(container, toFile: file) } catch { throw ServerError(error) }
            }
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ServerError("INTERNAL_ERROR", "cannot read the exported file", httpStatus: 500)
            }
            return Response(
                status: .ok,
                headers: [.contentType: "application/vnd.sqlite3", .contentDisposition: "attachment; filename=\"\(identifier).container\""],
                body: .init(byteBuffer: ByteBuffer(bytes: data)))
        } catch {
            return Self.response(ServiceAnswer(json: error.webServicesJSON, status: error.httpStatus))
        }
    }

    /// `?container=C` with a container file as the body: makes the new container C from it.
    func consoleImport(_ request: Request) async throws(ServerError) -> JSON {
        let identifier = request.uri.queryParameters.get("container") ?? ""
        let buffer: ByteBuffer
        do { buffer = try await request.body.collect(upTo: Self.importLimit) } catch { throw ServerError.tooLarge(Self.importLimit) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-import-\(UUIDText.random()).container").path
        defer { Self.removeContainerFile(file) }
        guard FileManager.default.createFile(atPath: file, contents: Data(buffer.readableBytesView)) else {
            throw ServerError("INTERNAL_ERROR", "cannot write the upload to \(file)", httpStatus: 500)
        }
        try await blockingWork.run { () throws(ServerError) in try self.containers.importContainer(identifier, from: file) }
        return .object([("container", .string(identifier))])
    }

    /// `{"container": C, "environment": E, "confirm": C}`: empties environment E of container C
    /// (`Container.reset`): every custom zone, every default zone's records and every
    /// subscription go, through the operations clients use, so the container stays served and
    /// the deletions' pushes go out. `confirm` must repeat the container's identifier.
    func consoleReset(_ request: Request) async throws(ServerError) -> JSON {
        let buffer: ByteBuffer
        do { buffer = try await request.body.collect(upTo: configuration.maximumBodySize) } catch {
            throw ServerError.tooLarge(configuration.maximumBodySize)
        }
        let json = try Body(bytes: Array(buffer.readableBytesView)).json()
        try DatabaseService.requireObject(json)
        for name in ["container", "environment", "confirm"] {
            guard let value = json[name], value.stringValue != nil else { throw ServerError.badRequest("a reset needs \"\(name)\", a string") }
        }
        let identifier = json["container"]?.stringValue ?? ""
        guard json["confirm"]?.stringValue == identifier else {
            throw ServerError.badRequest("\"confirm\" must repeat the container's identifier ('\(identifier)') to reset it")
        }
        guard let environment = ContainerEnvironment(name: json["environment"]?.stringValue ?? "") else {
            throw ServerError.badRequest("\"environment\" must be development or production")
        }
        // Resetting names a container that exists: it is not created empty to be emptied.
        guard ContainerDirectory.isValidIdentifier(identifier) else { throw ServerError.badRequest("invalid container identifier '\(identifier)'") }
        guard let container = try containers.existingContainer(identifier) else { throw ServerError.notFound("container '\(identifier)' does not exist") }
        let reset = try await blockingWork.run { () throws(ServerError) -> EnvironmentReset in
            do throws(ContainerError) { return try container.reset(environment) } catch { throw ServerError(error) }
        }
        if let console {
            for (database, change) in reset.changes {
                _ = console.changes.append(ConsoleChange(containerIdentifier: identifier, database: database, device: nil, change: change))
            }
        }
        journal(queued: reset.notifications, containerIdentifier: identifier)
        if !reset.notifications.isEmpty {
            Task { await courier.pushesQueued() }
            apns?.pushesQueued()
        }
        return .object([
            ("container", .string(identifier)), ("environment", .string(environment.name)), ("databases", .int(Int64(reset.databases))),
            ("zones", .int(Int64(reset.zones))), ("records", .int(Int64(reset.records))),
            ("subscriptions", .int(Int64(reset.subscriptions))), ("notifications", .int(Int64(reset.notifications.count))),
        ])
    }

    /// Removes a container file and its SQLite companions.
    static func removeContainerFile(_ path: String) {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    // MARK: Schema and zones

    /// `?container=C`: the schema records must fit, as `.ckdb` text: the one the server enforces
    /// (`--schema`), or the one the container learned from its saves.
    func consoleSchema(_ request: Request) throws(ServerError) -> JSON {
        let containerIdentifier = request.uri.queryParameters.get("container") ?? ""
        if let schema = configuration.schema {
            return .object([("source", .string("enforced (--schema)")), ("text", .string(schema.text))])
        }
        let learned = try containers.learnedSchema(containerIdentifier)
        // Read again: other nodes on the same database learn too.
        let text: String
        do throws(ContainerError) { text = try learned.kept().text } catch { throw ServerError(error) }
        return .object([("source", .string("learned from the container's saves")), ("text", .string(text))])
    }

    /// `?container&environment&database&user`: the database's zones, each with its current change
    /// token (what a client that fetched every change holds). The public database has only its
    /// default zone, which tracks no changes.
    func consoleZones(_ request: Request) throws(ServerError) -> JSON {
        let query = request.uri.queryParameters
        let (_, database, _) = try consoleDatabase { query.get($0) }
        guard database.scope != .public else {
            return .object([("zones", .array([.object([("zoneName", .string(ZoneID.default.zoneName)), ("syncToken", .null)])]))])
        }
        do throws(ContainerError) {
            let zones: [JSON] = try database.zones().map { zoneID throws(ContainerError) in
                guard !zoneID.isDefaultZone else { return .object([("zoneName", .string(zoneID.zoneName)), ("syncToken", .null)]) }
                // The token after the last page: the zone's current one.
                var page = try database.zoneChanges(zoneID, since: nil)
                var records = page.changes.count
                while page.moreComing {
                    page = try database.zoneChanges(zoneID, since: page.syncToken)
                    records += page.changes.count
                }
                return .object([
                    ("zoneName", .string(zoneID.zoneName)), ("ownerName", .string(zoneID.ownerName)), ("records", .int(Int64(records))),
                    ("syncToken", .string(page.syncToken.text)),
                ])
            }
            return .object([("zones", .array(zones))])
        } catch {
            throw ServerError(error)
        }
    }

    /// `{"container", "environment", "database", "user", "zone", "syncToken"}`: the zone's changes
    /// since the token (from the beginning without one), one page, as `changes/zone` answers them.
    func consoleZoneChanges(_ json: JSON) throws(ServerError) -> JSON {
        let (_, database, _) = try consoleDatabase { json[$0]?.stringValue }
        guard let zone = json["zone"]?.stringValue, !zone.isEmpty else { throw ServerError.badRequest("zone changes need a \"zone\"") }
        let token = json["syncToken"]?.stringValue.flatMap { $0.isEmpty ? nil : SyncToken(text: $0) }
        do throws(ContainerError) {
            return try database.zoneChanges(ZoneID(zoneName: zone), since: token).webServicesJSON()
        } catch {
            throw ServerError(error)
        }
    }

    // MARK: Subscriptions

    /// `?container&environment&database&user`: every user's subscriptions of that database (the
    /// public database's are many users'; a private one's are its user's).
    func consoleSubscriptions(_ request: Request) throws(ServerError) -> JSON {
        let query = request.uri.queryParameters
        let (_, database, _) = try consoleDatabase { query.get($0) }
        let subscriptions: [Subscription]
        do throws(ContainerError) { subscriptions = try database.allSubscriptions() } catch { throw ServerError(error) }
        return .object([("subscriptions", .array(subscriptions.map(\.webServicesJSON)))])
    }

    /// `?change=N[&user=U]`: the change numbered N in the change journal (its record's fields when
    /// public or acting as its user) and, for every subscription of its database, the verdict:
    /// fired, or the first reason it did not.
    func consoleExplain(_ request: Request, changes: ConsoleJournal<ConsoleChange>) throws(ServerError) -> JSON {
        guard let text = request.uri.queryParameters.get("change"), let number = Int(text) else {
            throw ServerError.badRequest("explain needs ?change=N, the number of a change in /console/api/changes")
        }
        guard let stamped = changes.entry(number) else {
            throw ServerError.notFound("change \(number) is not in the console's journal (it keeps the last \(changes.capacity))")
        }
        let entry = stamped.entry, key = entry.database
        let container = try containers.container(entry.containerIdentifier)
        let subscriptions: [Subscription]
        do throws(ContainerError) {
            let user = key.userRecordName.isEmpty ? nil : key.userRecordName
            subscriptions = try container.database(key.scope, environment: key.environment, user: user).allSubscriptions()
        } catch {
            throw ServerError(error)
        }
        let now = Int64(stamped.time.timeIntervalSince1970 * 1000)
        let verdicts: [JSON] = subscriptions.map { subscription in
            let verdict = SubscriptionSet.verdict(of: subscription, for: entry.change, now: now, reportsRecordsLeavingResults: false)
            var members: [(String, JSON)] = [
                ("subscriptionID", .string(subscription.subscriptionID)), ("owner", .string(subscription.owner)),
                ("fired", .bool(verdict.isFired)), ("reason", .string(verdict.consoleText)),
            ]
            if verdict.isFired, let device = entry.device {
                members.append(("note", .string("not pushed to device \(device): its own change")))
            }
            if case .clauseFalse(let clause) = verdict { members.append(("clause", .string(clause))) }
            return .object(members)
        }
        return .object([("change", stamped.json(entry.jsonMembers(actingAs: request.uri.queryParameters.get("user")))), ("verdicts", .array(verdicts))])
    }

    /// Keeps a committed modify's changes and the pushes it queued in the console's journals, and
    /// names the changes in the request's log entry.
    func journal(_ result: ModifyResult, of modify: DatabaseService.PreparedModify, in database: ContainerDatabase, containerIdentifier: String, context: ServerContext) {
        guard let console else { return }
        let numbers = result.changes.map { change in
            console.changes.append(ConsoleChange(containerIdentifier: containerIdentifier, database: database.key, device: modify.device, change: change))
        }
        context.entry.record(changes: numbers)
        journal(queued: result.notifications, containerIdentifier: containerIdentifier)
    }

    /// Keeps pushes just queued in the console's push log.
    func journal(queued notifications: [OutboxNotification], containerIdentifier: String) {
        guard let console else { return }
        for notification in notifications {
            console.pushes.append(
                ConsolePush(
                    channel: "queued", containerIdentifier: containerIdentifier, owner: notification.owner,
                    subscriptionID: notification.subscriptionID, device: notification.excludedDevice.map { "all but \($0)" }, outcome: "queued",
                    payload: notification.payload))
        }
    }
}

extension SubscriptionVerdict {
    var isFired: Bool {
        if case .fired = self { return true }
        return false
    }

    /// The verdict as the console says it.
    var consoleText: String {
        switch self {
        case .fired(let reason): "fired (\(Self.name(of: reason)))"
        case .wrongRecordType(let expected): "wrong record type: the subscription is for \(expected)"
        case .wrongZone(let expected): "wrong zone: the subscription is for zone \(expected.zoneName)"
        case .notFiringOn(let reason): "does not fire on \(Self.name(of: reason)) (firesOn)"
        case .defaultZone: "a database subscription: changes in the default zone notify nobody"
        case .predicateFalse: "the predicate was false"
        case .clauseFalse(let clause): "predicate clause false: \(clause)"
        }
    }

    private static func name(of reason: QueryNotificationReason) -> String {
        switch reason {
        case .recordCreated: "creation"
        case .recordUpdated: "update"
        case .recordDeleted: "deletion"
        }
    }
}

/// Who may use the console: with a console token, whoever presents it (the `X-KQuery-Console-Token`
/// header, or the cookie `/console?token=T` sets); without one (a loopback address only), whoever
/// reaches the server by a loopback name, so a web page naming another host that resolves here
/// (DNS rebinding) is refused. Web Services credentials never count. The API also wants the
/// `X-KQuery-Console` header, which no page of another origin can send (the server's CORS
/// answer does not allow it), so other sites cannot drive the console through a visitor's browser.
struct ConsoleAccess: RouterMiddleware {
    let token: String?

    static let tokenHeader = HeaderName("X-KQuery-Console-Token")!
    static let apiHeader = HeaderName("X-KQuery-Console")!
    static let cookie = "kquery_console"

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        let isAPI = request.uri.path.hasPrefix(CloudKitServer.consolePath + "/api/")
        if let token {
            let query = request.uri.queryParameters.get("token")
            let presented = request.headers[Self.tokenHeader] ?? request.cookies[Self.cookie]?.value ?? (isAPI ? nil : query)
            guard let presented, Self.same(presented, token) else {
                return refusal(isAPI, status: .unauthorized, "AUTHENTICATION_REQUIRED",
                               "the console needs its token (kquery serve --console-token): open /console?token=TOKEN, or send X-KQuery-Console-Token")
            }
            if !isAPI, query != nil {
                var response = try await next(request, context)
                response.headers[.setCookie] = "\(Self.cookie)=\(token); Path=\(CloudKitServer.consolePath); HttpOnly; SameSite=Strict"
                return response
            }
        } else {
            // A request without a Host header comes from no browser, so from no rebinding page.
            let host = request.head.authority.map(Self.hostName)
            guard host.map(ServerConfiguration.isLoopback) ?? true else {
                return refusal(isAPI, status: .forbidden, "ACCESS_DENIED", "the console without a token answers on a loopback address only (reached as '\(host ?? "")')")
            }
        }
        if isAPI, request.headers[Self.apiHeader] == nil {
            return refusal(true, status: .forbidden, "ACCESS_DENIED", "console API requests carry the X-KQuery-Console header (the console's pages send it)")
        }
        return try await next(request, context)
    }

    /// `host` of `host:port` (and of `[v6]:port`).
    static func hostName(_ authority: String) -> String {
        if authority.hasPrefix("["), let end = authority.firstIndex(of: "]") { return String(authority[...end]) }
        return String(authority.split(separator: ":", maxSplits: 1).first ?? "")
    }

    /// Compares in time independent of where the texts differ.
    static func same(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    func refusal(_ isAPI: Bool, status: HTTPResponse.Status, _ code: String, _ reason: String) -> Response {
        if isAPI {
            let error = ServerError(code, reason, httpStatus: Int(status.code))
            return CloudKitServer.response(ServiceAnswer(json: error.webServicesJSON, status: error.httpStatus))
        }
        let html = "<!doctype html><meta charset=\"utf-8\"><title>kquery console</title><p>\(reason.replacingOccurrences(of: "<", with: "&lt;"))</p>\n"
        return Response(status: status, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: html)))
    }
}

/// The console's pages, as the target's resources (`Console/Pages`).
enum ConsoleFiles {
    static let types = ["html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8", "svg": "image/svg+xml"]

    /// Where the pages are: the resource bundle beside the executable (as SwiftPM builds it), else
    /// the package's sources (a binary built from a clone). Found without `Bundle.module`, which
    /// stops the process when the bundle is missing (a binary copied on its own): then the
    /// console's pages answer 404 and the server goes on.
    static let directory: URL? = {
        let candidates = [
            Bundle.main.bundleURL.appendingPathComponent("KQuery_KQueryServer.resources/Pages"),
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Pages"),
        ]
        return candidates.first { FileManager.default.fileExists(atPath: $0.appendingPathComponent("index.html").path) }
    }()

    /// The file `name` of the pages directory; 404 for any other name.
    static func response(_ name: String) throws -> Response {
        let type = name.split(separator: ".").last.flatMap { types[String($0)] }
        guard let type, name.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || $0 == 45 || $0 == 46 }), !name.hasPrefix("."), let directory,
              let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path)
        else { throw HTTPError(.notFound) }
        return Response(status: .ok, headers: [.contentType: type, .cacheControl: "no-cache"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
