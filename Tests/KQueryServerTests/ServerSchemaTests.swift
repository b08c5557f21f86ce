import KQuery
import KQueryServer
import KQueryStore
import Testing

/// `--schema FILE.ckdb`: records and queries are held to the schema, with CloudKit's messages.
@Suite struct ServerSchemaTests {
    static let schema = """
        DEFINE SCHEMA
            RECORD TYPE Event (
                title   STRING QUERYABLE SORTABLE,
                notes   STRING,
                starts  TIMESTAMP QUERYABLE SORTABLE,
                GRANT READ TO "_world"
            );
        """

    @Test func schemaIsEnforced() async throws {
        let schema = try Schema(text: Self.schema)
        try await ServerHarness { $0.schema = schema }.run { c in
            // An untyped date takes the schema's TIMESTAMP type.
            var answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "e1", "recordType": "Event",
                  "fields": {"title": {"value": "Launch"}, "starts": {"value": 1704164645000}}}}]}
                """)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["fields"]?["starts"]?["type"] == .string("TIMESTAMP"))

            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "e2", "recordType": "Event", "fields": {"color": {"value": "red"}}}}]}
                """)
            #expect(answer.status == 400)
            #expect(answer.json["reason"]?.stringValue?.contains("Cannot create new field 'color'") == true)
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "e3", "recordType": "Event", "fields": {"title": {"value": 5}}}}]}
                """)
            #expect(answer.status == 400)

            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "Event", "filterBy": [{"comparator": "EQUALS", "fieldName": "notes", "fieldValue": {"value": "x"}}]}}"#)
            #expect(answer.status == 400)
            #expect(answer.json["reason"] == .string("Field 'notes' is not marked queryable"))
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "Event", "sortBy": [{"fieldName": "notes"}]}}"#)
            #expect(answer.json["reason"] == .string("Field 'notes' is not marked sortable"))
            answer = try await c.post("public", "records/query", """
                {"query": {"recordType": "Event", "filterBy": [{"comparator": "GREATER_THAN", "fieldName": "starts", "fieldValue": {"value": 1700000000000, "type": "TIMESTAMP"}}],
                 "sortBy": [{"fieldName": "title"}]}}
                """)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?.elements.count == 1)
        }
    }

    /// Without `--schema`, the container learns one, as CloudKit's development environment does:
    /// the first save of a field fixes its type, and the learned schema outlives a restart.
    @Test func firstSaveFixesTheFieldType() async throws {
        let harness = ServerHarness()
        try await harness.run { c in
            var answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a1", "recordType": "Artwork",
                  "fields": {"price": {"value": 120}, "shown": {"value": 1704164645000, "type": "TIMESTAMP"}}}}]}
                """)
            #expect(answer.status == 200)
            // A later untyped number in a TIMESTAMP field is a date; a string in an INT64 field is refused.
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a2", "recordType": "Artwork",
                  "fields": {"price": {"value": 80}, "shown": {"value": 1704164646000}}}}]}
                """)
            #expect(answer.status == 200)
            #expect(answer.json["records"]?[0]?["fields"]?["shown"]?["type"] == .string("TIMESTAMP"))
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a3", "recordType": "Artwork", "fields": {"title": {"value": "Dusk"}}}},
                  {"operationType": "create", "record": {"recordName": "a4", "recordType": "Artwork", "fields": {"price": {"value": "cheap"}}}}]}
                """)
            #expect(answer.status == 400)
            #expect(answer.json["reason"] == .string(
                "operations[1]: invalid attempt to set value type STRING for field 'price' for type 'Artwork', defined to be: INT64"))
            // The refused request learned nothing and saved nothing.
            answer = try await c.post("public", "records/lookup", #"{"records": [{"recordName": "a3"}]}"#)
            #expect(answer.json["records"]?[0]?["serverErrorCode"] == .string("NOT_FOUND"))
            // Another record type learns its own fields.
            answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "p1", "recordType": "Painter", "fields": {"price": {"value": "n/a"}}}}]}
                """)
            #expect(answer.status == 200)
        }
        let learned = try harness.learnedSchema("iCloud.com.example.tests")
        #expect(learned["Artwork"]?.fields.map(\.type.description) == ["INT64", "TIMESTAMP"])
        #expect(learned["Painter"]?.fields.map(\.type.description) == ["STRING"])
        #expect(learned["Artwork"]?.field(FieldReference(webServicesName: "title")) == nil)
        try await ServerHarness(directory: harness.directory).run { c in
            let answer = try await c.post("public", "records/modify", """
                {"operations": [{"operationType": "create", "record": {"recordName": "a5", "recordType": "Artwork", "fields": {"price": {"value": 1.5}}}}]}
                """)
            #expect(answer.status == 400)
            #expect(answer.json["reason"]?.stringValue?.contains("value type DOUBLE for field 'price'") == true)
        }
    }
}
