import KQuery
import KQueryContainer

import Foundation

/// A bounded log the console reads: the newest `capacity` entries, each numbered in arrival order
/// and stamped with its time, so a page polling with the last number it saw gets only what is new.
/// Memory stays bounded however long the server runs (request bodies are cut at
/// `ConsoleRequest.bodyLimit`).
final class ConsoleJournal<Entry: Sendable>: Sendable {
    /// An entry with its number and the time it was kept.
    struct Stamped: Sendable {
        var number: Int
        var time: Date
        var entry: Entry

        /// `{"number", "time" (milliseconds since 1970), ...members}`.
        func json(_ members: [(String, JSON)]) -> JSON {
            .object([("number", .int(Int64(number))), ("time", .int(Int64(time.timeIntervalSince1970 * 1000)))] + members)
        }
    }

    private struct State {
        var entries: [Stamped] = []
        /// Where the oldest entry is, once the ring is full.
        var head = 0
        var next = 1
    }

    let capacity: Int
    private let state = Locked(State())

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Keeps `entry`, stamped now; returns its number.
    @discardableResult
    func append(_ entry: Entry) -> Int {
        let time = Date()
        return state.withLock { state in
            let stamped = Stamped(number: state.next, time: time, entry: entry)
            state.next += 1
            if state.entries.count < capacity {
                state.entries.append(stamped)
            } else {
                state.entries[state.head] = stamped
                state.head = (state.head + 1) % capacity
            }
            return stamped.number
        }
    }

    /// The entries numbered after `number`, newest first.
    func entries(after number: Int) -> [Stamped] {
        state.withLock { state in
            let ordered = state.entries[state.head...] + state.entries[..<state.head]
            return ordered.reversed().filter { $0.number > number }
        }
    }

    /// The entry numbered `number`, while it is kept.
    func entry(_ number: Int) -> Stamped? {
        state.withLock { state in state.entries.first { $0.number == number } }
    }

    /// Forgets every entry (numbers go on from where they were).
    func clear() {
        state.withLock { state in
            state.entries = []
            state.head = 0
        }
    }
}

/// One Web Services request as the console's request log shows it.
struct ConsoleRequest: Sendable {
    /// The most bytes of a request's or response's body an entry keeps.
    static let bodyLimit = 16 * 1024

    /// A body as the console shows it: UTF-8 text, cut at `bodyLimit` bytes with a note saying so.
    static func text(_ bytes: [UInt8]) -> String {
        guard bytes.count > bodyLimit else { return String(decoding: bytes, as: UTF8.self) }
        return String(decoding: bytes.prefix(bodyLimit), as: UTF8.self) + "\n… (\(bytes.count - bodyLimit) more bytes not kept)"
    }

    var method: String
    var path: String
    var user: String?
    /// Which credential admitted the request, or why it was refused.
    var authentication: String?
    var status: Int
    var milliseconds: Double
    var pushes: Int
    var requestBody: String
    var responseBody: String
    /// The numbers of the record changes it committed, in the change journal.
    var changes: [Int]

    /// The Web Services operation: `records/modify` of `/database/1/C/E/D/records/modify`,
    /// `tokens/create` of a device path, the path itself otherwise.
    var operation: String {
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        if parts.first == "database", parts.count > 5 { return parts[5...].joined(separator: "/") }
        if parts.first == "device", parts.count > 4 { return parts[4...].joined(separator: "/") }
        return path
    }

    var jsonMembers: [(String, JSON)] {
        [
            ("method", .string(method)), ("path", .string(path)), ("operation", .string(operation)),
            ("user", user.map(JSON.string) ?? .null), ("authentication", authentication.map(JSON.string) ?? .null),
            ("status", .int(Int64(status))), ("milliseconds", .double((milliseconds * 10).rounded() / 10)),
            ("pushes", .int(Int64(pushes))), ("requestBody", .string(requestBody)), ("responseBody", .string(responseBody)),
            ("changes", .array(changes.map { .int(Int64($0)) })),
        ]
    }
}

/// One record change a modify committed, kept so the console can explain every subscription's
/// verdict on it.
struct ConsoleChange: Sendable {
    var containerIdentifier: String
    var database: DatabaseKey
    /// The device that made it (the modify's `apnsToken`): CloudKit pushes it to every device but that one.
    var device: String?
    var change: RecordChange

    var kind: String {
        switch change {
        case .created: "created"
        case .updated: "updated"
        case .deleted: "deleted"
        }
    }

    /// The change's members; the record's fields only when the change is public or the console
    /// acts as its user (another user's private records stay theirs).
    func jsonMembers(actingAs user: String?) -> [(String, JSON)] {
        let reveals = database.scope == .public || database.userRecordName == user
        return [
            ("container", .string(containerIdentifier)), ("environment", .string(database.environment.name)),
            ("database", .string(database.scope.name)), ("user", database.userRecordName.isEmpty ? .null : .string(database.userRecordName)),
            ("device", device.map(JSON.string) ?? .null), ("kind", .string(kind)),
            ("recordName", .string(change.recordID.recordName)), ("zoneName", .string(change.recordID.zoneID.zoneName)),
            ("recordType", .string(change.record.recordType)),
        ] + (reveals ? [("record", change.record.json(desiredKeys: nil))] : [])
    }
}

/// One push as the console's push log shows it: queued by a modify, handed to a web courier
/// client, or sent to APNs (with APNs' answer).
struct ConsolePush: Sendable {
    /// `queued`, `web courier` or `APNs`.
    var channel: String
    var containerIdentifier: String
    var owner: String
    var subscriptionID: String?
    var device: String?
    /// What became of it: `queued`, `delivered`, or APNs' status and reason.
    var outcome: String
    var payload: JSON

    var jsonMembers: [(String, JSON)] {
        [
            ("channel", .string(channel)), ("container", .string(containerIdentifier)), ("owner", .string(owner)),
            ("subscriptionID", subscriptionID.map(JSON.string) ?? .null), ("device", device.map(JSON.string) ?? .null),
            ("outcome", .string(outcome)), ("payload", payload),
        ]
    }
}

/// The console's logs: requests, record changes and pushes.
struct ConsoleJournals: Sendable {
    let requests = ConsoleJournal<ConsoleRequest>(capacity: 500)
    let changes = ConsoleJournal<ConsoleChange>(capacity: 200)
    let pushes = ConsoleJournal<ConsolePush>(capacity: 500)
}
