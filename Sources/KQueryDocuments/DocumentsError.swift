/// Why a documents operation was refused or a sync failed.
public struct DocumentsError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Code: String, Hashable, Sendable {
        /// A name or path that cannot be synced safely (`..`, `/`, NUL, too long, outside the folder).
        case unsafeName
        /// The operation is not allowed (removing the current version, `isResolved = false`).
        case refused
        /// No such item or version.
        case notFound
        /// The server, or the container, answered with something the library cannot read.
        case invalidServerAnswer
        /// The server, or the container, refused or failed a request.
        case syncFailed
        /// The server no longer has the changes since the device's token.
        case changeTokenExpired
        /// The folder or the sync state beside it could not be read or written.
        case localStorage
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
