import ArgumentParser
import KQuery
import KQueryContainer

import Foundation

/// Where a client library (`kvs`, `drive`) syncs: `kquery serve` through Web Services, or a
/// container file in process, for one user of one container.
struct SyncConnectionOptions: ParsableArguments {
    @Option(help: ArgumentHelp("A kquery serve URL to sync with (with --api-token and --web-auth-token).", valueName: "URL"))
    var server: String?
    @Option(name: .customLong("api-token"), help: ArgumentHelp("The server's API token (ckAPIToken).", valueName: "T"))
    var apiToken: String?
    @Option(name: .customLong("web-auth-token"), help: ArgumentHelp("The user's web auth token (ckWebAuthToken, from kquery token).", valueName: "W"))
    var webAuthToken: String?
    @Option(help: ArgumentHelp("A container file to sync with, in process (with --user).", valueName: "CONTAINER_FILE"))
    var db: String?
    @Option(help: ArgumentHelp("With --db: the user whose data it is (a user record name).", valueName: "NAME"))
    var user: String?
    @Option(help: ArgumentHelp("The container identifier.", valueName: "ID"))
    var container: String
    @Option(help: "development or production.")
    var environment = "development"

    func validate() throws {
        guard ContainerEnvironment(name: environment) != nil else { throw ValidationError("--environment must be development or production") }
        switch (server, db) {
        case (nil, nil): throw ValidationError("name where to sync: --server URL (with --api-token, --web-auth-token) or --db CONTAINER_FILE (with --user)")
        case (.some, .some): throw ValidationError("--server and --db are two ways to sync: give one")
        case (let server?, nil):
            guard serverURL != nil else { throw ValidationError("--server must be an http:// or https:// URL, not '\(server)'") }
            guard apiToken?.isEmpty == false, webAuthToken?.isEmpty == false else { throw ValidationError("--server needs --api-token and --web-auth-token") }
            if user != nil { throw ValidationError("--user goes with --db; with --server the web auth token names the user") }
        case (nil, .some):
            guard user?.isEmpty == false else { throw ValidationError("--db needs --user NAME (whose data it is)") }
            if apiToken != nil || webAuthToken != nil { throw ValidationError("--api-token and --web-auth-token go with --server") }
        }
        if container.isEmpty { throw ValidationError("--container must not be empty") }
    }

    var serverURL: URL? {
        guard let server, let url = URL(string: server), url.scheme == "http" || url.scheme == "https", url.host != nil else { return nil }
        return url
    }

    var containerEnvironment: ContainerEnvironment { ContainerEnvironment(name: environment) ?? .development }

    /// Runs async work from a synchronous command.
    static func wait<T: Sendable, E: Error>(_ body: @escaping @Sendable () async throws(E) -> T) -> Result<T, E>? {
        let outcome = Locked<Result<T, E>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<T, E>
            do throws(E) { result = .success(try await body()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return outcome.withLock { $0 }
    }
}
