import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A server change token (`syncToken` in Web Services): opaque to clients.
///
/// Inside: a format byte, the token's kind (database or zone), the change sequence the client has
/// seen up to, the database's history horizon when the token was made (see `Contents.horizon`),
/// and for a zone token the sequence that created the zone (so a token from before the zone was
/// deleted and created again is known as stale), then a SipHash tag over those bytes and
/// the database and zone the token belongs to, keyed with the container's secret. A token from
/// another database or zone, or altered, fails the tag: `BAD_REQUEST "invalid sync token"`.
public struct SyncToken: Hashable, Sendable, CustomStringConvertible {
    /// The base64 text clients send back.
    public let text: String

    public init(text: String) { self.text = text }

    public var description: String { text }

    enum Kind: UInt8 {
        case database = 1
        case zone = 2
    }

    private static let format: UInt8 = 1
    /// Joins the parts of what a token is bound to: a control character no user, zone or owner
    /// name contains in practice, so two different bindings never read the same.
    static let bindingSeparator = "\u{1F}"
    private static let payloadLength = 26

    /// What a token says, once its tag is checked.
    struct Contents: Hashable {
        var kind: Kind
        /// The last change sequence the client has.
        var sequence: Int64
        /// The database's horizon when the token was made. A token below the horizon is still
        /// good if the horizon has not moved since: the client read its records after the
        /// tombstones below it were dropped (a fetch from no token pages through old sequences).
        var horizon: Int64
        /// For zone tokens, the sequence that created the zone; 0 for database tokens.
        var incarnation: Int64

        /// Whether the history since the token is all still kept.
        func isCurrent(in database: StoredDatabase) -> Bool {
            (sequence >= database.horizon || horizon == database.horizon) && sequence <= database.sequence
        }
    }

    init(_ contents: Contents, binding: String, secret: (UInt64, UInt64)) {
        var bytes: [UInt8] = [Self.format, contents.kind.rawValue]
        bytes += Self.littleEndian(contents.sequence)
        bytes += Self.littleEndian(contents.horizon)
        bytes += Self.littleEndian(contents.incarnation)
        bytes += Self.littleEndian(Int64(bitPattern: Self.tag(bytes, binding: binding, secret: secret)))
        text = Data(bytes).base64EncodedString()
    }

    /// The token's contents, if it is well formed, of `kind`, and was made for `binding`.
    func contents(kind: Kind, binding: String, secret: (UInt64, UInt64)) throws(ContainerError) -> Contents {
        guard let data = Data(base64Encoded: text), data.count == Self.payloadLength + 8 else { throw ContainerError.invalidSyncToken }
        let bytes = [UInt8](data)
        let payload = Array(bytes[..<Self.payloadLength])
        guard payload[0] == Self.format, payload[1] == kind.rawValue,
              UInt64(bitPattern: Self.readInt64(bytes, at: Self.payloadLength)) == Self.tag(payload, binding: binding, secret: secret)
        else { throw ContainerError.invalidSyncToken }
        return Contents(kind: kind, sequence: Self.readInt64(bytes, at: 2), horizon: Self.readInt64(bytes, at: 10), incarnation: Self.readInt64(bytes, at: 18))
    }

    private static func tag(_ payload: [UInt8], binding: String, secret: (UInt64, UInt64)) -> UInt64 {
        SipHash.tag(payload + Array(binding.utf8), key: secret.0, secret.1)
    }

    private static func littleEndian(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: value) >> (8 * $0)) }
    }

    private static func readInt64(_ bytes: [UInt8], at offset: Int) -> Int64 {
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << (8 * index) }
        return Int64(bitPattern: value)
    }
}
