import KQuery
import KQueryContainer
import KQueryStore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What one command produced: text for stdout and stderr, whether it failed, whether to stop.
struct ShellReply: Equatable {
    var output = ""
    var error = ""
    var failed = false
    var stop = false

    static func failure(_ message: String) -> ShellReply {
        ShellReply(error: "error: " + message + "\n", failed: true)
    }
}

/// The shell's state and command logic, free of terminal I/O: feed it a complete command
/// (`execute`), get text back. `LineAssembler` decides when a command is complete.
final class ShellSession {
    enum Mode: String, CaseIterable {
        case table, json, names, count

        var printerFormat: RecordPrinter.Format {
            switch self {
            case .table: .table
            case .json: .ndjson
            case .names: .names
            case .count: .count
            }
        }
    }

    /// Whether output may carry ANSI colour (a terminal without NO_COLOR).
    var color: Bool
    /// Where records live: in memory until `.open` (or `--db`) opens a database file. Indexes are
    /// built the first time a query can use one. `.load`, `.save` and `.delete` go through it, with
    /// CloudKit's save rules.
    var store = ShellSession.memoryStore()
    private(set) var profile: PredicateProfile = .cloudkit
    private(set) var variables: [String: (constant: Constant, json: String)] = [:]
    private(set) var mode: Mode = .table
    private(set) var defaultSort: [SortDescriptor] = []
    private var defaultSortText = ""
    private(set) var defaultLimit: Int?
    private(set) var timer = false
    /// The time `now()` reads; nil for the clock.
    var fixedNow: Int64?
    /// The database `.subscribe`, `.save` and `.delete` work in (public by default).
    var database: DatabaseScope = .public
    /// The subscriptions of `database`; switching database clears them.
    var subscriptions = SubscriptionSet(database: .public)
    /// The canonical predicate text of each query subscription, by ID (for `.subscriptions`).
    var subscriptionPredicates: [String: String] = [:]
    /// The container file `.open` opened, if it opened one (not a database file): records,
    /// zones, subscriptions and pushes then live in it, per database and user.
    var container: Container?
    /// The user whose private and shared databases `.database` reaches (`.user NAME`).
    var user: String?
    /// Where saves and queries go in a container file (`.zone NAME`).
    var zone: ZoneID = .default

    init(color: Bool = false) {
        self.color = color
    }

    static func memoryStore() -> Database {
        let store = Database(indexPolicy: .automatic)
        store.createsMissingZones = true
        return store
    }

    // MARK: - Commands

    struct CommandInfo {
        var name: String
        var arguments: String
        var summary: String
    }

    static let commands: [CommandInfo] = [
        CommandInfo(name: ".help", arguments: "", summary: "list the commands"),
        CommandInfo(name: ".load", arguments: "FILE", summary: "add the records of an NDJSON or JSON file to the session"),
        CommandInfo(name: ".types", arguments: "", summary: "record types loaded, with counts"),
        CommandInfo(name: ".fields", arguments: "TYPE", summary: "field names of TYPE with the types seen in loaded records"),
        CommandInfo(name: ".profile", arguments: "cloudkit|extended", summary: "which predicate rules apply (alone: show it)"),
        CommandInfo(name: ".set", arguments: "NAME JSON", summary: "bind $NAME to a field JSON value (alone: list bindings)"),
        CommandInfo(name: ".unset", arguments: "NAME", summary: "remove the binding of $NAME"),
        CommandInfo(name: ".mode", arguments: "table|json|names|count", summary: "how results print (alone: show it)"),
        CommandInfo(name: ".sort", arguments: "FIELD [ASC|DESC], ...", summary: "default sort for queries (alone: clear it)"),
        CommandInfo(name: ".limit", arguments: "N", summary: "default result limit (alone: clear it)"),
        CommandInfo(name: ".timer", arguments: "on|off", summary: "print the run time after each query"),
        CommandInfo(name: ".explain", arguments: "[TYPE WHERE] PREDICATE", summary: "canonical form, Web Services filterBy and plan"),
        CommandInfo(name: ".quit", arguments: "", summary: "leave the shell (also .exit, Ctrl-D)"),
        CommandInfo(name: ".exit", arguments: "", summary: "leave the shell"),
        CommandInfo(name: ".open", arguments: "FILE", summary: "open a database file, or open (or create) a container file; later .load, .save, .delete and .subscribe write to it"),
        CommandInfo(name: ".schema", arguments: "[FILE | NONE]", summary: "show the schema, declare one from a CloudKit Schema Language file, or drop it"),
        CommandInfo(name: ".database", arguments: "public|private|shared", summary: "the database subscriptions and pushes belong to (alone: show it; switching clears subscriptions)"),
        CommandInfo(name: ".save", arguments: "JSON", summary: "create or replace a record (Web Services JSON or shorthand) and print the pushes it fires"),
        CommandInfo(name: ".delete", arguments: "NAME [ZONE]", summary: "delete a record and print the pushes it fires"),
        CommandInfo(name: ".subscribe", arguments: "ID TYPE [WHERE PREDICATE] [FIRES create,update,delete] [ONCE] [ALERT \"text\"]",
                    summary: "save a query subscription (cloudkit profile)"),
        CommandInfo(name: ".subscribe", arguments: "ID ZONE ZONENAME [ALERT \"text\"]", summary: "save a record zone subscription (private database)"),
        CommandInfo(name: ".subscribe", arguments: "ID DATABASE [ALERT \"text\"]", summary: "save a database subscription (private or shared database)"),
        CommandInfo(name: ".subscriptions", arguments: "", summary: "list the subscriptions of the current database"),
        CommandInfo(name: ".unsubscribe", arguments: "ID", summary: "remove a subscription"),
        CommandInfo(name: ".user", arguments: "NAME", summary: "in a container file: the user whose private and shared databases you reach (alone: show it)"),
        CommandInfo(name: ".zones", arguments: "", summary: "in a container file: the current database's zones"),
        CommandInfo(name: ".zone", arguments: "NAME", summary: "in a container file: where saves and queries go (created if missing; alone: show it)"),
        CommandInfo(name: ".changes", arguments: "[TOKEN]", summary: "in a container file: the current zone's record changes, or the database's zone changes, since TOKEN"),
    ]

    /// Runs one complete command: a dot-command, a query line, a blank line or a `--` comment.
    func execute(_ input: String) -> ShellReply {
        let line = input.trimmingWhitespace
        if line.isEmpty || line.hasPrefix("--") { return ShellReply() }
        if line.hasPrefix(".") { return dotCommand(line) }
        return queryLine(line)
    }

    private func dotCommand(_ line: String) -> ShellReply {
        let name: String
        let argument: String
        if let space = line.firstIndex(where: { $0 == " " || $0 == "\t" || $0 == "\n" }) {
            name = String(line[..<space])
            argument = String(line[space...]).trimmingWhitespace
        } else {
            name = line
            argument = ""
        }
        switch name {
        case ".help": return help()
        case ".quit", ".exit": return ShellReply(stop: true)
        case ".load": return load(argument)
        case ".open": return open(argument)
        case ".schema": return schema(argument)
        case ".types": return types()
        case ".fields": return fields(argument)
        case ".profile": return setProfile(argument)
        case ".set": return set(argument)
        case ".unset": return unset(argument)
        case ".mode": return setMode(argument)
        case ".sort": return setSort(argument)
        case ".limit": return setLimit(argument)
        case ".timer": return setTimer(argument)
        case ".explain": return explain(argument)
        case ".database": return setDatabase(argument)
        case ".save": return save(argument)
        case ".delete": return delete(argument)
        case ".subscribe": return subscribe(argument)
        case ".subscriptions": return listSubscriptions(argument)
        case ".unsubscribe": return unsubscribe(argument)
        case ".user": return setUser(argument)
        case ".zones": return listZones(argument)
        case ".zone": return setZone(argument)
        case ".changes": return changes(argument)
        default:
            return .failure("unknown command '\(name)' (try .help)")
        }
    }

    private func help() -> ShellReply {
        // Usages longer than this go on a line of their own, with the summary indented below.
        let width = min(Self.commands.map { ($0.name + " " + $0.arguments).count }.max() ?? 0, 40)
        var out = ""
        for info in Self.commands {
            let usage = info.arguments.isEmpty ? info.name : info.name + " " + info.arguments
            let summary = info.summary
            if usage.count > width {
                out += usage + "\n" + String(repeating: " ", count: width + 2) + summary + "\n"
            } else {
                out += usage.padded(to: width) + "  " + summary + "\n"
            }
        }
        out += "TYPE [WHERE PREDICATE] [SORT BY FIELD [ASC|DESC], ...] [LIMIT N]".padded(to: width) + "  run a query\n"
        return ShellReply(output: out)
    }

    private func load(_ argument: String) -> ShellReply {
        let path = Self.expandingHome(argument.unquoted)
        guard !path.isEmpty else { return .failure("usage: .load FILE") }
        let loaded: [Record]
        do {
            loaded = try RecordFile.load(path: path)
        } catch {
            return .failure("\(error)")
        }
        if container != nil { return loadIntoContainer(loaded) }
        let replaced = Set(loaded.map(\.recordID)).filter { store.record($0) != nil }.count
        do {
            try store.importRecords(loaded)
        } catch {
            return .failure("\(path): \(error.message)\(error.operationIndex.map { " (record \($0 + 1))" } ?? ""); nothing was loaded")
        }
        let typeCount = Set(loaded.map(\.recordType)).count
        var message = "loaded \(loaded.count) record\(loaded.count == 1 ? "" : "s") (\(typeCount) type\(typeCount == 1 ? "" : "s"))"
        if replaced > 0 { message += ", \(replaced) replaced" }
        if let path = store.path { message += " into \(path)" }
        return ShellReply(output: message + "\n")
    }

    private static func expandingHome(_ path: String) -> String {
        if path.hasPrefix("~/"), let home = ProcessInfo.processInfo.environment["HOME"] { return home + path.dropFirst() }
        return path
    }

    /// Opens (or creates) a database file as the session's store.
    func open(_ argument: String) -> ShellReply {
        let path = Self.expandingHome(argument.unquoted)
        guard !path.isEmpty else { return .failure("usage: .open FILE") }
        if Container.isContainerFile(atPath: path) || !FileManager.default.fileExists(atPath: path) {
            return openContainer(path)
        }
        do {
            let opened = try Database(path: path, indexPolicy: .automatic)
            opened.createsMissingZones = true
            store = opened
            container = nil
        } catch {
            return .failure(error.message)
        }
        let types = store.recordTypeNames.count
        var message = "opened \(path): \(store.recordCount) record\(store.recordCount == 1 ? "" : "s") (\(types) type\(types == 1 ? "" : "s"))"
        if store.schema != nil { message += ", with a schema" }
        return ShellReply(output: message + "\n")
    }

    private func schema(_ argument: String) -> ShellReply {
        let path = Self.expandingHome(argument.unquoted)
        if path.isEmpty {
            guard let schema = store.schema else { return ShellReply(output: "no schema: every record and query is allowed\n") }
            return ShellReply(output: schema.text)
        }
        var declared: Schema?
        if path.uppercased() != "NONE" {
            do {
                declared = try Schema(contentsOfFile: path)
            } catch {
                return .failure(error.description)
            }
        }
        do {
            try store.setSchema(declared)
        } catch {
            return .failure(error.message)
        }
        return ShellReply(output: declared == nil ? "schema dropped\n" : "schema declared: \(declared?.recordTypes.count ?? 0) record types\n")
    }

    /// Record types with records, sorted, with counts.
    var typeCounts: [(type: String, count: Int)] {
        store.recordTypeNames.map { ($0, store.records(ofType: $0).count) }
    }

    private func types() -> ShellReply {
        let counts = typeCounts
        if counts.isEmpty { return ShellReply(output: "no records loaded (try .load FILE)\n") }
        let width = counts.map(\.type.count).max() ?? 0
        return ShellReply(output: counts.map { $0.type.padded(to: width) + "  \($0.count)\n" }.joined())
    }

    /// Field names of `type` (all types when nil), sorted, with the Web Services types seen.
    func observedFields(of type: String?) -> [(name: String, types: [String])] {
        var seen: [String: [String]] = [:]
        for recordType in type.map({ [$0] }) ?? store.recordTypeNames {
            for record in store.records(ofType: recordType) {
                for (key, value) in record.fields {
                    let typeName = value.typeName
                    if !(seen[key.name]?.contains(typeName) ?? false) { seen[key.name, default: []].append(typeName) }
                }
            }
        }
        return seen.keys.sorted().map { ($0, seen[$0] ?? []) }
    }

    private func fields(_ argument: String) -> ShellReply {
        guard !argument.isEmpty, !argument.contains(" ") else { return .failure("usage: .fields TYPE") }
        if let declared = store.schema?[argument] {
            let width = declared.fields.map(\.field.name.count).max() ?? 0
            return ShellReply(output: declared.fields.map { field in
                let marks = FieldSchema.Indexes.keywords.filter { field.indexes.contains($0.index) }.map(\.keyword)
                return field.field.name.padded(to: width) + "  " + ([field.type.description] + marks).joined(separator: " ") + "\n"
            }.joined())
        }
        guard !store.records(ofType: argument).isEmpty else {
            return .failure("no records of type '\(argument)' are loaded")
        }
        let fields = observedFields(of: argument)
        let width = fields.map(\.name.count).max() ?? 0
        return ShellReply(output: fields.map { $0.name.padded(to: width) + "  " + $0.types.joined(separator: ", ") + "\n" }.joined())
    }

    private func setProfile(_ argument: String) -> ShellReply {
        if argument.isEmpty { return ShellReply(output: profile.rawValue + "\n") }
        guard let profile = PredicateProfile(rawValue: argument.lowercased()) else {
            return .failure("usage: .profile cloudkit|extended")
        }
        self.profile = profile
        return ShellReply()
    }

    private func set(_ argument: String) -> ShellReply {
        if argument.isEmpty {
            return ShellReply(output: variables.keys.sorted().map { "$\($0) = \(variables[$0]?.json ?? "")\n" }.joined())
        }
        guard let space = argument.firstIndex(where: { $0 == " " || $0 == "\t" || $0 == "\n" }) else {
            return .failure("usage: .set NAME JSON")
        }
        var name = String(argument[..<space])
        if name.hasPrefix("$") { name.removeFirst() }
        guard FieldKey.isValidName(name) else { return .failure("invalid variable name '\(name)'") }
        let text = String(argument[space...]).trimmingWhitespace
        do {
            let json = try JSON.parse(text)
            variables[name] = (try Constant(json: json), json.serialized)
        } catch let error as JSONError {
            return .failure(".set \(name): invalid JSON: \(error)")
        } catch {
            return .failure(".set \(name): \(error)")
        }
        return ShellReply()
    }

    private func unset(_ argument: String) -> ShellReply {
        var name = argument
        if name.hasPrefix("$") { name.removeFirst() }
        guard !name.isEmpty else { return .failure("usage: .unset NAME") }
        guard variables.removeValue(forKey: name) != nil else { return .failure("$\(name) is not set") }
        return ShellReply()
    }

    private func setMode(_ argument: String) -> ShellReply {
        if argument.isEmpty { return ShellReply(output: mode.rawValue + "\n") }
        guard let mode = Mode(rawValue: argument.lowercased()) else { return .failure("usage: .mode table|json|names|count") }
        self.mode = mode
        return ShellReply()
    }

    private func setSort(_ argument: String) -> ShellReply {
        if argument.isEmpty {
            defaultSort = []
            defaultSortText = ""
            return ShellReply()
        }
        do {
            defaultSort = try Self.sortDescriptors(argument)
            defaultSortText = argument
        } catch {
            return .failure(error.message)
        }
        return ShellReply()
    }

    private func setLimit(_ argument: String) -> ShellReply {
        if argument.isEmpty {
            defaultLimit = nil
            return ShellReply()
        }
        guard let limit = Int(argument), limit >= 1 else { return .failure("usage: .limit N (N at least 1)") }
        defaultLimit = limit
        return ShellReply()
    }

    private func setTimer(_ argument: String) -> ShellReply {
        switch argument.lowercased() {
        case "on": timer = true
        case "off": timer = false
        case "": return ShellReply(output: timer ? "on\n" : "off\n")
        default: return .failure("usage: .timer on|off")
        }
        return ShellReply()
    }

    // MARK: - Queries

    var now: Int64 {
        fixedNow ?? Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }

    private func validate(_ text: String) -> Result<ValidatedPredicate, ShellError> {
        do {
            let bound = variables.mapValues(\.constant)
            return .success(try ValidatedPredicate(text, variables: bound, profile: profile))
        } catch {
            return .failure(ShellError(error.rendered(in: text, color: color)))
        }
    }

    private func queryLine(_ line: String) -> ShellReply {
        let parsed: QueryLine
        do {
            parsed = try QueryLine(line)
        } catch {
            return .failure(error.message)
        }
        let predicate: ValidatedPredicate
        switch validate(parsed.predicate) {
        case .success(let validated): predicate = validated
        case .failure(let error): return ShellReply(error: error.message + "\n", failed: true)
        }
        if let error = schemaError(predicate, text: parsed.predicate, recordType: parsed.recordType, sort: parsed.sort ?? defaultSort) {
            return ShellReply(error: error + "\n", failed: true)
        }
        let wanted = parsed.limit ?? defaultLimit
        var query = KQuery.Query(recordType: parsed.recordType, predicate: predicate, sortDescriptors: parsed.sort ?? defaultSort)
        if container != nil { return containerQuery(query, limit: wanted) }
        let clock = ContinuousClock()
        let start = clock.now
        var records: [Record] = []
        var cursor: QueryCursor?
        // Pages of at most 200 (as from CloudKit), until the limit or the end.
        repeat {
            query.resultsLimit = min(Database.maximumResultsLimit, (wanted ?? Int.max) - records.count)
            do {
                let page = try store.perform(query, cursor: cursor, now: now)
                records += page.records
                cursor = page.cursor
            } catch {
                return .failure(error.message)
            }
        } while cursor != nil && records.count < (wanted ?? Int.max)
        let elapsed = clock.now - start
        var reply = ShellReply(output: RecordPrinter(format: mode.printerFormat, color: color).render(records))
        if timer { reply.output += "Run Time: real \(Self.seconds(elapsed))\n" }
        if store.recordCount > 0, store.records(ofType: parsed.recordType).isEmpty {
            reply.error = "note: no records of type '\(parsed.recordType)' are loaded\n"
        }
        return reply
    }

    /// The schema's objection to a query (rendered with a caret when it is about the predicate).
    private func schemaError(_ predicate: ValidatedPredicate, text: String, recordType: String, sort: [SortDescriptor]) -> String? {
        guard let schema = store.schema else { return nil }
        do {
            try schema.check(predicate, recordType: recordType)
        } catch {
            return error.rendered(in: text, color: color)
        }
        do {
            try schema.check(sortDescriptors: sort, recordType: recordType)
        } catch {
            return "error: SORT BY: \(error.message)"
        }
        return nil
    }

    /// `0.001234`: seconds with six decimals.
    static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let micros = max(0, seconds) * 1_000_000 + max(0, attoseconds) / 1_000_000_000_000
        let fraction = String(micros % 1_000_000)
        return "\(micros / 1_000_000)." + String(repeating: "0", count: 6 - fraction.count) + fraction
    }

    private func explain(_ argument: String) -> ShellReply {
        guard !argument.isEmpty else { return .failure("usage: .explain [TYPE WHERE] PREDICATE") }
        var recordType: String?
        var text = argument
        var sort: [SortDescriptor] = defaultSort
        if let parsed = try? QueryLine(argument), parsed.hasWhere || !store.records(ofType: parsed.recordType).isEmpty {
            recordType = parsed.recordType
            text = parsed.predicate
            sort = parsed.sort ?? defaultSort
        }
        let predicate: ValidatedPredicate
        switch validate(text) {
        case .success(let validated): predicate = validated
        case .failure(let error): return ShellReply(error: error.message + "\n", failed: true)
        }
        var out = "predicate: \(predicate.predicate.canonicalText)\n"
        do {
            out += "filterBy:  \(JSON.array(try predicate.condition.webServicesFilters(now: now)).serialized)\n"
        } catch {
            out += "filterBy:  none (\(error.message))\n"
        }
        guard let recordType else {
            out += "plan:      give TYPE WHERE PREDICATE to see the plan\n"
            return ShellReply(output: out)
        }
        if let error = schemaError(predicate, text: text, recordType: recordType, sort: sort) {
            return ShellReply(output: out, error: error + "\n", failed: true)
        }
        do {
            let plan = try store.plan(KQuery.Query(recordType: recordType, predicate: predicate, sortDescriptors: sort), now: now)
            out += "plan:\n" + plan.description.split(separator: "\n").map { "  " + $0 + "\n" }.joined()
        } catch {
            return ShellReply(output: out, error: "error: \(error.message)\n", failed: true)
        }
        return ShellReply(output: out)
    }

    static func sortDescriptors(_ text: String) throws(ShellError) -> [SortDescriptor] {
        var descriptors: [SortDescriptor] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let words = part.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init)
            guard let field = words.first, words.count <= 2 else {
                throw ShellError("sort keys are FIELD [ASC|DESC], ... (got '\(part.trimmingWhitespace)')")
            }
            guard FieldKey.isValidName(field) || ["recordID", "creationDate", "modificationDate"].contains(field) else {
                throw ShellError("invalid sort field '\(field)'")
            }
            var ascending = true
            if words.count == 2 {
                switch words[1].uppercased() {
                case "ASC": ascending = true
                case "DESC": ascending = false
                default: throw ShellError("sort direction must be ASC or DESC, got '\(words[1])'")
                }
            }
            descriptors.append(SortDescriptor(field, ascending: ascending))
        }
        return descriptors
    }
}

struct ShellError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// `TYPE [WHERE PREDICATE] [SORT BY FIELD [ASC|DESC], ...] [LIMIT N]`, split outside quotes and brackets.
struct QueryLine {
    var recordType: String
    var hasWhere: Bool
    var predicate: String
    var sort: [SortDescriptor]?
    var limit: Int?

    init(_ line: String) throws(ShellError) {
        let words = QueryLine.topLevelWords(line)
        guard let first = words.first else { throw ShellError("empty query") }
        recordType = String(line[first.range])
        guard FieldKey.isValidName(recordType) else {
            throw ShellError("expected 'TYPE [WHERE PREDICATE]' or a dot-command, got '\(recordType)' (try .help)")
        }
        var end = line.endIndex
        // LIMIT N at the very end.
        if words.count >= 2, words[words.count - 2].upper == "LIMIT", words[words.count - 2].range.lowerBound > first.range.upperBound {
            let number = String(line[words[words.count - 1].range])
            guard let limit = Int(number), limit >= 1 else { throw ShellError("LIMIT needs a number of at least 1, got '\(number)'") }
            self.limit = limit
            end = words[words.count - 2].range.lowerBound
        }
        // SORT BY ... : the last SORT followed by BY before the end.
        if let sortIndex = words.indices.last(where: { index in
            index + 1 < words.count && index > 0 && words[index].upper == "SORT" && words[index + 1].upper == "BY"
                && words[index + 1].range.upperBound <= end
        }) {
            let sortText = String(line[words[sortIndex + 1].range.upperBound..<end])
            guard !sortText.trimmingWhitespace.isEmpty else { throw ShellError("SORT BY needs FIELD [ASC|DESC], ...") }
            sort = try ShellSession.sortDescriptors(sortText)
            end = words[sortIndex].range.lowerBound
        }
        let rest = line[first.range.upperBound..<end].trimmingWhitespace
        if rest.isEmpty {
            hasWhere = false
            predicate = "TRUEPREDICATE"
        } else if words.count >= 2, words[1].upper == "WHERE" {
            hasWhere = true
            predicate = String(line[words[1].range.upperBound..<end]).trimmingWhitespace
            if predicate.isEmpty { throw ShellError("WHERE needs a predicate") }
        } else {
            throw ShellError("expected WHERE after the record type '\(recordType)'")
        }
    }

    struct Word {
        var range: Range<String.Index>
        var upper: String
    }

    /// Whitespace-separated words outside quotes and brackets (a quoted or bracketed run is part of a word).
    static func topLevelWords(_ line: String) -> [Word] {
        var words: [Word] = []
        var depth = 0
        var quote: Character?
        var escaped = false
        var start: String.Index?
        var index = line.startIndex
        while index < line.endIndex {
            let character = line[index]
            if let open = quote {
                if escaped { escaped = false } else if character == "\\" { escaped = true } else if character == open { quote = nil }
            } else if character == "'" || character == "\"" {
                quote = character
                if start == nil { start = index }
            } else if character == "(" || character == "{" {
                depth += 1
                if start == nil { start = index }
            } else if character == ")" || character == "}" {
                depth = max(0, depth - 1)
                if start == nil { start = index }
            } else if character.isWhitespace, depth == 0 {
                if let begin = start {
                    words.append(Word(range: begin..<index, upper: line[begin..<index].uppercased()))
                    start = nil
                }
            } else if start == nil {
                start = index
            }
            index = line.index(after: index)
        }
        if let begin = start { words.append(Word(range: begin..<line.endIndex, upper: line[begin...].uppercased())) }
        return words
    }
}

/// Joins physical lines into commands: a trailing `\` continues, and so does an unclosed `(`, `{`
/// or quote (for query lines, `.explain` and `.set`).
struct LineAssembler {
    private(set) var pending: String?

    var isContinuing: Bool { pending != nil }

    /// Adds a line; returns the complete command, or nil when more lines are needed.
    mutating func add(_ line: String) -> String? {
        var line = line
        if line.hasSuffix("\r") { line.removeLast() }
        let text = pending.map { $0 + "\n" + line } ?? line
        if line.hasSuffix("\\") {
            pending = String(text.dropLast())
            return nil
        }
        if Self.isOpen(text) {
            pending = text
            return nil
        }
        pending = nil
        return text
    }

    /// Returns what is buffered (at end of input) and clears it.
    mutating func flush() -> String? {
        defer { pending = nil }
        return pending
    }

    mutating func cancel() { pending = nil }

    static func isOpen(_ text: String) -> Bool {
        let trimmed = text.trimmingWhitespace
        if trimmed.hasPrefix("--") { return false }
        if trimmed.hasPrefix(".") && !(trimmed.hasPrefix(".explain") || trimmed.hasPrefix(".set ") || trimmed.hasPrefix(".save ")
            || trimmed.hasPrefix(".subscribe ")) { return false }
        var depth = 0
        var quote: Character?
        var escaped = false
        for character in text {
            if let open = quote {
                if escaped { escaped = false } else if character == "\\" { escaped = true } else if character == open { quote = nil }
            } else if character == "'" || character == "\"" {
                quote = character
            } else if character == "(" || character == "{" || character == "[" {
                depth += 1
            } else if character == ")" || character == "}" || character == "]" {
                depth -= 1
            }
        }
        return quote != nil || depth > 0
    }
}

extension StringProtocol {
    var trimmingWhitespace: String {
        guard let first = firstIndex(where: { !$0.isWhitespace }), let last = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[first...last])
    }

    func padded(to width: Int) -> String {
        count >= width ? String(self) : String(self) + String(repeating: " ", count: width - count)
    }

    /// Without one pair of surrounding quotes.
    var unquoted: String {
        let text = trimmingWhitespace
        if text.count >= 2, let first = text.first, first == "'" || first == "\"", text.last == first {
            return String(text.dropFirst().dropLast())
        }
        return text
    }
}

// MARK: - Completion

extension ShellSession {
    /// What completion needs to know about the session, as a value the line editor can keep.
    var vocabulary: CompletionVocabulary {
        CompletionVocabulary(types: typeCounts.map(\.type), fields: observedFields(of: nil).map(\.name), variables: variables.keys.sorted(),
                             subscriptionIDs: subscriptions.subscriptions.map(\.subscriptionID))
    }
}

struct CompletionVocabulary: Sendable {
    var types: [String] = []
    var fields: [String] = []
    var variables: [String] = []
    var subscriptionIDs: [String] = []

    static let keywords = [
        "WHERE", "SORT", "BY", "LIMIT", "ASC", "DESC",
        "AND", "OR", "NOT", "ANY", "ALL", "NONE", "SOME", "IN", "BETWEEN", "BEGINSWITH", "CONTAINS", "ENDSWITH",
        "LIKE", "MATCHES", "TOKENMATCHES", "TRUEPREDICATE", "FALSEPREDICATE", "SELF", "nil", "TRUE", "FALSE",
        "now()", "date(", "location(", "reference(", "recordID(", "tokenize(", "distanceToLocation:fromLocation:(",
    ]
    static let systemFields = ["recordID", "creationDate", "modificationDate", "creatorUserRecordID", "lastModifiedUserRecordID"]

    /// Candidates for the word `word` being typed, given the text of the line before it.
    /// Returns nil when file names should be completed instead.
    func completions(for word: String, before: String) -> [String]? {
        let previous = before.split(whereSeparator: { $0 == " " || $0 == "\t" })
        let fieldNames = fields
        let candidates: [String]
        if let command = previous.first, command.hasPrefix(".") {
            switch command {
            case ".load", ".open", ".schema": return nil
            case ".fields": candidates = previous.count == 1 ? types : []
            case ".mode": candidates = ShellSession.Mode.allCases.map(\.rawValue)
            case ".profile": candidates = PredicateProfile.allCases.map(\.rawValue)
            case ".timer": candidates = ["on", "off"]
            case ".sort": candidates = fieldNames + Self.systemFields + ["ASC", "DESC"]
            case ".set", ".unset": candidates = variables
            case ".database": candidates = DatabaseScope.allCases.map(\.name)
            case ".unsubscribe": candidates = previous.count == 1 ? subscriptionIDs : []
            case ".subscribe":
                candidates = previous.count == 2 ? types + ["ZONE", "DATABASE"]
                    : previous.count > 2 ? fieldNames + Self.systemFields + Self.keywords + ["FIRES", "ONCE", "ALERT", "create", "update", "delete"] : []
            case ".explain": candidates = (previous.count == 1 ? types : []) + fieldNames + Self.systemFields + Self.keywords
            default: candidates = []
            }
        } else if previous.isEmpty {
            candidates = word.hasPrefix(".") ? ShellSession.commands.map(\.name) : types
        } else if word.hasPrefix("$") {
            candidates = variables.map { "$" + $0 }
        } else if before.hasSuffix("$") {
            candidates = variables
        } else {
            candidates = fieldNames + Self.systemFields + Self.keywords
        }
        let exact = candidates.filter { $0.hasPrefix(word) }
        let matches = exact.isEmpty ? candidates.filter { $0.lowercased().hasPrefix(word.lowercased()) } : exact
        var seen = Set<String>()
        return matches.filter { seen.insert($0).inserted }
    }
}
