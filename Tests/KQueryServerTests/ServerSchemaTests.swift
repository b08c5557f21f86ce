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
}
