/// A request or an operation the container refused, with CloudKit Web Services' `serverErrorCode`
/// and a reason that names the record, zone, subscription or token concerned.
///
/// Whole-request errors are thrown; per-operation errors sit in a modify's results. The server
/// renders both once, as `{"serverErrorCode", "reason"}` (see `ContainerError+WebServices.swift`).
public struct ContainerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// CloudKit Web Services' `serverErrorCode` values the container produces.
    public enum Code: String, Hashable, Sendable, CaseIterable {
        /// A malformed request, an invalid name, a zone outside a private database (native
        /// `badDatabase`), a foreign or altered sync token.
        case badRequest = "BAD_REQUEST"
        /// The record's `recordChangeTag` is not the server's.
        case conflict = "CONFLICT"
        /// `create` of a record that exists.
        case exists = "EXISTS"
        case notFound = "NOT_FOUND"
        case zoneNotFound = "ZONE_NOT_FOUND"
        /// A sibling in an atomic zone failed, so this operation was not applied.
        case atomicError = "ATOMIC_ERROR"
        case validatingReferenceError = "VALIDATING_REFERENCE_ERROR"
        /// Native `limitExceeded` (27): Web Services' table has no such code, so the server sends it
        /// with HTTP 400, as it does BAD_REQUEST, keeping the code for clients that tell them apart.
        case limitExceeded = "LIMIT_EXCEEDED"
        /// Native `changeTokenExpired` (21): the client refetches from no token.
        case changeTokenExpired = "CHANGE_TOKEN_EXPIRED"
        /// The caller may not do this (a share it is not invited to).
        case accessDenied = "ACCESS_DENIED"
        /// An asset larger than the container takes (HTTP 413, as Web Services' QUOTA_EXCEEDED).
        case quotaExceeded = "QUOTA_EXCEEDED"
        /// The storage failed (disk full, damaged file).
        case internalError = "INTERNAL_ERROR"

        /// The HTTP status Web Services answers a whole-request error with.
        public var httpStatus: Int {
            switch self {
            case .badRequest, .atomicError, .limitExceeded, .changeTokenExpired: 400
            case .conflict, .exists: 409
            case .notFound, .zoneNotFound: 404
            case .validatingReferenceError: 412
            case .quotaExceeded: 413
            case .accessDenied: 403
            case .internalError: 500
            }
        }
    }

    public var code: Code
    public var reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code.rawValue): \(reason)" }

    /// The one text CloudKit gives an unusable token (foreign, altered or garbage).
    static let invalidSyncToken = ContainerError(.badRequest, "invalid sync token")
    /// CloudKit's live message for a token older than the history kept.
    static let expiredSyncToken = ContainerError(.changeTokenExpired, "client knowledge differs from server knowledge")
}
