import KQuery

/// What one APNs request came to, and so what becomes of the push for that device (SPEC §10).
enum APNsOutcome: Equatable, Sendable {
    /// 200: APNs took it.
    case delivered
    /// 410 `Unregistered` or `ExpiredToken`: the device token is forgotten.
    case unregistered(reason: String)
    /// A 4xx that sending again cannot fix (400 `BadDeviceToken`, 413 `PayloadTooLarge`, ...):
    /// dropped and logged, never retried.
    case refused(status: Int, reason: String)
    /// 429 (too many pushes to this device): tried again with backoff.
    case throttled(reason: String)
    /// 5xx, 403 (the provider token) or no answer at all: a failure of the service or of the
    /// server's credentials, not of this push. Tried again with backoff; when that fails too, the
    /// rest of the pass sends nothing more to that host.
    case serviceFailed(reason: String)

    /// Reads an answer: its status and its body (`{"reason": "..."}` on errors).
    init(status: Int, body: [UInt8]) {
        let reason = (try? JSON.parse(String(decoding: body, as: UTF8.self)))?["reason"]?.stringValue ?? "HTTP \(status)"
        switch status {
        case 200..<300: self = .delivered
        case 410: self = .unregistered(reason: reason)
        case 429: self = .throttled(reason: "\(status) \(reason)")
        case 403, 500..<600: self = .serviceFailed(reason: "\(status) \(reason)")
        case 400..<500: self = .refused(status: status, reason: reason)
        default: self = .serviceFailed(reason: "\(status) \(reason)")
        }
    }

    /// Whether the push is done with for this device (delivered or definitively refused).
    var isFinal: Bool {
        switch self {
        case .throttled, .serviceFailed: false
        case .delivered, .unregistered, .refused: true
        }
    }

    /// The outcome as the console's push log shows it.
    var consoleText: String {
        switch self {
        case .delivered: "200 delivered"
        case .unregistered(let reason): "410 \(reason): device forgotten"
        case .refused(let status, let reason): "\(status) \(reason): dropped"
        case .throttled(let reason): "\(reason): left pending"
        case .serviceFailed(let reason): "\(reason): left pending"
        }
    }
}
