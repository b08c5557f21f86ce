import Hummingbird
import HummingbirdWebSocket
import ServiceLifecycle
import KQuery
import KQueryContainer
import KQueryWebServices

import Foundation

/// `kquery serve`: CloudKit Web Services over the containers of a data directory (SPEC §11), and
/// the web courier and APNs delivery that deliver their pushes (SPEC §10).
///
/// The routes are thin: they read the request (body, path, credentials), let `Authentication`
/// name the user and `DatabaseService` run the operation, and write the answer. Every refusal is
/// a `ServerError`, rendered in one place (`response(_:)`).
public final class CloudKitServer: Sendable {
    public let configuration: ServerConfiguration
    public let containers: ContainerDirectory
    let secret: ServerSecret
    let authentication: Authentication
    let courier: WebCourier
    let deviceTokens: DeviceTokens
    let blockingWork: BlockingWork
    /// Where queries run as SQL run (`ServerConfiguration.queryThreads`).
    let queryWork: BlockingWork
    /// Record modifies, committed in arrival order and answered once durable.
    let commits = CommitQueue()
    /// Delivery to APNs, when configured.
    public let apns: APNsDelivery?
    /// The users whose `Users` record is known to exist, as container, environment and user name
    /// (`ensureUserRecord`): each is made once, on the user's first signed-in request.
    let usersWithRecords = Locked<Set<String>>([])
    /// The port the server listens on, once it does (the configured one may be 0).
    let boundPort = Locked<Int?>(nil)
    /// The requests being served, for `AdmissionLimit`.
    let requestsInFlight = Locked(0)
    /// The console's logs of requests, changes and pushes; nil when the console is not served.
    let console: ConsoleJournals?

    /// The database operations: POST unless listed in `getOperations`.
    static let postOperations = [
        "records/query", "records/modify", "records/lookup", "records/changes", "changes/database", "changes/zone",
        "zones/lookup", "zones/modify", "zones/changes", "subscriptions/lookup", "subscriptions/modify", "assets/upload", "assets/rereference",
        "users/discover", "users/lookup/email", "users/lookup/id", "records/resolve", "records/accept",
    ]
    static let getOperations = ["zones/list", "subscriptions/list", "users/current", "users/caller", "users/discover"]
    /// Where the web courier listens, as Apple's does (`/aps?tok=...&ttl=43200`).
    static let courierPath = "/aps"

    public init(configuration: ServerConfiguration) throws(ServerError) {
        self.configuration = configuration
        containers = try ContainerDirectory(path: configuration.dataDirectory, assetPolicy: configuration.assetPolicy, shared: configuration.sharedStore)
        if let shared = configuration.sharedStore {
            let keyBytes: [UInt8]
            do throws(ContainerError) { keyBytes = try shared.serverSecret() } catch { throw ServerError(error) }
            secret = try ServerSecret(keyBytes: keyBytes)
        } else {
            secret = try ServerSecret(directory: configuration.dataDirectory)
        }
        authentication = Authentication(
            apiTokens: configuration.apiTokens, serverKeys: configuration.serverKeys, secret: secret,
            signatureTolerance: configuration.signatureTolerance, webAuthTokenLifetime: configuration.webAuthTokenLifetime,
            spentTokens: !configuration.singleUseWebAuthTokens ? nil
                : configuration.sharedStore.map { SharedSpentWebAuthTokens(store: $0) } ?? SpentWebAuthTokens())
        deviceTokens = DeviceTokens(directory: configuration.dataDirectory, shared: configuration.sharedStore)
        console = configuration.servesConsole ? ConsoleJournals() : nil
        blockingWork = BlockingWork(threads: configuration.blockingThreads)
        queryWork = configuration.queryThreads.map { BlockingWork(threads: $0) } ?? blockingWork
        courier = WebCourier(acknowledges: configuration.apns == nil ? .all : .webCourier, shared: configuration.sharedStore)
        if let apnsConfiguration = configuration.apns {
            let pushes = console?.pushes
            apns = APNsDelivery(
                configuration: apnsConfiguration, containers: containers, deviceTokens: deviceTokens, logsToStandardError: configuration.logsRequests,
                outcomes: { notification, containerIdentifier, device, outcome in
                    pushes?.append(
                        ConsolePush(
                            channel: "APNs", containerIdentifier: containerIdentifier, owner: notification.owner,
                            subscriptionID: notification.subscriptionID, device: device.apnsToken, outcome: outcome.consoleText, payload: notification.payload))
                })
        } else {
            apns = nil
        }
        if let shared = configuration.sharedStore {
            // Another node's modify queued pushes: the polls and APNs delivery here look again;
            // another node's stream took a push: the user's streams here get a copy.
            let courier = courier, apns = apns
            let (copies, arriving) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1_000))
            Task {
                for await message in copies { await courier.copied(message) }   // in the order they came
            }
            shared.listen(wake: { pushes in
                Task { await courier.pushesQueued(pushes) }
                apns?.pushesQueued()
            }, copied: { arriving.yield($0) })
        }
    }

    /// A web auth token of a local user, issued at `issued`.
    public func webAuthToken(user: String, issued: Date = Date()) -> String { secret.webAuthToken(user: user, issued: issued) }

    // MARK: Application

    public func router() -> Router<ServerContext> {
        let router = Router(context: ServerContext.self)
        router.middlewares.add(RequestLog(enabled: configuration.logsRequests, journal: console?.requests))
        router.middlewares.add(BrowserAccess())
        router.middlewares.add(AdmissionLimit(limit: configuration.maximumRequestsInFlight, inFlight: requestsInFlight, exempting: Self.courierPath))
        router.middlewares.add(WebAuthRotation(secret: secret, spentTokens: authentication.spentTokens, blockingWork: blockingWork))
        let databasePath = "/database/1/:container/:environment/:database/"
        for operation in Self.postOperations {
            router.post(RouterPath(databasePath + operation)) { request, context in await self.database(operation, request, context) }
        }
        for operation in Self.getOperations {
            router.get(RouterPath(databasePath + operation)) { request, context in await self.database(operation, request, context) }
        }
        for operation in ["tokens/create", "tokens/register"] {
            router.post(RouterPath("/device/1/:container/:environment/" + operation)) { request, context in
                await self.device(operation, request, context)
            }
        }
        router.get(RouterPath(Self.courierPath)) { request, context in await self.courierPoll(request, context) }
        assetRoutes(router)
        router.get(RouterPath(Self.signInPath)) { _, _ in self.signInPage() }
        if let console { consoleRoutes(router, console) }
        return router
    }

    /// The web courier as a WebSocket (a KQuery extension, for local tools and the key-value
    /// store): `GET /aps/stream?tok=...` upgrades, then every notification queued for the token's
    /// user is sent as a text frame, as the long poll would answer it, until the client closes.
    /// Every open stream of the user hears each push, whichever poll or stream took it from the
    /// queue, except the stream of the device that made the change.
    public func webSocketRouter() -> Router<BasicWebSocketRequestContext> {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws(RouterPath(Self.courierPath + "/stream")) { request, _ in
            guard let token = request.uri.queryParameters.get("tok"), WebCourier.subscriber(token: token, secret: self.secret) != nil else {
                return .dontUpgrade
            }
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            guard let token = context.request.uri.queryParameters.get("tok"),
                  let subscriber = WebCourier.subscriber(token: token, secret: self.secret)
            else { return }
            let container = try self.containers.container(subscriber.containerIdentifier)
            let (stream, copies) = await self.courier.openStream(for: subscriber, device: token)
            // Whole text frames: the two writers below never interleave within one.
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for try await _ in inbound {} }
                    group.addTask {
                        for await payload in copies { try await outbound.write(.text(payload.serialized)) }
                    }
                    group.addTask {
                        while !Task.isCancelled, !Task.isShuttingDownGracefully {
                            if let delivery = try await self.nextPush(for: subscriber, device: token, in: container, timeout: .seconds(30)) {
                                do {
                                    try await outbound.write(.text(delivery.payload.serialized))
                                } catch {
                                    await self.courier.returned(delivery)
                                    throw error
                                }
                                try await self.settle(delivery, in: container)
                            }
                        }
                    }
                    try await group.next()
                    group.cancelAll()
                }
            } catch {
                await self.courier.closeStream(stream, of: subscriber)
                throw error
            }
            await self.courier.closeStream(stream, of: subscriber)
        }
        return router
    }

    /// The application serving `router()` at the configured address; `onServerRunning` learns the
    /// port (useful with port 0).
    public func application(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        Application(
            router: router(),
            server: .http1WebSocketUpgrade(
                webSocketRouter: webSocketRouter(), configuration: .init(http1: .init(additionalChannelHandlers: [ContinueHandler()]))),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "kquery"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? self.configuration.port
                self.boundPort.withLock { $0 = port }
                await onServerRunning(port)
            }
        )
    }

    /// The services `run` runs together: the application and, when configured, APNs delivery.
    public func services(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> (application: some ApplicationProtocol, all: [any Service]) {
        let application = application(onServerRunning: onServerRunning)
        var all: [any Service] = [application, AssetCollector(containers: containers, interval: configuration.assetCollectionInterval)]
        if let apns { all.append(apns) }
        return (application, all)
    }

    /// Serves until SIGTERM or SIGINT, which finish the requests in flight (waiting web courier
    /// polls answer 204 at once; a push being sent to APNs stays pending) before this returns.
    public func run(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let (application, all) = services(onServerRunning: onServerRunning)
        let group = ServiceGroup(configuration: .init(services: all, gracefulShutdownSignals: [.sigterm, .sigint], logger: application.logger))
        try await group.run()
    }

    // MARK: Routes

    func database(_ operation: String, _ request: Request, _ context: ServerContext) async -> Response {
        await respond(request, context) { body async throws(ServerError) -> ServiceAnswer in
            let environment = try Self.environment(context)
            guard let scopeName = context.parameters.get("database"), let scope = DatabaseScope(name: scopeName) else {
                throw ServerError.badRequest("the database must be public, private or shared")
            }
            let requester = try await self.authenticate(request, context, body: body.bytes, scope: scope)
            let user = requester.user
            if operation == "users/current" || operation.hasPrefix("assets/") || DatabaseService.shareOperations.contains(operation), user == nil {
                throw ServerError.authenticationRequired("\(operation) needs a signed-in user (ckWebAuthToken)")
            }
            if DatabaseService.publicUserOperations.contains(operation), !requester.bySignIn {
                // The user endpoints speak for a person: a server-to-server key is refused, as
                // CloudKit refuses it (MistKit #28, live: 401).
                guard user == nil else { throw ServerError.authenticationFailed("\(operation) needs a user's ckWebAuthToken, not a server-to-server key") }
                throw ServerError.authenticationRequired("\(operation) needs a signed-in user (ckWebAuthToken)")
            }
            let containerIdentifier = context.parameters.get("container") ?? ""
            let container = try self.containers.container(containerIdentifier)
            if requester.bySignIn, let user { try await self.ensureUserRecord(of: user, in: container, environment: environment) }
            let database: ContainerDatabase
            do throws(ContainerError) { database = try container.database(scope, environment: environment, user: user) } catch {
                throw ServerError(error)
            }
            let learnedSchema = self.configuration.schema == nil && operation == "records/modify"
                ? try self.containers.learnedSchema(containerIdentifier) : nil
            let users = operation.hasPrefix("users/") || DatabaseService.shareOperations.contains(operation)
                ? try self.configuration.userDirectory() : UserDirectory()
            let service = DatabaseService(database: database, schema: self.configuration.schema, learnedSchema: learnedSchema, users: users,
                                          assetLinks: self.assetLinks(request, containerIdentifier: containerIdentifier))
            // A GET takes no body (`users/discover` tells GET from POST by it).
            let json = request.method == .get ? JSON.null : try body.json()
            let answer: ServiceAnswer
            if operation == "records/query", database.queriesAreInMemory {
                // A query on records in memory is brief CPU work: run here rather than hop to a
                // blocking thread and back (two thread wakes, a fifth of a query's cost under load).
                answer = try service.run(operation, json)
            } else if operation == "records/query" {
                // In the storage (PostgreSQL): a task waits for the rows where it can, else a thread.
                let request = try service.queryRequest(json)
                if let quick = try await service.queryWithoutBlocking(request) {
                    answer = quick
                } else {
                    answer = try await self.queryWork.run { () throws(ServerError) -> ServiceAnswer in try service.query(request) }
                }
            } else if operation == "records/modify" {
                // Read here; committed in arrival order by the commit queue, answered once durable.
                try DatabaseService.requireObject(json)
                do throws(ContainerError) {
                    let request = try service.prepareModify(json)
                    let result = try await self.commits.run(in: container, reading: (database.key, request.recordIDs)) { () throws(ContainerError) in
                        try service.commit(request, durably: false)
                    } durable: {
                        () throws(ContainerError) in try container.waitUntilDurable()
                    }
                    answer = service.answer(request, result)
                    self.journal(result, of: request, in: database, containerIdentifier: containerIdentifier, context: context)
                } catch {
                    throw ServerError(error)
                }
            } else {
                answer = try await self.blockingWork.run { () throws(ServerError) -> ServiceAnswer in try service.run(operation, json) }
            }
            if !answer.pushedTo.isEmpty {
                await self.courier.pushesQueued(.recipients(containerIdentifier: containerIdentifier, answer.pushedTo))
                self.apns?.pushesQueued()
            }
            return answer
        }
    }

    func device(_ operation: String, _ request: Request, _ context: ServerContext) async -> Response {
        await respond(request, context) { body async throws(ServerError) -> ServiceAnswer in
            let environment = try Self.environment(context)
            guard let user = try await self.authenticate(request, context, body: body.bytes, scope: nil).user else {
                throw ServerError.authenticationRequired("tokens belong to a signed-in user (ckWebAuthToken)")
            }
            let containerIdentifier = context.parameters.get("container") ?? ""
            _ = try self.containers.container(containerIdentifier)
            let json = try body.json()
            try DatabaseService.requireObject(json)
            let apnsEnvironment = json["apnsEnvironment"]?.stringValue ?? environment.name
            guard ContainerEnvironment(name: apnsEnvironment) != nil else {
                throw ServerError.badRequest("apnsEnvironment must be \"development\" or \"production\"")
            }
            if operation == "tokens/create" {
                // CloudKit JS sends its clientId; each other caller is a client of its own.
                let client: String
                switch json["clientId"] {
                case nil, .null?: client = UUIDText.random()
                case .string(let id)? where !id.isEmpty && id.utf8.count <= 256 && !id.contains("\n"): client = id
                case let other?: throw ServerError.badRequest("\"clientId\" must be a string of at most 256 bytes on one line, not \(other.serialized.prefix(40))")
                }
                let token = WebCourier.token(
                    for: WebCourier.Subscriber(containerIdentifier: containerIdentifier, environment: environment, user: user), client: client,
                    secret: self.secret)
                let url = "http://\(self.address(of: request))\(Self.courierPath)?tok=\(token)&ttl=43200"
                return ServiceAnswer(json: .object([
                    ("apnsEnvironment", .string(apnsEnvironment)), ("apnsToken", .string(token)), ("webcourierURL", .string(url)),
                ]))
            }
            guard let apnsToken = json["apnsToken"]?.stringValue, !apnsToken.isEmpty else {
                throw ServerError.badRequest("tokens/register needs an \"apnsToken\"")
            }
            // (An APNs device token is 32 bytes in hex; a web courier token under 200.)
            guard apnsToken.utf8.count <= 512, !apnsToken.utf8.contains(where: { $0 < 0x20 }) else {
                throw ServerError.badRequest("\"apnsToken\" must be at most 512 bytes, without control characters")
            }
            try self.deviceTokens.register(.init(
                containerIdentifier: containerIdentifier, environment: environment.name, user: user, apnsEnvironment: apnsEnvironment,
                apnsToken: apnsToken))
            return ServiceAnswer(json: .object([("apnsEnvironment", .string(apnsEnvironment)), ("apnsToken", .string(apnsToken))]))
        }
    }

    /// A web courier poll: one notification (200), or 204 when none came in time. The notification
    /// is acknowledged once its answer has been written; if the client is gone by then, the next
    /// poll gets it.
    func courierPoll(_ request: Request, _ context: ServerContext) async -> Response {
        var taken: (WebCourier.Delivery, Container)?
        let polled = await answer(request, context) { _ async throws(ServerError) -> ServiceAnswer in
            guard let token = request.uri.queryParameters.get("tok"), let subscriber = WebCourier.subscriber(token: token, secret: self.secret) else {
                throw ServerError.authenticationFailed("invalid web courier token")
            }
            context.entry.record(user: subscriber.user)
            context.entry.record(authentication: "web courier token of \(subscriber.user)")
            let container = try self.containers.container(subscriber.containerIdentifier)
            guard let delivery = try await self.nextPush(for: subscriber, device: token, in: container, timeout: self.configuration.courierTimeout) else {
                return ServiceAnswer(json: .null, status: 204)
            }
            taken = (delivery, container)
            return ServiceAnswer(json: delivery.payload)
        }
        guard let (delivery, container) = taken else { return Self.response(polled, loggingIn: context.entry) }
        let bytes = Self.jsonBytes(polled.json)
        context.entry.record(responseBody: Array(bytes.readableBytesView))
        // When the client is gone before the answer is written, the server drops the response
        // without running its body: the guard gives the push back then.
        let guarded = UnsettledDelivery(delivery, courier: courier)
        return Response(
            status: .ok, headers: Self.jsonHeaders,
            body: ResponseBody(contentLength: bytes.readableBytes) { writer in
                guarded.settling()
                do {
                    try await writer.write(bytes)
                    try await writer.finish(nil)
                } catch {
                    await self.courier.returned(delivery)
                    throw error
                }
                try await self.settle(delivery, in: container)
            })
    }

    /// The next push for a web courier client polling with `device` (its token), skipping those
    /// about changes it made itself: they are acknowledged on its channel unseen (the courier's
    /// queue is its user's, so one client's skip is every client's, as one client's pop is).
    func nextPush(for subscriber: WebCourier.Subscriber, device: String, in container: Container, timeout: Duration) async throws(ServerError) -> WebCourier.Delivery? {
        let deadline = ContinuousClock.now + timeout
        while true {
            switch try await courier.next(for: subscriber, device: device, in: container, timeout: max(.zero, deadline - ContinuousClock.now)) {
            case nil: return nil
            case .push(let delivery)?: return delivery
            case .ownChange(let delivery)?:
                do { try await settle(delivery, in: container) } catch let error as ContainerError { throw ServerError(error) } catch {
                    throw ServerError("INTERNAL_ERROR", "cannot settle push \(delivery.id): \(error)", httpStatus: 500)
                }
            }
        }
    }

    /// Acknowledges a delivery whose answer was written, on the courier's channels.
    func settle(_ delivery: WebCourier.Delivery, in container: Container) async throws {
        let channels = courier.acknowledges
        do {
            try await blockingWork.run { () throws(ContainerError) in try container.acknowledge([delivery.id], channel: channels) }
            await courier.delivered(delivery)
            console?.pushes.append(
                ConsolePush(
                    channel: "web courier", containerIdentifier: container.containerIdentifier, owner: delivery.payload["ck"]?["ckuserid"]?.stringValue ?? "",
                    subscriptionID: ["qry", "fet", "met"].lazy.compactMap { delivery.payload["ck"]?[$0]?["sid"]?.stringValue }.first,
                    device: nil, outcome: "delivered", payload: delivery.payload))
        } catch {
            await courier.returned(delivery)
            throw error
        }
    }

    // MARK: Reading requests, writing answers

    /// A request body, read once, parsed on demand.
    struct Body {
        var bytes: [UInt8]

        func json() throws(ServerError) -> JSON {
            if bytes.allSatisfy({ $0 == 32 || $0 == 9 || $0 == 10 || $0 == 13 }) { return .object([]) }
            do {
                return try bytes.withUnsafeBufferPointer { buffer throws(JSONError) in try JSON.parse(bytes: buffer) }
            } catch {
                throw ServerError.badRequest("malformed JSON: \(error)")
            }
        }
    }

    /// Reads the body (refused past the size limit), runs `body`, and writes its answer or its error.
    func respond(_ request: Request, _ context: ServerContext, _ operation: (Body) async throws(ServerError) -> ServiceAnswer) async -> Response {
        Self.response(await answer(request, context, operation), loggingIn: context.entry)
    }

    /// Reads the body (refused past the size limit) and runs `operation`: its answer, or its error's.
    func answer(_ request: Request, _ context: ServerContext, _ operation: (Body) async throws(ServerError) -> ServiceAnswer) async -> ServiceAnswer {
        var answer: ServiceAnswer
        do throws(ServerError) {
            let buffer: ByteBuffer
            do { buffer = try await request.body.collect(upTo: configuration.maximumBodySize) } catch {
                throw ServerError.tooLarge(configuration.maximumBodySize)
            }
            let bytes = Array(buffer.readableBytesView)
            context.entry.record(requestBody: bytes)
            answer = try await operation(Body(bytes: bytes))
        } catch {
            var error = error
            // CloudKit's 421 names where to sign in (CloudKit JS opens it); here, this server's page
            // saying how to get a token.
            if error.httpStatus == 421, error.extra["redirectURL"] == nil {
                error.extra["redirectURL"] = .string("http://\(address(of: request))\(Self.signInPath)")
            }
            answer = ServiceAnswer(json: error.webServicesJSON, status: error.httpStatus)
        }
        context.entry.record(pushes: answer.pushes)
        return answer
    }

    /// `host:port` as the client reached the server.
    func address(of request: Request) -> String {
        let port = boundPort.withLock { $0 } ?? configuration.port
        return request.head.authority ?? "\(configuration.host):\(port)"
    }

    /// The page every AUTHENTICATION_REQUIRED answer's `redirectURL` names.
    static let signInPath = "/signin"

    /// How to sign in to a local server: there is no iCloud account to sign in with, only `kquery token`.
    func signInPage() -> Response {
        let directory = configuration.dataDirectory.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
        let html = """
            <!doctype html>
            <html><head><meta charset="utf-8"><title>Sign in to kquery serve</title></head>
            <body>
            <h1>Sign in to kquery serve</h1>
            <p>This local CloudKit Web Services server has no iCloud accounts: a user signs in with a web auth token
            that <code>kquery token</code> prints for the server's data directory.</p>
            <pre>kquery token --data \(directory) --user NAME</pre>
            <p>Pass the printed token as <code>ckWebAuthToken</code> (CloudKit JS: the <code>ckWebAuthToken</code> of the
            container's auth), and adopt the next one each successful answer carries in
            <code>X-Apple-CloudKit-Web-Auth-Token</code>.</p>
            </body></html>

            """
        return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// The answer as a response; `entry` keeps its body for the console's request log (the bytes
    /// serialized once for both).
    static func response(_ answer: ServiceAnswer, loggingIn entry: RequestLogEntry? = nil) -> Response {
        if answer.status == 204 { return Response(status: .noContent) }
        let bytes = answer.serializedBytes
        entry?.record(responseBody: bytes)
        return Response(status: .init(code: answer.status), headers: jsonHeaders, body: .init(byteBuffer: body(bytes)))
    }

    static let jsonHeaders: HTTPFields = [.contentType: "application/json; charset=utf-8"]

    /// An answer's body: the JSON, then a newline.
    static func jsonBytes(_ json: JSON) -> ByteBuffer { body(json.serializedBytes) }

    /// JSON text and a newline, copied once into a buffer of their size.
    private static func body(_ bytes: [UInt8]) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: bytes.count + 1)
        buffer.writeBytes(bytes)
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    /// Makes the user's `Users` record in the public database if it does not exist yet (SPEC §13:
    /// every user has one, named by the userRecordName; CloudKit makes it when the user first
    /// uses the app). Empty, as CloudKit's starts; the user may add fields to it.
    func ensureUserRecord(of user: String, in container: Container, environment: ContainerEnvironment) async throws(ServerError) {
        let key = [container.containerIdentifier, environment.name, user].joined(separator: "\u{1F}")
        guard !usersWithRecords.withLock({ $0.contains(key) }) else { return }
        try await blockingWork.run { () throws(ServerError) in
            do throws(ContainerError) {
                let database = try container.database(.public, environment: environment, user: user)
                let id = RecordID(recordName: user)
                if try database.record(id) == nil {
                    let record = Record(recordType: DatabaseService.usersRecordType, recordID: id)
                    let result = try database.modify([RecordOperation(kind: .create, record: record)], atomic: true, device: nil)
                    // A concurrent first request may have made it a moment before: EXISTS is fine.
                    if let error = result.results.first?.error, error.code != .exists { throw error }
                }
            } catch {
                throw ServerError(error)
            }
        }
        _ = usersWithRecords.withLock { $0.insert(key) }
    }

    func authenticate(_ request: Request, _ context: ServerContext, body: [UInt8], scope: DatabaseScope?) async throws(ServerError) -> Authentication.Requester {
        func header(_ name: String) -> String? {
            request.headers.first { $0.name.canonicalName == name }?.value
        }
        let query = request.uri.queryParameters
        let credentials = Authentication.Credentials(
            apiToken: query.get("ckAPIToken"), webAuthToken: query.get("ckWebAuthToken"),
            keyID: header("x-apple-cloudkit-request-keyid"), date: header("x-apple-cloudkit-request-iso8601date"),
            signature: header("x-apple-cloudkit-request-signaturev1"), subpath: request.uri.path, body: body)
        let requester: Authentication.Requester
        do throws(ServerError) {
            let found = try authentication.requester(credentials, scope: scope)
            if authentication.spentTokens?.isShared == true, found.spentToken != nil {
                let authentication = authentication
                try await blockingWork.run { () throws(ServerError) in try authentication.spend(found) }
            }
            requester = found
        } catch {
            context.entry.record(authentication: "refused: \(error.reason)")
            throw error
        }
        context.entry.record(user: requester.user, bySignIn: requester.bySignIn, spentToken: requester.spentToken)
        context.entry.record(authentication: credentials.decision(requester))
        return requester
    }

    static func environment(_ context: ServerContext) throws(ServerError) -> ContainerEnvironment {
        guard let name = context.parameters.get("environment"), let environment = ContainerEnvironment(name: name) else {
            throw ServerError.badRequest("the environment must be development or production")
        }
        return environment
    }
}

/// One line on standard error per request: method, path, user, status, milliseconds, pushes queued.
/// Requests no route answers get CloudKit's error JSON here too.
struct RequestLog: RouterMiddleware {
    let enabled: Bool
    /// The console's request log, when the console is served: every request but the console's own.
    let journal: ConsoleJournal<ConsoleRequest>?

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let journal = request.uri.path.hasPrefix(CloudKitServer.consolePath) ? nil : journal
        if journal != nil { context.entry.facts.withLock { $0.capturesBodies = true } }
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            let code = error.status == .notFound ? "NOT_FOUND" : error.status == .methodNotAllowed ? "BAD_REQUEST" : "INTERNAL_ERROR"
            let refusal = ServerError(code, "\(request.method) \(request.uri.path): \(error.status.reasonPhrase)", httpStatus: error.status.code)
            response = CloudKitServer.response(ServiceAnswer(json: refusal.webServicesJSON, status: refusal.httpStatus), loggingIn: context.entry)
        }
        let elapsed = ContinuousClock.now - start
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        let facts = context.entry.facts.withLock { $0 }
        journal?.append(
            ConsoleRequest(
                method: request.method.rawValue, path: request.uri.path, user: facts.user, authentication: facts.authentication,
                status: Int(response.status.code), milliseconds: milliseconds, pushes: facts.pushes, requestBody: facts.requestBody,
                responseBody: facts.responseBody, changes: facts.changes))
        if enabled {
            let line = "\(request.method) \(request.uri.path) user=\(facts.user ?? "-") status=\(response.status.code) "
                + "\(String(format: "%.1f", milliseconds))ms pushes=\(facts.pushes)\n"
            FileHandle.standardError.write(Data(line.utf8))
        }
        return response
    }
}

/// A popped web courier push whose answer may never be written: if the response is dropped
/// before its body runs (the client left), the push goes back to the courier for the next poll.
final class UnsettledDelivery: Sendable {
    let delivery: WebCourier.Delivery
    let courier: WebCourier
    private let isSettling = Locked(false)

    init(_ delivery: WebCourier.Delivery, courier: WebCourier) {
        self.delivery = delivery
        self.courier = courier
    }

    /// The body is being written: from here the writer settles the push.
    func settling() { isSettling.withLock { $0 = true } }

    deinit {
        guard !isSettling.withLock({ $0 }) else { return }
        let courier = courier, delivery = delivery
        Task { await courier.returned(delivery) }
    }
}
