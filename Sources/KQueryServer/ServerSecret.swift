import Crypto
import KQueryWebServices

import Foundation

/// The secret kept in the data directory that makes the server's tokens unforgeable: a web auth
/// token (`ckWebAuthToken`) and a web courier token are their contents followed by an HMAC-SHA256
/// of them under this key, so the server keeps no token table and restarts lose none.
public struct ServerSecret: Sendable {
    static let fileName = "web-auth-secret"
    /// The key's bytes (SymmetricKey is not Sendable).
    private let keyBytes: [UInt8]
    var key: SymmetricKey { SymmetricKey(data: keyBytes) }

    /// The secret of `directory`, made (32 random bytes, readable by the owner only) when missing.
    public init(directory: String) throws(ServerError) {
        let path = (directory as NSString).appendingPathComponent(Self.fileName)
        if let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8),
           let bytes = Self.bytes(hex: text.trimmingCharacters(in: .whitespacesAndNewlines)), bytes.count >= 16
        {
            keyBytes = bytes
            return
        }
        let fresh = SymmetricKey(size: .bits256)
        let hex = fresh.withUnsafeBytes { Self.hex(Array($0)) }
        guard FileManager.default.createFile(atPath: path, contents: Data((hex + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ServerError("INTERNAL_ERROR", "cannot write \(path)", httpStatus: 500)
        }
        keyBytes = fresh.withUnsafeBytes { Array($0) }
    }

    /// A secret kept elsewhere (a shared database, SPEC §16); at least 16 bytes.
    public init(keyBytes: [UInt8]) throws(ServerError) {
        guard keyBytes.count >= 16 else { throw ServerError("INTERNAL_ERROR", "the shared web auth secret is too short", httpStatus: 500) }
        self.keyBytes = keyBytes
    }

    /// `base64url(parts joined by newlines).hex(HMAC)`, the HMAC bound to `purpose` so a token of
    /// one kind is not accepted as another.
    func token(_ purpose: String, _ parts: [String]) -> String {
        let body = Data(parts.joined(separator: "\n").utf8).base64URLEncoded
        return body + "." + signature(purpose, body)
    }

    /// The parts of a token this secret made for `purpose`, or nil.
    func parts(_ purpose: String, of token: String) -> [String]? {
        let pieces = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard pieces.count == 2, let mac = Self.bytes(hex: String(decoding: pieces[1], as: UTF8.self)) else { return nil }
        let body = String(decoding: pieces[0], as: UTF8.self)
        guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: Array((purpose + ":" + body).utf8), using: key),
              let data = Data(base64URLEncoded: body), let text = String(data: data, encoding: .utf8)
        else { return nil }
        return text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    }

    /// A web auth token of a local user (what `kquery token` prints, and what each answer to a
    /// signed-in request hands back as the next one): the user, when it was issued (seconds since
    /// 1970) and a random nonce, so no two tokens are alike and a single-use token can be spent.
    public func webAuthToken(user: String, issued: Date = Date()) -> String {
        var nonce = UInt64.random(in: .min ... .max)
        let nonceText = withUnsafeBytes(of: &nonce) { Self.hex($0) }
        return token("user", [user, String(Int64(issued.timeIntervalSince1970)), nonceText])
    }

    /// Who a web auth token names and when it was issued (nil for the tokens of versions before
    /// rotation, which carried the user alone), or nil when this secret did not make it.
    public func identity(webAuthToken: String) -> WebAuthIdentity? {
        guard let parts = parts("user", of: webAuthToken), !parts[0].isEmpty else { return nil }
        switch parts.count {
        case 1: return WebAuthIdentity(user: parts[0], issued: nil)
        case 3:
            guard let seconds = Int64(parts[1]) else { return nil }
            return WebAuthIdentity(user: parts[0], issued: Date(timeIntervalSince1970: TimeInterval(seconds)))
        default: return nil
        }
    }

    private func signature(_ purpose: String, _ body: String) -> String {
        Self.hex(HMAC<SHA256>.authenticationCode(for: Array((purpose + ":" + body).utf8), using: key))
    }

    /// Lowercase hexadecimal, built as bytes (a token is made or checked on every signed-in request).
    static func hex<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        let digits: StaticString = "0123456789abcdef"
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        digits.withUTF8Buffer { digits in
            for byte in bytes {
                text.append(digits[Int(byte >> 4)])
                text.append(digits[Int(byte & 15)])
            }
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func bytes(hex: String) -> [UInt8]? {
        let utf8 = Array(hex.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 97...102: c - 87
            case 65...70: c - 55
            default: nil
            }
        }
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}

/// Base64url (RFC 4648 §5, unpadded), translated byte by byte from Foundation's base64.
extension Data {
    var base64URLEncoded: String {
        var bytes: [UInt8] = []
        for byte in base64EncodedData() {
            switch byte {
            case UInt8(ascii: "+"): bytes.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): bytes.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): continue
            default: bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    init?(base64URLEncoded text: String) {
        var bytes: [UInt8] = text.utf8.map { $0 == UInt8(ascii: "-") ? UInt8(ascii: "+") : $0 == UInt8(ascii: "_") ? UInt8(ascii: "/") : $0 }
        bytes += repeatElement(UInt8(ascii: "="), count: (4 - bytes.count % 4) % 4)
        self.init(base64Encoded: Data(bytes))
    }
}

/// What a web auth token says: the user, and when the token was issued.
public struct WebAuthIdentity: Hashable, Sendable {
    public var user: String
    /// nil for a token made before tokens carried their issue time (never expires).
    public var issued: Date?
}
