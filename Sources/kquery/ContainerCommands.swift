import ArgumentParser
import KQuery
import KQueryContainer

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Which database of a container file a command works on: the flags every container command shares.
struct ContainerDatabaseOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The container file (created if missing).", valueName: "FILE"))
    var db: String

    @OptionGroup var selection: ContainerDatabaseSelection

    func open() throws -> ContainerDatabase { try selection.open(db) }
}

/// The database of a container file: `--database`, `--user`, `--environment` and `--container`,
/// also read by `import` and `query` when their `--db` is a container file.
struct ContainerDatabaseSelection: ParsableArguments {
    @Option(help: ArgumentHelp("In a container file: public, private or shared (default: private with --user, public otherwise).", valueName: "SCOPE"))
    var database: String?

    @Option(help: ArgumentHelp("In a container file: the user (a user record name such as _9f2c) whose private or shared database it is.", valueName: "NAME"))
    var user: String?

    @Option(help: "In a container file: development or production (separate data, as in CloudKit).")
    var environment = "development"

    @Option(help: ArgumentHelp("The container identifier pushes carry (ck.cid).", valueName: "ID"))
    var container = ContainerFiles.defaultIdentifier

    var scope: DatabaseScope {
        get throws {
            guard let database else { return user == nil ? .public : .private }
            guard let scope = DatabaseScope(name: database) else { throw ValidationError("--database must be public, private or shared") }
            return scope
        }
    }

    /// Whether a database was named, which only a container file has.
    var namesADatabase: Bool { database != nil || user != nil }

    /// The environment --environment names.
    func environmentValue() throws -> ContainerEnvironment {
        guard let environment = ContainerEnvironment(name: environment) else {
            throw ValidationError("--environment must be development or production")
        }
        return environment
    }

    /// Opens the file and the database the flags name (exit 2 when either cannot be).
    func open(_ db: String) throws -> ContainerDatabase {
        let environment = try environmentValue()
        let scope = try scope
        let opened = try ContainerFiles.open(db, identifier: container)
        return try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in
            try opened.database(scope, environment: environment, user: user)
        }
    }
}

/// Opening container files and reporting the container's errors, in one place.
enum ContainerFiles {
    static let defaultIdentifier = "iCloud.kquery.local"

    static func open(_ path: String, identifier: String) throws -> Container {
        try run(exitCode: 2) { () throws(ContainerError) in try Container(containerIdentifier: identifier, path: path) }
    }

    /// Runs `body`; a container error is printed as `error: CODE: reason` and exits with `exitCode`.
    static func run<T>(exitCode: Int32 = 1, _ body: () throws(ContainerError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            Terminal.writeError("error: \(error.code.rawValue): \(error.reason)")
            throw ExitCode(exitCode)
        }
    }

    /// A zone of the database: `_defaultZone` or a custom zone the database's user owns.
    static func zoneID(_ name: String) throws -> ZoneID {
        guard !name.isEmpty else { throw ValidationError("a zone name must not be empty") }
        return ZoneID(zoneName: name)
    }

    /// The text of FILE, or of standard input for `-`.
    static func read(_ path: String) throws -> String {
        if path == "-" {
            var lines: [String] = []
            while let line = readLine(strippingNewline: false) { lines.append(line) }
            return lines.joined()
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            Terminal.writeError("error: \(path): cannot read file")
            throw ExitCode(2)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            Terminal.writeError("error: \(path): not UTF-8")
            throw ExitCode(2)
        }
        return text
    }

    static func print(_ json: JSON) {
        Terminal.writeAll(json.serialized + "\n", to: 1)
    }
}

struct Zones: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, create or delete a container database's zones.",
        discussion: """
            Prints Web Services JSON: the zones/list answer ({"zones": [{"zoneID": ...}]}), or for --create and \
            --delete the zones/modify answer, one entry per operation in order. Custom zones exist only in private \
            databases; deleting a zone deletes its records. Exit status: 0 success, 1 a refused operation, 2 a bad \
            file or flag.
            """
    )

    @OptionGroup var target: ContainerDatabaseOptions

    @Option(help: ArgumentHelp("Create a zone (repeatable).", valueName: "NAME"))
    var create: [String] = []

    @Option(help: ArgumentHelp("Delete a zone and its records (repeatable).", valueName: "NAME"))
    var delete: [String] = []

    func run() throws {
        let database = try target.open()
        if create.isEmpty, delete.isEmpty {
            let zones = try ContainerFiles.run { () throws(ContainerError) in try database.zones() }
            ContainerFiles.print(.object([("zones", .array(zones.map { .object([("zoneID", $0.json)]) }))]))
            return
        }
        var results: [JSON] = []
        var failed = false
        for (name, deleting) in create.map({ ($0, false) }) + delete.map({ ($0, true) }) {
            let zone = try ContainerFiles.zoneID(name)
            do throws(ContainerError) {
                if deleting { try database.deleteZone(zone) } else { try database.createZone(zone) }
                results.append(.object([("zoneID", zone.json)] + (deleting ? [("deleted", .bool(true))] : [])))
            } catch {
                failed = true
                results.append(.object([("zoneID", zone.json)] + error.webServicesMembers))
            }
        }
        ContainerFiles.print(.object([("zones", .array(results))]))
        if failed { throw ExitCode(1) }
    }
}

struct Modify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply record operations to a container database and print the Web Services answer.",
        discussion: """
            OPERATIONS is a file (or - for standard input) holding a Web Services records/modify body \
            ({"operations": [{"operationType": "create", "record": {...}}], "atomic": true}) or NDJSON of operations. \
            Operation types: create, update, forceUpdate, replace, forceReplace, delete, forceDelete. An asset field's \
            value {"$file": "PATH"} uploads that file into the field first (a file that cannot be read is exit 2, nothing saved). Prints \
            {"records": [...]}, one entry per operation with per-record errors in place. With --stream, every \
            input line is a whole modify body, applied and answered (one line each) as soon as it commits. \
            Exit status: 0 every operation applied, 1 some failed, 2 a bad file, body or flag.
            """
    )

    @OptionGroup var target: ContainerDatabaseOptions

    @Option(help: ArgumentHelp("The zone of records that name none.", valueName: "NAME"))
    var zone: String?

    @Flag(help: "Read one modify body per line and answer each as it commits.")
    var stream = false

    @Argument(help: ArgumentHelp("The operations file, or - for standard input.", valueName: "OPERATIONS"))
    var operations: String

    func run() throws {
        let database = try target.open()
        if stream {
            try runStream(database)
            return
        }
        let text = try ContainerFiles.read(operations)
        let request = try Self.request(text, zone: zone, source: operations)
        // A `$file` that cannot be read (or is too large) is a bad input, exit 2, before anything is saved.
        let uploaded = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try database.uploadingFiles(request.operations) }
        let result = try ContainerFiles.run { () throws(ContainerError) in
            try database.modify(uploaded, atomic: request.atomic, device: request.device)
        }
        ContainerFiles.print(result.webServicesJSON())
        if result.results.contains(where: { $0.error != nil }) { throw ExitCode(1) }
    }

    /// One modify per input line, each answered (and flushed) once committed: what a client that
    /// must know which changes are durable reads.
    private func runStream(_ database: ContainerDatabase) throws {
        var anyFailed = false
        var number = 0
        while let line = readLine(strippingNewline: true) {
            number += 1
            if line.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\r" }) { continue }
            let json: JSON
            do {
                json = try JSON.parse(line)
            } catch {
                Terminal.writeError("error: \(operations):\(number): \(error)")
                throw ExitCode(2)
            }
            let request = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in
                try ModifyRequest(webServicesJSON: Self.placing(json, zone: zone))
            }
            let uploaded = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try database.uploadingFiles(request.operations) }
            let result = try ContainerFiles.run { () throws(ContainerError) in
                try database.modify(uploaded, atomic: request.atomic, device: request.device)
            }
            anyFailed = anyFailed || result.results.contains { $0.error != nil }
            ContainerFiles.print(result.webServicesJSON())
        }
        if anyFailed { throw ExitCode(1) }
    }

    /// A modify body, or NDJSON of operations gathered into one.
    static func request(_ text: String, zone: String?, source: String) throws -> ModifyRequest {
        let body: JSON
        if let whole = try? JSON.parse(text), case .object = whole, whole["operations"] != nil {
            body = whole
        } else {
            var operations: [JSON] = []
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                guard !line.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\r" }) else { continue }
                do {
                    operations.append(try JSON.parse(String(line)))
                } catch {
                    Terminal.writeError("error: \(source):\(index + 1): \(error)")
                    throw ExitCode(2)
                }
            }
            body = .object([("operations", .array(operations))])
        }
        return try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try ModifyRequest(webServicesJSON: placing(body, zone: zone)) }
    }

    /// The body with `--zone` as its `zoneID`, unless it names one itself.
    private static func placing(_ body: JSON, zone: String?) -> JSON {
        guard let zone, case .object(var members) = body, !members.contains(where: { $0.0 == "zoneID" }) else { return body }
        members.append(("zoneID", ZoneID(zoneName: zone).json))
        return .object(members)
    }
}

struct Changes: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fetch a zone's record changes, or (without --zone) a database's zone changes, since a sync token.",
        discussion: """
            Prints Web Services JSON: changes/zone ({"records": [...], "syncToken": ..., "moreComing": ...}, a deleted \
            record as {"recordName", "recordType", "deleted": true}) or changes/database ({"zones": [...], \
            "syncToken": ..., "moreComing": ...}). Pass the printed syncToken back with --token for the next batch; \
            no token starts from the beginning. Exit status: 0 success, 1 a refused token (BAD_REQUEST, or \
            CHANGE_TOKEN_EXPIRED: fetch again without a token), 2 a bad file or flag.
            """
    )

    @OptionGroup var target: ContainerDatabaseOptions

    @Option(help: ArgumentHelp("A custom zone: fetch its record changes.", valueName: "NAME"))
    var zone: String?

    @Option(help: ArgumentHelp("The syncToken of the previous fetch.", valueName: "TOKEN"))
    var token: String?

    @Option(help: "At most this many changes (the server may send fewer).")
    var limit: Int = 200

    func validate() throws {
        if limit < 1 { throw ValidationError("--limit must be at least 1") }
    }

    func run() throws {
        let database = try target.open()
        let since = token.map(SyncToken.init(text:))
        if let zone {
            let zoneID = try ContainerFiles.zoneID(zone)
            let changes = try ContainerFiles.run { () throws(ContainerError) in try database.zoneChanges(zoneID, since: since, resultsLimit: limit) }
            ContainerFiles.print(changes.webServicesJSON())
        } else {
            let changes = try ContainerFiles.run { () throws(ContainerError) in try database.databaseChanges(since: since, resultsLimit: limit) }
            ContainerFiles.print(changes.webServicesJSON)
        }
    }
}

struct Subscriptions: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, save or delete a container database's subscriptions (the user's own).",
        discussion: """
            --save takes a JSON file holding one Web Services subscription or an array of them (subscriptionType \
            query, zone or database; a query's predicate as filterBy or, as a KQuery extension, a "predicate" \
            string). Subscriptions persist in the container file, and every modify fires them. Prints \
            {"subscriptions": [...]}. Exit status: 0 success, 1 a refused subscription, 2 a bad file or flag.
            """
    )

    @OptionGroup var target: ContainerDatabaseOptions

    @Option(help: ArgumentHelp("Save the subscriptions in FILE.", valueName: "FILE"))
    var save: String?

    @Option(help: ArgumentHelp("Delete this subscription (repeatable).", valueName: "ID"))
    var delete: [String] = []

    func run() throws {
        let database = try target.open()
        var printed: [JSON] = []
        if let save {
            let json: JSON
            do {
                json = try JSON.parse(try ContainerFiles.read(save))
            } catch let exit as ExitCode {
                throw exit
            } catch {
                Terminal.writeError("error: \(save): \(error)")
                throw ExitCode(2)
            }
            let elements: [JSON] = if case .array(let elements) = json { elements } else { [json] }
            for (index, element) in elements.enumerated() {
                let subscription: Subscription
                do {
                    subscription = try Subscription(webServicesJSON: element)
                } catch {
                    Terminal.writeError("error: \(save): subscription #\(index + 1): \(error.message)")
                    throw ExitCode(1)
                }
                let saved = try ContainerFiles.run { () throws(ContainerError) in try database.saveSubscription(subscription) }
                printed.append(saved.webServicesJSON)
            }
        }
        for id in delete {
            try ContainerFiles.run { () throws(ContainerError) in try database.deleteSubscription(id) }
            printed.append(.object([("subscriptionID", .string(id)), ("deleted", .bool(true))]))
        }
        if save == nil, delete.isEmpty {
            printed = try ContainerFiles.run { () throws(ContainerError) in try database.subscriptions() }.map(\.webServicesJSON)
        }
        ContainerFiles.print(.object([("subscriptions", .array(printed))]))
    }
}

struct Notifications: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the container's pending notifications (the outbox), or acknowledge delivered ones.",
        discussion: """
            Prints one JSON object per pending notification, oldest first: {"id", "database", "subscriptionID", \
            "owner", "payload", "priority", "pushType", "created"}. A committed modify's notifications are in the \
            outbox before it answers, and stay until acknowledged (--ack ID). Exit status: 0 success, 2 a bad \
            file or flag.
            """
    )

    @Option(help: ArgumentHelp("The container file.", valueName: "FILE"))
    var db: String

    @Option(help: ArgumentHelp("The container identifier.", valueName: "ID"))
    var container = ContainerFiles.defaultIdentifier

    @Option(help: ArgumentHelp("Acknowledge (remove) this notification (repeatable).", valueName: "ID"))
    var ack: [Int64] = []

    @Option(help: "At most this many notifications.")
    var limit: Int = 1_000

    func run() throws {
        let opened = try ContainerFiles.open(db, identifier: container)
        if !ack.isEmpty {
            try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try opened.acknowledge(ack) }
            return
        }
        let pending = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try opened.pendingNotifications(limit: max(limit, 0)) }
        var out = ""
        for notification in pending { out += notification.webServicesJSON.serialized + "\n" }
        Terminal.writeAll(out, to: 1)
    }
}
