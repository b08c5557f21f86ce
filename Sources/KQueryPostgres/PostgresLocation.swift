import PostgresNIO

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where a PostgreSQL database is: a `postgresql://user[:password]@host[:port]/database` URL, as
/// `kquery serve --postgres URL` takes it (`postgres://` too; no TLS: the nodes and PostgreSQL
/// share a private network, or a socket proxy adds it). As with libpq, a host that is a directory
/// (`?host=/var/run/postgresql`, or percent-encoded in the host's place) names a Unix-domain
/// socket's: `.s.PGSQL.PORT` in it, cheaper than TCP for a node on PostgreSQL's own machine.
public struct PostgresLocation: Hashable, Sendable, CustomStringConvertible {
    /// A host name or address, or a socket's directory (an absolute path).
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
        guard let components = URLComponents(string: text), ["postgresql", "postgres"].contains(components.scheme ?? "") else { return nil }
        // libpq's `host` parameter names the host (a socket's directory, mostly) where the URL has none.
        var named: String?
        for item in components.queryItems ?? [] {
            guard item.name == "host", named == nil, let value = item.value, !value.isEmpty else { return nil }
            named = value
        }
        let inURL = components.host.flatMap { $0.isEmpty ? nil : $0 }
        guard let host = inURL == nil ? named : (named == nil ? inURL : nil) else { return nil }
        // A directory: an absolute path of at most what a socket's address holds, with its file's name.
        if host.hasPrefix("/"), host.utf8.count + "/.s.PGSQL.65535".utf8.count > 107 || host.contains("\u{0}") { return nil }
        if !host.hasPrefix("/"), host.contains("/") { return nil }
        let database = String(components.path.drop { $0 == "/" })
        guard let username = components.user, !username.isEmpty, !database.isEmpty, !database.contains("/") else { return nil }
        // A port that does not read as one (URLComponents then says none) is refused, not defaulted.
        let authority = text.drop { $0 != "@" }.prefix { $0 != "/" }
        if authority.contains(":") && components.port == nil { return nil }
        if let port = components.port, !(1...65535).contains(port) { return nil }
        self.init(host: host, port: components.port ?? 5432, username: username, password: components.password, database: database)
    }

    /// Whether `host` is a Unix-domain socket's directory.
    public var isSocket: Bool { host.hasPrefix("/") }

    /// The URL, without its password (for logs and messages).
    public var description: String {
        isSocket ? "postgresql://\(username)@:\(port)/\(database)?host=\(host)" : "postgresql://\(username)@\(host):\(port)/\(database)"
    }

    var configuration: PostgresConnection.Configuration {
        var configuration = isSocket
            ? PostgresConnection.Configuration(unixSocketPath: "\(host)/.s.PGSQL.\(port)", username: username, password: password, database: database)
            : PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: .disable)
        configuration.options.connectTimeout = .seconds(10)
        return configuration
    }
}
