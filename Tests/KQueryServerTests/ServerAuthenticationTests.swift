import Crypto
import Hummingbird
import HummingbirdTesting
import KQuery
import KQueryServer
import KQueryWebServices
import Testing

import Foundation

/// API tokens, web auth tokens, user isolation and server-to-server signatures (SPEC §11).
@Suite struct ServerAuthenticationTests {
    @Test func apiTokens() async throws {
        try await ServerHarness { $0.apiTokens = ["good"] }.run { c in
            var answer = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#, apiToken: nil)
            #expect(answer.status == 421)
            #expect(answer.json["serverErrorCode"] == .string("AUTHENTICATION_REQUIRED"))
            #expect(answer.json["uuid"]?.stringValue != nil)
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#, apiToken: "bad")
            #expect(answer.status == 401)
            #expect(answer.json["serverErrorCode"] == .string("AUTHENTICATION_FAILED"))
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#, apiToken: "good")
            #expect(answer.status == 200)
        }
        // With none configured, any token does.
        try await ServerHarness().run { c in
            let answer = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#, apiToken: "whatever")
            #expect(answer.status == 200)
        }
    }

    @Test func privateDatabasesNeedAValidUserAndStayPrivate() async throws {
        try await ServerHarness().run { c in
            var answer = try await c.post("private", "records/query", #"{"query": {"recordType": "Secret"}}"#)
            #expect(answer.status == 421)
            answer = try await c.send(.post, c.path("shared", "records/query"), body: #"{"query": {"recordType": "Secret"}}"#)
            #expect(answer.status == 421)
            answer = try await c.get("public", "users/current")
            #expect(answer.status == 421)

            // A forged token (another user's name under a wrong MAC, or altered bytes) is refused.
            let aliceToken = c.token("_alice")
            let forged = String(aliceToken.dropLast()) + (aliceToken.hasSuffix("0") ? "1" : "0")
            answer = try await c.send(.post, c.path("private", "records/query"), body: #"{"query": {"recordType": "Secret"}}"#, query: ["ckWebAuthToken=\(forged)"])
            #expect(answer.status == 401)
            let mallory = Data("_alice".utf8).base64EncodedString() + ".00"
            answer = try await c.send(.post, c.path("private", "records/query"), body: #"{"query": {"recordType": "Secret"}}"#, query: ["ckWebAuthToken=\(mallory)"])
            #expect(answer.status == 401)

            answer = try await c.post("private", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "diary", "recordType": "Secret", "fields": {"text": {"value": "mine"}}}}]}
                """, user: "_alice")
            #expect(answer.status == 200)
            // Bob sees none of Alice's private records, by query, lookup or changes, and cannot change them.
            answer = try await c.post("private", "records/query", #"{"query": {"recordType": "Secret"}}"#, user: "_bob")
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.isEmpty == true)
            answer = try await c.post("private", "records/lookup", #"{"records": [{"recordName": "diary"}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))
            answer = try await c.post("private", "records/modify", #"{"operations": [{"operationType": "forceDelete", "record": {"recordName": "diary"}}]}"#, user: "_bob")
            answer = try await c.post("private", "records/lookup", #"{"records": [{"recordName": "diary"}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["fields"]?["text"]?["value"] == .string("mine"))
            answer = try await c.get("private", "users/current", user: "_bob")
            #expect(answer.json["userRecordName"] == .string("_bob"))
        }
    }

    /// Signs like CloudKit's server-to-server keys: ECDSA P-256 over `date:base64(sha256(body)):subpath`.
    static func signedHeaders(key keyBytes: Data, keyID: String, date: String, body: String, subpath: String) throws -> HTTPFields {
        let message = ServerKey.message(date: date, body: Array(body.utf8), subpath: subpath)
        let key = try P256.Signing.PrivateKey(rawRepresentation: keyBytes)
        let signature = try key.signature(for: Data(message.utf8)).derRepresentation.base64EncodedString()
        return [
            .init("X-Apple-CloudKit-Request-KeyID")!: keyID, .init("X-Apple-CloudKit-Request-ISO8601Date")!: date,
            .init("X-Apple-CloudKit-Request-SignatureV1")!: signature,
        ]
    }

    static func iso8601(_ date: Date) -> String { date.formatted(.iso8601) }

    @Test func serverToServerSignatures() async throws {
        let privateKey = P256.Signing.PrivateKey()
        let key = privateKey.rawRepresentation
        let keyID = "abc123"
        let config = """
            {"apiTokens": ["only"], "serverToServerKeys": [{"keyID": "\(keyID)", "publicKey": \(JSON.string(privateKey.publicKey.pemRepresentation).serialized)}]}
            """
        var harness = ServerHarness()
        try harness.configuration.load(configurationText: config)
        try await harness.run { c in
            let subpath = c.path("public", "records/modify")
            let body = #"{"operations": [{"operationType": "create", "record": {"recordName": "signed", "recordType": "T"}}]}"#
            let now = Self.iso8601(Date())
            var headers = try Self.signedHeaders(key: key, keyID: keyID, date: now, body: body, subpath: subpath)
            var answer = try await c.send(.post, subpath, body: body, apiToken: nil, headers: headers)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["recordName"] == .string("signed"))

            // The same signature replayed with another body.
            let changed = #"{"operations": [{"operationType": "forceDelete", "record": {"recordName": "signed"}}]}"#
            answer = try await c.send(.post, subpath, body: changed, apiToken: nil, headers: headers)
            #expect(answer.status == 401)
            #expect(answer.json["serverErrorCode"] == .string("AUTHENTICATION_FAILED"))

            // Another key's signature.
            headers = try Self.signedHeaders(key: P256.Signing.PrivateKey().rawRepresentation, keyID: keyID, date: now, body: body, subpath: subpath)
            answer = try await c.send(.post, subpath, body: body, apiToken: nil, headers: headers)
            #expect(answer.status == 401)

            // A date ten minutes old, correctly signed.
            let stale = Self.iso8601(Date().addingTimeInterval(-600))
            headers = try Self.signedHeaders(key: key, keyID: keyID, date: stale, body: body, subpath: subpath)
            answer = try await c.send(.post, subpath, body: body, apiToken: nil, headers: headers)
            #expect(answer.status == 401)

            // An unknown key, and a signature for the private database.
            headers = try Self.signedHeaders(key: key, keyID: "other", date: now, body: body, subpath: subpath)
            answer = try await c.send(.post, subpath, body: body, apiToken: nil, headers: headers)
            #expect(answer.status == 401)
            let privatePath = c.path("private", "records/modify")
            headers = try Self.signedHeaders(key: key, keyID: keyID, date: now, body: body, subpath: privatePath)
            answer = try await c.send(.post, privatePath, body: body, apiToken: nil, headers: headers)
            #expect(answer.status == 401)

            // A signature over another path.
            headers = try Self.signedHeaders(key: key, keyID: keyID, date: now, body: body, subpath: c.path("public", "records/query"))
            answer = try await c.send(.post, subpath, body: body, apiToken: nil, headers: headers)
            #expect(answer.status == 401)

            // The record the refused requests tried to delete is still there.
            answer = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "signed"}]}"#, apiToken: "only")
            #expect(answer.json["records"]?[0]?["recordType"] == .string("T"))
        }
    }
}

/// Web auth token rotation, lifetime and single use (CloudKit: each answer carries the next token
/// in `X-Apple-CloudKit-Web-Auth-Token`), and the CORS a browser client needs to read it.
@Suite struct ServerWebAuthTokenTests {
    static let rotated = "X-Apple-CloudKit-Web-Auth-Token"

    func current(_ c: ServerClient, token: String, headers: HTTPFields = [:]) async throws -> ServerClient.Answer {
        try await c.send(.get, c.path("private", "users/current"), query: ["ckWebAuthToken=\(token)"], headers: headers)
    }

    @Test func eachAnswerCarriesTheNextTokenAndOldOnesStillWorkByDefault() async throws {
        try await ServerHarness().run { c in
            let first = c.token("_alice")
            let answer = try await current(c, token: first)
            #expect(answer.status == 200)
            let next = try #require(answer.header(Self.rotated))
            #expect(next != first)
            let again = try await current(c, token: next)
            #expect(again.json["userRecordName"] == .string("_alice"))
            #expect(again.header(Self.rotated).map { $0 != next } == true)
            // Like CloudKit's live service, the old token is still taken.
            #expect(try await current(c, token: first).status == 200)
            // Requests without a web auth token get none; refused ones neither.
            #expect(try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#).header(Self.rotated) == nil)
            let refused = try await current(c, token: String(first.dropLast()) + (first.hasSuffix("0") ? "1" : "0"))
            #expect(refused.status == 401)
            #expect(refused.header(Self.rotated) == nil)
            // A zone error still rotates: the request was signed in.
            let missing = try await c.post("private", "changes/zone", #"{"zones": [{"zoneID": {"zoneName": "Nope"}}]}"#, user: "_alice")
            #expect(missing.header(Self.rotated) != nil)
        }
    }

    @Test func singleUseTokensAreSpentOnce() async throws {
        try await ServerHarness { $0.singleUseWebAuthTokens = true }.run { c in
            let first = c.token("_alice")
            let answer = try await current(c, token: first)
            #expect(answer.status == 200)
            let reused = try await current(c, token: first)
            #expect(reused.status == 401)
            #expect(reused.json["serverErrorCode"] == .string("AUTHENTICATION_FAILED"))
            #expect(reused.json["reason"]?.stringValue?.contains("already used") == true)
            // Following the chain of rotated tokens keeps working.
            var token = try #require(answer.header(Self.rotated))
            for _ in 0..<5 {
                let step = try await current(c, token: token)
                #expect(step.status == 200)
                token = try #require(step.header(Self.rotated))
            }
        }
    }

    @Test func tokensExpireAfterTheirLifetime() async throws {
        try await ServerHarness { $0.webAuthTokenLifetime = 1800 }.run { c in
            let server = try #require(c.server)
            let stale = server.webAuthToken(user: "_alice", issued: Date().addingTimeInterval(-1801))
            let answer = try await current(c, token: stale)
            #expect(answer.status == 401)
            #expect(answer.json["reason"]?.stringValue?.contains("expired") == true)
            let fresh = server.webAuthToken(user: "_alice", issued: Date().addingTimeInterval(-1700))
            #expect(try await current(c, token: fresh).status == 200)
        }
    }

    @Test func browsersMayCallAndReadTheRotatedToken() async throws {
        try await ServerHarness().run { c in
            let origin = "http://localhost:3000"
            let preflight = try await c.send(
                .options, c.path("private", "records/query"), apiToken: nil,
                headers: [.origin: origin, .accessControlRequestMethod: "POST", .accessControlRequestHeaders: "content-type"])
            #expect(preflight.status == 204)
            #expect(preflight.header("Access-Control-Allow-Origin") == origin)
            #expect(preflight.header("Access-Control-Allow-Methods")?.contains("POST") == true)
            #expect(preflight.header("Access-Control-Allow-Headers")?.lowercased().contains("content-type") == true)
            let answer = try await current(c, token: c.token("_alice"), headers: [.origin: origin])
            #expect(answer.status == 200)
            #expect(answer.header("Access-Control-Allow-Origin") == origin)
            #expect(answer.header("Access-Control-Expose-Headers")?.lowercased() == Self.rotated.lowercased())
        }
    }

    @Test func configurationFileSetsTheTokenRules() throws {
        var configuration = ServerConfiguration(dataDirectory: "/nonexistent")
        try configuration.load(configurationText: #"{"webAuthTokenLifetime": 1800, "singleUseWebAuthTokens": true}"#)
        #expect(configuration.webAuthTokenLifetime == 1800)
        #expect(configuration.singleUseWebAuthTokens)
        for bad in [#"{"webAuthTokenLifetime": -1}"#, #"{"webAuthTokenLifetime": "long"}"#, #"{"singleUseWebAuthTokens": 1}"#] {
            var other = ServerConfiguration(dataDirectory: "/nonexistent")
            #expect(throws: ServerError.self) { try other.load(configurationText: bad) }
        }
    }
}
