import KQuery
import KQueryContainer

/// A commit's wake-up on `kquery_pushes`, as `NOTIFY` carries it (at most 8,000 bytes): the
/// container and whom its pushes are for, `{"container":ID,"to":[[ENVIRONMENT,USER],...]}`; empty
/// for everyone (too many to name in one payload). A payload that does not read so wakes everyone:
/// a needless look at the outbox, never a missed push.
extension QueuedPushes {
    /// The longest payload that names its recipients (PostgreSQL's limit is 8,000 bytes).
    static let notifyPayloadLimit = 7_900

    var notifyPayload: String {
        guard case .recipients(let identifier, let recipients) = self else { return "" }
        let to = recipients.map { JSON.array([.string($0.environment.name), .string($0.owner)]) }
        let payload = JSON.object([("container", .string(identifier)), ("to", .array(to))]).serialized
        return payload.utf8.count <= Self.notifyPayloadLimit ? payload : ""
    }

    init(notifyPayload payload: String) {
        guard !payload.isEmpty, let json = try? JSON.parse(payload), let identifier = json["container"]?.stringValue,
              case .array(let to)? = json["to"]
        else {
            self = .everyone
            return
        }
        var recipients = Set<OutboxRecipient>()
        for entry in to {
            guard case .array(let parts) = entry, parts.count == 2,
                  let environment = parts[0].stringValue.flatMap(ContainerEnvironment.init(name:)), let owner = parts[1].stringValue
            else {
                self = .everyone
                return
            }
            recipients.insert(OutboxRecipient(owner: owner, environment: environment))
        }
        self = .recipients(containerIdentifier: identifier, recipients)
    }
}
