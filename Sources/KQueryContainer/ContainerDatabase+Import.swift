import KQuery
import KQueryStore

extension ContainerDatabase {
    /// Saves records as `forceReplace` operations, 200 a transaction (Web Services' limit), creating
    /// the custom zones they name first: for loading a records file into a container. Each record
    /// gets a new change tag, enters its zone's change history and fires subscriptions, as any save.
    /// Asset values `{"$file": "PATH"}` are uploaded from those files first.
    /// `progress` is called with the number of records done. Returns the operations that failed.
    public func importRecords(_ records: [Record], progress: (Int) -> Void = { _ in }) throws(ContainerError) -> [RecordResult] {
        let zones = Set(records.map(\.recordID.zoneID)).filter { !$0.isDefaultZone }.sorted { $0.zoneName < $1.zoneName }
        for zone in zones { try createZone(zone) }
        var failures: [RecordResult] = []
        var start = 0
        while start < records.count {
            let chunk = records[start..<min(start + Self.maximumOperations, records.count)].map { RecordOperation(kind: .forceReplace, record: $0) }
            failures += try modify(try uploadingFiles(chunk), atomic: false).results.filter { $0.error != nil }
            start += chunk.count
            progress(start)
        }
        return failures
    }

    /// How many records of each type the database holds, by type name.
    public func recordCounts() throws(ContainerError) -> [String: Int] {
        if container.storage.runsQueries {
            let key = key
            return try container.storage.read { tx throws(ContainerError) in
                guard let database = try tx.database(key) else { return [:] }
                return try tx.recordCounts(in: database) ?? [:]
            }
        }
        return try container.withQueryStore(key) { store throws(ContainerError) in
            Dictionary(uniqueKeysWithValues: store.recordTypeNames.map { ($0, store.records(ofType: $0).count) })
        }
    }

    /// How the database would answer `query`, in words (`kquery query --explain`): a storage that
    /// runs queries itself (PostgreSQL) says which statements it runs, with their plans; otherwise
    /// the plan of the database's in-memory query store.
    public func explanation(_ query: Query, cursor: QueryCursor? = nil, now: Int64? = nil) throws(ContainerError) -> String {
        let time = now ?? container.clock()
        if container.storage.runsQueries {
            if let cursor, !query.accepts(cursor) { throw ContainerError(.badRequest, "the cursor belongs to a different query") }
            let explained = try container.storage.read { tx throws(ContainerError) -> String? in
                guard let database = try tx.database(key) else { return "The database holds no records yet: nothing to run." }
                return try tx.explain(query, cursor: cursor, in: database, now: time)
            }
            if let explained { return explained }
        }
        return try plan(query, now: time).description
    }

    /// How the database's query store would answer `query`: the plan the shell's `.explain`
    /// prints, and `kquery query --explain` on a container file.
    public func plan(_ query: Query, now: Int64? = nil) throws(ContainerError) -> QueryPlan {
        let time = now ?? container.clock()
        return try container.withQueryStore(key) { store throws(ContainerError) in
            do throws(DatabaseError) { return try store.plan(query, now: time) } catch { throw ContainerError(.badRequest, error.message) }
        }
    }
}
