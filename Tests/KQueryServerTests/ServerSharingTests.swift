import KQuery
import KQueryServer
import KQueryWebServices
import Testing

/// Sharing over real HTTP on loopback (SPEC §13): shares saved with their roots, short GUIDs,
/// participants, `records/resolve` and `records/accept`, and the rules that refuse.
@Suite struct ServerSharingTests {
    static func harness() throws -> ServerHarness {
        let bob = try DirectoryUser(name: "_bob", emailAddress: "bob@example.com", givenName: "Bob", familyName: "B", discoverable: true)
        let carol = try DirectoryUser(name: "_carol", emailAddress: "carol@example.com")
        let alice = try DirectoryUser(name: "_alice", emailAddress: "alice@example.com", givenName: "Alice", discoverable: true)
        return ServerHarness { $0.users = UserDirectory(users: [alice, bob, carol]) }
    }

    static let zone = #"{"zoneName": "Lists"}"#

    /// The owner's list, an item under it and its share inviting Bob, in one modify.
    static func shareList(_ c: ServerClient, participants: String = #"[{"type": "USER", "permission": "READ_WRITE", "acceptanceStatus": "INVITED", "userIdentity": {"lookupInfo": {"emailAddress": "bob@example.com"}}}]"#) async throws -> ServerClient.Answer {
        _ = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": \#(zone)}}]}"#, user: "_alice")
        return try await c.post("private", "records/modify", """
            {"zoneID": \(zone), "atomic": true, "operations": [
              {"operationType": "create", "record": {"recordName": "List-1", "recordType": "List", "createShortGUID": true, "fields": {"title": {"value": "Groceries"}}}},
              {"operationType": "create", "record": {"recordName": "Item-1", "recordType": "Item", "parent": {"recordName": "List-1"}, "fields": {"name": {"value": "Milk"}}}},
              {"operationType": "create", "record": {"recordName": "Share-1", "recordType": "cloudKit.share", "forRecord": {"recordName": "List-1"},
                "fields": {"cloudkit.title": {"value": "Groceries"}}, "publicPermission": "NONE", "denyAccessRequests": true,
                "participants": \(participants)}}
            ]}
            """, user: "_alice")
    }

    /// The owner's zone as participants name it in the shared database.
    static let sharedZone = #"{"zoneName": "Lists", "ownerRecordName": "_alice"}"#

    /// The list shared with `participants`, accepted by each of `users`; its short GUID.
    static func shareListAccepted(_ c: ServerClient, participants: String, by users: [String]) async throws -> String {
        let saved = try await shareList(c, participants: participants)
        let guid = try #require(saved.json["records"]?[0]?["shortGUID"]?.stringValue, "\(saved.text)")
        for user in users { _ = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: user) }
        return guid
    }

    @Test func aShareIsSavedWithItsRootAndResolvedAndAcceptedByItsInvitee() async throws {
        try await Self.harness().run { c in
            let saved = try await Self.shareList(c)
            #expect(saved.status == 200, "\(saved.text)")
            let root = try #require(saved.json["records"]?[0])
            let share = try #require(saved.json["records"]?[2])
            let guid = try #require(root["shortGUID"]?.stringValue)
            #expect(root["share"]?["recordName"] == .string("Share-1"))
            #expect(share["recordType"] == .string("cloudkit.share"), "emitted in lower case")
            #expect(share["shortGUID"] == .string(guid), "a share carries its root's GUID")
            #expect(share["fields"]?["___participants"] == nil && share["participants"]?.elements.count == 2)
            #expect(share["participants"]?[0]?["type"] == .string("OWNER") && share["owner"]?["userIdentity"]?["userRecordName"] == .string("_alice"))
            #expect(share["participants"]?[1]?["participantId"]?.stringValue != nil)
            #expect(share["denyAccessRequests"] == .bool(true), "unknown share keys are kept and echoed")
            #expect(share["forRecord"]?["recordName"] == .string("List-1"))
            let item = try await c.post("private", "records/lookup", #"{"zoneID": \#(Self.zone), "records": [{"recordName": "Item-1"}]}"#, user: "_alice")
            #expect(item.json["records"]?[0]?["parent"]?["recordName"] == .string("List-1"), "a record's parent is kept")

            // Bob resolves: invited, the root fetched with the keys he asked for.
            var answer = try await c.post("public", "records/resolve", #"{"shortGUIDs": [{"value": "\#(guid)", "shouldFetchRootRecord": true, "rootRecordDesiredKeys": ["title"]}]}"#, user: "_bob")
            var result = try #require(answer.json["results"]?[0], "\(answer.text)")
            #expect(result["participantStatus"] == .string("INVITED") && result["participantType"] == .string("USER"), "\(answer.text)")
            #expect(result["participantPermission"] == .string("READ_WRITE") && result["databaseScope"] == .string("SHARED"))
            #expect(result["rootRecordName"] == .string("List-1") && result["rootRecord"]?["fields"]?["title"]?["value"] == .string("Groceries"))
            #expect(result["zoneID"]?["ownerRecordName"] == .string("_alice"))
            #expect(result["ownerIdentity"]?["nameComponents"]?["givenName"] == .string("Alice"))
            #expect(result["share"]?["currentUserParticipant"]?["acceptanceStatus"] == .string("INVITED"))

            // Accepting is idempotent; the owner then sees Bob by name, accepted.
            for _ in 0..<2 {
                answer = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: "_bob")
                result = try #require(answer.json["results"]?[0])
                #expect(result["participantStatus"] == .string("ACCEPTED"), "\(answer.text)")
                #expect(result["rootRecord"] == nil, "the root only when asked for")
            }
            answer = try await c.post("private", "records/lookup", #"{"zoneID": \#(Self.zone), "records": [{"recordName": "Share-1"}]}"#, user: "_alice")
            let bob = answer.json["records"]?[0]?["participants"]?.elements.first { $0["type"] == .string("USER") }
            #expect(bob?["acceptanceStatus"] == .string("ACCEPTED") && bob?["userIdentity"]?["userRecordName"] == .string("_bob"))

            // The owner resolves her own share: PRIVATE, OWNER.
            answer = try await c.post("public", "records/resolve", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: "_alice")
            #expect(answer.json["results"]?[0]?["databaseScope"] == .string("PRIVATE") && answer.json["results"]?[0]?["participantType"] == .string("OWNER"))
        }
    }

    @Test func aShareListedBeforeItsRootCarriesTheRootsGUID() async throws {
        try await Self.harness().run { c in
            _ = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": \#(Self.zone)}}]}"#, user: "_alice")
            let answer = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "create", "record": {"recordName": "S", "recordType": "cloudkit.share", "forRecord": {"recordName": "R"}}}, {"operationType": "create", "record": {"recordName": "R", "recordType": "List", "createShortGUID": true}}]}"#, user: "_alice")
            let guid = answer.json["records"]?[1]?["shortGUID"]?.stringValue
            #expect(guid != nil && answer.json["records"]?[0]?["shortGUID"]?.stringValue == guid, "\(answer.text)")
            #expect(answer.json["records"]?[1]?["share"]?["recordName"] == .string("S"))
        }
    }

    @Test func aParticipantReadsAndEditsTheShareInTheSharedDatabase() async throws {
        try await Self.harness().run { c in
            let participants = #"[{"type": "USER", "permission": "READ_WRITE", "userIdentity": {"lookupInfo": {"emailAddress": "bob@example.com"}}}, {"type": "USER", "permission": "READ_ONLY", "userIdentity": {"userRecordName": "_carol"}}]"#
            let saved = try await Self.shareList(c, participants: participants)
            let guid = try #require(saved.json["records"]?[0]?["shortGUID"]?.stringValue, "\(saved.text)")
            // A record of the same zone outside the share.
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "create", "record": {"recordName": "Secret", "recordType": "Item", "fields": {"name": {"value": "Diary"}}}}]}"#, user: "_alice")
            let sharedZone = Self.sharedZone

            // Before accepting, the shared database shows nothing.
            var answer = try await c.get("shared", "zones/list", user: "_bob")
            #expect(answer.json["zones"]?.elements.isEmpty == true, "\(answer.text)")
            for user in ["_bob", "_carol"] {
                _ = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: user)
            }
            answer = try await c.get("shared", "zones/list", user: "_bob")
            #expect(answer.json["zones"]?.elements.compactMap { $0["zoneID"]?["ownerRecordName"]?.stringValue } == ["_alice"], "\(answer.text)")

            // Bob reads the list and its item, never the record outside the share.
            answer = try await c.post("shared", "records/query", #"{"zoneID": \#(sharedZone), "query": {"recordType": "Item"}}"#, user: "_bob")
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["Item-1"], "\(answer.text)")
            answer = try await c.post("shared", "records/lookup", #"{"zoneID": \#(sharedZone), "records": [{"recordName": "List-1"}, {"recordName": "Secret"}, {"recordName": "Share-1"}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["fields"]?["title"]?["value"] == .string("Groceries"))
            #expect(answer.json["records"]?[1]?["serverErrorCode"] == .string("NOT_FOUND") && !answer.text.contains("Diary"))
            #expect(answer.json["records"]?[2]?["recordType"] == .string("cloudkit.share"))
            answer = try await c.post("shared", "changes/zone", #"{"zones": [{"zoneID": \#(sharedZone)}]}"#, user: "_bob")
            let changed = answer.json["zones"]?[0]?["records"]?.elements ?? []
            #expect(!answer.text.contains("Diary") && changed.contains { $0["recordName"] == .string("Item-1") && $0["fields"] != nil }, "\(answer.text)")

            // Bob edits the item and adds one under the list; Alice sees both, stamped by Bob.
            let tag = try #require(try await c.post("shared", "records/lookup", #"{"zoneID": \#(sharedZone), "records": [{"recordName": "Item-1"}]}"#, user: "_bob").json["records"]?[0]?["recordChangeTag"]?.stringValue)
            answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "operations": [{"operationType": "update", "record": {"recordName": "Item-1", "recordType": "Item", "recordChangeTag": "\#(tag)", "fields": {"name": {"value": "Oat milk"}}}}, {"operationType": "create", "record": {"recordName": "Item-2", "recordType": "Item", "parent": {"recordName": "List-1"}, "fields": {"name": {"value": "Bread"}}}}]}"#, user: "_bob")
            #expect(answer.status == 200 && answer.json["records"]?.elements.allSatisfy { $0["serverErrorCode"] == nil } == true, "\(answer.text)")
            answer = try await c.post("private", "records/lookup", #"{"zoneID": \#(Self.zone), "records": [{"recordName": "Item-1"}, {"recordName": "Item-2"}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["fields"]?["name"]?["value"] == .string("Oat milk"))
            #expect(answer.json["records"]?[0]?["modified"]?["userRecordName"] == .string("_bob") && answer.json["records"]?[1]?["recordName"] == .string("Item-2"))

            // Refused: outside the share, the root's deletion, the share, and any write of a READ_ONLY participant.
            let refusals: [(String, String)] = [
                ("_bob", #"{"operationType": "create", "record": {"recordName": "Loose", "recordType": "Item", "fields": {}}}"#),
                ("_bob", #"{"operationType": "forceUpdate", "record": {"recordName": "Secret", "recordType": "Item", "fields": {"name": {"value": "x"}}}}"#),
                ("_bob", #"{"operationType": "forceDelete", "record": {"recordName": "List-1", "recordType": "List"}}"#),
                ("_bob", #"{"operationType": "forceUpdate", "record": {"recordName": "Share-1", "recordType": "cloudkit.share", "publicPermission": "READ_WRITE"}}"#),
                ("_carol", #"{"operationType": "forceUpdate", "record": {"recordName": "Item-1", "recordType": "Item", "fields": {"name": {"value": "x"}}}}"#),
            ]
            for (user, operation) in refusals {
                answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "atomic": false, "operations": [\#(operation)]}"#, user: user)
                #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ACCESS_DENIED"), "\(user) \(operation): \(answer.text)")
            }
            answer = try await c.post("private", "records/lookup", #"{"zoneID": \#(Self.zone), "records": [{"recordName": "Secret"}, {"recordName": "Loose"}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["fields"]?["name"]?["value"] == .string("Diary") && answer.json["records"]?[1]?["serverErrorCode"] == .string("NOT_FOUND"))

            // Dave, never invited, sees no zone and reaches nothing.
            answer = try await c.get("shared", "zones/list", user: "_dave")
            #expect(answer.json["zones"]?.elements.isEmpty == true)
            answer = try await c.post("shared", "records/lookup", #"{"zoneID": \#(sharedZone), "records": [{"recordName": "List-1"}]}"#, user: "_dave")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ZONE_NOT_FOUND") && !answer.text.contains("Groceries"))
            answer = try await c.post("shared", "records/query", #"{"zoneID": \#(sharedZone), "query": {"recordType": "Item"}}"#, user: "_dave")
            #expect(answer.status == 404 && !answer.text.contains("Milk"))
            answer = try await c.post("shared", "changes/zone", #"{"zones": [{"zoneID": \#(sharedZone)}]}"#, user: "_dave")
            #expect(answer.json["zones"]?[0]?["serverErrorCode"] == .string("ZONE_NOT_FOUND") && !answer.text.contains("Milk"))
            answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "operations": [{"operationType": "forceDelete", "record": {"recordName": "Item-1"}}]}"#, user: "_dave")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ZONE_NOT_FOUND"))

            // Bob's database changes: the zone, then nothing, then the zone again once Alice changes it.
            answer = try await c.post("shared", "changes/database", "{}", user: "_bob")
            #expect(answer.json["zones"]?.elements.compactMap { $0["zoneID"]?["ownerRecordName"]?.stringValue } == ["_alice"], "\(answer.text)")
            var token = try #require(answer.json["syncToken"]?.stringValue)
            answer = try await c.post("shared", "changes/database", #"{"syncToken": "\#(token)"}"#, user: "_bob")
            #expect(answer.json["zones"]?.elements.isEmpty == true, "\(answer.text)")
            // A record of the zone outside the share changes nothing Bob sees.
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "create", "record": {"recordName": "Private-1", "recordType": "Item", "fields": {"name": {"value": "Gift"}}}}]}"#, user: "_alice")
            answer = try await c.post("shared", "changes/database", #"{"syncToken": "\#(token)"}"#, user: "_bob")
            #expect(answer.json["zones"]?.elements.isEmpty == true, "a change outside the share: \(answer.text)")
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "forceUpdate", "record": {"recordName": "List-1", "recordType": "List", "fields": {"title": {"value": "Shopping"}}}}]}"#, user: "_alice")
            answer = try await c.post("shared", "changes/database", #"{"syncToken": "\#(token)"}"#, user: "_bob")
            #expect(answer.json["zones"]?.elements.count == 1 && answer.json["zones"]?[0]?["deleted"] != .bool(true), "\(answer.text)")
            token = try #require(answer.json["syncToken"]?.stringValue)
            // Dave's token says nothing of Alice's zones; Bob's token is refused to Dave.
            answer = try await c.post("shared", "changes/database", #"{"syncToken": "\#(token)"}"#, user: "_dave")
            #expect(answer.status == 400)

            // The owner unshares: the zone leaves Bob's shared database, as a deletion in his database changes.
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "forceDelete", "record": {"recordName": "Share-1", "recordType": "cloudkit.share"}}]}"#, user: "_alice")
            answer = try await c.post("shared", "changes/database", #"{"syncToken": "\#(token)"}"#, user: "_bob")
            #expect(answer.json["zones"]?.elements.count == 1 && answer.json["zones"]?[0]?["deleted"] == .bool(true), "\(answer.text)")
            answer = try await c.get("shared", "zones/list", user: "_bob")
            #expect(answer.json["zones"]?.elements.isEmpty == true, "\(answer.text)")
            answer = try await c.post("shared", "records/lookup", #"{"zoneID": \#(sharedZone), "records": [{"recordName": "List-1"}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ZONE_NOT_FOUND"))
        }
    }

    @Test func aParticipantsDatabaseSubscriptionFiresWithDatabaseScopeThree() async throws {
        try await Self.harness().run { c in
            let saved = try await Self.shareList(c)
            let guid = try #require(saved.json["records"]?[0]?["shortGUID"]?.stringValue)
            _ = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: "_bob")
            var answer = try await c.post("shared", "subscriptions/modify", #"{"operations": [{"operationType": "create", "subscription": {"subscriptionID": "shared-db", "subscriptionType": "database", "notificationInfo": {"shouldSendContentAvailable": true}}}]}"#, user: "_bob")
            #expect(answer.json["subscriptions"]?[0]?["serverErrorCode"] == nil, "\(answer.text)")
            answer = try await c.post("shared", "subscriptions/modify", #"{"operations": [{"operationType": "create", "subscription": {"subscriptionID": "q", "subscriptionType": "query", "query": {"recordType": "Item"}, "firesOn": ["create"], "notificationInfo": {"shouldSendContentAvailable": true}}}]}"#, user: "_bob")
            #expect(answer.json["subscriptions"]?[0]?["serverErrorCode"] == .string("BAD_REQUEST"), "query subscriptions are refused in the shared database: \(answer.text)")

            let container = try #require(c.server).containers.container(c.container)
            let before = try container.pendingNotifications(limit: 1000).count
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "create", "record": {"recordName": "Item-9", "recordType": "Item", "parent": {"recordName": "List-1"}, "fields": {"name": {"value": "Eggs"}}}}]}"#, user: "_alice")
            let pushes = try container.pendingNotifications(limit: 1000).dropFirst(before)
            let bobs = pushes.filter { $0.owner == "_bob" }
            #expect(bobs.count == 1, "\(pushes.map(\.payload.serialized))")
            let met = bobs.first?.payload["ck"]?["met"]
            #expect(met?["dbs"] == .int(3) && met?["sid"] == .string("shared-db"), "\(bobs.map(\.payload.serialized))")

            // A record of the zone outside the shared hierarchy is none of Bob's business; moving
            // one into it, and out again, is.
            var count = try container.pendingNotifications(limit: 1000).count
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "create", "record": {"recordName": "Private-1", "recordType": "Item", "fields": {"name": {"value": "Gift"}}}}]}"#, user: "_alice")
            #expect(!(try container.pendingNotifications(limit: 1000).dropFirst(count).contains { $0.owner == "_bob" }))
            for parent in [#"{"recordName": "List-1"}"#, "null"] {
                count = try container.pendingNotifications(limit: 1000).count
                _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "forceUpdate", "record": {"recordName": "Private-1", "recordType": "Item", "parent": \#(parent), "fields": {"name": {"value": "Gift"}}}}]}"#, user: "_alice")
                #expect(try container.pendingNotifications(limit: 1000).dropFirst(count).filter { $0.owner == "_bob" }.count == 1, "parent \(parent)")
            }

            // A user who did not accept gets nothing.
            _ = try await c.post("shared", "subscriptions/modify", #"{"operations": [{"operationType": "create", "subscription": {"subscriptionID": "d", "subscriptionType": "database", "notificationInfo": {"shouldSendContentAvailable": true}}}]}"#, user: "_dave")
            count = try container.pendingNotifications(limit: 1000).count
            _ = try await c.post("private", "records/modify", #"{"zoneID": \#(Self.zone), "operations": [{"operationType": "forceDelete", "record": {"recordName": "Item-9"}}]}"#, user: "_alice")
            let later = try container.pendingNotifications(limit: 1000).dropFirst(count)
            #expect(!later.contains { $0.owner == "_dave" } && later.filter { $0.owner == "_bob" }.count == 1)
        }
    }

    @Test func aZoneSharedWholeIsReadAndEditedAndARemovedParticipantLosesIt() async throws {
        try await Self.harness().run { c in
            _ = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Team"}}}]}"#, user: "_alice")
            var answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Team"}, "operations": [{"operationType": "create", "record": {"recordName": "Note-1", "recordType": "Note", "fields": {"text": {"value": "Hello"}}}}, {"operationType": "create", "record": {"recordName": "cloudkit.zoneshare", "recordType": "cloudkit.share", "participants": [{"type": "USER", "permission": "READ_WRITE", "userIdentity": {"lookupInfo": {"emailAddress": "bob@example.com"}}}]}}]}"#, user: "_alice")
            let guid = try #require(answer.json["records"]?[1]?["shortGUID"]?.stringValue, "\(answer.text)")
            _ = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: "_bob")
            let team = #"{"zoneName": "Team", "ownerRecordName": "_alice"}"#
            // The whole zone: a record with no parent is shared too, and Bob adds one of his own.
            answer = try await c.post("shared", "records/query", #"{"zoneID": \#(team), "query": {"recordType": "Note"}}"#, user: "_bob")
            #expect(answer.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } == ["Note-1"], "\(answer.text)")
            answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(team), "operations": [{"operationType": "create", "record": {"recordName": "Note-2", "recordType": "Note", "fields": {"text": {"value": "Hi"}}}}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["created"]?["userRecordName"] == .string("_bob"), "\(answer.text)")
            answer = try await c.post("shared", "changes/database", "{}", user: "_bob")
            let token = try #require(answer.json["syncToken"]?.stringValue)
            #expect(answer.json["zones"]?.elements.count == 1)

            // Alice removes Bob from the share (the whole list, without him): the zone leaves his database.
            answer = try await c.post("private", "records/lookup", #"{"zoneID": {"zoneName": "Team"}, "records": [{"recordName": "cloudkit.zoneshare"}]}"#, user: "_alice")
            let tag = try #require(answer.json["records"]?[0]?["recordChangeTag"]?.stringValue)
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Team"}, "operations": [{"operationType": "update", "record": {"recordName": "cloudkit.zoneshare", "recordType": "cloudkit.share", "recordChangeTag": "\#(tag)", "participants": []}}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["participants"]?.elements.count == 1, "only the owner is left: \(answer.text)")
            answer = try await c.post("shared", "changes/database", #"{"syncToken": "\#(token)"}"#, user: "_bob")
            #expect(answer.json["zones"]?.elements.count == 1 && answer.json["zones"]?[0]?["deleted"] == .bool(true), "\(answer.text)")
            answer = try await c.post("shared", "records/query", #"{"zoneID": \#(team), "query": {"recordType": "Note"}}"#, user: "_bob")
            #expect(answer.status == 404 && !answer.text.contains("Hello"))
        }
    }

    @Test func anAdministratorChangesParticipantsAnOrdinaryParticipantCannot() async throws {
        try await Self.harness().run { c in
            let participants = #"[{"type": "ADMINISTRATOR", "permission": "READ_WRITE", "userIdentity": {"userRecordName": "_bob"}}, {"type": "USER", "permission": "READ_WRITE", "userIdentity": {"userRecordName": "_carol"}}]"#
            _ = try await Self.shareListAccepted(c, participants: participants, by: ["_bob", "_carol"])
            let sharedZone = Self.sharedZone
            func share(_ user: String) async throws -> JSON? {
                try await c.post("shared", "records/lookup", #"{"zoneID": \#(sharedZone), "records": [{"recordName": "Share-1"}]}"#, user: user).json["records"]?[0]
            }
            // Carol may not; Bob, an administrator, invites Dave and makes Carol read-only.
            var current = try #require(try await share("_carol"))
            var answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "operations": [{"operationType": "update", "record": {"recordName": "Share-1", "recordType": "cloudkit.share", "recordChangeTag": "\#(current["recordChangeTag"]?.stringValue ?? "")", "participants": []}}]}"#, user: "_carol")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ACCESS_DENIED"), "\(answer.text)")
            current = try #require(try await share("_bob"))
            let kept = current["participants"]?.elements.filter { $0["type"] != .string("OWNER") }.map { entry -> JSON in
                guard entry["userIdentity"]?["userRecordName"] == .string("_carol"), case .object(var members) = entry else { return entry }
                if let at = members.firstIndex(where: { $0.0 == "permission" }) { members[at].1 = .string("READ_ONLY") }
                return .object(members)
            } ?? []
            let changed = JSON.array(kept + [.object([("type", .string("USER")), ("permission", .string("READ_ONLY")), ("userIdentity", .object([("userRecordName", .string("_dave"))]))])])
            answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "operations": [{"operationType": "update", "record": {"recordName": "Share-1", "recordType": "cloudkit.share", "recordChangeTag": "\#(current["recordChangeTag"]?.stringValue ?? "")", "participants": \#(changed.serialized)}}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == nil, "\(answer.text)")
            let entries = answer.json["records"]?[0]?["participants"]?.elements ?? []
            #expect(entries.first?["userIdentity"]?["userRecordName"] == .string("_alice") && entries.first?["type"] == .string("OWNER"), "the owner stays the owner")
            #expect(entries.contains { $0["userIdentity"]?["userRecordName"] == .string("_dave") })
            // Carol is read-only now.
            answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "operations": [{"operationType": "forceUpdate", "record": {"recordName": "Item-1", "recordType": "Item", "fields": {"name": {"value": "x"}}}}]}"#, user: "_carol")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ACCESS_DENIED"), "\(answer.text)")
        }
    }

    @Test func aParticipantLeavesByDeletingTheShareOrTheZone() async throws {
        try await Self.harness().run { c in
            let participants = #"[{"type": "USER", "permission": "READ_WRITE", "userIdentity": {"userRecordName": "_bob"}}, {"type": "USER", "permission": "READ_ONLY", "userIdentity": {"userRecordName": "_carol"}}]"#
            _ = try await Self.shareListAccepted(c, participants: participants, by: ["_bob", "_carol"])
            let sharedZone = Self.sharedZone
            // An atomic request with a refused operation (the root's deletion) leaves nothing: not the share either.
            var answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "atomic": true, "operations": [{"operationType": "forceDelete", "record": {"recordName": "Share-1", "recordType": "cloudkit.share"}}, {"operationType": "forceDelete", "record": {"recordName": "List-1"}}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("ATOMIC_ERROR"), "\(answer.text)")
            #expect(answer.json["records"]?[1]?["serverErrorCode"] == .string("ACCESS_DENIED"), "\(answer.text)")
            answer = try await c.get("shared", "zones/list", user: "_bob")
            #expect(answer.json["zones"]?.elements.count == 1, "\(answer.text)")
            answer = try await c.post("shared", "records/modify", #"{"zoneID": \#(sharedZone), "operations": [{"operationType": "forceDelete", "record": {"recordName": "Share-1", "recordType": "cloudkit.share"}}]}"#, user: "_bob")
            #expect(answer.json["records"]?[0]?["deleted"] == .bool(true), "\(answer.text)")
            answer = try await c.post("shared", "zones/modify", #"{"operations": [{"operationType": "delete", "zone": {"zoneID": \#(sharedZone)}}]}"#, user: "_carol")
            #expect(answer.json["zones"]?[0]?["deleted"] == .bool(true), "\(answer.text)")
            for user in ["_bob", "_carol"] {
                answer = try await c.get("shared", "zones/list", user: user)
                #expect(answer.json["zones"]?.elements.isEmpty == true, "\(user): \(answer.text)")
            }
            // The share stays for its owner, both marked REMOVED; the list is untouched.
            answer = try await c.post("private", "records/lookup", #"{"zoneID": \#(Self.zone), "records": [{"recordName": "Share-1"}, {"recordName": "List-1"}]}"#, user: "_alice")
            let statuses = answer.json["records"]?[0]?["participants"]?.elements.filter { $0["type"] != .string("OWNER") }.map { $0["acceptanceStatus"] }
            #expect(statuses == [.string("REMOVED"), .string("REMOVED")], "\(answer.text)")
            #expect(answer.json["records"]?[1]?["share"]?["recordName"] == .string("Share-1"))
        }
    }

    @Test func othersCannotResolveIntoAPrivateShare() async throws {
        try await Self.harness().run { c in
            let saved = try await Self.shareList(c)
            let guid = try #require(saved.json["records"]?[0]?["shortGUID"]?.stringValue)
            for operation in ["records/resolve", "records/accept"] {
                let answer = try await c.post("public", operation, #"{"shortGUIDs": [{"value": "\#(guid)", "shouldFetchRootRecord": true}]}"#, user: "_carol")
                let result = answer.json["results"]?[0]
                #expect(result?["serverErrorCode"] == .string("ACCESS_DENIED"), "\(answer.text)")
                #expect(result?["rootRecord"] == nil && result?["share"] == nil && !answer.text.contains("Groceries"))
            }
            let unknown = try await c.post("public", "records/resolve", #"{"shortGUIDs": [{"value": "nope"}]}"#, user: "_carol")
            #expect(unknown.json["results"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))
            #expect(try await c.post("private", "records/resolve", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: "_carol").status == 400)
            #expect(try await c.post("public", "records/resolve", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#).status == 421)
            #expect(try await c.post("public", "records/resolve", #"{"shortGUIDs": 3}"#, user: "_carol").status == 400)
        }
    }

    /// An invitation to an address no user has verified may be the caller's: resolving lists it
    /// (`potentialMatchList`) without the share; accepting is refused until it is verified.
    @Test func anUnverifiedInvitationIsAPotentialMatchNotAnEntry() async throws {
        try await Self.harness().run { c in
            let participants = #"[{"type": "USER", "permission": "READ_ONLY", "userIdentity": {"lookupInfo": {"emailAddress": "dave@example.net"}}},"#
                + #" {"type": "USER", "permission": "READ_ONLY", "userIdentity": {"lookupInfo": {"emailAddress": "bob@example.com"}}}]"#
            let saved = try await Self.shareList(c, participants: participants)
            let guid = try #require(saved.json["records"]?[0]?["shortGUID"]?.stringValue, "\(saved.text)")
            let dave = try #require(saved.json["records"]?[2]?["participants"]?.elements.first {
                $0["userIdentity"]?["lookupInfo"]?["emailAddress"] == .string("dave@example.net")
            })
            var answer = try await c.post("public", "records/resolve", #"{"shortGUIDs": [{"value": "\#(guid)", "shouldFetchRootRecord": true}]}"#, user: "_carol")
            let result = try #require(answer.json["results"]?[0], "\(answer.text)")
            let matches = result["potentialMatchList"]?.elements ?? []
            #expect(matches.count == 1, "only the address no user has: \(answer.text)")
            #expect(matches.first?["participantId"] == dave["participantId"])
            #expect(matches.first?["contactInformation"]?["emailAddress"] == .string("dave@example.net"))
            #expect(result["share"] == nil && result["rootRecord"] == nil && !answer.text.contains("Groceries"), "\(answer.text)")
            #expect(result["ownerIdentity"]?["userRecordName"] == .string("_alice"))
            answer = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)"}]}"#, user: "_carol")
            #expect(answer.json["results"]?[0]?["serverErrorCode"] == .string("ACCESS_DENIED"), "\(answer.text)")
            #expect(answer.json["results"]?[0]?["reason"]?.stringValue?.hasPrefix("PARTICIPANT_MAY_NEED_VERIFICATION") == true)
            let share = try await c.post("private", "records/lookup", #"{"zoneID": \#(Self.zone), "records": [{"recordName": "Share-1"}]}"#, user: "_alice")
            #expect(share.json["records"]?[0]?["participants"]?.elements.count == 3, "a refused accept changes nothing")
        }
    }

    @Test func sharingRulesRefuse() async throws {
        try await Self.harness().run { c in
            _ = try await Self.shareList(c)
            func save(_ record: String, database: String = "private", zone: String? = Self.zone) async throws -> JSON? {
                let zoneMember = zone.map { #""zoneID": \#($0), "# } ?? ""
                let answer = try await c.post(database, "records/modify", #"{\#(zoneMember)"operations": [{"operationType": "create", "record": \#(record)}]}"#, user: "_alice")
                return answer.json["records"]?[0] ?? answer.json
            }
            let second = try await save(#"{"recordName": "Share-2", "recordType": "cloudkit.share", "forRecord": {"recordName": "List-1"}}"#)
            #expect(second?["reason"]?.stringValue?.hasPrefix("ALREADY_SHARED") == true, "\(second?.serialized ?? "")")
            let inDefaultZone = try await save(#"{"recordName": "S", "recordType": "cloudkit.share", "forRecord": {"recordName": "x"}}"#, zone: nil)
            #expect(inDefaultZone?["serverErrorCode"] == .string("BAD_REQUEST"))
            let inPublic = try await save(#"{"recordName": "S", "recordType": "cloudkit.share", "forRecord": {"recordName": "x"}}"#, database: "public", zone: nil)
            #expect(inPublic?["serverErrorCode"] == .string("BAD_REQUEST"))
            let rootless = try await save(#"{"recordName": "S", "recordType": "cloudkit.share", "forRecord": {"recordName": "missing"}}"#)
            #expect(rootless?["serverErrorCode"] == .string("VALIDATING_REFERENCE_ERROR"))
            let noRoot = try await save(#"{"recordName": "S", "recordType": "cloudkit.share"}"#)
            #expect(noRoot?["serverErrorCode"] == .string("BAD_REQUEST"))
            let many = "[" + (0..<100).map { #"{"userIdentity": {"lookupInfo": {"emailAddress": "u\#($0)@example.com"}}}"# }.joined(separator: ",") + "]"
            _ = try await save(#"{"recordName": "List-2", "recordType": "List", "fields": {}}"#)
            let crowded = try await save(#"{"recordName": "S2", "recordType": "cloudkit.share", "forRecord": {"recordName": "List-2"}, "participants": \#(many)}"#)
            #expect(crowded?["reason"]?.stringValue?.hasPrefix("TOO_MANY_PARTICIPANTS") == true, "\(crowded?.serialized ?? "")")
            let badEnum = try await save(#"{"recordName": "S3", "recordType": "cloudkit.share", "forRecord": {"recordName": "List-2"}, "participants": [{"permission": "ALL", "userIdentity": {"userRecordName": "_bob"}}]}"#)
            #expect(badEnum?["serverErrorCode"] == .string("BAD_REQUEST"))
            let reserved = try await save(#"{"recordName": "r", "recordType": "List", "fields": {"___shortGUID": {"value": "forged"}}}"#)
            #expect(reserved?["serverErrorCode"] == .string("BAD_REQUEST"), "clients cannot write reserved fields")
        }
    }

    @Test func zoneWideSharesAndTheTwoStepHierarchyShare() async throws {
        try await Self.harness().run { c in
            _ = try await c.post("private", "zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Team"}}}, {"operationType": "create", "zone": {"zoneID": {"zoneName": "Lists"}}}]}"#, user: "_alice")
            let zoneShare = #"{"zoneID": {"zoneName": "Team"}, "operations": [{"operationType": "create", "record": {"recordName": "cloudkit.zoneshare", "recordType": "cloudkit.share", "publicPermission": "READ_ONLY", "fields": {"cloudkit.title": {"value": "Team"}}}}]}"#
            var answer = try await c.post("private", "records/modify", zoneShare, user: "_alice")
            let guid = try #require(answer.json["records"]?[0]?["shortGUID"]?.stringValue, "\(answer.text)")
            #expect(answer.json["records"]?[0]?["forRecord"] == nil)
            answer = try await c.post("private", "records/modify", zoneShare, user: "_alice")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("EXISTS"))
            // Public: anyone with the link joins as a PUBLIC_USER with the public permission.
            answer = try await c.post("public", "records/accept", #"{"shortGUIDs": [{"value": "\#(guid)", "shouldFetchRootRecord": true}]}"#, user: "_carol")
            let result = answer.json["results"]?[0]
            #expect(result?["participantType"] == .string("PUBLIC_USER") && result?["participantPermission"] == .string("READ_ONLY"), "\(answer.text)")
            #expect(result?["rootRecordName"] == nil && result?["rootRecord"] == nil, "a zone-wide share has no root")
            let hierarchy = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Team"}, "operations": [{"operationType": "create", "record": {"recordName": "R", "recordType": "List"}}, {"operationType": "create", "record": {"recordName": "S", "recordType": "cloudkit.share", "forRecord": {"recordName": "R"}}}]}"#, user: "_alice")
            #expect(hierarchy.json["records"]?[1]?["reason"]?.stringValue?.hasPrefix("ALREADY_SHARED") == true, "\(hierarchy.text)")

            // Apple's two steps: the root first (with a GUID), its share in a later modify.
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Lists"}, "operations": [{"operationType": "create", "record": {"recordName": "L", "recordType": "List", "createShortGUID": true}}]}"#, user: "_alice")
            let rootGUID = try #require(answer.json["records"]?[0]?["shortGUID"]?.stringValue)
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Lists"}, "operations": [{"operationType": "create", "record": {"recordName": "LS", "recordType": "cloudkit.share", "forRecord": {"recordName": "L", "recordChangeTag": "x"}}}]}"#, user: "_alice")
            #expect(answer.json["records"]?.elements.count == 1 && answer.json["records"]?[0]?["shortGUID"] == .string(rootGUID), "\(answer.text)")
            answer = try await c.post("private", "records/lookup", #"{"zoneID": {"zoneName": "Lists"}, "records": [{"recordName": "L"}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["share"]?["recordName"] == .string("LS") && answer.json["records"]?[0]?["shortGUID"] == .string(rootGUID))

            // Unsharing clears the root's share; deleting a root deletes its share.
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Lists"}, "operations": [{"operationType": "forceDelete", "record": {"recordName": "LS", "recordType": "cloudkit.share"}}]}"#, user: "_alice")
            #expect(answer.status == 200, "\(answer.text)")
            answer = try await c.post("private", "records/lookup", #"{"zoneID": {"zoneName": "Lists"}, "records": [{"recordName": "L"}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["share"] == nil && answer.json["records"]?[0]?["shortGUID"] == .string(rootGUID), "the GUID stays for a reshare")
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Lists"}, "operations": [{"operationType": "create", "record": {"recordName": "LS2", "recordType": "cloudkit.share", "forRecord": {"recordName": "L"}}}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["shortGUID"] == .string(rootGUID), "a reshare keeps the root's GUID")
            answer = try await c.post("private", "records/modify", #"{"zoneID": {"zoneName": "Lists"}, "operations": [{"operationType": "forceDelete", "record": {"recordName": "L"}}]}"#, user: "_alice")
            answer = try await c.post("private", "records/lookup", #"{"zoneID": {"zoneName": "Lists"}, "records": [{"recordName": "LS2"}]}"#, user: "_alice")
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))
        }
    }
}
