import ArgumentParser
import KQueryContainer
import KQueryPostgres
import KQueryWebServices

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// `kquery migrate`: a container from its file into PostgreSQL, or back (SPEC §16).
struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy a container between its file and a PostgreSQL database (either way).",
        discussion: """
            --from FILE --to-postgres URL --container ID copies the container file into the database (its schema \
            is created when empty); --from-postgres URL --to FILE --container ID copies it back. Records go a page at \
            a time; a copy stopped by a crash is resumed by running the same command again (it continues where the \
            copy got to). Assets, the retention horizon, the secret of sync tokens and the learned schema (FILE.ckdb) \
            are carried. Into a database \
            without records, the record indexes are built once the rows are in; a node opening the database while \
            they are missing builds them first. Prints what it copied; on a terminal, a progress line while it runs.
            """
    )

    @Option(help: ArgumentHelp("The container file to copy from.", valueName: "FILE"))
    var from: String?

    @Option(name: .customLong("to-postgres"), help: ArgumentHelp("The PostgreSQL database to copy into.", valueName: "URL"), transform: PostgresLocation.argument)
    var toPostgres: PostgresLocation?

    @Option(name: .customLong("from-postgres"), help: ArgumentHelp("The PostgreSQL database to copy from.", valueName: "URL"), transform: PostgresLocation.argument)
    var fromPostgres: PostgresLocation?

    @Option(help: ArgumentHelp("The container file to copy into (created if missing).", valueName: "FILE"))
    var to: String?

    @Option(help: ArgumentHelp("The container's identifier in the database.", valueName: "ID"))
    var container: String

    func validate() throws {
        let intoDatabase = from != nil && toPostgres != nil && fromPostgres == nil && to == nil
        let outOfDatabase = fromPostgres != nil && to != nil && from == nil && toPostgres == nil
        guard intoDatabase || outOfDatabase else {
            throw ValidationError("give --from FILE --to-postgres URL, or --from-postgres URL --to FILE")
        }
        if container.isEmpty { throw ValidationError("--container must name a container") }
    }

    func run() throws {
        let onTerminal = isatty(2) == 1
        let counts: ContainerCopy.Counts
        do throws(ContainerError) {
            // One pool serves the copy and the learned schema; a copy into the database is a load.
            guard let location = toPostgres ?? fromPostgres else { throw ContainerError(.badRequest, "nothing to copy") }
            let containers = try PostgresContainers(location: location, connections: 8, loading: toPostgres != nil)
            defer { containers.close() }
            let source: any ContainerStorage, destination: any ContainerStorage
            if let from, toPostgres != nil {
                // The source is read, never made: a mistyped path is an error, not an empty copy.
                guard access(from, F_OK) == 0 else { throw ContainerError(.notFound, "no container file at \(from)") }
                source = try ContainerCopy.fileStorage(path: from)
                destination = try containers.storage(container)
            } else if let to {
                guard try containers.containerIdentifiers().contains(container) else {
                    throw ContainerError(.notFound, "\(location) holds no container \(container)")
                }
                source = try containers.storage(container)
                destination = try ContainerCopy.fileStorage(path: to)
            } else {
                throw ContainerError(.badRequest, "nothing to copy")
            }
            counts = try ContainerCopy.copy(from: source, to: destination) { counts in
                guard onTerminal else { return }
                Terminal.writeAll("\rmigrate: \(counts.assets) assets, \(counts.databases) databases, \(counts.records) records, \(counts.tombstones) tombstones", to: 2)
            }
            try destination.waitUntilDurable()
            try carryLearnedSchema(containers)
        } catch {
            if onTerminal { Terminal.writeAll("\n", to: 2) }
            Terminal.writeError("error: \(error.code.rawValue): \(error.reason)")
            throw ExitCode(2)
        }
        if onTerminal { Terminal.writeAll("\r\u{1B}[K", to: 2) }
        Terminal.writeAll("""
            copied \(counts.databases) databases, \(counts.zones) zones, \(counts.records) records, \(counts.tombstones) tombstones, \
            \(counts.subscriptions) subscriptions, \(counts.notifications) queued notifications, \(counts.assets) assets (\(counts.assetBytes) bytes), \
            \(counts.uploads) upload tickets, \(counts.receipts) receipts

            """, to: 1)
    }

    /// The schema the container learned (`FILE.ckdb` beside a container file, `learned_schemas` in
    /// PostgreSQL), carried with it where the destination has none yet.
    private func carryLearnedSchema(_ containers: PostgresContainers) throws(ContainerError) {
        if let from, toPostgres != nil {
            guard let text = FileManager.default.contents(atPath: from + ".ckdb").map({ String(decoding: $0, as: UTF8.self) }) else { return }
            _ = try LearnedSchema.schema(text, from + ".ckdb")
            guard try containers.learnedSchema(container) == nil else { return }
            _ = try containers.replaceLearnedSchema(container, text: text, version: 0)
        } else if let to {
            let file = LearnedSchemaFile(path: to + ".ckdb")
            guard let kept = try containers.learnedSchema(container), try file.load().version == 0 else { return }
            _ = try file.replace(try LearnedSchema.schema(kept.text, "\(containers.location) (\(container))"), over: 0)
        }
    }
}
