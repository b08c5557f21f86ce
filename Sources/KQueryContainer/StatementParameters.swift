import GRDB
import GRDBSQLite

/// Binds a prepared statement's `?` parameters in order, through SQLite's C API, for the
/// statements a modify runs once per record.
///
/// GRDB's `StatementArguments` boxes each value, checks the count, then binds: for a
/// 200-record modify that was more work than SQLite's own. Binding here leaves GRDB's statement
/// marked as holding valid arguments (bound empty first), so `execute()` runs it with GRDB's
/// bookkeeping as usual; every parameter must be bound before it does.
struct StatementParameters {
    private let statement: SQLiteStatement
    private let name: String
    private var index: CInt = 1

    /// SQLite copies strings and blobs bound with this before the call returns.
    private static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// Starts binding `statement` from its first parameter (clearing what it held). `name` names
    /// the file in errors.
    init(_ statement: Statement, name: String) throws(ContainerError) {
        // Resets the statement, clears its bindings, and marks its arguments as set.
        statement.setUncheckedArguments(StatementArguments())
        self.statement = statement.sqliteStatement
        self.name = name
    }

    mutating func bind(_ value: Int64) throws(ContainerError) {
        try check(sqlite3_bind_int64(statement, index, value))
    }

    mutating func bind(_ value: String) throws(ContainerError) {
        // The length in bytes, so a name holding a NUL is bound whole.
        let code = value.withCString { text in sqlite3_bind_text(statement, index, text, CInt(value.utf8.count), Self.transient) }
        try check(code)
    }

    /// A string, or NULL.
    mutating func bind(_ value: String?) throws(ContainerError) {
        guard let value else { return try check(sqlite3_bind_null(statement, index)) }
        try bind(value)
    }

    /// UTF-8 bytes bound as TEXT (what a String column holds), without making a String first.
    mutating func bind(text bytes: [UInt8]) throws(ContainerError) {
        let code = bytes.withUnsafeBytes { buffer in
            // An empty buffer has no address, which SQLite would bind as NULL: bound as "".
            guard let text = buffer.baseAddress?.assumingMemoryBound(to: CChar.self) else {
                return sqlite3_bind_text(statement, index, "", 0, Self.transient)
            }
            return sqlite3_bind_text(statement, index, text, CInt(buffer.count), Self.transient)
        }
        try check(code)
    }

    mutating func bind(_ bytes: [UInt8]) throws(ContainerError) {
        let code = bytes.withUnsafeBytes { buffer in
            // An empty buffer has no address, which SQLite would bind as NULL.
            buffer.isEmpty ? sqlite3_bind_zeroblob(statement, index, 0)
                : sqlite3_bind_blob(statement, index, buffer.baseAddress, CInt(buffer.count), Self.transient)
        }
        try check(code)
    }

    private mutating func check(_ code: CInt) throws(ContainerError) {
        guard code == SQLITE_OK else {
            throw ContainerError(.internalError, "\(name): binding parameter \(index) failed (SQLite code \(code))")
        }
        index += 1
    }
}
