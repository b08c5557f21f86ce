import ArgumentParser
import KQuery
import KQueryStore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply record changes and print the CloudKit pushes each one fires.",
        discussion: """
            SUBSCRIPTIONS is a JSON array of Web Services subscription objects; CHANGES is NDJSON of \
            modify operations ({"operationType": "create"|"update"|"forceUpdate"|"replace"|"forceReplace"|\
            "delete"|"forceDelete", "record": {...}}), applied in order. Each push prints as one line: \
            {"payload": {...}, "priority": 10|5, "pushType": "alert"|"background"}. Exit status: 0 success, \
            1 a refused subscription or operation (named on stderr), 2 a bad file or flag.
            """
    )

    @Option(help: ArgumentHelp("Subscriptions: a JSON array of Web Services subscription objects.", valueName: "FILE"))
    var subscriptions: String

    @Option(help: ArgumentHelp("Changes: NDJSON of Web Services modify operations.", valueName: "FILE"))
    var changes: String

    @Option(help: ArgumentHelp("Records the store starts with (NDJSON or JSON array).", valueName: "FILE"))
    var records: String?

    @Option(help: ArgumentHelp("A database file the store starts from (it is read, never written).", valueName: "FILE"))
    var db: String?

    @Option(help: "The container identifier (ck.cid).")
    var container = "iCloud.com.example.app"

    @Option(help: "development or production (ck.ce).")
    var environment = "development"

    @Option(help: "public, private or shared (ck.qry.dbs).")
    var database = "public"

    @Option(help: "The user subscriptions belong to when they name no ownerRecordName (ck.ckuserid).")
    var user = PushContext.defaultUserRecordName

    @Option(help: ArgumentHelp("The time now() reads, ISO-8601 (default: the clock).", valueName: "ISO-8601"))
    var now: String?

    @Flag(help: "Also fire query subscriptions when an update takes a record out of their results.")
    var reportLeaving = false

    func validate() throws {
        if records != nil, db != nil { throw ValidationError("give --records FILE or --db FILE, not both") }
    }

    func run() throws {
        guard let environment = ContainerEnvironment(name: environment) else {
            throw ValidationError("--environment must be development or production")
        }
        guard let database = DatabaseScope(name: database) else { throw ValidationError("--database must be public, private or shared") }
        var clock = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        if let now {
            guard let parsed = Timestamp.parseISO8601(now) else { throw ValidationError("--now needs an ISO-8601 date, got '\(now)'") }
            clock = parsed
        }
        let context = PushContext(containerIdentifier: container, environment: environment, database: database, userRecordName: user)

        var set = SubscriptionSet(database: database, reportsRecordsLeavingResults: reportLeaving)
        for var subscription in try readSubscriptions() {
            if subscription.owner == PushContext.defaultUserRecordName { subscription.owner = user }
            do {
                try set.save(subscription)
            } catch {
                Terminal.writeError("error: \(subscriptions): subscription '\(subscription.subscriptionID)': \(error.message)")
                throw ExitCode(1)
            }
        }
        // The changes apply to an in-memory copy: a simulation never writes to the database file.
        let store = Database(indexPolicy: .declared)
        store.createsMissingZones = true
        let stamp = clock
        store.clock = { stamp }
        do {
            if let db {
                let file = try StoreFiles.open(db)
                try store.setSchema(file.schema)
                try store.importRecords(file.allRecords)
            } else if let records {
                try store.importRecords(try StoreFiles.loadRecords(records))
            }
        } catch let error as DatabaseError {
            Terminal.writeError("error: \(error.message)")
            throw ExitCode(2)
        }
        for (line, operation) in try readOperations() {
            let change: RecordChange
            do {
                change = try store.save(operation)
            } catch {
                Terminal.writeError("error: \(changes):\(line): \(error.message)")
                throw ExitCode(1)
            }
            var out = ""
            for firing in set.apply(change, now: clock) {
                out += firing.payload(context: context).envelope.serialized + "\n"
            }
            Terminal.writeAll(out, to: 1)
        }
    }

    private func readSubscriptions() throws -> [Subscription] {
        let json = try readJSON(subscriptions)
        guard case .array(let elements) = json else {
            Terminal.writeError("error: \(subscriptions): expected a JSON array of subscriptions")
            throw ExitCode(2)
        }
        var result: [Subscription] = []
        for (index, element) in elements.enumerated() {
            do {
                result.append(try Subscription(webServicesJSON: element))
            } catch {
                Terminal.writeError("error: \(subscriptions): subscription #\(index + 1): \(error.message)")
                throw ExitCode(1)
            }
        }
        return result
    }

    private func readOperations() throws -> [(Int, RecordOperation)] {
        guard let data = FileManager.default.contents(atPath: changes), let text = String(data: data, encoding: .utf8) else {
            Terminal.writeError("error: \(changes): cannot read file")
            throw ExitCode(2)
        }
        var operations: [(Int, RecordOperation)] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            guard !line.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\r" }) else { continue }
            do {
                operations.append((index + 1, try RecordOperation(json: JSON.parse(String(line)))))
            } catch let error as JSONError {
                Terminal.writeError("error: \(changes):\(index + 1): \(error.message) (column \(error.column))")
                throw ExitCode(2)
            } catch let error as RecordDecodingError {
                Terminal.writeError("error: \(changes):\(index + 1): \(error.message)")
                throw ExitCode(2)
            }
        }
        return operations
    }

    private func readJSON(_ path: String) throws -> JSON {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            Terminal.writeError("error: \(path): cannot read file")
            throw ExitCode(2)
        }
        do {
            return try JSON.parse(text)
        } catch {
            Terminal.writeError("error: \(path):\(error.line): \(error.message) (column \(error.column))")
            throw ExitCode(2)
        }
    }
}
