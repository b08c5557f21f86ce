import KQuery
import Testing
@testable import KQueryContainer

private typealias F = ContainerFixture

@Suite struct ContainerWebServicesTests {
    @Test func modifyRequestsDecode() throws {
        let body = try JSON.parse("""
            {"operations": [
              {"operationType": "create", "record": {"recordName": "n1", "recordType": "Note",
                "fields": {"title": {"value": "Hi", "type": "STRING"},
                           "owner": {"value": {"recordName": "p", "action": "DELETE_SELF"}, "type": "REFERENCE"},
                           "tags": {"value": [{"recordName": "t1", "action": "VALIDATE"}], "type": "REFERENCE_LIST"},
                           "loose": {"recordName": "q"}}}},
              {"operationType": "forceDelete", "record": {"recordName": "old"}},
              {"operationType": "update", "record": {"recordName": "d", "recordType": "Note", "recordChangeTag": "7",
                "zoneID": {"zoneName": "_defaultZone"}}}
             ],
             "zoneID": {"zoneName": "Notes", "ownerRecordName": "_u1"}, "atomic": false}
            """)
        let request = try ModifyRequest(webServicesJSON: body)
        #expect(!request.atomic)
        #expect(request.operations.map(\.kind) == [.create, .forceDelete, .update])
        let created = request.operations[0].record
        #expect(created.recordID == RecordID(recordName: "n1", zoneID: F.zone))
        #expect(created["owner"] == .reference(Reference(recordID: RecordID(recordName: "p", zoneID: F.zone), action: .deleteSelf)))
        guard case .reference(let owner)? = created["owner"], case .list(.reference, let tags)? = created["tags"],
              case .reference(let tag) = tags.first, case .reference(let loose)? = created["loose"]
        else { Issue.record("references did not decode"); return }
        #expect(owner.recordID.zoneID == F.zone && owner.action == .deleteSelf)
        #expect(tag.recordID.zoneID == F.zone && tag.action == .validate)
        #expect(loose.recordID.zoneID == F.zone)
        #expect(request.operations[1].record.recordID == RecordID(recordName: "old", zoneID: F.zone))
        #expect(request.operations[2].record.recordID.zoneID == .default)
        #expect(request.operations[2].record.recordChangeTag == "7")
        #expect(try ModifyRequest(webServicesJSON: JSON.parse(#"{"operations": []}"#)).atomic)
    }

    @Test func malformedModifyRequestsAreRefusedClearly() throws {
        let cases: [(String, String)] = [
            (#"[]"#, "a modify request must be a JSON object"),
            (#"{}"#, "a modify request needs an \"operations\" array"),
            (#"{"operations": [1]}"#, "operations[0]: an operation must be an object"),
            (#"{"operations": [{"record": {}}]}"#, "operations[0]: no \"operationType\""),
            (#"{"operations": [{"operationType": "upsert", "record": {}}]}"#, "operations[0]: unknown operationType \"upsert\" (expected one of create, update, forceUpdate, replace, forceReplace, delete, forceDelete)"),
            (#"{"operations": [{"operationType": "create"}]}"#, "operations[0]: no \"record\" object"),
            (#"{"operations": [{"operationType": "create", "record": {"recordName": "x"}}]}"#, "operations[0]: record 'x' has no \"recordType\" string"),
            (#"{"operations": [], "atomic": "yes"}"#, "\"atomic\" must be true or false"),
            (#"{"operations": [], "zoneID": 3}"#, "\"zoneID\" must be an object"),
        ]
        for (text, expected) in cases {
            let error = containerError { _ = try ModifyRequest(webServicesJSON: JSON.parse(text)) }
            #expect(error?.code == .badRequest, "\(text)")
            #expect(error?.reason.hasPrefix(expected) == true, "\(text): \(String(describing: error))")
        }
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func responsesEncode(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        _ = try database.modify([F.operation(.create, F.record("gone", zone: F.zone)), F.operation(.create, F.record("kept", zone: F.zone))])
        let token = try database.zoneChanges(F.zone, since: nil).syncToken
        let result = try database.modify([
            F.operation(.create, F.record("n1", zone: F.zone, ["title": .string("Hi")])),
            F.operation(.forceDelete, F.record("gone", zone: F.zone)),
            F.operation(.create, F.record("kept", zone: F.zone)),
        ], atomic: false)
        let json = result.webServicesJSON()
        guard case .array(let records)? = json["records"], records.count == 3 else { Issue.record("\(json.serialized)"); return }
        #expect(records[0]["recordName"] == .string("n1"))
        #expect(records[0]["fields"]?["title"] == .object([("value", .string("Hi")), ("type", .string("STRING"))]))
        #expect(records[0]["recordChangeTag"] != nil && records[0]["created"]?["userRecordName"] == .string("_u1"))
        #expect(records[1] == .object([("recordName", .string("gone")), ("recordType", .string("Note")), ("zoneID", F.zone.json), ("deleted", .bool(true))]))
        #expect(records[2] == .object([("recordName", .string("kept")), ("zoneID", F.zone.json), ("serverErrorCode", .string("EXISTS")),
                                       ("reason", .string("record 'kept' already exists"))]))

        let changes = try database.zoneChanges(F.zone, since: token).webServicesJSON()
        #expect(changes["zoneID"] == F.zone.json)
        #expect(changes["moreComing"] == .bool(false))
        #expect(changes["syncToken"]?.stringValue?.isEmpty == false)
        guard case .array(let changed)? = changes["records"], changed.count == 2 else { Issue.record("\(changes.serialized)"); return }
        #expect(changed[0]["recordName"] == .string("n1"))
        #expect(changed[1] == .object([("recordName", .string("gone")), ("recordType", .string("Note")), ("deleted", .bool(true))]))

        try database.deleteZone(F.otherZone)
        let zones = try database.databaseChanges(since: nil).webServicesJSON
        #expect(zones["zones"] == .array([.object([("zoneID", F.zone.json)]), .object([("zoneID", F.otherZone.json), ("deleted", .bool(true))])]))
        #expect(zones["moreComing"] == .bool(false))
        #expect(ContainerError(.zoneNotFound, "zone 'X' does not exist").webServicesJSON.serialized
            == #"{"serverErrorCode":"ZONE_NOT_FOUND","reason":"zone 'X' does not exist"}"#)
    }

    @Test(arguments: ContainerFixture.Storage.allCases) func modifyRequestsRunThroughTheContainer(storage: ContainerFixture.Storage) throws {
        let database = try F.privateDatabase(F.container(storage))
        let body = try JSON.parse("""
            {"zoneID": {"zoneName": "Notes", "ownerRecordName": "_u1"}, "operations": [
              {"operationType": "create", "record": {"recordName": "parent", "recordType": "Note"}},
              {"operationType": "create", "record": {"recordName": "child", "recordType": "Note",
                "fields": {"parent": {"value": {"recordName": "parent", "action": "DELETE_SELF"}, "type": "REFERENCE"}}}}]}
            """)
        let request = try ModifyRequest(webServicesJSON: body)
        #expect(try database.modify(request.operations, atomic: request.atomic).results.allSatisfy { $0.record != nil })
        let deletion = try ModifyRequest(webServicesJSON: JSON.parse("""
            {"zoneID": {"zoneName": "Notes", "ownerRecordName": "_u1"}, "operations": [{"operationType": "forceDelete", "record": {"recordName": "parent"}}]}
            """))
        _ = try database.modify(deletion.operations)
        #expect(try database.zoneChanges(F.zone, since: nil).changes.isEmpty)
    }
}
