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
/// Every input is also read as a multipart upload body (cut differently, the same file must come
/// out) and its first line as a `Range` header.
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard let container = try? Container(containerIdentifier: "iCloud.fuzz"),
          let database = try? container.database(.private, user: "_fuzz"),
          let publicDatabase = try? container.database(.public, user: "_fuzz")
    else { preconditionFailure("cannot open an in-memory container") }
    let service = DatabaseService(database: database, schema: RequestFuzz.schema(for: data, size), assetLinks: RequestFuzz.assetLinks)
    // The user endpoints answer on the public database only (the private one refuses them all alike).
    let userService = DatabaseService(database: publicDatabase, users: RequestFuzz.users)
    let input = UnsafeBufferPointer(start: data, count: size)
    RequestFuzz.checkMultipart(input)
    RequestFuzz.checkByteRange(input)
    // The `singleFile` dictionary of the session's last upload: `"$R"` in a body stands for it, so
    // a mutated session can save (or misuse) a real receipt.
    var lastAsset: JSON?
    for line in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).prefix(8) {
        let operation = RequestFuzz.operations[Int(line[line.startIndex]) % RequestFuzz.operations.count]
        var text = String(decoding: line.dropFirst(), as: UTF8.self)
        if let lastAsset { text = text.replacingOccurrences(of: "\"$R\"", with: lastAsset.serialized) }
        guard let body = try? JSON.parse(text) else { continue }
        let before = RequestFuzz.state(of: database, container)
        do {
            // The user and share endpoints answer on the public database (shares are saved in the private one).
            let answer = try (operation.hasPrefix("users/") || operation == "records/resolve" || operation == "records/accept" ? userService : service)
                .run(operation, body)
            precondition(RequestFuzz.statuses.contains(answer.status), "\(operation): status \(answer.status)")
            RequestFuzz.checkRoundTrip(answer.json, operation)
            if let asset = RequestFuzz.completeUploads(answer, operation, container, bytes: Array(line)) { lastAsset = asset }
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
        // 48 in all ('H' and 'I' pick the asset operations), so every first byte of the older seeds
        // still picks what it picked among 24 (48 is a multiple of 24, and none used 'H' or later).
        "assets/upload", "assets/rereference", "records/modify", "records/lookup", "assets/upload", "records/changes", "assets/rereference",
        "records/query", "records/modify", "zones/modify", "records/lookup", "changes/zone", "records/modify", "records/query",
        "records/lookup", "assets/upload", "records/modify", "assets/rereference", "records/changes", "records/modify", "records/lookup",
        "zones/modify", "records/resolve", "records/accept",
    ]

    /// URLs for the asset answers (the fuzzer has no HTTP layer: only their shape matters).
    static let assetLinks = AssetLinks(
        upload: { "http://fuzz/assets/upload/iCloud.fuzz/\($0)" },
        download: { "http://fuzz/assets/download/iCloud.fuzz/\($0.contentHash)/\(AssetLinks.fileNamePlaceholder)" })

    /// Finishes the uploads an `assets/upload` answer handed out, with `bytes` (what the upload URL
    /// would take), and returns the last `singleFile` dictionary; a rereference's fresh asset too.
    static func completeUploads(_ answer: ServiceAnswer, _ operation: String, _ container: Container, bytes: [UInt8]) -> JSON? {
        switch operation {
        case "assets/upload":
            var last: JSON?
            guard case .array(let tokens)? = answer.json["tokens"] else { return nil }
            for token in tokens {
                guard let url = token["url"]?.stringValue, let secret = url.split(separator: "/").last else { continue }
                do throws(ContainerError) {
                    let writer = try container.beginAssetUpload(token: String(secret), contentType: "application/octet-stream")
                    try writer.append(bytes)
                    let uploaded = try writer.finish()
                    precondition(uploaded.size == Int64(bytes.count), "an upload of \(bytes.count) bytes answered size \(uploaded.size)")
                    last = uploaded.webServicesJSON
                } catch {
                    preconditionFailure("a fresh upload URL refused its bytes: \(error)")
                }
            }
            return last
        case "assets/rereference":
            guard case .array(let assets)? = answer.json["assets"] else { return nil }
            return assets.last { $0["receipt"] != nil }
        default:
            return nil
        }
    }

    /// The multipart reader must find the same file (or refuse alike) however the body is cut into
    /// reads: the input whole, cut in two where its first byte says, and a byte at a time when short.
    static func checkMultipart(_ input: UnsafeBufferPointer<UInt8>) {
        guard let first = input.first else { return }
        func read(_ pieces: [Range<Int>]) -> [UInt8]? {
            do throws(ServerError) {
                guard var reader = try MultipartFileReader(contentType: "multipart/form-data; boundary=\"fz\"") else {
                    preconditionFailure("a multipart content type was not read as one")
                }
                var file: [UInt8] = []
                for piece in pieces { file += try reader.feed(input[piece]) }
                try reader.finish()
                return file
            } catch {
                return nil
            }
        }
        let whole = read([0..<input.count])
        let cut = Int(first) * input.count / 256
        precondition(read([0..<cut, cut..<input.count]) == whole, "a multipart body cut at \(cut) of \(input.count) read differently")
        if input.count <= 512 {
            precondition(read(input.indices.map { $0..<($0 + 1) }) == whole, "a multipart body fed a byte at a time read differently")
        }
        if let whole { precondition(whole.count <= input.count, "the multipart file is longer than its body") }
    }

    /// A `Range` header (the input's first line) against a size (its length): a range served
    /// is non-empty and inside the asset; a refusal is 416.
    static func checkByteRange(_ input: UnsafeBufferPointer<UInt8>) {
        let line = input.prefix { $0 != UInt8(ascii: "\n") }
        let header = String(decoding: line, as: UTF8.self)
        for size in [Int64(0), 1, Int64(input.count), 50_000_000] {
            do throws(ServerError) {
                if let range = try ByteRange.parse(header, size: size) {
                    precondition(!range.isEmpty || size == 0, "\(header): an empty range of \(size) bytes")
                    precondition(range.lowerBound >= 0 && range.upperBound <= size, "\(header): \(range) is outside \(size) bytes")
                }
            } catch {
                precondition(error.httpStatus == 416, "\(header): status \(error.httpStatus)")
            }
        }
    }

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
