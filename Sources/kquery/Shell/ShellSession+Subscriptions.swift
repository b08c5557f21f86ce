import KQuery
import KQueryStore

/// `.database`, `.subscribe`, `.subscriptions`, `.unsubscribe`, `.save` and `.delete`: the session's
/// subscriptions and the record changes that fire them.
extension ShellSession {
    /// The push context of the session: a fixed container, the development environment, the current database.
    var pushContext: PushContext {
        PushContext(containerIdentifier: "iCloud.kquery.shell", environment: .development, database: database)
    }

    func setDatabase(_ argument: String) -> ShellReply {
        if argument.isEmpty { return ShellReply(output: database.name + "\n") }
        guard let scope = DatabaseScope(name: argument.lowercased()) else { return .failure("usage: .database public|private|shared") }
        guard scope != database else { return ShellReply() }
        if container != nil { return switchContainerDatabase(to: scope) }
        let cleared = subscriptions.count
        database = scope
        subscriptions = SubscriptionSet(database: scope)
        subscriptionPredicates = [:]
        guard cleared > 0 else { return ShellReply() }
        return ShellReply(error: "note: subscriptions are kept per database: removed \(cleared) subscription\(cleared == 1 ? "" : "s")\n")
    }

    // MARK: - Subscriptions

    func subscribe(_ argument: String) -> ShellReply {
        let parsed: SubscribeLine
        do {
            parsed = try SubscribeLine(argument)
        } catch {
            return .failure(error.message)
        }
        let subscription: Subscription
        var predicateText: String?
        switch parsed.target {
        case .query(let recordType, let text):
            let validated: ValidatedPredicate
            do {
                validated = try ValidatedPredicate(text, variables: variables.mapValues(\.constant), profile: .cloudkit)
            } catch {
                return ShellReply(error: error.rendered(in: text, color: color) + "\n", failed: true)
            }
            predicateText = validated.predicate.canonicalText
            var options = parsed.fires ?? .default
            if parsed.once { options.insert(.firesOnce) }
            subscription = Subscription(
                subscriptionID: parsed.id, kind: .query(recordType: recordType, condition: validated.condition, zoneID: nil),
                options: options, notificationInfo: NotificationInfo(alertBody: parsed.alert))
        case .zone(let zoneName):
            subscription = Subscription(subscriptionID: parsed.id, kind: .recordZone(zoneID: ZoneID(zoneName: zoneName), recordType: nil),
                                        notificationInfo: NotificationInfo(alertBody: parsed.alert))
        case .database:
            subscription = Subscription(subscriptionID: parsed.id, kind: .database(recordType: nil),
                                        notificationInfo: NotificationInfo(alertBody: parsed.alert))
        }
        if container != nil { return saveToContainer(subscription) }
        do {
            try subscriptions.save(subscription)
        } catch {
            return .failure(error.message)
        }
        subscriptionPredicates[parsed.id] = predicateText
        return ShellReply()
    }

    func listSubscriptions(_ argument: String) -> ShellReply {
        guard argument.isEmpty else { return .failure("usage: .subscriptions") }
        let all: [Subscription]
        if container != nil {
            switch currentDatabase() {
            case .success(let opened):
                do { all = try opened.subscriptions() } catch { return .failure("\(error.code.rawValue): \(error.reason)") }
            case .failure(let error): return .failure(error.message)
            }
        } else {
            all = subscriptions.subscriptions
        }
        if all.isEmpty { return ShellReply(output: "no subscriptions in the \(database.name) database (try .subscribe)\n") }
        var rows: [[String]] = [["id", "kind", "recordType", "predicate", "options"]]
        for subscription in all {
            let kind: String
            let target: String
            let predicate: String
            switch subscription.kind {
            case .query(let recordType, _, _):
                kind = "query"
                target = recordType
                predicate = subscriptionPredicates[subscription.subscriptionID] ?? subscription.predicateText
            case .recordZone(let zoneID, let recordType):
                kind = "zone " + zoneID.zoneName
                target = recordType ?? "-"
                predicate = "-"
            case .database(let recordType):
                kind = "database"
                target = recordType ?? "-"
                predicate = "-"
            }
            rows.append([subscription.subscriptionID, kind, target, predicate, Self.optionsText(subscription)])
        }
        var widths = [Int](repeating: 0, count: 5)
        for row in rows {
            for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
        }
        var out = ""
        for (number, row) in rows.enumerated() {
            var cells: [String] = []
            for (column, cell) in row.enumerated() { cells.append(column == row.count - 1 ? cell : cell.padded(to: widths[column])) }
            out += cells.joined(separator: "  ").trimmingWhitespace + "\n"
            if number == 0 { out += widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n" }
        }
        out += "(\(all.count) subscription\(all.count == 1 ? "" : "s"))\n"
        return ShellReply(output: out)
    }

    /// `fires create,update,delete once alert "text"`.
    static func optionsText(_ subscription: Subscription) -> String {
        var fires: [String] = []
        if subscription.options.contains(.firesOnRecordCreation) { fires.append("create") }
        if subscription.options.contains(.firesOnRecordUpdate) { fires.append("update") }
        if subscription.options.contains(.firesOnRecordDeletion) { fires.append("delete") }
        var text = "fires " + fires.joined(separator: ",")
        if subscription.options.contains(.firesOnce) { text += " once" }
        if let alert = subscription.notificationInfo.alertBody { text += " alert " + JSON.string(alert).serialized }
        return text
    }

    func unsubscribe(_ argument: String) -> ShellReply {
        let id = argument.unquoted
        guard !id.isEmpty else { return .failure("usage: .unsubscribe ID") }
        if container != nil { return deleteFromContainer(id) }
        guard subscriptions.remove(id: id) else { return .failure("no subscription '\(id)' in the \(database.name) database") }
        subscriptionPredicates[id] = nil
        return ShellReply()
    }

    // MARK: - Record changes

    func save(_ argument: String) -> ShellReply {
        guard !argument.isEmpty else { return .failure("usage: .save JSON") }
        let operation: RecordOperation
        do {
            let json = placedInCurrentZone(try JSON.parse(argument))
            if json["operationType"] != nil {
                operation = try RecordOperation(json: json)
            } else {
                operation = RecordOperation(kind: .forceReplace, record: try Record(json: json))
            }
        } catch let error as JSONError {
            return .failure(".save: invalid JSON: \(error.message) (column \(error.column))")
        } catch let error as RecordDecodingError {
            return .failure(".save: \(error.message)")
        } catch {
            return .failure(".save: \(error)")
        }
        return perform(operation)
    }

    func delete(_ argument: String) -> ShellReply {
        let words = QueryLine.topLevelWords(argument).map { argument[$0.range].unquoted }
        guard let name = words.first, !name.isEmpty, words.count <= 2 else { return .failure("usage: .delete NAME [ZONE]") }
        let zoneID = words.count == 2 ? ZoneID(zoneName: words[1]) : zone
        let record = Record(recordType: "_deleted", recordID: RecordID(recordName: name, zoneID: zoneID))
        return perform(RecordOperation(kind: .forceDelete, record: record))
    }

    /// Applies `operation` to the change log and the session's records, then prints each push it fires
    /// (one JSON envelope a line) and the count.
    private func perform(_ operation: RecordOperation) -> ShellReply {
        if container != nil { return performInContainer(operation) }
        let change: RecordChange
        do {
            change = try store.save(operation)
        } catch {
            return .failure(error.message)
        }
        let firings = subscriptions.apply(change, now: now)
        let context = pushContext
        var out = ""
        for firing in firings {
            out += firing.payload(context: context).envelope.serialized + "\n"
        }
        out += "\(firings.count) push\(firings.count == 1 ? "" : "es")\n"
        return ShellReply(output: out)
    }
}

/// The argument of `.subscribe`:
///
///     ID TYPE [WHERE PREDICATE] [FIRES create,update,delete] [ONCE] [ALERT "text"]
///     ID ZONE ZONENAME [ALERT "text"]
///     ID DATABASE [ALERT "text"]
///
/// Words are split outside quotes and brackets; the trailing clauses (in any order) are read from the
/// end, so a predicate may mention fields called `once` or `fires`. `ZONE` and `DATABASE` are
/// keywords (any case) in the second position.
struct SubscribeLine {
    enum Target: Equatable {
        case query(recordType: String, predicate: String)
        case zone(String)
        case database
    }

    var id: String
    var target: Target
    var fires: SubscriptionOptions?
    var once = false
    var alert: String?

    static let usage = #"usage: .subscribe ID TYPE [WHERE PREDICATE] [FIRES create,update,delete] [ONCE] [ALERT "text"] | ID ZONE ZONENAME | ID DATABASE"#

    init(_ line: String) throws(ShellError) {
        let words = QueryLine.topLevelWords(line)
        guard words.count >= 2 else { throw ShellError(Self.usage) }
        id = line[words[0].range].unquoted
        guard !id.isEmpty else { throw ShellError(Self.usage) }
        // Trailing clauses, from the end.
        var end = words.count
        var seen = Set<String>()
        while end > 2 {
            let last = words[end - 1]
            if last.upper == "ONCE", seen.insert("ONCE").inserted {
                once = true
                end -= 1
                continue
            }
            if end - 2 >= 2, words[end - 2].upper == "ALERT", let text = Self.quotedText(String(line[last.range])), seen.insert("ALERT").inserted {
                alert = text
                end -= 2
                continue
            }
            // FIRES create, update: the run of event words before the end, preceded by FIRES.
            var start = end
            while start > 2, Self.isEventList(String(line[words[start - 1].range])) { start -= 1 }
            if start < end, start - 1 >= 2, words[start - 1].upper == "FIRES", seen.insert("FIRES").inserted {
                let list = words[start..<end].map { String(line[$0.range]) }.joined(separator: ",")
                fires = try Self.events(list)
                end = start - 1
                continue
            }
            break
        }
        let second = words[1]
        switch second.upper {
        case "ZONE":
            guard end == 3 else { throw ShellError("usage: .subscribe ID ZONE ZONENAME [ALERT \"text\"]") }
            let zoneName = line[words[2].range].unquoted
            guard !zoneName.isEmpty else { throw ShellError("usage: .subscribe ID ZONE ZONENAME [ALERT \"text\"]") }
            target = .zone(zoneName)
        case "DATABASE":
            guard end == 2 else { throw ShellError("usage: .subscribe ID DATABASE [ALERT \"text\"]") }
            target = .database
        default:
            let recordType = String(line[second.range])
            guard FieldKey.isValidName(recordType) else { throw ShellError("invalid record type '\(recordType)' (\(Self.usage))") }
            if end == 2 {
                target = .query(recordType: recordType, predicate: "TRUEPREDICATE")
            } else if ["FIRES", "ONCE", "ALERT"].contains(words[2].upper) {
                throw ShellError("malformed \(words[2].upper) clause: expected FIRES create,update,delete, ONCE or ALERT \"text\"")
            } else if words[2].upper == "WHERE" {
                let upper = end < words.count ? words[end].range.lowerBound : line.endIndex
                let predicate = String(line[words[2].range.upperBound..<upper]).trimmingWhitespace
                guard !predicate.isEmpty else { throw ShellError("WHERE needs a predicate") }
                target = .query(recordType: recordType, predicate: predicate)
            } else {
                throw ShellError("expected WHERE, FIRES, ONCE or ALERT after the record type '\(recordType)', got '\(line[words[2].range])'")
            }
        }
        if fires != nil || once {
            guard case .query = target else { throw ShellError("FIRES and ONCE apply to query subscriptions only") }
        }
    }

    /// Whether `word` is made only of event names and commas (`create,`, `update`, `,delete`).
    static func isEventList(_ word: String) -> Bool {
        let parts = word.split(separator: ",")
        return !parts.isEmpty && parts.allSatisfy { ["create", "update", "delete"].contains($0.lowercased()) }
    }

    static func events(_ list: String) throws(ShellError) -> SubscriptionOptions {
        var options: SubscriptionOptions = []
        for part in list.split(separator: ",") {
            switch part.lowercased() {
            case "create": options.insert(.firesOnRecordCreation)
            case "update": options.insert(.firesOnRecordUpdate)
            case "delete": options.insert(.firesOnRecordDeletion)
            default: throw ShellError("FIRES takes create, update and delete, got '\(part)'")
            }
        }
        return options
    }

    /// The text of a single- or double-quoted word, with backslash escapes undone; nil if not quoted.
    static func quotedText(_ word: String) -> String? {
        guard word.count >= 2, let quote = word.first, quote == "'" || quote == "\"", word.last == quote else { return nil }
        var text = ""
        var escaped = false
        for character in word.dropFirst().dropLast() {
            if escaped {
                switch character {
                case "n": text.append("\n")
                case "t": text.append("\t")
                default: text.append(character)
                }
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == quote {
                return nil
            } else {
                text.append(character)
            }
        }
        return escaped ? nil : text
    }
}
