import ArgumentParser
import CKQuerySupport
import KQuery
import KQueryContainer
import KQueryPostgres
import KQueryServer
import KQueryStore
import KQueryWebServices

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Dispatch)
import Dispatch
#endif

struct Serve: ParsableCommand {
    /// Blocks from 4 MiB up are mapped from the system; asset chunks (1 MiB) stay in the heap.
    static let mmapThreshold = 4 << 20
    /// A heap keeps up to 32 MiB free at its top (the chunks of a few uploads in flight) instead
    /// of giving pages back and faulting them in again.
    static let trimThreshold = 32 << 20

    static let configuration = CommandConfiguration(
        abstract: "Serve CloudKit Web Services over HTTP, with its pushes on the web courier.",
        discussion: """
            Every container identifier a request names (/database/1/{container}/{environment}/{database}/...) is \
            served, its data in DIR/{container}.container. Requests need a ckAPIToken (any, unless --api-token or \
            the config file names some); private and shared databases need a ckWebAuthToken from `kquery token`; \
            server-to-server keys in the config file sign requests to the public database. SIGTERM or SIGINT \
            finishes the requests in flight and exits 0. With --postgres URL the containers and the token secret \
            live in that PostgreSQL database instead (schema created or migrated at start), and any number of \
            servers on it serve the same containers; --data then only holds local files.
            """
    )

    @Option(help: ArgumentHelp("The data directory (created if missing).", valueName: "DIR"))
    var data: String?

    @Option(help: ArgumentHelp("Keep the containers in this PostgreSQL database (postgresql://user[:password]@host[:port]/database), shared with other servers.", valueName: "URL"), transform: PostgresLocation.argument)
    var postgres: PostgresLocation?

    @Option(name: .customLong("postgres-connections"), help: ArgumentHelp("With --postgres: the most connections the node opens to it at once (default: four a core).", valueName: "N"))
    var postgresConnections = PostgresContainers.defaultConnections

    @Option(help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on (0 picks a free one).")
    var port = 8080

    @Option(name: .customLong("api-token"), help: ArgumentHelp("Accept this ckAPIToken (repeatable; none: accept any).", valueName: "TOKEN"))
    var apiTokens: [String] = []

    @Option(help: ArgumentHelp(
        "A JSON configuration: {\"apiTokens\": [...], \"serverToServerKeys\": [{\"keyID\", \"publicKey\": PEM, \"userRecordName\"}], "
            + "\"apns\": {\"teamID\", \"keyID\", \"privateKey\": PEM or \"privateKeyPath\", \"topic\"}, "
            + "\"assets\": {\"maximumSize\": bytes, \"uploadLifetime\", \"receiptLifetime\", \"gracePeriod\", \"downloadLifetime\", "
            + "\"collectionInterval\": seconds}} (see README).",
        valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("Enforce this CloudKit schema (.ckdb): record types, field types, QUERYABLE/SORTABLE/SEARCHABLE.", valueName: "FILE"))
    var schema: String?

    @Flag(help: "Delete every container of DIR before starting.")
    var reset = false

    @Option(help: ArgumentHelp("Import these records (JSON or NDJSON) into the public development database of --container at start.", valueName: "FILE"))
    var records: String?

    @Option(help: ArgumentHelp("The container --records imports into.", valueName: "ID"))
    var container = ContainerFiles.defaultIdentifier

    @Option(help: "Seconds a web courier poll waits for a notification before answering 204.")
    var courierTimeout = 30

    @Flag(help: "Do not log requests to standard error.")
    var quiet = false

    @Option(help: ArgumentHelp("Serve at most N requests at once (web courier polls aside); more are answered 503 TRY_AGAIN_LATER with retryAfter.", valueName: "N"))
    var maxRequestsInFlight = 512

    @Option(help: ArgumentHelp("Seconds a web auth token is accepted after it was issued (default: two weeks, CloudKit's \"Keep me signed in\").", valueName: "SECONDS"))
    var webAuthTokenLifetime: Int?

    @Flag(help: "Accept each web auth token once, as CloudKit documents (each answer carries the next in X-Apple-CloudKit-Web-Auth-Token).")
    var singleUseWebAuthTokens = false

    @Option(name: .customLong("console-token"), help: ArgumentHelp(
        "Serve the web console at /console behind this token (open /console?token=TOKEN). Without it the console is served on a loopback --host only.",
        valueName: "TOKEN"))
    var consoleToken: String?

    func validate() throws {
        if data == nil && postgres == nil { throw ValidationError("give --data DIR, --postgres URL, or both") }
        if reset && postgres != nil { throw ValidationError("--reset deletes container files: it does not apply to --postgres") }
        if let webAuthTokenLifetime, webAuthTokenLifetime <= 0 { throw ValidationError("--web-auth-token-lifetime must be a positive number of seconds") }
        if maxRequestsInFlight < 1 { throw ValidationError("--max-requests-in-flight must be at least 1") }
        if postgresConnections < 1 || postgresConnections > 10_000 { throw ValidationError("--postgres-connections must be from 1 to 10000") }
        if let consoleToken, consoleToken.count < 8 || consoleToken.contains(where: { $0.isWhitespace || $0 == ";" || $0 == "," }) {
            throw ValidationError("--console-token must be at least 8 characters, without spaces, ';' or ','")
        }
    }

    func run() throws {
        // Megabyte buffers (asset chunks) come from the heap and go back to it: after five 50 MB
        // uploads the peak RSS stays near 64 MiB (81 MiB with glibc's moving threshold).
        _ = kquery_fix_heap_thresholds(Self.mmapThreshold, Self.trimThreshold)
        // Without --data a node on PostgreSQL keeps its few local files in a directory of its own.
        let data = data ?? FileManager.default.temporaryDirectory.appendingPathComponent("kquery-serve-\(ProcessInfo.processInfo.processIdentifier)").path
        var configuration = ServerConfiguration(dataDirectory: data)
        if let location = postgres {
            configuration.sharedStore = try Self.run { () throws(ServerError) in
                do throws(ContainerError) { return PostgresServerStore(containers: try PostgresContainers(location: location, connections: postgresConnections)) } catch {
                    throw ServerError(error)
                }
            }
            // Two threads a connection: one runs its statement while the other decodes and answers.
            configuration.queryThreads = 2 * postgresConnections
        }
        configuration.host = host
        configuration.port = port
        configuration.apiTokens = Set(apiTokens)
        configuration.courierTimeout = .seconds(courierTimeout)
        configuration.maximumRequestsInFlight = maxRequestsInFlight
        configuration.logsRequests = !quiet
        configuration.consoleToken = consoleToken
        if let config {
            let text = try ContainerFiles.read(config)
            // A relative path in the file (apns.privateKeyPath) is read beside the file.
            let directory = config.lastIndex(of: "/").map { String(config[..<$0]).isEmpty ? "/" : String(config[..<$0]) }
            try Self.run { () throws(ServerError) in try configuration.load(configurationText: text, directory: directory) }
        }
        if let webAuthTokenLifetime { configuration.webAuthTokenLifetime = Double(webAuthTokenLifetime) }
        if singleUseWebAuthTokens { configuration.singleUseWebAuthTokens = true }
        if let schema {
            do { configuration.schema = try Schema(contentsOfFile: schema) } catch {
                Terminal.writeError("error: \(error)")
                throw ExitCode(2)
            }
        }
        if reset { try Self.run { () throws(ServerError) in try ContainerDirectory.reset(path: data) } }
        let server = try Self.run { () throws(ServerError) in try CloudKitServer(configuration: configuration) }
        if let records {
            let loaded: [Record]
            do { loaded = try RecordFile.load(path: records) } catch {
                Terminal.writeError("error: \(error)")
                throw ExitCode(2)
            }
            let identifier = container
            let results = try Self.run { () throws(ServerError) in
                let container = try server.containers.container(identifier)
                do throws(ContainerError) {
                    return try container.database(.public).importRecords(loaded)
                } catch {
                    throw ServerError(error)
                }
            }
            // importRecords answers the operations that failed.
            let failed = results.count
            Terminal.writeError("imported \(loaded.count - failed) records into \(identifier) (public, development)\(failed > 0 ? ", \(failed) refused" : "")")
        }
        let outcome = Locked<(any Error)?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                try await server.run { port in
                    let place = postgres.map { "containers in \($0)" } ?? "data in \(server.configuration.dataDirectory)"
                    Terminal.writeError("kquery serve: listening on http://\(server.configuration.host):\(port), \(place)")
                    if server.configuration.servesConsole {
                        let address = "http://\(server.configuration.host):\(port)/console"
                        Terminal.writeError("kquery serve: console at \(address)\(server.configuration.consoleToken == nil ? "" : "?token=TOKEN (--console-token)")")
                    } else {
                        Terminal.writeError("kquery serve: console off (--host is not loopback: give --console-token TOKEN to serve it)")
                    }
                }
            } catch { outcome.withLock { $0 = error } }
            done.signal()
        }
        done.wait()
        if let error = outcome.withLock({ $0 }) {
            Terminal.writeError("error: \(error)")
            throw ExitCode(1)
        }
    }

    /// Runs `body`; a refusal is printed as `error: CODE: reason` and exits 2.
    static func run<T>(_ body: () throws(ServerError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            Terminal.writeError("error: \(error.serverErrorCode): \(error.reason)")
            throw ExitCode(2)
        }
    }
}

struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a web auth token (ckWebAuthToken) for a local user of `kquery serve --data DIR` (or `--postgres URL`).",
        discussion: "The token carries the user name and its issue time under an HMAC with a secret kept in DIR, so it cannot be forged and survives restarts; the server takes it for --web-auth-token-lifetime (two weeks by default), and each answer hands back the next one."
    )

    @Option(help: ArgumentHelp("The server's data directory.", valueName: "DIR"))
    var data: String?

    @Option(help: ArgumentHelp("The servers' PostgreSQL database (their shared secret signs the token).", valueName: "URL"), transform: PostgresLocation.argument)
    var postgres: PostgresLocation?

    @Option(help: ArgumentHelp("The user record name (such as _alice).", valueName: "NAME"))
    var user: String

    func validate() throws {
        if (data == nil) == (postgres == nil) { throw ValidationError("give one of --data DIR and --postgres URL") }
        if user.isEmpty || user.contains("\n") { throw ValidationError("--user must be a non-empty name on one line") }
    }

    func run() throws {
        let name = user
        let (data, postgres) = (data, postgres)
        let token = try Serve.run { () throws(ServerError) -> String in
            if let location = postgres {
                let keyBytes: [UInt8]
                do throws(ContainerError) {
                    let containers = try PostgresContainers(location: location, connections: 1)
                    defer { containers.close() }
                    keyBytes = try containers.serverSecret()
                } catch {
                    throw ServerError(error)
                }
                return try ServerSecret(keyBytes: keyBytes).webAuthToken(user: name)
            }
            guard let data else { throw ServerError.badRequest("no --data") }
            _ = try ContainerDirectory(path: data)
            return try ServerSecret(directory: data).webAuthToken(user: name)
        }
        Terminal.writeAll(token + "\n", to: 1)
    }
}
