#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Which database a subscription lives in. The raw value is CloudKit's `dbs`, which is
/// CKDatabase.Scope's raw value (public 1, private 2, shared 3): a device decodes its
/// notification's `databaseScope` from it, so a wrong number sends the app to the wrong database.
public enum DatabaseScope: Int, Hashable, Sendable, CaseIterable {
    /// The container's public database.
    case `public` = 1
    /// The user's private database.
    case `private` = 2
    /// The database of records other users share with the user.
    case shared = 3

    /// `"private"`, `"public"` or `"shared"`.
    public var name: String {
        switch self {
        case .private: "private"
        case .public: "public"
        case .shared: "shared"
        }
    }

    /// The scope called `name` (`"private"`, `"public"` or `"shared"`), or nil.
    public init?(name: String) {
        guard let scope = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = scope
    }
}

/// `ce`: production 1, development 2.
public enum ContainerEnvironment: Int, Hashable, Sendable, CaseIterable {
    /// The production environment, used by released apps.
    case production = 1
    /// The development environment, used while building the app.
    case development = 2

    /// `"production"` or `"development"`.
    public var name: String {
        switch self {
        case .production: "production"
        case .development: "development"
        }
    }

    /// The environment called `name` (`"production"` or `"development"`), or nil.
    public init?(name: String) {
        guard let environment = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = environment
    }
}

/// `fo`: why a query notification was sent.
public enum QueryNotificationReason: Int, Hashable, Sendable {
    /// A record that matches was created.
    case recordCreated = 1
    /// A record matches after an update.
    case recordUpdated = 2
    /// A record that matched was deleted.
    case recordDeleted = 3
}

/// Where pushes come from: the container, its environment, and the user (ckuserid) receiving them.
public struct PushContext: Hashable, Sendable {
    /// The container (`cid`), e.g. `"iCloud.com.example.Gallery"`.
    public var containerIdentifier: String
    /// The container environment (`ce`).
    public var environment: ContainerEnvironment
    /// The database of the subscription (`dbs`).
    public var database: DatabaseScope
    /// The user record name of the user receiving the push (`ckuserid`), e.g. `"_3f1a..."`.
    public var userRecordName: String

    /// Creates a context; by default the public database of the development environment.
    public init(
        containerIdentifier: String, environment: ContainerEnvironment = .development,
        database: DatabaseScope = .public, userRecordName: String = "_defaultUser"
    ) {
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.database = database
        self.userRecordName = userRecordName
    }
}

/// One APNs push: the payload a device's CKNotification parses, and how APNs must send it.
///
/// Decisions where the spec is silent:
/// - `aps` is always present, possibly empty (`{}`); `alert` is omitted when it has no member. Member
///   order follows SPEC §5's example: alert, badge, sound, content-available, mutable-content, category.
/// - Localization args are filled from the record only for query pushes (`loc-args`, `title-loc-args`,
///   `subtitle-loc-args`): STRING as is, INT64 and TIMESTAMP (milliseconds) as decimal text, DOUBLE as
///   Swift's shortest round-tripping text (`4.5`, `3.0`), LOCATION as `"lat,lon"`, REFERENCE as its
///   recordName, and the system names `recordID`, `creationDate`, `modificationDate`,
///   `creatorUserRecordID`, `lastModifiedUserRecordID` as those values. A missing field, BYTES, ASSETID
///   and lists give `""`. Zone and database pushes have no record: their args are sent as given.
/// - `af` holds at most 3 entries, taken from `desiredKeys` in order; missing fields, repeated keys,
///   unsupported types (BYTES, ASSETID, lists) and non-finite doubles are skipped and do not count.
///   Strings are cut to their first 100 Characters (grapheme clusters, not bytes or scalars).
/// - Pruning (`ck.p: 1`, appended last in `ck`) drops, in `pruningOrder`, only as many keys as needed.
///   If the payload is still too large, the longest remaining `aps` strings (alert members, elements of
///   loc-args arrays, category; those of 16 bytes or more) are shortened to one common length, the
///   largest that fits, at Character boundaries and ending with "…"; failing that,
///   the remaining args arrays, then the whole alert, then category are dropped; last, the `ck`
///   identifiers (sid, zid, zoid, ckuserid, and `nid` only after all others) are cut. A payload over
///   `maximumSize` is never returned.
public struct PushPayload: Hashable, Sendable {
    /// The payload: `{"aps": {...}, "ck": {...}}`.
    public var json: JSON {
        get { content.json }
        set { content = PushJSON(newValue) }
    }
    /// The payload as kept: JSON, or a query template and the values of its holes, made into JSON
    /// when read (`QueryPushTemplate`).
    public var content: PushJSON
    /// 10 for a visible push (alert, sound or badge), 5 for a silent (background) push.
    public var priority: Int
    /// "alert" or "background".
    public var pushType: String
    /// Whether fields were dropped to fit APNs' 4096 bytes (then ck.p == 1).
    public var isPruned: Bool
    /// APNs' `apns-collapse-id` (not part of the payload): the text of the record's
    /// `collapseIDKey` field, cut to APNs' 64 bytes; nil when unset or empty.
    public var collapseID: String? = nil

    /// APNs' limit on `apns-collapse-id`, in UTF-8 bytes.
    public static let maximumCollapseIDSize = 64

    public init(json: JSON, priority: Int, pushType: String, isPruned: Bool, collapseID: String? = nil) {
        self.init(content: PushJSON(json), priority: priority, pushType: pushType, isPruned: isPruned, collapseID: collapseID)
    }

    init(content: PushJSON, priority: Int, pushType: String, isPruned: Bool, collapseID: String?) {
        self.content = content
        self.priority = priority
        self.pushType = pushType
        self.isPruned = isPruned
        self.collapseID = collapseID
    }

    /// `{"payload": {...}, "priority": 10, "pushType": "alert"}` — one line of `kquery simulate` output.
    public var envelope: JSON {
        .object([("payload", json), ("priority", .int(Int64(priority))), ("pushType", .string(pushType))])
    }

    /// APNs' limit on a payload, in UTF-8 bytes of its serialized JSON.
    public static let maximumSize = 4096

    /// The largest number of entries `af` carries.
    static let maximumDesiredKeys = 3

    /// The number of Characters a STRING value keeps in `af`.
    static let maximumDesiredStringLength = 100

    /// The keys dropped, in this order, from a payload over `maximumSize`, as "section.key"
    /// (`ck.qry` and the other subscription sections are "sub").
    static let pruningOrder: [String] = [
        "sub.af", "ck.cid", "sub.rid", "sub.fo", "aps.sound", "alert.launch-image", "alert.action-loc-key",
        "alert.body", "alert.loc-args", "alert.loc-key", "aps.badge",
    ]

    /// A query subscription's push for `record` (for deletes: the record as it was before).
    public static func query(
        subscriptionID: String, record: Record, reason: QueryNotificationReason, notificationInfo: NotificationInfo,
        context: PushContext, notificationID: String = UUIDText.random()
    ) -> PushPayload {
        var section: [(String, JSON)] = [
            ("sid", .string(subscriptionID)),
            ("rid", .string(record.recordID.recordName)),
            ("zid", .string(record.recordID.zoneID.zoneName)),
            ("zoid", .string(record.recordID.zoneID.ownerName)),
            ("dbs", .int(Int64(context.database.rawValue))),
            ("fo", .int(Int64(reason.rawValue))),
        ]
        let fields = desiredFields(notificationInfo.desiredKeys, of: record)
        if !fields.isEmpty { section.append(("af", .object(fields))) }
        var payload = build(notificationInfo, record: record, context: context, notificationID: notificationID,
                            sectionKey: "qry", section: section)
        payload.collapseID = collapseID(notificationInfo.collapseIDKey, of: record)
        return payload
    }

    /// The `apns-collapse-id` of a query push: the text of the record's `key` field, cut to 64
    /// bytes; nil when there is no key or no text.
    static func collapseID(_ key: String?, of record: Record) -> String? {
        guard let key else { return nil }
        let text = truncatedUTF8(argumentText(key, of: record), maximumBytes: maximumCollapseIDSize)
        return text.isEmpty ? nil : text
    }

    /// The longest prefix of `text`, at a Character boundary, of at most `maximumBytes` UTF-8 bytes.
    static func truncatedUTF8(_ text: String, maximumBytes: Int) -> String {
        guard text.utf8.count > maximumBytes else { return text }
        var result = ""
        for character in text {
            guard result.utf8.count + character.utf8.count <= maximumBytes else { break }
            result.append(character)
        }
        return result
    }

    /// A record zone subscription's push (`fet`).
    public static func recordZone(
        subscriptionID: String, zoneID: ZoneID, notificationInfo: NotificationInfo, context: PushContext,
        notificationID: String = UUIDText.random()
    ) -> PushPayload {
        let section: [(String, JSON)] = [
            ("sid", .string(subscriptionID)),
            ("zid", .string(zoneID.zoneName)),
            ("zoid", .string(zoneID.ownerName)),
            ("dbs", .int(Int64(context.database.rawValue))),
        ]
        return build(notificationInfo, record: nil, context: context, notificationID: notificationID,
                     sectionKey: "fet", section: section)
    }

    /// A database subscription's push (`met`, with the changed zone's zid/zoid).
    public static func database(
        subscriptionID: String, zoneID: ZoneID?, notificationInfo: NotificationInfo, context: PushContext,
        notificationID: String = UUIDText.random()
    ) -> PushPayload {
        var section: [(String, JSON)] = [("sid", .string(subscriptionID)), ("dbs", .int(Int64(context.database.rawValue)))]
        if let zoneID {
            section.append(("zid", .string(zoneID.zoneName)))
            section.append(("zoid", .string(zoneID.ownerName)))
        }
        return build(notificationInfo, record: nil, context: context, notificationID: notificationID,
                     sectionKey: "met", section: section)
    }

    // MARK: Building

    private static func build(
        _ info: NotificationInfo, record: Record?, context: PushContext, notificationID: String,
        sectionKey: String, section: [(String, JSON)]
    ) -> PushPayload {
        func args(_ names: [String]) -> JSON {
            .array(names.map { name in .string(record.map { argumentText(name, of: $0) } ?? name) })
        }
        var alert: [(String, JSON)] = []
        if let v = info.alertBody { alert.append(("body", .string(v))) }
        if let v = info.alertLocalizationKey { alert.append(("loc-key", .string(v))) }
        if let v = info.alertLocalizationArgs { alert.append(("loc-args", args(v))) }
        if let v = info.title { alert.append(("title", .string(v))) }
        if let v = info.titleLocalizationKey { alert.append(("title-loc-key", .string(v))) }
        if let v = info.titleLocalizationArgs { alert.append(("title-loc-args", args(v))) }
        if let v = info.subtitle { alert.append(("subtitle", .string(v))) }
        if let v = info.subtitleLocalizationKey { alert.append(("subtitle-loc-key", .string(v))) }
        if let v = info.subtitleLocalizationArgs { alert.append(("subtitle-loc-args", args(v))) }
        if let v = info.alertActionLocalizationKey { alert.append(("action-loc-key", .string(v))) }
        if let v = info.alertLaunchImage { alert.append(("launch-image", .string(v))) }

        var aps: [(String, JSON)] = []
        // SPEC §5's example order: badge before sound.
        if info.shouldBadge { aps.append(("badge", .int(1))) }
        if let v = info.soundName { aps.append(("sound", .string(v))) }
        if info.shouldSendContentAvailable { aps.append(("content-available", .int(1))) }
        if info.shouldSendMutableContent { aps.append(("mutable-content", .int(1))) }
        if let v = info.category { aps.append(("category", .string(v))) }

        let ck: [(String, JSON)] = [
            ("ce", .int(Int64(context.environment.rawValue))),
            ("cid", .string(context.containerIdentifier)),
            ("nid", .string(notificationID)),
            ("ckuserid", .string(context.userRecordName)),
        ]
        var draft = _PushDraft(alert: alert, aps: aps, ck: ck, sectionKey: sectionKey, section: section)
        // Made once when it fits, as nearly every payload does; measured exactly only when a
        // quick bound does not show it fits (the exact measure was half of making a push).
        var json = draft.json
        if json.serializedSizeBound > maximumSize, json.serializedSize > maximumSize {
            draft.fit(maximumSize)
            json = draft.json
        }
        let visible = !draft.alert.isEmpty || draft.aps.contains { $0.0 == "sound" || $0.0 == "badge" }
        return PushPayload(json: json, priority: visible ? 10 : 5, pushType: visible ? "alert" : "background",
                           isPruned: draft.pruned)
    }

    /// The value of a record field (or system field) that a push may carry, by name.
    private static func value(_ name: String, of record: Record) -> FieldValue? {
        switch name {
        case "recordID", "creationDate", "modificationDate", "creatorUserRecordID", "lastModifiedUserRecordID":
            record.value(of: FieldReference(name: name))
        default:
            record[name]
        }
    }

    /// A localization argument: the named field's value as text, `""` when missing or not textual.
    static func argumentText(_ name: String, of record: Record) -> String {
        switch value(name, of: record) {
        case .string(let s)?: s
        case .int64(let i)?: String(i)
        case .double(let d)?: d.description
        case .timestamp(let ms)?: String(ms)
        case .reference(let reference)?: reference.recordID.recordName
        case .location(let location)?: "\(location.latitude.description),\(location.longitude.description)"
        case .bytes?, .assetID?, .list?, nil: ""
        }
    }

    /// The `af` members: at most 3 of `keys` present on `record` with a type `af` can carry.
    static func desiredFields(_ keys: [String]?, of record: Record) -> [(String, JSON)] {
        var fields: [(String, JSON)] = []
        for key in keys ?? [] where fields.count < maximumDesiredKeys && !fields.contains(where: { $0.0 == key }) {
            let json: JSON? =
                switch value(key, of: record) {
                case .string(let s)?: .string(String(s.prefix(maximumDesiredStringLength)))
                case .int64(let i)?: .int(i)
                case .double(let d)? where d.isFinite: .double(d)
                case .timestamp(let ms)?: .int(ms)
                case .location(let l)? where l.latitude.isFinite && l.longitude.isFinite:
                    .object([("latitude", .double(l.latitude)), ("longitude", .double(l.longitude))])
                case .reference(let reference)?: .string(reference.recordID.recordName)
                default: nil
                }
            if let json { fields.append((key, json)) }
        }
        return fields
    }
}

/// A query subscription's push with its record's parts left out: made once for a subscription, its
/// notification info and its context, then filled in for each change (the record's name, zone and
/// owner, why it fired, and the notification ID) at a fraction of what building the push costs.
///
/// Made from the push `PushPayload.query` builds for an empty record, so it has the same members
/// in the same order; only for notification infos that take nothing else from the record (no
/// `desiredKeys`, no localization args). A filled push is returned only when its size bound shows
/// it fits APNs' limit: exactly when `PushPayload.query` would not prune it. Otherwise (nil) the
/// caller builds it.
public final class QueryPushTemplate: Sendable {
    /// The `aps` member, the members of `ck` (with the notification ID and the `qry` section at
    /// `notificationIDAt` and `sectionAt`), and the section (the record's parts and why at the
    /// `…At` positions).
    private let aps: (String, JSON)
    private let ck: [(String, JSON)]
    private let section: [(String, JSON)]
    private let notificationIDAt: Int, sectionAt: Int
    private let recordNameAt: Int, zoneNameAt: Int, ownerNameAt: Int, reasonAt: Int
    /// The size bound of the push with empty holes (`JSON.serializedSizeBound`).
    private let emptyBound: Int
    private let priority: Int
    private let pushType: String
    private let collapseIDKey: String?

    /// Nil when the notification info takes more from the record than the holes, or the push
    /// does not fit even empty.
    public init?(subscriptionID: String, notificationInfo: NotificationInfo, context: PushContext) {
        guard notificationInfo.desiredKeys?.isEmpty ?? true, notificationInfo.alertLocalizationArgs?.isEmpty ?? true,
              notificationInfo.titleLocalizationArgs?.isEmpty ?? true, notificationInfo.subtitleLocalizationArgs?.isEmpty ?? true
        else { return nil }
        let empty = Record(recordType: "", recordID: RecordID(recordName: "", zoneID: ZoneID(zoneName: "", ownerName: "")))
        let push = PushPayload.query(subscriptionID: subscriptionID, record: empty, reason: .recordCreated, notificationInfo: notificationInfo,
                                     context: context, notificationID: "")
        func position(of key: String, in members: [(String, JSON)]) -> Int? { members.firstIndex { $0.0 == key } }
        guard !push.isPruned, case .object(let root) = push.json, root.count == 2, root[0].0 == "aps", root[1].0 == "ck",
              case .object(let ck) = root[1].1, let notificationIDAt = position(of: "nid", in: ck), let sectionAt = position(of: "qry", in: ck),
              case .object(let section) = ck[sectionAt].1, let recordNameAt = position(of: "rid", in: section),
              let zoneNameAt = position(of: "zid", in: section), let ownerNameAt = position(of: "zoid", in: section),
              let reasonAt = position(of: "fo", in: section)
        else { return nil }
        (aps, self.ck, self.section) = (root[0], ck, section)
        (self.notificationIDAt, self.sectionAt) = (notificationIDAt, sectionAt)
        (self.recordNameAt, self.zoneNameAt, self.ownerNameAt, self.reasonAt) = (recordNameAt, zoneNameAt, ownerNameAt, reasonAt)
        emptyBound = push.json.serializedSizeBound
        (priority, pushType, collapseIDKey) = (push.priority, push.pushType, notificationInfo.collapseIDKey)
    }

    /// The push for `record`, as `PushPayload.query` makes it; nil when it might need pruning. Its
    /// JSON is made from the template when first read (a queued push is often read only when it is
    /// delivered, or never, when another channel takes it).
    public func payload(record: Record, reason: QueryNotificationReason, notificationID: String) -> PushPayload? {
        let id = record.recordID
        // An empty string's bound is 2; each byte of text adds at most 6 (`\u001f`).
        let bound = emptyBound + 6 * (id.recordName.utf8.count + id.zoneID.zoneName.utf8.count + id.zoneID.ownerName.utf8.count + notificationID.utf8.count)
        guard bound <= PushPayload.maximumSize else { return nil }
        let holes = Holes(template: self, recordName: id.recordName, zoneName: id.zoneID.zoneName, ownerName: id.zoneID.ownerName, reason: reason,
                          notificationID: notificationID)
        return PushPayload(content: PushJSON(holes), priority: priority, pushType: pushType, isPruned: false,
                           collapseID: PushPayload.collapseID(collapseIDKey, of: record))
    }

    /// What fills a template's holes, with the template: one object, so that a push copied from
    /// list to list (made, queued, returned) retains one reference rather than six.
    final class Holes: Sendable {
        let template: QueryPushTemplate
        let recordName: String
        let zoneName: String
        let ownerName: String
        let reason: QueryNotificationReason
        let notificationID: String

        init(template: QueryPushTemplate, recordName: String, zoneName: String, ownerName: String, reason: QueryNotificationReason, notificationID: String) {
            self.template = template
            self.recordName = recordName
            self.zoneName = zoneName
            self.ownerName = ownerName
            self.reason = reason
            self.notificationID = notificationID
        }
    }

    /// The push's JSON with `holes` filled.
    func json(_ holes: Holes) -> JSON {
        // Made member by member: changing copies of the template's lists copied each member
        // through its value witness, most of the cost.
        let section = Self.members(self.section) { position in
            switch position {
            case recordNameAt: .string(holes.recordName)
            case zoneNameAt: .string(holes.zoneName)
            case ownerNameAt: .string(holes.ownerName)
            case reasonAt: .int(Int64(holes.reason.rawValue))
            default: nil
            }
        }
        let ck = Self.members(ck) { position in
            switch position {
            case notificationIDAt: .string(holes.notificationID)
            case sectionAt: .object(section)
            default: nil
            }
        }
        return .object([aps, ("ck", .object(ck))])
    }

    /// `members` with the values `replacement` gives in place of theirs.
    @inline(__always)
    private static func members(_ members: [(String, JSON)], replacing replacement: (Int) -> JSON?) -> [(String, JSON)] {
        var result: [(String, JSON)] = []
        result.reserveCapacity(members.count)
        for position in members.indices { result.append((members[position].0, replacement(position) ?? members[position].1)) }
        return result
    }
}

/// A push payload's JSON as kept: the JSON itself, or a query push template and the values of its
/// holes, made into JSON each time it is read. Equal when their JSON is.
public struct PushJSON: Hashable, Sendable {
    private enum Storage: Sendable {
        case json(JSON)
        case template(QueryPushTemplate.Holes)
    }
    private let storage: Storage

    public init(_ json: JSON) {
        storage = .json(json)
    }

    init(_ holes: QueryPushTemplate.Holes) {
        storage = .template(holes)
    }

    public var json: JSON {
        switch storage {
        case .json(let json): json
        case .template(let holes): holes.template.json(holes)
        }
    }

    public static func == (a: PushJSON, b: PushJSON) -> Bool { a.json == b.json }
    public func hash(into hasher: inout Hasher) { hasher.combine(json) }
}

/// The query push templates of a database's subscriptions, by subscription ID, each kept with
/// what it was made from and used only while that still holds: a subscription saved again with
/// another notification info, or for another user, gets a new one.
public struct QueryPushTemplates: Sendable {
    /// Each subscription's entry: its position in the lists below (read in place there: an entry
    /// struct copied out of a dictionary retained all it held).
    private var positions: [String: Int] = [:]
    /// The entry used last: a database's modifies mostly fire the same subscription, found again
    /// by comparing its ID rather than hashing it.
    private var last: (subscriptionID: String, position: Int)?
    /// What each template was made from. The info is held, so its identity cannot pass to another
    /// info while the entry lives.
    private var notificationInfos: [SharedNotificationInfo] = []
    private var contexts: [PushContext] = []
    /// Nil: the subscription's pushes cannot be made from a template.
    private var templates: [QueryPushTemplate?] = []
    /// The most entries kept; past it the cache starts over (subscriptions deleted leave theirs).
    private let capacity: Int

    public init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// The template for a firing's subscription with `notificationInfo` in `context`, made if needed.
    mutating func template(_ subscriptionID: String, _ notificationInfo: SharedNotificationInfo, _ context: PushContext) -> QueryPushTemplate? {
        let known: Int?
        if let last, last.subscriptionID == subscriptionID {
            known = last.position
        } else {
            known = positions[subscriptionID]
            if let known { last = (subscriptionID, known) }
        }
        if let known, notificationInfos[known] === notificationInfo, contexts[known] == context { return templates[known] }
        let template = QueryPushTemplate(subscriptionID: subscriptionID, notificationInfo: notificationInfo.value, context: context)
        if let known {
            (notificationInfos[known], contexts[known], templates[known]) = (notificationInfo, context, template)
        } else {
            if positions.count >= capacity {
                positions.removeAll(keepingCapacity: true)
                notificationInfos.removeAll(keepingCapacity: true)
                contexts.removeAll(keepingCapacity: true)
                templates.removeAll(keepingCapacity: true)
            }
            positions[subscriptionID] = templates.count
            last = (subscriptionID, templates.count)
            notificationInfos.append(notificationInfo)
            contexts.append(context)
            templates.append(template)
        }
        return template
    }
}

/// A payload under construction, kept in sections so that keys can be dropped and strings cut.
struct _PushDraft {
    var alert: [(String, JSON)]
    /// `aps` members after `alert`.
    var aps: [(String, JSON)]
    /// `ck` members before the subscription section.
    var ck: [(String, JSON)]
    var sectionKey: String
    var section: [(String, JSON)]
    var pruned = false

    var json: JSON {
        var apsMembers: [(String, JSON)] = []
        if !alert.isEmpty { apsMembers.append(("alert", .object(alert))) }
        apsMembers += aps
        var ckMembers = ck
        ckMembers.append((sectionKey, .object(section)))
        if pruned { ckMembers.append(("p", .int(1))) }
        return .object([("aps", .object(apsMembers)), ("ck", .object(ckMembers))])
    }

    var size: Int { json.serializedSize }

    private enum Place {
        case alert(Int)
        case alertElement(Int, Int)
        case aps(Int)
        case ck(Int)
        case section(Int)
    }

    /// Drops and cuts (see `PushPayload`) until the serialized payload is at most `limit` bytes.
    mutating func fit(_ limit: Int) {
        guard size > limit else { return }
        pruned = true
        for entry in PushPayload.pruningOrder {
            if size <= limit { return }
            let parts = entry.split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            let key = parts[1]
            switch parts[0] {
            case "sub": section.removeAll { $0.0 == key }
            case "ck": ck.removeAll { $0.0 == key }
            case "aps": aps.removeAll { $0.0 == key }
            case "alert": alert.removeAll { $0.0 == key }
            default: break
            }
        }
        // Shorten the longest aps strings to a common length (strings under 16 bytes are not worth
        // cutting). One pass saves at least the excess or empties every candidate; the second pass only
        // covers an estimate gone wrong.
        var passes = 0
        while size > limit, passes < 2, capLongest(of: apsTextPlaces, by: size - limit, minimumSize: 16) {
            passes += 1
        }
        if size > limit { alert.removeAll { if case .array = $0.1 { true } else { false } } }
        if size > limit { alert.removeAll() }
        if size > limit { aps.removeAll { $0.0 == "category" } }
        // Only identifiers of pathological length remain: cut them, nid last.
        while size > limit, cutLongest(of: identifierPlaces(includingNotificationID: false), by: size - limit, ellipsis: false) {}
        while size > limit, cutLongest(of: identifierPlaces(includingNotificationID: true), by: size - limit, ellipsis: false) {}
    }

    private var apsTextPlaces: [Place] {
        var places: [Place] = []
        for (index, member) in alert.enumerated() {
            switch member.1 {
            case .string: places.append(.alert(index))
            case .array(let elements):
                for element in elements.indices { places.append(.alertElement(index, element)) }
            default: break
            }
        }
        for (index, member) in aps.enumerated() {
            if case .string = member.1 { places.append(.aps(index)) }
        }
        return places
    }

    private func identifierPlaces(includingNotificationID: Bool) -> [Place] {
        var places: [Place] = []
        for (index, member) in ck.enumerated() where includingNotificationID || member.0 != "nid" {
            if case .string = member.1 { places.append(.ck(index)) }
        }
        for (index, member) in section.enumerated() {
            if case .string = member.1 { places.append(.section(index)) }
        }
        return places
    }

    private func text(at place: Place) -> String? {
        let value: JSON
        switch place {
        case .alert(let i): value = alert[i].1
        case .alertElement(let i, let j):
            guard case .array(let elements) = alert[i].1 else { return nil }
            value = elements[j]
        case .aps(let i): value = aps[i].1
        case .ck(let i): value = ck[i].1
        case .section(let i): value = section[i].1
        }
        return value.stringValue
    }

    private mutating func set(_ string: String, at place: Place) {
        switch place {
        case .alert(let i): alert[i].1 = .string(string)
        case .alertElement(let i, let j):
            guard case .array(var elements) = alert[i].1 else { return }
            elements[j] = .string(string)
            alert[i].1 = .array(elements)
        case .aps(let i): aps[i].1 = .string(string)
        case .ck(let i): ck[i].1 = .string(string)
        case .section(let i): section[i].1 = .string(string)
        }
    }

    /// Cuts every string among `places` of at least `minimumSize` serialized bytes down to one common
    /// length (ending with "…"): the largest that saves `excess` bytes, or nothing when no length does.
    /// An alert member or aps string cut to nothing is removed; an emptied arg stays, as `""`.
    /// False when there is no such string.
    private mutating func capLongest(of places: [Place], by excess: Int, minimumSize: Int) -> Bool {
        var candidates: [(place: Place, string: String, size: Int)] = []
        for place in places {
            guard let string = text(at: place) else { continue }
            let size = Self.escapedSize(string.unicodeScalars)
            if size >= minimumSize { candidates.append((place, string, size)) }
        }
        guard let longest = candidates.map(\.size).max() else { return false }
        func saving(_ cap: Int) -> Int { candidates.reduce(0) { $0 + max(0, $1.size - cap) } }
        // The largest cap whose saving covers the excess: saving(low) >= excess > saving(high).
        var low = 0
        var high = longest
        if saving(low) >= excess {
            while high - low > 1 {
                let middle = (low + high) / 2
                if saving(middle) >= excess { low = middle } else { high = middle }
            }
        }
        // In reverse, so that removing a member leaves the places still to visit valid.
        for candidate in candidates.reversed() where candidate.size > low {
            let cut = Self.truncated(candidate.string, by: candidate.size - low, ellipsis: true)
            switch (candidate.place, cut.isEmpty) {
            case (.alert(let index), true): alert.remove(at: index)
            case (.aps(let index), true): aps.remove(at: index)
            default: set(cut, at: candidate.place)
            }
        }
        return true
    }

    /// Cuts the longest non-empty string among `places` so that the payload shrinks by at least
    /// `excess` bytes, or the string becomes empty. False when every string is already empty.
    private mutating func cutLongest(of places: [Place], by excess: Int, ellipsis: Bool) -> Bool {
        var best: (place: Place, string: String, size: Int)?
        for place in places {
            guard let string = text(at: place), !string.isEmpty else { continue }
            let size = Self.escapedSize(string.unicodeScalars)
            if size > best?.size ?? 0 { best = (place, string, size) }
        }
        guard let best else { return false }
        set(Self.truncated(best.string, by: excess, ellipsis: ellipsis), at: best.place)
        return true
    }

    /// `string` without enough trailing Characters to save `excess` serialized bytes, ending with "…"
    /// when `ellipsis` is set; `""` when that would leave nothing.
    static func truncated(_ string: String, by excess: Int, ellipsis: Bool) -> String {
        let marker = ellipsis ? "…" : ""
        let needed = excess + marker.utf8.count
        var removed = 0
        var end = string.endIndex
        while end > string.startIndex, removed < needed {
            let previous = string.index(before: end)
            removed += escapedSize(string[previous..<end].unicodeScalars)
            end = previous
        }
        if end == string.startIndex { return "" }
        return String(string[..<end]) + marker
    }

    /// The bytes `JSON.serialized` writes for these scalars, without the quotes.
    static func escapedSize<S: Sequence<Unicode.Scalar>>(_ scalars: S) -> Int {
        var size = 0
        for scalar in scalars {
            switch scalar {
            case "\"", "\\", "\n", "\r", "\t": size += 2
            case _ where scalar.value < 0x20: size += 6
            default: size += UTF8.width(scalar)
            }
        }
        return size
    }
}
