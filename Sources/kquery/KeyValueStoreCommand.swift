import ArgumentParser
import KQuery
import KQueryContainer
import KQueryKeyValueStore

import Foundation

/// `kquery kvs`: iCloud key-value storage (SPEC §14) on the command line, one device per
/// `--device` directory, synced through `kquery serve` or a container file.
struct KeyValueStoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kvs",
        abstract: "iCloud key-value storage (NSUbiquitousKeyValueStore): set, get, sync and watch one device's store.",
        discussion: """
            Values are JSON: a string, number, boolean, array or object, {"$date": "ISO-8601"} for a date and \
            {"$data": "base64"} for data. Two --device directories are two devices of the same user. \
            Exit status: 0 done, 1 a refused write (the limit it broke) or a failed sync, 2 bad flags or input.
            """,
        subcommands: [Set.self, Get.self, Remove.self, List.self, Sync.self, Watch.self]
    )

    struct Set: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set KEY to a JSON value, keep it on the device and upload it.")
        @OptionGroup var options: KeyValueStoreOptions
        @Argument(help: "The key.") var key: String
        @Argument(help: "The value, as JSON.") var json: String

        func run() throws {
            let value = try KeyValueStoreJSON.value(json)
            let store = try options.open()
            do { try store.set(value, forKey: key) } catch { throw KeyValueStoreOptions.refused(error) }
            options.upload(store)
        }
    }

    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print KEY's value on this device, as JSON.")
        @OptionGroup var options: KeyValueStoreOptions
        @Argument(help: "The key.") var key: String

        func run() throws {
            let store = try options.open()
            guard let value = store.value(forKey: key) else {
                Terminal.writeError("kvs: no value for '\(key)'")
                throw ExitCode(1)
            }
            Terminal.writeAll(KeyValueStoreJSON.json(value).serialized + "\n", to: 1)
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove KEY on this device and upload the removal.")
        @OptionGroup var options: KeyValueStoreOptions
        @Argument(help: "The key.") var key: String

        func run() throws {
            let store = try options.open()
            do { try store.removeObject(forKey: key) } catch { throw KeyValueStoreOptions.refused(error) }
            options.upload(store)
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print every key and value on this device, as one JSON object.")
        @OptionGroup var options: KeyValueStoreOptions

        func run() throws {
            let store = try options.open()
            let values = store.values
            let object = JSON.object(values.keys.sorted().map { ($0, KeyValueStoreJSON.json(values[$0] ?? .bool(false))) })
            Terminal.writeAll(object.serialized + "\n", to: 1)
        }
    }

    struct Sync: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Upload what is pending, pull, print each notification as a JSON line; exit 0 once both sides agree.")
        @OptionGroup var options: KeyValueStoreOptions

        func run() throws {
            let store = try options.open()
            let result = KeyValueStoreOptions.wait { () async throws(KeyValueStoreError) -> [KeyValueStoreChange] in try await store.syncNow() }
            switch result {
            case .success(let changes):
                for change in changes { Terminal.writeAll(KeyValueStoreJSON.line(change) + "\n", to: 1) }
            case .failure(let error):
                Terminal.writeError("kvs: sync failed: \(error.message)")
                throw ExitCode(1)
            }
        }
    }

    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Sync, then print notifications as JSON lines as they arrive.")
        @OptionGroup var options: KeyValueStoreOptions
        @Option(name: .customLong("for"), help: ArgumentHelp("Stop after this many seconds (default: never).", valueName: "SECONDS"))
        var seconds: Double?

        func validate() throws {
            if let seconds, !(seconds >= 0 && seconds.isFinite) { throw ValidationError("--for must be a number of seconds, 0 or more") }
        }

        func run() throws {
            let store = try options.open()
            let seconds = self.seconds
            // Listening before the first sync, which may bring changes too.
            let changes = store.changes
            store.startSyncing()
            _ = KeyValueStoreOptions.wait { () async throws(KeyValueStoreError) -> Void in
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await change in changes { Terminal.writeAll(KeyValueStoreJSON.line(change) + "\n", to: 1) }
                    }
                    group.addTask {
                        if let seconds { try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000))) } else {
                            while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
                        }
                    }
                    await group.next()
                    group.cancelAll()
                }
            }
            store.close()
        }
    }
}

/// The flags every `kvs` subcommand takes: where the store syncs, and which device this is.
struct KeyValueStoreOptions: ParsableArguments {
    @OptionGroup var connection: SyncConnectionOptions
    @Option(help: ArgumentHelp("The store identifier (default: the container identifier).", valueName: "ID"))
    var store: String?
    @Option(help: ArgumentHelp("This device's state directory (made if missing).", valueName: "DIR"))
    var device: String

    func validate() throws {
        if store?.isEmpty == true || device.isEmpty { throw ValidationError("--store and --device must not be empty") }
    }

    var storeIdentifier: String { store ?? connection.container }

    /// The store of this device, its background sync off (`watch` starts it).
    func open() throws -> UbiquitousKeyValueStore {
        let environment = connection.containerEnvironment
        let transport: any KeyValueStoreTransport
        if let url = connection.serverURL, let apiToken = connection.apiToken, let webAuthToken = connection.webAuthToken {
            transport = WebServicesTransport(server: url, containerIdentifier: connection.container, environment: environment.name,
                                             storeIdentifier: storeIdentifier, apiToken: apiToken, webAuthToken: webAuthToken)
        } else if let db = connection.db, let user = connection.user {
            // Opened for each call: another kquery process (another device) may have written since.
            transport = ContainerFileTransport(path: db, containerIdentifier: connection.container, environment: environment, user: user,
                                               storeIdentifier: storeIdentifier)
        } else {
            throw ValidationError("name where the store syncs: --server or --db")
        }
        var configuration = UbiquitousKeyValueStore.Configuration(storeIdentifier: storeIdentifier, deviceDirectory: device, transport: transport)
        configuration.automaticallySyncs = false
        configuration.uploadDelay = .zero
        configuration.minimumUploadInterval = .zero
        do { return try UbiquitousKeyValueStore(configuration: configuration) } catch {
            Terminal.writeError("kvs: \(error.message)")
            throw ExitCode(2)
        }
    }

    /// Uploads a write just made; when the server is away it stays on the device for `sync`.
    func upload(_ store: UbiquitousKeyValueStore) {
        if case .failure(let error) = Self.wait({ () async throws(KeyValueStoreError) -> [KeyValueStoreChange] in try await store.syncNow() }) {
            Terminal.writeError("kvs: kept on this device, not uploaded yet (\(error.message)); `kquery kvs sync` uploads it")
        }
    }

    /// A refused write: exit 1 with the rule it broke; a bad key is an input error (2) too.
    static func refused(_ error: KeyValueStoreError) -> Error {
        Terminal.writeError("kvs: refused: \(error.message)")
        return ExitCode(1)
    }

    /// Runs async work from the synchronous command.
    static func wait<T: Sendable>(_ body: @escaping @Sendable () async throws(KeyValueStoreError) -> T) -> Result<T, KeyValueStoreError> {
        SyncConnectionOptions.wait(body) ?? .failure(KeyValueStoreError(.syncFailed, "the sync did not finish"))
    }
}

/// The JSON forms of values on the command line: plain JSON, with `{"$date": ISO-8601}` and
/// `{"$data": base64}` for the two types JSON lacks.
enum KeyValueStoreJSON {
    static func value(_ text: String) throws -> PropertyListValue {
        let json: JSON
        do { json = try JSON.parse(text) } catch { throw ValidationError("the value is not JSON: \(error)") }
        return try value(json)
    }

    static func value(_ json: JSON) throws -> PropertyListValue {
        switch json {
        case .null: throw ValidationError("null is not a property-list value (remove the key with `kvs remove`)")
        case .bool(let flag): return .bool(flag)
        case .int(let number): return .integer(number)
        case .double(let number): return .real(number)
        case .string(let text): return .string(text)
        case .array(let members): return .array(try members.map(value))
        case .object(let members):
            if members.count == 1, members[0].0 == "$date" {
                guard let text = members[0].1.stringValue, let date = parseDate(text) else {
                    throw ValidationError("{\"$date\": …} takes an ISO-8601 date such as \"2026-11-27T12:00:00Z\"")
                }
                return .date(date)
            }
            if members.count == 1, members[0].0 == "$data" {
                guard let text = members[0].1.stringValue, let data = Data(base64Encoded: text) else { throw ValidationError("{\"$data\": …} takes base64 text") }
                return .data(data)
            }
            var dictionary: [String: PropertyListValue] = [:]
            for (key, member) in members { dictionary[key] = try value(member) }
            return .dictionary(dictionary)
        }
    }

    static func json(_ value: PropertyListValue) -> JSON {
        switch value {
        case .string(let text): .string(text)
        case .integer(let number): .int(number)
        case .real(let number): .double(number)
        case .bool(let flag): .bool(flag)
        case .date(let date): .object([("$date", .string(formatDate(date)))])
        case .data(let data): .object([("$data", .string(data.base64EncodedString()))])
        case .array(let members): .array(members.map(json))
        case .dictionary(let members): .object(members.keys.sorted().map { ($0, json(members[$0] ?? .bool(false))) })
        }
    }

    static func line(_ change: KeyValueStoreChange) -> String {
        JSON.object([("reason", .int(Int64(change.reason.rawValue))), ("changedKeys", .array(change.changedKeys.map(JSON.string)))]).serialized
    }

    private static func parseDate(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    private static func formatDate(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        let whole = date.timeIntervalSince1970.rounded(.down) == date.timeIntervalSince1970
        formatter.formatOptions = whole ? [.withInternetDateTime] : [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}
