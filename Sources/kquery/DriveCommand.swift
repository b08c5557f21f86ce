import ArgumentParser
import KQuery
import KQueryContainer
import KQueryDocuments

import Foundation

/// `kquery drive`: iCloud Documents (SPEC §15) on the command line: one folder per device,
/// synced through `kquery serve` or a container file.
struct DriveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "drive",
        abstract: "iCloud Documents: sync a folder, list its items, versions and conflicts, download and evict.",
        discussion: """
            DIR is the device's folder (Documents/ and the rest; *.nosync stays on the device); its sync state is a \
            file beside it. PATH is relative to DIR (Documents/notes.txt). Exit status: 0 done, 1 a refused operation \
            (with the reason) or a failed sync, 2 bad flags.
            """,
        subcommands: [Sync.self, Status.self, Versions.self, Resolve.self, Download.self, Evict.self, MetadataQueryCommand.self]
    )

    struct Sync: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Sync DIR both ways, once (or again whenever it changes, with --watch).")
        @OptionGroup var options: DriveOptions
        @Option(help: "on-demand (files from other devices stay placeholders until downloaded) or all.")
        var download: String = UbiquityContainer.DownloadPolicy.onDemand.rawValue
        @Flag(help: "Keep syncing until interrupted: at once when the server pushes a change, and every second for local ones.") var watch = false
        @Flag(help: "Print a JSON line at the end: items, bytes and chunks uploaded and downloaded.") var stats = false

        func validate() throws {
            guard UbiquityContainer.DownloadPolicy(rawValue: download) != nil else { throw ValidationError("--download must be all or on-demand") }
        }

        func run() throws {
            let container = try options.open(policy: UbiquityContainer.DownloadPolicy(rawValue: download) ?? .onDemand)
            let watching = watch
            let total = try DriveOptions.perform { () async throws(DocumentsError) -> UbiquityContainer.Statistics in
                var total = try await container.sync()
                while watching {
                    await container.waitForChange()
                    let more = try await container.sync()
                    total.itemsUploaded += more.itemsUploaded
                    total.itemsDownloaded += more.itemsDownloaded
                }
                return total
            }
            if stats { Terminal.writeAll(total.json.serialized + "\n", to: 1) }
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a JSON line per item (or for PATH and what is inside it).")
        @OptionGroup var options: DriveOptions
        @Argument(help: "An item's path relative to DIR.") var path: String?

        func run() throws {
            let container = try options.open()
            let items = try DriveOptions.perform { () async throws(DocumentsError) in try await container.status() }
            for item in items where path == nil || item.path == path || item.path.hasPrefix((path ?? "") + "/") {
                let line = JSON.object([
                    ("path", .string(item.path)), ("kind", .string(item.kind.rawValue)), ("size", .int(item.size)),
                    ("downloadingStatus", .string(item.downloadingStatus.rawValue)), ("isUploaded", .bool(item.isUploaded)),
                    ("hasUnresolvedConflicts", .bool(item.hasUnresolvedConflicts)),
                ])
                Terminal.writeAll(line.serialized + "\n", to: 1)
            }
        }
    }

    struct Versions: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print PATH's current and other versions as JSON.")
        @OptionGroup var options: DriveOptions
        @Argument(help: "The item's path relative to DIR.") var path: String

        func run() throws {
            let container = try options.open()
            let item = path
            let (current, others) = try DriveOptions.perform { () async throws(DocumentsError) -> (FileVersion?, [FileVersion]) in
                (try await container.currentVersionOfItem(at: item), try await container.otherVersionsOfItem(at: item))
            }
            guard let current else {
                Terminal.writeError("drive: refused: no item at '\(path)' (sync first?)")
                throw ExitCode(1)
            }
            let json = JSON.object([("current", Self.json(current)), ("others", .array(others.map(Self.json)))])
            Terminal.writeAll(json.serialized + "\n", to: 1)
        }

        static func json(_ version: FileVersion) -> JSON {
            .object([
                ("id", .string(version.persistentIdentifier)), ("isConflict", .bool(version.isConflict)), ("isResolved", .bool(version.isResolved)),
                ("modificationDate", .string(ISO8601DateFormatter().string(from: version.modificationDate))),
                ("savingComputer", version.localizedNameOfSavingComputer.map(JSON.string) ?? .null), ("size", .int(version.size)),
                ("hasLocalContents", .bool(version.hasLocalContents)),
            ])
        }
    }

    struct Resolve: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make ID (default: the current version) current, resolve every conflict and remove the other versions.")
        @OptionGroup var item: DriveItemOptions
        @Option(help: ArgumentHelp("The version to keep (an id from `drive versions`).", valueName: "ID")) var keep: String = FileVersion.currentIdentifier

        func run() throws {
            let kept = keep
            try item.syncThen { container, path throws(DocumentsError) in try await container.resolve(path, keep: kept) }
        }
    }

    struct Download: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Download PATH (a placeholder, or a folder's placeholders).")
        @OptionGroup var item: DriveItemOptions

        func run() throws { try item.syncThen { container, path throws(DocumentsError) in _ = try await container.download(path) } }
    }

    struct Evict: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove PATH's local bytes; the item stays, as a placeholder.")
        @OptionGroup var item: DriveItemOptions

        func run() throws { try item.syncThen { container, path throws(DocumentsError) in try await container.evict(path) } }
    }
}

/// A folder and an item in it, for the subcommands that act on one item.
struct DriveItemOptions: ParsableArguments {
    @OptionGroup var options: DriveOptions
    @Argument(help: "The item's path relative to DIR.") var path: String

    /// Syncs, then acts on the item.
    func syncThen(_ body: @escaping @Sendable (UbiquityContainer, String) async throws(DocumentsError) -> Void) throws {
        let container = try options.open()
        let item = path
        try DriveOptions.perform { () async throws(DocumentsError) in
            try await container.sync()
            try await body(container, item)
        }
    }
}

/// `kquery drive query`: an `NSMetadataQuery` over the folder, a JSON line per notification.
struct MetadataQueryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Run a metadata query (NSPredicate over raw attribute names, e.g. \"kMDItemFSName LIKE '*.txt'\"), a JSON line per notification.")
    @OptionGroup var options: DriveOptions
    @Option(help: "documents or data.") var scope = "documents"
    @Option(help: ArgumentHelp("An attribute to sort by, :desc for descending.", valueName: "KEY[:desc]")) var sort: [String] = []
    @Option(help: ArgumentHelp("Keep syncing and print updates for this many seconds.", valueName: "SECONDS")) var watch: Int?
    @Argument(help: "The predicate.") var predicate: String

    func validate() throws {
        guard ["documents", "data"].contains(scope) else { throw ValidationError("--scope must be documents or data") }
        if let watch, watch < 0 { throw ValidationError("--watch takes a number of seconds") }
    }

    func run() throws {
        let descriptors = sort.map { key -> (attribute: String, ascending: Bool) in
            key.hasSuffix(":desc") ? (String(key.dropLast(5)), false) : (key.hasSuffix(":asc") ? String(key.dropLast(4)) : key, true)
        }
        let query: MetadataQuery
        do {
            query = try MetadataQuery(predicate: predicate, searchScopes: [scope == "data" ? MetadataQuery.ubiquitousDataScope : MetadataQuery.ubiquitousDocumentsScope],
                                      sortDescriptors: descriptors)
        } catch {
            Terminal.writeError("drive: \(error.message)")
            throw ExitCode(2)
        }
        query.notificationBatchingInterval = .zero
        let container = try options.open()
        let seconds = watch ?? 0
        try DriveOptions.perform { () async throws(DocumentsError) in
            try await container.sync()
            for note in query.gather(try await container.status(), directory: container.directory) { Self.print(note) }
            let end = ContinuousClock.now.advanced(by: .seconds(seconds))
            while ContinuousClock.now < end {
                await container.waitForChange()
                try await container.sync()
                query.update(try await container.status(), directory: container.directory)
                query.flush { Self.print($0) }
            }
        }
    }

    static func print(_ notification: MetadataQueryNotification) { Terminal.writeAll(line(notification).serialized + "\n", to: 1) }

    static func line(_ notification: MetadataQueryNotification) -> JSON {
        func items(_ list: [MetadataItem]) -> JSON {
            .array(list.map { item in
                .object([("path", .string(item.relativePath))] + item.attributes.keys.sorted().compactMap { key in item.attributes[key].map { (key, $0.valueJSON) } })
            })
        }
        switch notification {
        case .didStartGathering: return .object([("notification", .string("gathering"))])
        case .gatheringProgress(let added): return .object([("notification", .string("progress")), ("added", items(added))])
        case .didFinishGathering(let results): return .object([("notification", .string("finished")), ("results", items(results))])
        case .didUpdate(let added, let changed, let removed):
            return .object([("notification", .string("update")), ("added", items(added)), ("changed", items(changed)), ("removed", items(removed))])
        }
    }
}

/// The flags and the folder every `drive` subcommand takes.
struct DriveOptions: ParsableArguments {
    @Argument(help: "The device's folder (made if missing).") var directory: String
    @OptionGroup var connection: SyncConnectionOptions
    @Option(name: .customLong("device-name"),
            help: ArgumentHelp("This device's name, a conflict version's savingComputer (default: the name DIR last synced with, else the host name).", valueName: "NAME"))
    var deviceName: String?

    func validate() throws {
        if directory.isEmpty || deviceName?.isEmpty == true { throw ValidationError("DIR and --device-name must not be empty") }
    }

    func open(policy: UbiquityContainer.DownloadPolicy = .onDemand) throws -> UbiquityContainer {
        let transport: any DocumentsTransport
        if let url = connection.serverURL, let apiToken = connection.apiToken, let webAuthToken = connection.webAuthToken {
            transport = WebServicesDocumentsTransport(server: url, containerIdentifier: connection.container, environment: connection.environment,
                                                      apiToken: apiToken, webAuthToken: webAuthToken)
        } else if let db = connection.db, let user = connection.user {
            do {
                let container = try Container(containerIdentifier: connection.container, path: db)
                transport = ContainerDocumentsTransport(container: container, environment: connection.containerEnvironment, user: user)
            } catch {
                Terminal.writeError("drive: \(db): \(error.reason)")
                throw ExitCode(1)
            }
        } else {
            throw ValidationError("name where to sync: --server or --db")
        }
        let name = deviceName ?? UbiquityContainer.lastDeviceName(for: directory) ?? ProcessInfo.processInfo.hostName
        do { return try UbiquityContainer(directory: directory, transport: transport, deviceName: name, downloadPolicy: policy) } catch {
            Terminal.writeError("drive: \(error.message)")
            throw ExitCode(1)
        }
    }

    /// Runs the work; a refused operation or a failed sync exits 1 with the reason.
    @discardableResult
    static func perform<T: Sendable>(_ body: @escaping @Sendable () async throws(DocumentsError) -> T) throws -> T {
        switch SyncConnectionOptions.wait(body) {
        case .success(let value)?: return value
        case .failure(let error)?:
            let what = [.refused, .unsafeName, .notFound].contains(error.code) ? "refused" : "sync failed"
            Terminal.writeError("drive: \(what): \(error.message)")
            throw ExitCode(1)
        case nil:
            Terminal.writeError("drive: the work did not finish")
            throw ExitCode(1)
        }
    }
}
