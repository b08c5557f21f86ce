import PostgresNIO

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where a PostgreSQL database is: a `postgresql://user[:password]@host[:port]/database` URL, as
/// `kquery serve --postgres URL` takes it (`postgres://` too; no TLS: the nodes and PostgreSQL
/// share a private network, or a socket proxy adds it).
public struct PostgresLocation: Hashable, Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String

    public init(host: String, port: Int = 5432, username: String, password: String? = nil, database: String) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
    }

    /// Reads a URL; nil when it is not one of PostgreSQL's (the caller says why).
    public init?(url text: String) {
        guard let components = URLComponents(string: text), ["postgresql", "postgres"].contains(components.scheme ?? ""),
              let host = components.host, !host.isEmpty
        else { return nil }
        let database = String(components.path.drop { $0 == "/" })
        guard let username = components.user, !username.isEmpty, !database.isEmpty, !database.contains("/") else { return nil }
        // A port that does not read as one (URLComponents then says none) is refused, not defaulted.
        let authority = text.drop { $0 != "@" }.prefix { $0 != "/" }
        if authority.contains(":") && components.port == nil { return nil }
        if let port = components.port, !(1...65535).contains(port) { return nil }
        self.init(host: host, port: components.port ?? 5432, username: username, password: components.password, database: database)
    }

    /// The URL, without its password (for logs and messages).
    public var description: String { "postgresql://\(username)@\(host):\(port)/\(database)" }

    var configuration: PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: .disable)
        configuration.options.connectTimeout = .seconds(10)
        return configuration
    }
}
