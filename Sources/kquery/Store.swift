import ArgumentParser
import KQuery
import KQueryContainer
import KQueryStore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Opening a database file and reading records, with errors reported once (exit 2).
enum StoreFiles {
    static func open(_ path: String, indexPolicy: Database.IndexPolicy = .declared) throws -> Database {
        do {
            return try Database(path: path, indexPolicy: indexPolicy)
        } catch {
            Terminal.writeError("error: \(error.message)")
            throw ExitCode(2)
        }
    }

    static func loadRecords(_ path: String) throws -> [Record] {
        do {
            return try RecordFile.load(path: path)
        } catch {
            Terminal.writeError("error: \(error)")
            throw ExitCode(2)
        }
    }

    static func readSchema(_ path: String) throws -> Schema {
        do {
            return try Schema(contentsOfFile: path)
        } catch {
            Terminal.writeError("error: \(error)")
            throw ExitCode(2)
        }
    }
}

struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load records into a database file (created if missing), replacing records with the same ID.",
        discussion: """
            The whole file is one transaction: if the process stops midway, the database keeps none of it. \
            A progress bar shows on a terminal. Exit status: 0 success, 1 records refused by the schema, \
            2 a bad file or flag.
            """
    )

    @Option(help: ArgumentHelp("The database file.", valueName: "FILE"))
    var db: String

    @Option(help: ArgumentHelp("Records as NDJSON or a JSON array (CloudKit Web Services form or shorthand).", valueName: "FILE"))
    var records: String

    @Option(help: ArgumentHelp("Declare this schema (CloudKit Schema Language) before importing.", valueName: "FILE"))
    var schema: String?

    @OptionGroup var selection: ContainerDatabaseSelection

    func run() throws {
        if Container.isContainerFile(atPath: db) {
            try importIntoContainer()
            return
        }
        if selection.namesADatabase {
            throw ValidationError("--database and --user import into a container file; \(db) is not one (see kquery modify)")
        }
        let database = try StoreFiles.open(db)
        if let schema {
            let declared = try StoreFiles.readSchema(schema)
            do {
                try database.setSchema(declared)
            } catch {
                Terminal.writeError("error: \(error.message)")
                throw ExitCode(1)
            }
        }
        let started = Date()
        let loaded = try StoreFiles.loadRecords(records)
        let bar = ProgressBar(total: loaded.count, label: "importing")
        let before = database.recordCount
        do {
            try database.importRecords(loaded) { bar.update($0) }
        } catch {
            bar.finish()
            let line = error.operationIndex.map { " (record \($0 + 1) of \(records))" } ?? ""
            Terminal.writeError("error: \(error.message)\(line); nothing was imported")
            throw ExitCode(error.kind == .schemaViolation ? 1 : 2)
        }
        bar.finish()
        let seconds = Date().timeIntervalSince(started)
        let added = database.recordCount - before
        print("imported \(loaded.count) records into \(db) (\(added) new, \(loaded.count - added) replaced) in \(String(format: "%.2f", seconds)) s")
    }
}

extension Import {
    /// Saves the records into one database of a container file as `forceReplace` operations, 200 a
    /// transaction (Web Services' limit), creating the custom zones they name: unlike a database
    /// file's import, each gets a new change tag, enters the change history and fires subscriptions.
    func importIntoContainer() throws {
        if schema != nil { throw ValidationError("--schema declares a database file's schema; a container file has none yet") }
        let opened = try selection.open(db)
        let started = Date()
        let loaded = try StoreFiles.loadRecords(records)
        let bar = ProgressBar(total: loaded.count, label: "importing")
        let failed = try ContainerFiles.run { () throws(ContainerError) in try opened.importRecords(loaded) { bar.update($0) } }
        for case .failed(let id, let error) in failed {
            Terminal.writeError("error: record '\(id.recordName)': \(error.code.rawValue): \(error.reason)")
        }
        let failures = failed.count
        bar.finish()
        let seconds = Date().timeIntervalSince(started)
        print("imported \(loaded.count - failures) records into \(db) (\(opened.key)) in \(String(format: "%.2f", seconds)) s")
        if failures > 0 { throw ExitCode(1) }
    }
}

/// A one-line progress bar on stderr, drawn only on a terminal.
final class ProgressBar {
    private let total: Int
    private let label: String
    private let enabled: Bool
    private var drawn = -1

    init(total: Int, label: String) {
        self.total = total
        self.label = label
        enabled = isatty(2) == 1 && total >= 10_000
    }

    func update(_ done: Int) {
        guard enabled, total > 0 else { return }
        let percent = min(100, done * 100 / total)
        guard percent != drawn else { return }
        drawn = percent
        let width = 30
        let filled = percent * width / 100
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        Terminal.writeAll("\r\(label) [\(bar)] \(percent)% \(done)/\(total)", to: 2)
    }

    func finish() {
        guard enabled, drawn >= 0 else { return }
        Terminal.writeAll("\r\u{1B}[K", to: 2)
    }
}

struct SchemaCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Print a database's schema, or declare or drop it.",
        discussion: """
            The schema is written in the CloudKit Schema Language (RECORD TYPE Name (field TYPE QUERYABLE \
            SORTABLE SEARCHABLE, ...);). With a schema, saves must fit it and queries may only use the \
            indexes it marks. Exit status: 0 success, 1 records in the database do not fit, 2 a bad file or flag.
            """
    )

    @Option(help: ArgumentHelp("The database file.", valueName: "FILE"))
    var db: String

    @Option(help: ArgumentHelp("Declare the schema in FILE.", valueName: "FILE"))
    var set: String?

    @Flag(help: "Drop the schema: every record and query is allowed again.")
    var drop = false

    func validate() throws {
        if set != nil, drop { throw ValidationError("--set and --drop cannot be used together") }
    }

    func run() throws {
        let database = try StoreFiles.open(db)
        if set != nil || drop {
            let schema = try set.map(StoreFiles.readSchema)
            do {
                try database.setSchema(schema)
            } catch {
                Terminal.writeError("error: \(error.message)")
                throw ExitCode(1)
            }
            return
        }
        guard let schema = database.schema else {
            Terminal.writeError("\(db) has no schema: every record and query is allowed")
            return
        }
        print(schema.text, terminator: "")
    }
}

struct IndexCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "index",
        abstract: "Declare an index in a database without a schema, or list its indexes.",
        discussion: """
            KIND is queryable (equality, IN, CONTAINS, BEGINSWITH, distance), sortable (ranges and sorting) \
            or searchable (token search over the type's string fields). With no TYPE, lists the declared \
            indexes. A database with a schema takes its indexes from the schema.
            """
    )

    enum Kind: String, ExpressibleByArgument, CaseIterable {
        case queryable, sortable, searchable
    }

    @Option(help: ArgumentHelp("The database file.", valueName: "FILE"))
    var db: String

    @Argument(help: "The record type.")
    var type: String?

    @Argument(help: "The field.")
    var field: String?

    @Argument(help: "queryable, sortable or searchable.")
    var kind: Kind?

    func validate() throws {
        if type != nil, field == nil || kind == nil { throw ValidationError("give TYPE FIELD KIND, or nothing to list the indexes") }
        if let field, !FieldKey.isValidName(field), FieldReference(name: field).isUser {
            throw ValidationError("invalid field name '\(field)' (expected [a-zA-Z][0-9a-zA-Z_]*)")
        }
    }

    func run() throws {
        let database = try StoreFiles.open(db)
        guard let type, let field, let kind else {
            let declared = database.schema.map { schema in
                schema.recordTypes.flatMap { type in type.fields.flatMap { field in
                    FieldSchema.Indexes.keywords.compactMap { index, _ in
                        field.indexes.contains(index) ? IndexDeclaration(recordType: type.name, field: field.field, index: index) : nil
                    }
                } }
            } ?? database.declaredIndexes
            for declaration in declared { print(declaration) }
            return
        }
        if database.schema != nil {
            Terminal.writeError("error: \(db) has a schema: mark the field in the schema instead (kquery schema --set)")
            throw ExitCode(2)
        }
        let index: FieldSchema.Indexes = switch kind {
        case .queryable: .queryable
        case .sortable: .sortable
        case .searchable: .searchable
        }
        do {
            try database.declareIndex(IndexDeclaration(recordType: type, field: FieldReference(name: field), index: index))
        } catch {
            Terminal.writeError("error: \(error.message)")
            throw ExitCode(2)
        }
    }
}

extension FieldReference {
    var isUser: Bool {
        if case .user = self { return true }
        return false
    }
}
