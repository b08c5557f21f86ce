import Crypto
import Hummingbird
import KQuery
import KQueryServer
import KQueryWebServices
import Testing

import Foundation

/// The user endpoints over HTTP (SPEC §13; research sharing-users §1.8–1.9): caller, discover,
/// lookups and current, the local directory (configuration and `users.json`), and the `Users` records.
@Suite struct ServerUserTests {
    /// `_ann` and `_carol` are discoverable (`_carol` from the configuration file), `_bo` is not.
    static func harness() throws -> ServerHarness {
        var harness = ServerHarness()
        try harness.configuration.load(configurationText: """
            {"users": [{"name": "_carol", "emailAddress": "carol@example.com", "givenName": "Carol", "discoverable": true}]}
            """)
        try FileManager.default.createDirectory(atPath: harness.directory, withIntermediateDirectories: true)
        try UserDirectory(users: [
            DirectoryUser(name: "_ann", emailAddress: "Ann@Example.com", phoneNumber: "+1 (555) 010-0100", givenName: "Ann", familyName: "Lee", discoverable: true),
            DirectoryUser(name: "_bo", emailAddress: "bo@example.com", phoneNumber: "555-0101", givenName: "Bo"),
        ]).write(directory: harness.directory)
        return harness
    }

    static func names(_ answer: ServerClient.Answer) -> [String] {
        answer.json["users"]?.elements.compactMap { $0["userRecordName"]?.stringValue } ?? []
    }

    @Test func callerIsABareIdentityAndAUsersList() async throws {
        try await Self.harness().run { c in
            let answer = try await c.get("public", "users/caller", user: "_ann")
            #expect(answer.status == 200)
            #expect(answer.json["userRecordName"] == .string("_ann"))
            #expect(answer.json["lookupInfo"]?["emailAddress"] == .string("Ann@Example.com"))
            #expect(answer.json["lookupInfo"]?["userRecordName"] == .string("_ann"))
            #expect(answer.json["nameComponents"]?["givenName"] == .string("Ann"))
            #expect(answer.json["nameComponents"]?["familyName"] == .string("Lee"))
            #expect(answer.json["users"]?[0]?["userRecordName"] == .string("_ann"))
            #expect(answer.json["users"]?[0]?["nameComponents"]?["givenName"] == .string("Ann"))
            // Undiscoverable, or not in the directory: only the name, no names.
            let bo = try await c.get("public", "users/caller", user: "_bo")
            #expect(bo.json["userRecordName"] == .string("_bo"))
            #expect(bo.json["nameComponents"] == nil)
            let stranger = try await c.get("public", "users/caller", user: "_zed")
            #expect(stranger.status == 200)
            #expect(stranger.json["userRecordName"] == .string("_zed"))
        }
    }

    @Test func discoverFindsDiscoverableUsersOnly() async throws {
        try await Self.harness().run { c in
            // GET: everyone discoverable but the caller.
            var answer = try await c.get("public", "users/discover", user: "_ann")
            #expect(answer.status == 200)
            #expect(Self.names(answer) == ["_carol"])
            answer = try await c.get("public", "users/discover", user: "_bo")
            #expect(Self.names(answer) == ["_ann", "_carol"])
            // POST: by email (any case), phone (digits only) or name; `_bo` stays hidden.
            answer = try await c.post("public", "users/discover", """
                {"lookupInfos": [{"emailAddress": "ANN@example.com"}, {"phoneNumber": "15550100100"}, {"userRecordName": "_bo"},
                                 {"emailAddress": "bo@example.com"}, {"userRecordName": "_carol"}, {"emailAddress": "nobody@example.com"}]}
                """, user: "_bo")
            #expect(answer.status == 200)
            #expect(Self.names(answer) == ["_ann", "_carol"])
            #expect(answer.json["users"]?[0]?["nameComponents"]?["givenName"] == .string("Ann"))
            // A malformed request is BAD_REQUEST.
            for body in [#"{}"#, #"{"lookupInfos": [{"fax": "1"}]}"#, #"{"lookupInfos": [{"emailAddress": 3}]}"#, #"[1]"#] {
                answer = try await c.post("public", "users/discover", body, user: "_ann")
                #expect(answer.status == 400, "\(body)")
                #expect(answer.json["serverErrorCode"] == .string("BAD_REQUEST"))
            }
        }
    }

    @Test func lookupsByEmailAndByID() async throws {
        try await Self.harness().run { c in
            var answer = try await c.post("public", "users/lookup/email", #"{"users": [{"emailAddress": "ann@EXAMPLE.com"}, {"emailAddress": "bo@example.com"}]}"#, user: "_carol")
            #expect(answer.status == 200)
            #expect(Self.names(answer) == ["_ann"])
            let ann = try #require(answer.json["users"]?[0])
            #expect(ann["firstName"] == .string("Ann"))
            #expect(ann["lastName"] == .string("Lee"))
            #expect(ann["emailAddress"] == .string("Ann@Example.com"))
            answer = try await c.post("public", "users/lookup/id", #"{"users": [{"userRecordName": "_ann"}, {"userRecordName": "_bo"}, {"userRecordName": "_nobody"}]}"#, user: "_carol")
            #expect(Self.names(answer) == ["_ann"])
            #expect(answer.json["users"]?[0]?["firstName"] == .string("Ann"))
            #expect(answer.json["users"]?[0]?["emailAddress"] == nil)
            answer = try await c.post("public", "users/lookup/id", #"{"users": [{"emailAddress": "ann@example.com"}]}"#, user: "_carol")
            #expect(answer.status == 400)
        }
    }

    @Test func currentNamesDiscoverableUsers() async throws {
        try await Self.harness().run { c in
            let ann = try await c.get("private", "users/current", user: "_ann")
            #expect(ann.json["userRecordName"] == .string("_ann"))
            #expect(ann.json["firstName"] == .string("Ann"))
            #expect(ann.json["lastName"] == .string("Lee"))
            let bo = try await c.get("public", "users/current", user: "_bo")
            #expect(bo.json["userRecordName"] == .string("_bo"))
            #expect(bo.json["firstName"] == nil)
        }
    }

    /// The user endpoints answer on the public database, for a signed-in user only.
    @Test(arguments: ["users/caller", "users/discover"]) func onlyThePublicDatabaseWithAUserToken(operation: String) async throws {
        let privateKey = P256.Signing.PrivateKey()
        let key = privateKey.rawRepresentation
        var harness = try Self.harness()
        try harness.configuration.load(configurationText: """
            {"serverToServerKeys": [{"keyID": "k1", "publicKey": \(JSON.string(privateKey.publicKey.pemRepresentation).serialized)}]}
            """)
        try await harness.run { c in
            for database in ["private", "shared"] {
                let answer = try await c.get(database, operation, user: "_ann")
                #expect(answer.status == 400)
                #expect(answer.json["serverErrorCode"] == .string("BAD_REQUEST"))
                #expect(answer.json["reason"]?.stringValue?.contains("endpoint not applicable in the database type '\(database)db'") == true)
            }
            let anonymous = try await c.get("public", operation)
            #expect(anonymous.status == 421)
            #expect(anonymous.json["redirectURL"]?.stringValue != nil)
            let path = c.path("public", operation)
            let headers = try ServerAuthenticationTests.signedHeaders(
                key: key, keyID: "k1", date: ServerAuthenticationTests.iso8601(Date()), body: "", subpath: path)
            let signed = try await c.send(.get, path, apiToken: nil, headers: headers)
            #expect(signed.status == 401)
            #expect(signed.json["serverErrorCode"] == .string("AUTHENTICATION_FAILED"))
        }
    }

    /// Each signed-in user gets a `Users` record in the public database, named by their name; it
    /// can be looked up but not queried, as CloudKit's.
    @Test func everyUserHasAUsersRecord() async throws {
        try await Self.harness().run { c in
            #expect(try await c.post("private", "records/query", #"{"query": {"recordType": "Note"}}"#, user: "_dan").status == 200)
            var answer = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "_dan"}]}"#)
            #expect(answer.json["records"]?[0]?["recordType"] == .string("Users"), "\(answer.text)")
            #expect(answer.json["records"]?[0]?["created"]?["userRecordName"] == .string("_dan"))
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "Users"}}"#, user: "_dan")
            #expect(answer.status == 400)
            #expect(answer.json["reason"]?.stringValue?.contains("Type is not marked indexable") == true)
            // It can be given fields, but no Users record can be created.
            answer = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "_dan"}]}"#)
            let changeTag = try #require(answer.json["records"]?[0]?["recordChangeTag"]?.stringValue)
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "update", "record": {"recordName": "_dan", "recordType": "Users", "recordChangeTag": "\(changeTag)",
                  "fields": {"nickname": {"value": "D"}}}}]}
                """, user: "_dan")
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["fields"]?["nickname"]?["value"] == .string("D"), "\(answer.text)")
            answer = try await c.post("public", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "_fake", "recordType": "Users"}}]}"#, user: "_dan")
            #expect(answer.status == 400)
            #expect(answer.json["reason"]?.stringValue?.contains("cannot be created") == true)
        }
    }

    /// A user `kquery users add` saves while the server runs is found at once.
    @Test func usersAddedWhileServingAreFound() async throws {
        let harness = try Self.harness()
        try await harness.run { c in
            #expect(Self.names(try await c.get("public", "users/discover", user: "_ann")) == ["_carol"])
            var directory = try UserDirectory.load(directory: harness.directory)
            directory.save(try DirectoryUser(name: "_bo", emailAddress: "bo@example.com", discoverable: true))
            try directory.write(directory: harness.directory)
            #expect(Self.names(try await c.get("public", "users/discover", user: "_ann")) == ["_bo", "_carol"])
        }
    }

    @Test(arguments: [
        #"{"users": {"name": "_a"}}"#, #"{"users": [{"emailAddress": "a@example.com"}]}"#, #"{"users": [{"name": "_a", "emailAddress": "nope"}]}"#,
        #"{"users": [{"name": "_a", "discoverable": "yes"}]}"#,
    ])
    func configurationRefusesBadUsers(text: String) {
        var configuration = ServerConfiguration(dataDirectory: "/nonexistent")
        #expect(throws: ServerError.self) { try configuration.load(configurationText: text) }
    }

    @Test(arguments: [
        ("", nil, nil), ("two words", nil, nil), ("__defaultOwner__", nil, nil), ("_a", "no-at-sign", nil), ("_a", "a@b", nil),
        ("_a", "a@@b.com", nil), ("_a", "a b@c.com", nil), ("_a", nil, "12"), ("_a", nil, "555-CALL-NOW"), ("_a", nil, "+1 2345 6789 0123 4567"),
    ] as [(String, String?, String?)])
    func directoryUsersAreChecked(name: String, email: String?, phone: String?) {
        #expect(throws: ServerError.self) { try DirectoryUser(name: name, emailAddress: email, phoneNumber: phone) }
    }

    @Test func directoryUsersReadBackAndReplaceByName() throws {
        let ann = try DirectoryUser(name: "_ann", emailAddress: "a@example.com", phoneNumber: "+44 20 7946 0000", givenName: "Ann", discoverable: true)
        #expect(try DirectoryUser(json: ann.json) == ann)
        var directory = UserDirectory(users: [ann])
        directory.save(try DirectoryUser(name: "_ann"))
        #expect(directory.users.count == 1)
        #expect(directory["_ann"]?.discoverable == false)
        #expect(try UserDirectory(json: directory.json) == directory)
    }
}
