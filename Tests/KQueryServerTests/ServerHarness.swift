import Hummingbird
import HummingbirdTesting
import KQuery
import KQueryPostgres
import KQueryServer
import KQueryStore
import ServiceLifecycle
import KQueryTestSupport
import Testing

import Foundation

/// A `CloudKitServer` on 127.0.0.1 and a free port, started for one test and stopped after it,
/// whether the test passes or not.
struct ServerHarness {
    let directory: String
    var configuration: ServerConfiguration

    init(directory: String? = nil, _ configure: (inout ServerConfiguration) -> Void = { _ in }) {
        let path = directory ?? TemporaryFiles.path("kquery-server")
        self.directory = path
        configuration = ServerConfiguration(dataDirectory: path)
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.courierTimeout = .milliseconds(500)
        configuration.logsRequests = false
        configure(&configuration)
    }

    /// Whether the server suites run on PostgreSQL (`KQUERY_SERVER_STORAGE=postgres`): each
    /// harness then serves its containers from a database of its own in the test process's
    /// throwaway cluster, as `kquery serve --postgres` does.
    static let onPostgres = ProcessInfo.processInfo.environment["KQUERY_SERVER_STORAGE"] == "postgres"
    private static let databases = Locked<[String: String]>([:])

    /// The schema container `identifier` learned, where this harness's servers keep it: beside the
    /// container file, or in the PostgreSQL database of the directory.
    func learnedSchema(_ identifier: String) throws -> Schema {
        guard Self.onPostgres, let url = Self.databases.withLock({ $0[directory] }), let location = PostgresLocation(url: url) else {
            return try Schema(contentsOfFile: directory + "/\(identifier).container.ckdb")
        }
        let containers = try PostgresContainers(location: location, connections: 1)
        defer { containers.close() }
        return try Schema(text: try #require(try containers.learnedSchema(identifier)?.text))
    }

    /// Runs `body` against a running server; the server shuts down gracefully afterwards.
    func run<T: Sendable>(_ body: @escaping @Sendable (ServerClient) async throws -> T) async throws -> T {
        var configuration = configuration
        if Self.onPostgres, configuration.sharedStore == nil {
            // One database per data directory: a server started again on the directory (a
            // restart) finds its data, as a node restarted on its database does.
            let url = try Self.databases.withLock { databases throws -> String in
                if let url = databases[directory] { return url }
                let url = try PostgresCluster.start().createDatabase()
                databases[directory] = url
                return url
            }
            guard let location = PostgresLocation(url: url) else { throw PostgresCluster.ClusterError(description: "bad URL \(url)") }
            configuration.sharedStore = PostgresServerStore(containers: try PostgresContainers(location: location, connections: 8))
            // As `kquery serve --postgres` runs queries: on threads of their own.
            if configuration.queryThreads == nil { configuration.queryThreads = 16 }
        }
        let server = try CloudKitServer(configuration: configuration)
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let (application, services) = server.services { port in continuation.yield(port) }
        let group = ServiceGroup(configuration: .init(services: services, logger: application.logger))
        return try await withThrowingTaskGroup(of: T?.self) { tasks in
            tasks.addTask {
                try await group.run()
                return nil
            }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw CancellationError() }
            let client = ServerClient(webAuthToken: { server.webAuthToken(user: $0) }, host: "127.0.0.1", port: port, server: server)
            do {
                let value = try await body(client)
                await group.triggerGracefulShutdown()
                for try await _ in tasks {}
                return value
            } catch {
                await group.triggerGracefulShutdown()
                tasks.cancelAll()
                throw error
            }
        }
    }
}

/// Requests to a harness's server: each on a fresh connection, so a waiting poll blocks nothing.
struct ServerClient: Sendable {
    let webAuthToken: @Sendable (String) -> String
    let host: String
    let port: Int
    var container = "iCloud.com.example.tests"
    /// The server, when the test runs it in process.
    var server: CloudKitServer? = nil

    struct Answer: Sendable {
        var status: Int
        var json: JSON
        var text: String
        var headers: HTTPFields = [:]

        /// A response header's value, by name in any case.
        func header(_ name: String) -> String? {
            headers.first { $0.name.canonicalName == name.lowercased() }?.value
        }
    }

    func token(_ user: String) -> String { webAuthToken(user) }

    /// `/database/1/{container}/development/{database}/{operation}`.
    func path(_ database: String, _ operation: String, environment: String = "development") -> String {
        "/database/1/\(container)/\(environment)/\(database)/\(operation)"
    }

    /// Sends a request; `user` adds that user's ckWebAuthToken, `apiToken` the ckAPIToken (nil: none).
    func send(
        _ method: HTTPRequest.Method, _ path: String, body: String? = nil, user: String? = nil, apiToken: String? = "test-token",
        query: [String] = [], headers: HTTPFields = [:]
    ) async throws -> Answer {
        var items = query
        if let apiToken { items.append("ckAPIToken=\(apiToken)") }
        if let user { items.append("ckWebAuthToken=\(token(user))") }
        let uri = items.isEmpty ? path : path + (path.contains("?") ? "&" : "?") + items.joined(separator: "&")
        let client = TestClient(host: host, port: port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        do {
            let response = try await client.execute(.init(uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) }))
            try await client.shutdown()
            let text = response.body.map { String(buffer: $0) } ?? ""
            let json = text.isEmpty ? JSON.null : ((try? JSON.parse(text)) ?? .string(text))
            return Answer(status: Int(response.status.code), json: json, text: text, headers: response.headers)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    func post(_ database: String, _ operation: String, _ body: String, user: String? = nil, apiToken: String? = "test-token") async throws -> Answer {
        try await send(.post, path(database, operation), body: body, user: user, apiToken: apiToken)
    }

    func get(_ database: String, _ operation: String, user: String? = nil) async throws -> Answer {
        try await send(.get, path(database, operation), user: user)
    }
}

extension JSON {
    /// The array at this value, or empty.
    var elements: [JSON] {
        if case .array(let elements) = self { return elements }
        return []
    }
}
