import KQuery
import KQueryContainer

/// The shell over a container file: `.open` of a container file (or a new file), `.user`,
/// `.database`, `.zones`, `.zone`, `.changes`, and the container's side of `.load`, `.save`,
/// `.delete`, `.subscribe`, `.subscriptions`, `.unsubscribe` and queries. Records, zones,
/// subscriptions and the pushes they queue are kept in the file, per database and user.
extension ShellSession {
    static let containerIdentifier = "iCloud.kquery.shell"

    func openContainer(_ path: String) -> ShellReply {
        let opened: Container
        do {
            opened = try Container(containerIdentifier: Self.containerIdentifier, path: path)
        } catch {
            return .failure(error.reason)
        }
        container = opened
        store = Self.memoryStore()
        subscriptions = SubscriptionSet(database: database)
        subscriptionPredicates = [:]
        zone = .default
        guard case .success(let current) = currentDatabase() else {
            return ShellReply(output: "opened \(path): a container file; .user NAME reaches a user's \(database.name) database\n")
        }
        let counts = (try? current.recordCounts()) ?? [:]
        let records = counts.values.reduce(0, +)
        let types = counts.count
        return ShellReply(output: "opened \(path): \(records) record\(records == 1 ? "" : "s") (\(types) type\(types == 1 ? "" : "s"))\n")
    }

    /// The database `.database` and `.user` name, in the development environment.
    func currentDatabase() -> Result<ContainerDatabase, ShellError> {
        guard let container else { return .failure(ShellError("open a container file first (.open FILE)")) }
        do {
            return .success(try container.database(database, environment: .development, user: user))
        } catch {
            return .failure(ShellError(database == .public ? error.reason : "\(error.reason) (.user NAME)"))
        }
    }

    /// Runs `body` on the current database; a container error becomes `error: CODE: reason`.
    private func withCurrentDatabase(_ body: (ContainerDatabase) throws(ContainerError) -> ShellReply) -> ShellReply {
        switch currentDatabase() {
        case .failure(let error):
            return .failure(error.message)
        case .success(let opened):
            do {
                return try body(opened)
            } catch {
                return .failure("\(error.code.rawValue): \(error.reason)")
            }
        }
    }

    func setUser(_ argument: String) -> ShellReply {
        guard container != nil else { return .failure("open a container file first (.open FILE)") }
        if argument.isEmpty { return ShellReply(output: (user ?? "none") + "\n") }
        let name = argument.unquoted
        guard !name.isEmpty, !name.contains(where: \.isWhitespace) else { return .failure("usage: .user NAME") }
        user = name
        zone = .default
        // A user's own data is in their private database, as on the command line.
        if database == .public { database = .private }
        return ShellReply(output: "\(name): the \(database.name) database\n")
    }

    func switchContainerDatabase(to scope: DatabaseScope) -> ShellReply {
        database = scope
        zone = .default
        return ShellReply()
    }

    func listZones(_ argument: String) -> ShellReply {
        guard argument.isEmpty else { return .failure("usage: .zones") }
        return withCurrentDatabase { opened throws(ContainerError) in
            let zones = try opened.zones()
            return ShellReply(output: zones.map { ($0.zoneName == zone.zoneName ? "* " : "  ") + $0.zoneName + "\n" }.joined())
        }
    }

    func setZone(_ argument: String) -> ShellReply {
        if argument.isEmpty {
            guard container != nil else { return .failure("open a container file first (.open FILE)") }
            return ShellReply(output: zone.zoneName + "\n")
        }
        let name = argument.unquoted
        guard !name.isEmpty else { return .failure("usage: .zone NAME") }
        let wanted = ZoneID(zoneName: name)
        return withCurrentDatabase { opened throws(ContainerError) in
            var reply = ShellReply()
            if !wanted.isDefaultZone, try opened.zone(wanted) == nil {
                try opened.createZone(wanted)
                reply.output = "created zone \(name)\n"
            }
            zone = wanted
            return reply
        }
    }

    /// `.changes [TOKEN]`: the current zone's record changes (a custom zone), or the database's
    /// zone changes (the default zone), as Web Services JSON, every batch until none is left.
    func changes(_ argument: String) -> ShellReply {
        var token = argument.isEmpty ? nil : SyncToken(text: argument.unquoted)
        return withCurrentDatabase { opened throws(ContainerError) in
            var out = ""
            repeat {
                let json: JSON
                let moreComing: Bool
                if zone.isDefaultZone {
                    let batch = try opened.databaseChanges(since: token)
                    (json, token, moreComing) = (batch.webServicesJSON, batch.syncToken, batch.moreComing)
                } else {
                    let batch = try opened.zoneChanges(zone, since: token)
                    (json, token, moreComing) = (batch.webServicesJSON(), batch.syncToken, batch.moreComing)
                }
                out += json.serialized + "\n"
                if !moreComing { break }
            } while true
            return ShellReply(output: out)
        }
    }

    func loadIntoContainer(_ records: [Record]) -> ShellReply {
        withCurrentDatabase { opened throws(ContainerError) in
            let placed = records.map { record in
                var record = record
                if record.recordID.zoneID.isDefaultZone { record.recordID.zoneID = zone }
                return record
            }
            let failed = try opened.importRecords(placed)
            let types = Set(records.map(\.recordType)).count
            var reply = ShellReply(output: "loaded \(records.count - failed.count) record\(records.count - failed.count == 1 ? "" : "s") (\(types) type\(types == 1 ? "" : "s")) into \(opened.key)\n")
            for case .failed(let id, let error) in failed {
                reply.error += "error: record '\(id.recordName)': \(error.code.rawValue): \(error.reason)\n"
                reply.failed = true
            }
            return reply
        }
    }

    /// A record JSON (or an operation's) with the current zone, when it names none.
    func placedInCurrentZone(_ json: JSON) -> JSON {
        guard container != nil, !zone.isDefaultZone, case .object(var members) = json else { return json }
        if let position = members.firstIndex(where: { $0.0 == "record" }) {
            members[position].1 = placedInCurrentZone(members[position].1)
        } else if !members.contains(where: { $0.0 == "zoneID" }) {
            members.append(("zoneID", zone.json))
        }
        return .object(members)
    }

    /// A save or delete through the container: its result, then each push it queued.
    func performInContainer(_ operation: RecordOperation) -> ShellReply {
        withCurrentDatabase { opened throws(ContainerError) in
            let result = try opened.modify(try opened.uploadingFiles([operation]))
            if let error = result.results.first?.error { throw error }
            var out = ""
            for notification in result.notifications {
                let envelope = JSON.object([
                    ("payload", notification.payload), ("priority", .int(Int64(notification.priority))), ("pushType", .string(notification.pushType)),
                ])
                out += envelope.serialized + "\n"
            }
            let count = result.notifications.count
            out += "\(count) push\(count == 1 ? "" : "es")\n"
            return ShellReply(output: out)
        }
    }

    func saveToContainer(_ subscription: Subscription) -> ShellReply {
        withCurrentDatabase { opened throws(ContainerError) in
            try opened.saveSubscription(subscription)
            return ShellReply()
        }
    }

    func deleteFromContainer(_ id: String) -> ShellReply {
        withCurrentDatabase { opened throws(ContainerError) in
            try opened.deleteSubscription(id)
            return ShellReply()
        }
    }

    /// A query line on the current database and zone, page by page up to `limit`.
    func containerQuery(_ query: KQuery.Query, limit: Int?) -> ShellReply {
        withCurrentDatabase { opened throws(ContainerError) in
            var query = query
            query.zoneID = zone
            var records: [Record] = []
            var cursor: QueryCursor?
            repeat {
                query.resultsLimit = min(200, (limit ?? Int.max) - records.count)
                let page = try opened.query(query, cursor: cursor, now: now)
                records += page.records
                cursor = page.cursor
            } while cursor != nil && records.count < (limit ?? Int.max)
            return ShellReply(output: RecordPrinter(format: mode.printerFormat, color: color).render(records))
        }
    }
}

extension Subscription {
    /// A query subscription's predicate as text, `-` for the other kinds.
    var predicateText: String {
        if case .query(_, let condition, _) = kind { return condition.description }
        return "-"
    }
}
