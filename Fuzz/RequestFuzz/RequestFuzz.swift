import KQuery
import KQueryContainer
import KQueryStore
import KQueryWebServices

/// libFuzzer entry point for the server's request decoding: each input is a short session of
/// Web Services requests against a fresh in-memory container, one per line, the line's first byte
/// choosing the operation and the rest its JSON body. It runs what `kquery serve` runs for a
/// request once the HTTP layer has read it (parse, decode, authorize-free operation, encode).
///
/// Traps when a promise breaks: a refused request changed the container (a half-applied modify),
/// an answer's JSON does not read back as itself, or a status is not one Web Services documents.
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard let container = try? Container(containerIdentifier: "iCloud.fuzz"),
          let database = try? container.database(.private, user: "_fuzz"),
          let publicDatabase = try? container.database(.public, user: "_fuzz")
    else { preconditionFailure("cannot open an in-memory container") }
    let service = DatabaseService(database: database, schema: RequestFuzz.schema(for: data, size))
    // The user endpoints answer on the public database only (the private one refuses them all alike).
    let userService = DatabaseService(database: publicDatabase, users: RequestFuzz.users)
    for line in UnsafeBufferPointer(start: data, count: size).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).prefix(8) {
        let operation = RequestFuzz.operations[Int(line[line.startIndex]) % RequestFuzz.operations.count]
        let text = String(decoding: line.dropFirst(), as: UTF8.self)
        guard let body = try? JSON.parse(text) else { continue }
        let before = RequestFuzz.state(of: database, container)
        do {
            let answer = try (operation.hasPrefix("users/") ? userService : service).run(operation, body)
            precondition(RequestFuzz.statuses.contains(answer.status), "\(operation): status \(answer.status)")
            RequestFuzz.checkRoundTrip(answer.json, operation)
        } catch {
            precondition(RequestFuzz.statuses.contains(error.httpStatus), "\(operation): status \(error.httpStatus) for \(error)")
            RequestFuzz.checkRoundTrip(error.webServicesJSON, operation)
            precondition(RequestFuzz.state(of: database, container) == before, "\(operation) was refused but changed the container:\n\(text)")
        }
    }
    return 0
}

enum RequestFuzz {
    static let operations = [
        "records/modify", "records/query", "records/lookup", "records/changes", "changes/zone", "changes/database",
        "zones/changes", "zones/list", "zones/lookup", "zones/modify", "subscriptions/list", "subscriptions/lookup",
        "subscriptions/modify", "users/current", "records/modify", "records/query",
        // 24 in all, so the seeds' first bytes ('0' and on) pick what they picked among the first 16.
        "users/caller", "users/discover", "users/lookup/email", "users/lookup/id", "users/discover", "records/modify", "zones/modify",
        "subscriptions/modify",
    ]

    /// A directory with a discoverable and an undiscoverable user, for the user endpoints.
    static let users = UserDirectory(users: [
        try? DirectoryUser(name: "_ann", emailAddress: "Ann@Example.com", phoneNumber: "+1 555 0100", givenName: "Ann", discoverable: true),
        try? DirectoryUser(name: "_bo", emailAddress: "bo@example.com", phoneNumber: "555-0101"),
    ].compactMap { $0 })

    /// Every HTTP status a Web Services answer may carry (SPEC §11).
    static let statuses: Set<Int> = [200, 400, 401, 403, 404, 409, 412, 413, 421, 429, 500, 503]

    /// Half of the inputs run with a schema (the `.ckdb` path: coercion and index checks), half
    /// without, chosen by the input's length so a mutation can flip it.
    static func schema(for data: UnsafePointer<UInt8>, _ size: Int) -> Schema? {
        size % 2 == 0 ? nil : fuzzSchema
    }

    static let fuzzSchema: Schema? = try? Schema(text: """
        DEFINE SCHEMA
        RECORD TYPE T (
            "___recordID" REFERENCE QUERYABLE,
            a INT64 QUERYABLE SORTABLE,
            name STRING QUERYABLE SEARCHABLE SORTABLE,
            t TIMESTAMP QUERYABLE SORTABLE,
            location LOCATION QUERYABLE SORTABLE,
            tags LIST<STRING> QUERYABLE,
            chef REFERENCE QUERYABLE,
            GRANT WRITE TO "_creator",
            GRANT CREATE TO "_icloud",
            GRANT READ TO "_world"
        );
        """)

    /// What a refused request must leave as it was: the records per type, the zones, the
    /// subscriptions and the outbox.
    static func state(of database: ContainerDatabase, _ container: Container) -> String {
        let counts = (try? database.recordCounts()).map { $0.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" } } ?? ["?"]
        let zones = (try? database.zones().map(\.zoneName).sorted()) ?? ["?"]
        let subscriptions = (try? database.subscriptions().map(\.subscriptionID).sorted()) ?? ["?"]
        let outbox = (try? container.pendingNotifications(limit: 1_000).count) ?? -1
        return "\(counts) \(zones) \(subscriptions) \(outbox)"
    }

    static func checkRoundTrip(_ json: JSON, _ operation: String) {
        let text = json.serialized
        guard let again = try? JSON.parse(text) else { preconditionFailure("\(operation): the answer is not JSON:\n\(text)") }
        precondition(again.serialized == text, "\(operation): the answer does not read back as itself:\n\(text)")
    }
}
