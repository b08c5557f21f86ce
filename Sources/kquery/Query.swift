import ArgumentParser
import KQuery
import KQueryContainer
import KQueryPostgres
import KQueryStore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

struct Query: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a query over a records file or a database and print the matching records in result order.",
        discussion: """
            With --records the file is scanned and every match printed (unless --limit). With --db the \
            database's indexes answer the query and results come in pages as from CloudKit: 100 records \
            unless --limit, at most 200; with --postgres URL the container --container holds there (what \
            `kquery serve --postgres` serves) answers it in SQL. --explain prints the plan instead of the \
            records (with --postgres: each statement, its values and PostgreSQL's plan for it). \
            Exit status: 0 success, 1 invalid predicate or a query the schema refuses (error with position \
            and caret on stderr), 2 bad file or flags. When a page is cut, the cursor for the next page is \
            printed on stderr as `next page: --cursor TOKEN`.
            """
    )

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case ndjson, names, table, count
    }

    @Option(help: ArgumentHelp("Records as NDJSON or a JSON array (CloudKit Web Services form or shorthand).", valueName: "FILE"))
    var records: String?

    @Option(help: ArgumentHelp("A database file (see kquery import) or a container file (see kquery modify).", valueName: "FILE"))
    var db: String?

    @Option(help: ArgumentHelp("A PostgreSQL database that `kquery serve --postgres` serves (the container --container there).", valueName: "URL"), transform: PostgresLocation.argument)
    var postgres: PostgresLocation?

    @OptionGroup var selection: ContainerDatabaseSelection

    @Flag(help: "Print how the query would run (indexes, tests, order) instead of its records.")
    var explain = false

    @Option(help: "The record type to query.")
    var type: String

    @Option(name: .customLong("sort"), help: ArgumentHelp("Sort by a field, ascending unless :desc. Repeat for more keys.", valueName: "KEY[:asc|:desc]"))
    var sortKeys: [String] = []

    @Option(name: .customLong("sort-near"), help: ArgumentHelp("Sort by distance of a LOCATION field from a point, nearest first.", valueName: "KEY@LAT,LON"))
    var sortNear: [String] = []

    @Option(help: "Records per page (a cursor for the next page goes to stderr).")
    var limit: Int?

    @Option(help: "Resume after the page that printed this cursor.")
    var cursor: String?

    @Option(help: ArgumentHelp("The time now() reads, ISO-8601 (default: the clock).", valueName: "ISO-8601"))
    var now: String?

    @Option(help: "Only records in this zone.")
    var zone: String?

    @Option(name: .customLong("desired-keys"), help: ArgumentHelp("Comma-separated fields to return ('' for system fields only).", valueName: "KEYS"))
    var desiredKeys: String?

    @Option(help: "ndjson (Web Services records), names (one recordName per line), table (for people) or count.")
    var format: Format = .ndjson

    @OptionGroup var predicateOptions: PredicateOptions

    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
        if [records != nil, db != nil, postgres != nil].filter({ $0 }).count != 1 { throw ValidationError("give one of --records FILE, --db FILE or --postgres URL") }
        if selection.namesADatabase, db == nil, postgres == nil {
            throw ValidationError("--database and --user read a container (--db FILE or --postgres URL)")
        }
    }

    func run() throws {
        let predicate = try predicateOptions.validated()
        let descriptors = try sortDescriptors()
        let nowMilliseconds = try clock()
        var resume: QueryCursor?
        if let cursor {
            do {
                resume = try QueryCursor(token: cursor)
            } catch {
                throw ValidationError("--cursor: \(error.message)")
            }
        }
        let query = KQuery.Query(
            recordType: type, predicate: predicate, sortDescriptors: descriptors, resultsLimit: limit,
            zoneID: zone.map { ZoneID(zoneName: $0) },
            desiredKeys: desiredKeys.map { $0.split(separator: ",").map { String($0.filter { $0 != " " }) } })
        let result: QueryResult
        if let location = postgres {
            let containers = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try PostgresContainers(location: location, connections: 1) }
            defer { containers.close() }
            let (scope, environment) = (try selection.scope, try selection.environmentValue())
            let opened = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) -> ContainerDatabase in
                // Read, never made: a mistyped identifier is an error, not an empty container.
                guard try containers.containerIdentifiers().contains(selection.container) else {
                    throw ContainerError(.notFound, "\(location) holds no container \(selection.container)")
                }
                return try containers.openContainer(selection.container).database(scope, environment: environment, user: selection.user)
            }
            result = try runOnContainer(opened, query, cursor: resume, now: nowMilliseconds)
            if format == .count { return }
        } else if let db, Container.isContainerFile(atPath: db) {
            result = try runOnContainer(try selection.open(db), query, cursor: resume, now: nowMilliseconds)
            if format == .count { return }
        } else if let db {
            let database = try StoreFiles.open(db)
            if let schema = database.schema {
                do {
                    try schema.check(predicate, recordType: type)
                } catch {
                    Terminal.writeError(error.rendered(in: try predicateOptions.predicateText(), color: Terminal.colorOnStandardError))
                    throw ExitCode(1)
                }
                do {
                    try schema.check(sortDescriptors: descriptors, recordType: type)
                } catch {
                    Terminal.writeError("error: --sort: \(error.message)")
                    throw ExitCode(1)
                }
            }
            do {
                if explain {
                    print(try database.plan(query, now: nowMilliseconds))
                    return
                }
                if format == .count, resume == nil {
                    // Every match, not one page's.
                    print(try database.count(query, now: nowMilliseconds))
                    return
                }
                result = try database.perform(query, cursor: resume, now: nowMilliseconds)
            } catch {
                Terminal.writeError("error: \(error.message)")
                throw ExitCode(error.kind == .invalidQuery ? 1 : 2)
            }
        } else {
            let loaded = try StoreFiles.loadRecords(records ?? "")
            if explain {
                let database = Database(indexPolicy: .automatic)
                do {
                    try database.importRecords(loaded)
                    print(try database.plan(query, now: nowMilliseconds))
                } catch {
                    Terminal.writeError("error: \(error.message)")
                    throw ExitCode(2)
                }
                return
            }
            do {
                result = try query.perform(on: loaded, now: nowMilliseconds, cursor: resume)
            } catch {
                Terminal.writeError("error: \(error.message)")
                throw ExitCode(2)
            }
        }
        Terminal.writeAll(RecordPrinter(format: format.printerFormat, color: Terminal.colorOnStandardOutput).render(result.records), to: 1)
        if let next = result.cursor {
            Terminal.writeError("next page: --cursor \(next.token)")
        }
    }

    /// The query on one database of a container (the public database's default zone unless
    /// --database, --user or --zone say otherwise). `--format count` pages through every match;
    /// `--explain` prints how the database runs it.
    private func runOnContainer(_ opened: ContainerDatabase, _ query: KQuery.Query, cursor: QueryCursor?, now: Int64) throws -> QueryResult {
        if explain {
            print(try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try opened.explanation(query, cursor: cursor, now: now) })
            throw ExitCode.success
        }
        var page = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try opened.query(query, cursor: cursor, now: now) }
        guard format == .count else { return page }
        var count = page.records.count
        while let next = page.cursor {
            page = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try opened.query(query, cursor: next, now: now) }
            count += page.records.count
        }
        print(count)
        return page
    }

    private func sortDescriptors() throws -> [SortDescriptor] {
        var descriptors: [SortDescriptor] = []
        for spec in sortKeys {
            let parts = spec.split(separator: ":", maxSplits: 1).map(String.init)
            guard let field = parts.first, FieldKey.isValidName(field) || field == "recordID" || field == "creationDate" || field == "modificationDate" else {
                throw ValidationError("--sort needs KEY[:asc|:desc], got '\(spec)'")
            }
            switch parts.count == 2 ? parts[1].lowercased() : "asc" {
            case "asc": descriptors.append(SortDescriptor(field, ascending: true))
            case "desc": descriptors.append(SortDescriptor(field, ascending: false))
            default: throw ValidationError("--sort direction must be asc or desc, got '\(parts[1])'")
            }
        }
        for spec in sortNear {
            let parts = spec.split(separator: "@", maxSplits: 1).map(String.init)
            let coordinates = parts.count == 2 ? parts[1].split(separator: ",").compactMap { Double($0.filter { $0 != " " }) } : []
            guard parts.count == 2, FieldKey.isValidName(parts[0]), coordinates.count == 2,
                  (-90...90).contains(coordinates[0]), (-180...180).contains(coordinates[1])
            else { throw ValidationError("--sort-near needs KEY@LAT,LON, got '\(spec)'") }
            descriptors.append(SortDescriptor(distanceOf: parts[0], from: Location(latitude: coordinates[0], longitude: coordinates[1])))
        }
        return descriptors
    }

    private func clock() throws -> Int64 {
        guard let now else { return Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
        guard let milliseconds = Timestamp.parseISO8601(now) else { throw ValidationError("--now needs an ISO-8601 date, got '\(now)'") }
        return milliseconds
    }
}

extension Query.Format {
    var printerFormat: RecordPrinter.Format {
        switch self {
        case .ndjson: .ndjson
        case .names: .names
        case .table: .table
        case .count: .count
        }
    }
}
