import KQuery

/// What the file-format fuzz target (`Fuzz/FileFuzz`) runs: a database file's two binary forms,
/// decoded from arbitrary bytes. Traps only when a promise breaks; bad bytes must give errors.
package enum FileFormatProbe {
    /// A record body: a body that decodes must encode to bytes that decode to the same record.
    package static func record(_ bytes: UnsafeRawBufferPointer) {
        guard let record = try? RecordCoding.decode(bytes) else { return }
        let again = RecordCoding.encode(record)
        let decoded = again.withUnsafeBytes { try? RecordCoding.decode($0) }
        precondition(decoded.map { Self.same($0, record) } == true, "a decoded record does not survive encoding")
    }

    /// An index snapshot's body (its checksum is added here, so that the fuzzer reaches the decoding
    /// behind it) for a table of `count` sample records with every kind of declared index. Indexes
    /// that decode are installed and queried: whatever they say, nothing may trap.
    package static func snapshot(_ body: UnsafeRawBufferPointer, count: Int) {
        var bytes = Array(body)
        let sum = bytes.withUnsafeBytes { IndexSnapshot.checksum($0) }
        withUnsafeBytes(of: sum.littleEndian) { bytes.append(contentsOf: $0) }
        let database = Self.database(count)
        guard case .success(let indexes) = database.indexes(fromSnapshot: bytes, of: "T") else { return }
        database.tables["T"]?.install(indexes)
        for text in queries {
            guard let predicate = try? ValidatedPredicate(text) else { continue }
            _ = try? database.perform(Query(recordType: "T", predicate: predicate), now: 0)
        }
        _ = try? database.save([RecordOperation(kind: .forceReplace, record: sample(0))])
        _ = try? database.save([RecordOperation(kind: .forceDelete, record: sample(1))])
    }

    /// The snapshot of the sample table of `count` records: a seed for the fuzzer.
    package static func sampleSnapshotBody(count: Int) -> [UInt8] {
        Array((database(count).indexSnapshot(of: "T") ?? []).dropLast(8))
    }

    private static let queries = [
        "n == 3", "n > 2", "s BEGINSWITH 'b'", "tags CONTAINS 'x'", "ALL tokenize('alpha', 'Cdl') IN allTokens",
        "distanceToLocation:fromLocation:(place, location(10, 20)) < 500", "d < 1.5",
    ]

    private static func sample(_ index: Int) -> Record {
        var record = Record(recordType: "T", recordName: "r\(index)", fields: [
            "n": .int64(Int64(index % 5)), "s": .string(["alpha", "beta", "gamma"][index % 3]),
            "place": .location(Location(latitude: Double(index % 7), longitude: Double(index % 11) * 3)),
            "d": .double(Double(index) / 2),
        ])
        if index % 2 == 0 { record["tags"] = .list(.string, [.string("x"), .string("y\(index % 3)")]) }
        return record
    }

    private static func database(_ count: Int) -> Database {
        let database = Database(indexPolicy: .declared)
        _ = try? database.importRecords((0..<count).map(sample))
        for (field, index) in [("n", FieldSchema.Indexes([.queryable, .sortable])), ("s", .searchable), ("place", .queryable), ("tags", [.queryable, .sortable]), ("d", .sortable)] {
            try? database.declareIndex(IndexDeclaration(recordType: "T", field: .user(FieldKey(field)), index: index))
        }
        return database
    }

    /// Equal, with NaN equal to itself (a decoded NaN is still NaN).
    private static func same(_ a: Record, _ b: Record) -> Bool {
        RecordCoding.encode(a) == RecordCoding.encode(b)
    }
}
