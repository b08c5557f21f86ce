import Foundation
import KQuery
import Testing
@testable import KQueryContainer
import KQueryPostgres
import KQueryTestSupport

/// Builders shared by the container tests.
enum ContainerFixture {
    static let identifier = "iCloud.com.example.Notes"
    static let zone = ZoneID(zoneName: "Notes", ownerName: "_u1")
    static let otherZone = ZoneID(zoneName: "Archive", ownerName: "_u1")

    /// The storages a container runs on. The suites that matter run on each, so the memory and
    /// PostgreSQL storages are held to the SQLite one's behaviour (SQLite here in memory: the same
    /// statements as a file, no file to clean up; PostgreSQL in the test process's throwaway
    /// cluster, a container of its own for each storage made).
    enum Storage: CaseIterable, CustomTestStringConvertible {
        case memory, sqlite, postgres

        var testDescription: String {
            switch self {
            case .memory: "memory"
            case .sqlite: "SQLite"
            case .postgres: "PostgreSQL"
            }
        }

        func make() throws -> any ContainerStorage {
            switch self {
            case .memory: MemoryContainerStorage()
            case .sqlite: try SQLiteContainerStorage(path: nil)
            case .postgres: try PostgresContainerStorage(location: try PostgresTestDatabase.shared(), containerIdentifier: "test-\(UUID().uuidString)")
            }
        }
    }

    /// A container at a fixed time, in memory or in a file.
    static func container(path: String? = nil) throws -> Container {
        try Container(containerIdentifier: identifier, path: path, clock: { 1_700_000_000_000 })
    }

    /// A container at a fixed time on `storage`.
    static func container(_ storage: Storage, changeHistoryRetention: Int? = nil) throws -> Container {
        try Container(containerIdentifier: identifier, storage: storage.make(), changeHistoryRetention: changeHistoryRetention, clock: { 1_700_000_000_000 })
    }

    /// A fresh file path in the temporary directory (the file does not exist yet).
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("kquery-container-\(UUID().uuidString).sqlite").path
    }

    /// Removes a container file and its WAL companions.
    static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    /// A private database with the `Notes` and `Archive` zones.
    static func privateDatabase(_ container: Container, user: String = "_u1") throws -> ContainerDatabase {
        let database = try container.database(.private, user: user)
        try database.createZone(zone)
        try database.createZone(otherZone)
        return database
    }

    static func record(_ name: String, type: String = "Note", zone: ZoneID = .default, _ fields: [String: FieldValue] = [:], tag: String? = nil) -> Record {
        var record = Record(recordType: type, recordID: RecordID(recordName: name, zoneID: zone), fields: Fields(fields.map { ($0, $1) }))
        record.recordChangeTag = tag
        return record
    }

    static func reference(_ name: String, zone: ZoneID = ContainerFixture.zone, _ action: Reference.Action) -> FieldValue {
        .reference(Reference(recordID: RecordID(recordName: name, zoneID: zone), action: action))
    }

    static func operation(_ kind: RecordOperation.Kind, _ record: Record) -> RecordOperation {
        RecordOperation(kind: kind, record: record)
    }
}

/// The container error `body` throws, or nil.
func containerError(_ body: () throws -> Void) -> ContainerError? {
    do {
        try body()
        return nil
    } catch let error as ContainerError {
        return error
    } catch {
        return nil
    }
}

extension RecordResult {
    var record: Record? {
        if case .saved(let record) = self { return record }
        return nil
    }
}

/// The database the container tests' PostgreSQL storages share (each its own container in it),
/// in the test process's throwaway cluster.
enum PostgresTestDatabase {
    private static let location = Locked<PostgresLocation?>(nil)

    static func shared() throws -> PostgresLocation {
        try location.withLock { location in
            if let location { return location }
            let url = try PostgresCluster.start().createDatabase()
            guard let made = PostgresLocation(url: url) else { throw PostgresCluster.ClusterError(description: "bad URL \(url)") }
            location = made
            return made
        }
    }
}
