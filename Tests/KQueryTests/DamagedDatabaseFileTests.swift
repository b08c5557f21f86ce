import Foundation
import GRDB
import KQuery
import KQueryStore
import Testing

/// Database files damaged behind KQuery's back (edited with SQLite directly): opening one is an
/// error naming the file, never a crash.
@Suite("Database: damaged files")
struct DamagedDatabaseFileTests {
    @Test func aDamagedFileIsAnErrorNotACrash() throws {
        let holder = TemporaryDatabasePath()
        do {
            let database = try KQueryStore.Database(path: holder.path)
            try database.importRecords([KQuery.Record(recordType: "Artwork", recordName: "a", fields: ["price": .int64(1)])])
        }
        for damage in [
            "UPDATE records SET body = x'01020304'",
            "UPDATE records SET recordName = x'00ff', body = x'01'",
            "UPDATE records SET body = 12345",
            "UPDATE records SET body = 'text, not a record'",
            "UPDATE kquery_meta SET value = 'many' WHERE key = 'nextChangeTag'",
            "INSERT INTO zones VALUES ('z', x'00ff')",
            "UPDATE kquery_meta SET value = '2' WHERE key = 'format'",
        ] {
            let copy = TemporaryDatabasePath()
            try FileManager.default.copyItem(atPath: holder.path, toPath: copy.path)
            let queue = try DatabaseQueue(path: copy.path)
            try queue.write { db in
                try db.execute(sql: damage)
            }
            try queue.close()
            let error = #expect(throws: KQueryStore.DatabaseError.self, "\(damage)") { try KQueryStore.Database(path: copy.path) }
            #expect(error?.kind == .storage)
        }
    }

}
