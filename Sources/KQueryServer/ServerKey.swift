import Crypto
import KQueryWebServices

import Foundation

/// A server-to-server key (CloudKit's "Server-to-Server Keys"): the P-256 public key whose private
/// half signs requests to the public database, and the user its requests act as.
public struct ServerKey: Sendable {
    public var keyID: String
    /// The key's X9.63 bytes (the key type is not Sendable).
    let publicKeyBytes: Data
    public var userRecordName: String

    public init(keyID: String, pem: String, userRecordName: String = "_server") throws(ServerError) {
        do {
            publicKeyBytes = try P256.Signing.PublicKey(pemRepresentation: pem).x963Representation
        } catch {
            throw ServerError.badRequest("server-to-server key '\(keyID)': not a PEM P-256 public key")
        }
        self.keyID = keyID
        self.userRecordName = userRecordName
    }

    /// The message CloudKit signs: `date:base64(SHA-256(body)):subpath`.
    public static func message(date: String, body: [UInt8], subpath: String) -> String {
        "\(date):\(Data(SHA256.hash(data: body)).base64EncodedString()):\(subpath)"
    }

    /// Whether `signature` (base64 of a DER ECDSA signature) signs `message` with this key.
    func isValidSignature(_ signature: String, for message: String) -> Bool {
        guard let der = Data(base64Encoded: signature),
              let parsed = try? P256.Signing.ECDSASignature(derRepresentation: der)
        else { return false }
        guard let publicKey = try? P256.Signing.PublicKey(x963Representation: publicKeyBytes) else { return false }
        return publicKey.isValidSignature(parsed, for: Data(message.utf8))
    }
}
