import ArgumentParser
import KQueryPostgres

extension PostgresLocation {
    /// Reads a `--postgres URL` (or migrate's `--to-postgres` / `--from-postgres`) as the commands
    /// take it, refusing one that is not a PostgreSQL URL with what it should look like.
    static func argument(_ text: String) throws -> PostgresLocation {
        guard let location = PostgresLocation(url: text) else {
            throw ValidationError("not a postgresql://user[:password]@host[:port]/database URL (on a Unix-domain socket: postgresql://user@[:port]/database?host=/directory)")
        }
        return location
    }
}
