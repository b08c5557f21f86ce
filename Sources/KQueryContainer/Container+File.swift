import GRDB

extension Container {
    /// Whether `path` is a container file (one `Container(path:)` made), without changing it: how the
    /// command line tells a container file from a KQueryStore database file. False for a missing
    /// file, another SQLite file, or anything else.
    public static func isContainerFile(atPath path: String) -> Bool {
        var configuration = Configuration()
        configuration.readonly = true
        guard let queue = try? DatabaseQueue(path: path, configuration: configuration) else { return false }
        let found = try? queue.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'container_meta')")
        }
        return found == true
    }
}
