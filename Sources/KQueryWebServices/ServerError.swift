import KQuery
import KQueryContainer

import Foundation

/// A request the server refused as a whole: CloudKit's `serverErrorCode`, a reason, and the HTTP
/// status Web Services answers it with (SPEC §11). The one error type routes throw; it is rendered
/// once, in `webServicesJSON`, as `{"uuid", "serverErrorCode", "reason"}`.
public struct ServerError: Error, Hashable, Sendable, CustomStringConvertible {
    public var serverErrorCode: String
    public var reason: String
    public var httpStatus: Int
    /// Extra members of the answer: the per-record results of a failed atomic modify.
    package var extra: [String: JSON] = [:]

    public init(_ serverErrorCode: String, _ reason: String, httpStatus: Int) {
        self.serverErrorCode = serverErrorCode
        self.reason = reason
        self.httpStatus = httpStatus
    }

    public init(_ error: ContainerError) {
        self.init(error.code.rawValue, error.reason, httpStatus: error.code.httpStatus)
    }

    public var description: String { "\(serverErrorCode): \(reason)" }

    package static func badRequest(_ reason: String) -> ServerError { ServerError("BAD_REQUEST", reason, httpStatus: 400) }
    package static func authenticationRequired(_ reason: String) -> ServerError { ServerError("AUTHENTICATION_REQUIRED", reason, httpStatus: 421) }
    package static func authenticationFailed(_ reason: String) -> ServerError { ServerError("AUTHENTICATION_FAILED", reason, httpStatus: 401) }
    package static func accessDenied(_ reason: String) -> ServerError { ServerError("ACCESS_DENIED", reason, httpStatus: 403) }
    package static func notFound(_ reason: String) -> ServerError { ServerError("NOT_FOUND", reason, httpStatus: 404) }
    package static func tooLarge(_ limit: Int) -> ServerError {
        ServerError("QUOTA_EXCEEDED", "the request body is larger than \(limit) bytes", httpStatus: 413)
    }

    /// TRY_AGAIN_LATER (503): the server is busy; `retryAfter` (seconds) goes into the answer, as
    /// CloudKit's retryable errors carry it.
    package static func tryAgainLater(_ reason: String, retryAfter: Int) -> ServerError {
        var error = ServerError("TRY_AGAIN_LATER", reason, httpStatus: 503)
        error.extra["retryAfter"] = .int(Int64(retryAfter))
        return error
    }

    /// `{"uuid", "serverErrorCode", "reason"}` and any extra members.
    public var webServicesJSON: JSON {
        var members: [(String, JSON)] = [
            ("uuid", .string(UUID().uuidString.lowercased())), ("serverErrorCode", .string(serverErrorCode)), ("reason", .string(reason)),
        ]
        for key in extra.keys.sorted() { members.append((key, extra[key]!)) }
        return .object(members)
    }
}
