import Foundation
import PropertyBased
import Testing
@testable import KQuery

private let fixedID = "6F1C2A4E-0B5D-4C8E-9A3F-2D7E1B0C9A11"
private let context = PushContext(
    containerIdentifier: "iCloud.com.example.Gallery", environment: .development, database: .public, userRecordName: "_owner")
private let ownerZone = ZoneID(zoneName: "_defaultZone", ownerName: "_owner")

/// A record of type Artwork in `ownerZone`.
private func artwork(_ name: String, _ fields: [(String, FieldValue)]) -> Record {
    Record(recordType: "Artwork", recordID: RecordID(recordName: name, zoneID: ownerZone), fields: Fields(fields))
}

private func queryPush(
    _ info: NotificationInfo, record: Record = artwork("art-1", []), reason: QueryNotificationReason = .recordCreated,
    notificationID: String = fixedID
) -> PushPayload {
    .query(subscriptionID: "art-by-mei", record: record, reason: reason, notificationInfo: info, context: context,
           notificationID: notificationID)
}

private func zonePush(_ info: NotificationInfo) -> PushPayload {
    .recordZone(subscriptionID: "zone-sub", zoneID: ZoneID(zoneName: "Drafts", ownerName: "_owner"), notificationInfo: info,
                context: PushContext(containerIdentifier: "iCloud.c", database: .private, userRecordName: "_owner"),
                notificationID: fixedID)
}

private func size(_ json: JSON) -> Int { json.serialized.utf8.count }

/// `json` without the member at `path`.
private func removing(_ path: [String], from json: JSON) -> JSON {
    guard let first = path.first, case .object(var members) = json else { return json }
    if path.count == 1 {
        members.removeAll { $0.0 == first }
    } else if let index = members.firstIndex(where: { $0.0 == first }) {
        members[index].1 = removing(Array(path.dropFirst()), from: members[index].1)
    }
    return .object(members)
}

/// `json` with `value` at `path` (replacing the member, or appending it).
private func setting(_ path: [String], to value: JSON, in json: JSON) -> JSON {
    guard let first = path.first, case .object(var members) = json else { return json }
    let index = members.firstIndex { $0.0 == first }
    let newValue = path.count == 1 ? value : setting(Array(path.dropFirst()), to: value, in: index.map { members[$0].1 } ?? .object([]))
    if let index { members[index].1 = newValue } else { members.append((first, newValue)) }
    return .object(members)
}

/// Whether the member at `path` exists.
private func has(_ json: JSON, _ path: [String]) -> Bool {
    var current: JSON? = json
    for key in path { current = current?[key] }
    return current != nil
}

@Suite("Push payloads")
struct PushPayloadTests {
    /// Fitting a payload counts its serialized bytes without serializing it: the count must agree.
    @Test func serializedSizeIsTheSerializedLength() {
        let values: [JSON] = [
            .null, .bool(true), .bool(false), .int(-42), .double(2.5), .double(.nan), .string(""), .string("plain"),
            .string("quote \" back\\slash\n tab\t ctl\u{01} é ☃ 🎨"), .array([]), .array([.int(1), .string("a"), .null]),
            .object([]), .object([("k\"ey", .array([.object([("x", .double(1e300))])])), ("b", .bool(false))]),
        ]
        for value in values { #expect(value.serializedSize == value.serialized.utf8.count, "\(value.serialized)") }
    }

    /// The serialized text, as bytes (what a server sends) and as a string.
    @Test(arguments: [
        (JSON.null, "null"), (.bool(true), "true"), (.bool(false), "false"), (.int(0), "0"), (.int(-42), "-42"), (.int(7), "7"),
        (.int(.max), "9223372036854775807"), (.int(.min), "-9223372036854775808"), (.double(2.5), "2.5"), (.double(-0.0), "-0.0"),
        (.double(.nan), "null"), (.string(""), #""""#), (.string("plain"), #""plain""#),
        (.string("quote \" back\\slash\n\r tab\t ctl\u{01}\u{1f} é ☃ 🎨"), #""quote \" back\\slash\n\r tab\t ctl\u0001\u001f é ☃ 🎨""#),
        (.array([]), "[]"), (.array([.int(1), .string("a"), .null]), #"[1,"a",null]"#), (.object([]), "{}"),
        (.object([("k\"ey", .array([.object([("x", .double(1e300))])])), ("b", .bool(false))]), #"{"k\"ey":[{"x":1e+300}],"b":false}"#),
    ])
    func serializedText(value: JSON, text: String) {
        #expect(value.serialized == text)
        #expect(value.serializedBytes == Array(text.utf8))
    }

    // MARK: The SPEC example

    @Test func specExample() throws {
        let info = NotificationInfo(
            alertBody: "New artwork by Mei Chen", soundName: "default", shouldBadge: true, shouldSendContentAvailable: true,
            category: "NEW_ART", desiredKeys: ["title"])
        let record = artwork("art-1", [("title", .string("Sunset")), ("price", .int64(1200))])
        let push = queryPush(info, record: record)
        let expected = """
            {"aps":{"alert":{"body":"New artwork by Mei Chen"},"badge":1,"sound":"default","content-available":1,"category":"NEW_ART"},\
            "ck":{"ce":2,"cid":"iCloud.com.example.Gallery","nid":"\(fixedID)","ckuserid":"_owner",\
            "qry":{"sid":"art-by-mei","rid":"art-1","zid":"_defaultZone","zoid":"_owner","dbs":1,"fo":1,"af":{"title":"Sunset"}}}}
            """
        #expect(push.json.serialized == expected)
        #expect(push.json == (try JSON.parse(expected)))
        #expect(push.priority == 10)
        #expect(push.pushType == "alert")
        #expect(!push.isPruned)
        #expect(push.envelope.serialized == #"{"payload":\#(expected),"priority":10,"pushType":"alert"}"#)
    }

    static let reasons: [(QueryNotificationReason, Int64)] = [(.recordCreated, 1), (.recordUpdated, 2), (.recordDeleted, 3)]

    @Test(arguments: reasons)
    func reasonCodes(reason: QueryNotificationReason, code: Int64) {
        #expect(queryPush(NotificationInfo(), reason: reason).json["ck"]?["qry"]?["fo"] == .int(code))
    }

    /// `dbs` is CKDatabase.Scope's raw value: a device decodes `databaseScope` from it. Written out
    /// as numbers, not read back through `rawValue`, so a swapped enum fails here.
    static let scopeCodes: [(DatabaseScope, Int64)] = [(.public, 1), (.private, 2), (.shared, 3)]

    @Test(arguments: scopeCodes)
    func databaseScopeCodes(scope: DatabaseScope, code: Int64) {
        let context = PushContext(containerIdentifier: "iCloud.c", database: scope, userRecordName: "_u")
        let query = PushPayload.query(
            subscriptionID: "q", record: artwork("r", []), reason: .recordCreated, notificationInfo: NotificationInfo(),
            context: context, notificationID: fixedID)
        #expect(query.json["ck"]?["qry"]?["dbs"] == .int(code))
        let zone = PushPayload.recordZone(
            subscriptionID: "z", zoneID: ZoneID(zoneName: "Z", ownerName: "_u"), notificationInfo: NotificationInfo(),
            context: context, notificationID: fixedID)
        #expect(zone.json["ck"]?["fet"]?["dbs"] == .int(code))
        let database = PushPayload.database(
            subscriptionID: "d", zoneID: nil, notificationInfo: NotificationInfo(), context: context, notificationID: fixedID)
        #expect(database.json["ck"]?["met"]?["dbs"] == .int(code))
    }

    @Test func contextCodes() {
        for environment in ContainerEnvironment.allCases {
            for database in DatabaseScope.allCases {
                let ctx = PushContext(containerIdentifier: "iCloud.x", environment: environment, database: database, userRecordName: "_u")
                let push = PushPayload.query(
                    subscriptionID: "s", record: artwork("r", []), reason: .recordUpdated, notificationInfo: NotificationInfo(),
                    context: ctx, notificationID: fixedID)
                #expect(push.json["ck"]?["ce"] == .int(Int64(environment.rawValue)))
                #expect(push.json["ck"]?["qry"]?["dbs"] == .int(Int64(database.rawValue)))
                #expect(push.json["ck"]?["ckuserid"] == .string("_u"))
                #expect(push.json["ck"]?["cid"] == .string("iCloud.x"))
            }
        }
        #expect(ContainerEnvironment.production.rawValue == 1 && ContainerEnvironment.development.rawValue == 2)
        #expect(DatabaseScope.public.rawValue == 1 && DatabaseScope.private.rawValue == 2 && DatabaseScope.shared.rawValue == 3)
        for scope in DatabaseScope.allCases { #expect(DatabaseScope(name: scope.name) == scope) }
        for environment in ContainerEnvironment.allCases { #expect(ContainerEnvironment(name: environment.name) == environment) }
        #expect(DatabaseScope(name: "Public") == nil)
        #expect(ContainerEnvironment(name: "prod") == nil)
        let defaults = PushContext(containerIdentifier: "iCloud.x")
        #expect(defaults.environment == .development && defaults.database == .public && defaults.userRecordName == "_defaultUser")
    }

    // MARK: notificationInfo → aps

    static let mappings: [(NotificationInfo, String)] = [
        (NotificationInfo(), #"{}"#),
        (NotificationInfo(alertBody: "b"), #"{"alert":{"body":"b"}}"#),
        (NotificationInfo(alertLocalizationKey: "K"), #"{"alert":{"loc-key":"K"}}"#),
        (NotificationInfo(alertLocalizationArgs: ["a", "b"]), #"{"alert":{"loc-args":["a","b"]}}"#),
        (NotificationInfo(title: "t"), #"{"alert":{"title":"t"}}"#),
        (NotificationInfo(titleLocalizationKey: "TK"), #"{"alert":{"title-loc-key":"TK"}}"#),
        (NotificationInfo(titleLocalizationArgs: ["x"]), #"{"alert":{"title-loc-args":["x"]}}"#),
        (NotificationInfo(subtitle: "s"), #"{"alert":{"subtitle":"s"}}"#),
        (NotificationInfo(subtitleLocalizationKey: "SK"), #"{"alert":{"subtitle-loc-key":"SK"}}"#),
        (NotificationInfo(subtitleLocalizationArgs: []), #"{"alert":{"subtitle-loc-args":[]}}"#),
        (NotificationInfo(alertActionLocalizationKey: "VIEW"), #"{"alert":{"action-loc-key":"VIEW"}}"#),
        (NotificationInfo(alertLaunchImage: "l.png"), #"{"alert":{"launch-image":"l.png"}}"#),
        (NotificationInfo(soundName: "default"), #"{"sound":"default"}"#),
        (NotificationInfo(shouldBadge: true), #"{"badge":1}"#),
        (NotificationInfo(shouldSendContentAvailable: true), #"{"content-available":1}"#),
        (NotificationInfo(shouldSendMutableContent: true), #"{"mutable-content":1}"#),
        (NotificationInfo(category: "C"), #"{"category":"C"}"#),
        (NotificationInfo(desiredKeys: ["title"]), #"{}"#),
        (
            NotificationInfo(
                alertBody: "b", alertLocalizationKey: "K", alertLocalizationArgs: ["a"], title: "t", titleLocalizationKey: "TK",
                titleLocalizationArgs: ["x"], subtitle: "s", subtitleLocalizationKey: "SK", subtitleLocalizationArgs: ["y"],
                alertActionLocalizationKey: "VIEW", alertLaunchImage: "l.png", soundName: "ping", shouldBadge: true,
                shouldSendContentAvailable: true, shouldSendMutableContent: true, category: "C"),
            #"{"alert":{"body":"b","loc-key":"K","loc-args":["a"],"title":"t","title-loc-key":"TK","title-loc-args":["x"],"#
                + #""subtitle":"s","subtitle-loc-key":"SK","subtitle-loc-args":["y"],"action-loc-key":"VIEW","launch-image":"l.png"},"#
                + #""badge":1,"sound":"ping","content-available":1,"mutable-content":1,"category":"C"}"#
        ),
    ]

    /// On a zone push (no record) loc-args are sent as given, so the table shows the mapping alone.
    @Test(arguments: mappings)
    func notificationInfoMapping(info: NotificationInfo, aps: String) {
        #expect(zonePush(info).json["aps"]?.serialized == aps)
    }

    // MARK: loc-args from record values

    static let argumentValues: [(String, FieldValue?, String)] = [
        ("string", .string("Mei \"Chen\""), "Mei \"Chen\""),
        ("int", .int64(-42), "-42"),
        ("double", .double(4.5), "4.5"),
        ("integralDouble", .double(3), "3.0"),
        ("timestamp", .timestamp(1_700_000_000_123), "1700000000123"),
        ("reference", .reference(Reference(recordID: RecordID(recordName: "artist-07", zoneID: ownerZone))), "artist-07"),
        ("location", .location(Location(latitude: 48.8606, longitude: 2.3376, altitude: 35)), "48.8606,2.3376"),
        ("bytes", .bytes([1, 2, 3]), ""),
        ("asset", .assetID("asset-1"), ""),
        ("list", .list(.string, [.string("a"), .string("b")]), ""),
        ("missing", nil, ""),
    ]

    @Test(arguments: argumentValues)
    func localizationArgsFromRecord(name: String, value: FieldValue?, text: String) {
        let record = artwork("art-1", value.map { [(name, $0)] } ?? [])
        let info = NotificationInfo(
            alertLocalizationArgs: [name], titleLocalizationArgs: [name, name], subtitleLocalizationArgs: [name])
        let alert = queryPush(info, record: record).json["aps"]?["alert"]
        #expect(alert?["loc-args"] == .array([.string(text)]))
        #expect(alert?["title-loc-args"] == .array([.string(text), .string(text)]))
        #expect(alert?["subtitle-loc-args"] == .array([.string(text)]))
    }

    @Test func localizationArgsKeepOrderAndSystemFields() {
        var record = artwork("art-9", [("artist", .string("Mei Chen")), ("price", .int64(1200))])
        record.creationDate = 1_600_000_000_000
        let info = NotificationInfo(alertLocalizationKey: "NEW_%@_%@_%@_%@", alertLocalizationArgs: ["price", "artist", "recordID", "creationDate"])
        let alert = queryPush(info, record: record).json["aps"]?["alert"]
        #expect(alert?.serialized == #"{"loc-key":"NEW_%@_%@_%@_%@","loc-args":["1200","Mei Chen","art-9","1600000000000"]}"#)
    }

    @Test func localizationArgsOfZoneAndDatabasePushesAreSentAsGiven() {
        let info = NotificationInfo(alertLocalizationArgs: ["title"], titleLocalizationArgs: ["artist"])
        let zone = zonePush(info).json["aps"]?["alert"]
        #expect(zone?.serialized == #"{"loc-args":["title"],"title-loc-args":["artist"]}"#)
        let database = PushPayload.database(subscriptionID: "db", zoneID: nil, notificationInfo: info, context: context, notificationID: fixedID)
        #expect(database.json["aps"]?["alert"] == zone)
    }

    // MARK: af

    static let desiredValues: [(FieldValue, String?)] = [
        (.string("Sunset"), #""Sunset""#),
        (.int64(9_007_199_254_740_993), "9007199254740993"),
        (.double(2.5), "2.5"),
        (.timestamp(1_700_000_000_000), "1700000000000"),
        (.location(Location(latitude: 48.8606, longitude: 2.3376, altitude: 30, speed: 2)), #"{"latitude":48.8606,"longitude":2.3376}"#),
        (.reference(Reference(recordID: RecordID(recordName: "artist-07"), action: .deleteSelf)), #""artist-07""#),
        (.bytes([0xFF]), nil),
        (.assetID("a1"), nil),
        (.list(.int64, [.int64(1)]), nil),
        (.list(.string, []), nil),
        (.double(.nan), nil),
    ]

    @Test(arguments: desiredValues)
    func desiredKeyEncoding(value: FieldValue, encoded: String?) {
        let push = queryPush(NotificationInfo(desiredKeys: ["v"]), record: artwork("r", [("v", value)]))
        if let encoded {
            #expect(push.json["ck"]?["qry"]?["af"]?.serialized == "{\"v\":\(encoded)}")
        } else {
            #expect(!has(push.json, ["ck", "qry", "af"]))
        }
    }

    @Test func desiredKeysUseAtMostThreePresentFields() {
        let record = artwork("r", [
            ("a", .string("A")), ("b", .int64(2)), ("blob", .bytes([1])), ("c", .double(3.5)), ("d", .string("D")),
        ])
        let info = NotificationInfo(desiredKeys: ["missing", "c", "blob", "a", "c", "b", "d"])
        #expect(queryPush(info, record: record).json["ck"]?["qry"]?["af"]?.serialized == #"{"c":3.5,"a":"A","b":2}"#)
        #expect(!has(queryPush(NotificationInfo(desiredKeys: []), record: record).json, ["ck", "qry", "af"]))
        #expect(!has(queryPush(NotificationInfo(desiredKeys: ["missing"]), record: record).json, ["ck", "qry", "af"]))
        #expect(!has(queryPush(NotificationInfo(), record: record).json, ["ck", "qry", "af"]))
    }

    @Test(arguments: [
        (String(repeating: "a", count: 150), String(repeating: "a", count: 100)),
        (String(repeating: "a", count: 100), String(repeating: "a", count: 100)),
        ("short", "short"),
        // "é" as e + U+0301: 100 Characters are 200 scalars and 300 UTF-8 bytes.
        (String(repeating: "e\u{301}", count: 120), String(repeating: "e\u{301}", count: 100)),
        (String(repeating: "👩‍👩‍👧", count: 101), String(repeating: "👩‍👩‍👧", count: 100)),
    ])
    func desiredStringsAreCutAtOneHundredCharacters(value: String, kept: String) {
        let push = queryPush(NotificationInfo(desiredKeys: ["title"]), record: artwork("r", [("title", .string(value))]))
        #expect(push.json["ck"]?["qry"]?["af"]?["title"] == .string(kept))
        #expect(kept.count <= 100)
    }

    // MARK: Zone and database pushes

    @Test func recordZonePush() {
        let push = zonePush(NotificationInfo(shouldSendContentAvailable: true))
        #expect(push.json.serialized == """
            {"aps":{"content-available":1},"ck":{"ce":2,"cid":"iCloud.c","nid":"\(fixedID)","ckuserid":"_owner",\
            "fet":{"sid":"zone-sub","zid":"Drafts","zoid":"_owner","dbs":2}}}
            """)
        #expect(push.priority == 5 && push.pushType == "background" && !push.isPruned)
    }

    @Test func databasePush() {
        let shared = PushContext(containerIdentifier: "iCloud.c", environment: .production, database: .shared, userRecordName: "_me")
        let push = PushPayload.database(
            subscriptionID: "db-sub", zoneID: ZoneID(zoneName: "Album", ownerName: "_friend"),
            notificationInfo: NotificationInfo(alertBody: "Changed", desiredKeys: ["title"]), context: shared, notificationID: fixedID)
        #expect(push.json.serialized == """
            {"aps":{"alert":{"body":"Changed"}},"ck":{"ce":1,"cid":"iCloud.c","nid":"\(fixedID)","ckuserid":"_me",\
            "met":{"sid":"db-sub","dbs":3,"zid":"Album","zoid":"_friend"}}}
            """)
        #expect(push.priority == 10 && push.pushType == "alert")
        let withoutZone = PushPayload.database(
            subscriptionID: "db-sub", zoneID: nil, notificationInfo: NotificationInfo(), context: shared, notificationID: fixedID)
        #expect(withoutZone.json["ck"]?["met"]?.serialized == #"{"sid":"db-sub","dbs":3}"#)
        #expect(withoutZone.json["aps"] == .object([]))
    }

    // MARK: Priority

    static let priorities: [(NotificationInfo, Int, String)] = [
        (NotificationInfo(), 5, "background"),
        (NotificationInfo(shouldSendContentAvailable: true), 5, "background"),
        (NotificationInfo(shouldSendMutableContent: true), 5, "background"),
        (NotificationInfo(category: "C"), 5, "background"),
        (NotificationInfo(desiredKeys: ["title"]), 5, "background"),
        (NotificationInfo(alertBody: "b"), 10, "alert"),
        (NotificationInfo(alertLocalizationKey: "K"), 10, "alert"),
        (NotificationInfo(title: "t"), 10, "alert"),
        (NotificationInfo(subtitle: "s"), 10, "alert"),
        (NotificationInfo(soundName: "default"), 10, "alert"),
        (NotificationInfo(shouldBadge: true), 10, "alert"),
        (NotificationInfo(soundName: "default", shouldSendContentAvailable: true), 10, "alert"),
    ]

    @Test(arguments: priorities)
    func priorityAndPushType(info: NotificationInfo, priority: Int, pushType: String) {
        for push in [queryPush(info), zonePush(info)] {
            #expect(push.priority == priority)
            #expect(push.pushType == pushType)
            #expect(push.envelope["priority"] == .int(Int64(priority)))
            #expect(push.envelope["pushType"] == .string(pushType))
        }
    }

    // MARK: Pruning

    /// Where each pruned key lives, in pruning order.
    static let pruningPaths: [[String]] = [
        ["ck", "qry", "af"], ["ck", "cid"], ["ck", "qry", "rid"], ["ck", "qry", "fo"], ["aps", "sound"],
        ["aps", "alert", "launch-image"], ["aps", "alert", "action-loc-key"], ["aps", "alert", "body"],
        ["aps", "alert", "loc-args"], ["aps", "alert", "loc-key"], ["aps", "badge"],
    ]

    static let prunableRecord = artwork("art-1", [
        ("title", .string(String(repeating: "T", count: 140))), ("note", .string(String(repeating: "N", count: 100))),
        ("price", .int64(1200)),
    ])

    static func prunableInfo(title: String) -> NotificationInfo {
        NotificationInfo(
            alertBody: "New artwork by Mei Chen", alertLocalizationKey: "NEW_ART_%@", alertLocalizationArgs: ["title"], title: title,
            alertActionLocalizationKey: "VIEW", alertLaunchImage: "launch.png", soundName: "chime.aiff", shouldBadge: true,
            shouldSendContentAvailable: true, category: "NEW_ART", desiredKeys: ["title", "note", "price"])
    }

    /// The payload expected after dropping the first `count` keys, with `title` as the alert title.
    static func expectedPruned(_ count: Int, title: String) -> JSON {
        let small = queryPush(prunableInfo(title: ""), record: prunableRecord).json
        let base = setting(["aps", "alert", "title"], to: .string(title), in: small)
        var json = pruningPaths.prefix(count).reduce(base) { removing($1, from: $0) }
        if count > 0 { json = setting(["ck", "p"], to: .int(1), in: json) }
        return json
    }

    @Test func payloadOfExactlyTheLimitIsNotPruned() {
        let padding = PushPayload.maximumSize - size(Self.expectedPruned(0, title: ""))
        let push = queryPush(Self.prunableInfo(title: String(repeating: "x", count: padding)), record: Self.prunableRecord)
        #expect(size(push.json) == PushPayload.maximumSize)
        #expect(!push.isPruned)
        #expect(!has(push.json, ["ck", "p"]))
        #expect(Self.pruningPaths.allSatisfy { has(push.json, $0) })
    }

    /// For each k, a payload that fits exactly once the first k keys are gone (and, one byte larger,
    /// once k + 1 are): exactly those keys are dropped, `p` is 1, and nid survives.
    @Test(arguments: 1...11)
    func pruningOrder(dropped: Int) throws {
        let padding = PushPayload.maximumSize - size(Self.expectedPruned(dropped, title: ""))
        let over = size(Self.expectedPruned(0, title: "")) + padding - PushPayload.maximumSize
        #expect(over > 0)
        for (extra, count) in [(0, dropped), (1, dropped + 1)] where count <= 11 {
            let title = String(repeating: "x", count: padding + extra)
            let push = queryPush(Self.prunableInfo(title: title), record: Self.prunableRecord)
            #expect(push.json == Self.expectedPruned(count, title: title))
            #expect(size(push.json) <= PushPayload.maximumSize)
            #expect(push.isPruned)
            #expect(push.json["ck"]?["p"] == .int(1))
            #expect(push.json["ck"]?["nid"] == .string(fixedID))
            for (index, path) in Self.pruningPaths.enumerated() {
                #expect(has(push.json, path) == (index >= count), "\(path) after dropping \(count)")
            }
            #expect(push.json["aps"]?["alert"]?["title"] == .string(title))
            #expect(push.json["aps"]?["category"] == .string("NEW_ART"))
            #expect(push.json["aps"]?["content-available"] == .int(1))
            #expect(push.priority == 10 && push.pushType == "alert")
        }
    }

    @Test func zonePushPrunesOnlyWhatItHas() {
        let small = zonePush(NotificationInfo(alertBody: "b", title: "", soundName: "s")).json
        var expected = [["ck", "cid"], ["aps", "sound"], ["aps", "alert", "body"]].reduce(small) { removing($1, from: $0) }
        expected = setting(["ck", "p"], to: .int(1), in: expected)
        let title = String(repeating: "t", count: PushPayload.maximumSize - size(expected))
        expected = setting(["aps", "alert", "title"], to: .string(title), in: expected)
        let push = zonePush(NotificationInfo(alertBody: "b", title: title, soundName: "s"))
        // cid, sound and body go (the other listed keys are absent); the title then fits exactly.
        #expect(push.json == expected)
        #expect(size(push.json) == PushPayload.maximumSize)
        #expect(push.json["ck"]?["cid"] == nil)
        #expect(push.json["aps"]?["sound"] == nil)
        #expect(push.json["aps"]?["alert"]?["body"] == nil)
        #expect(push.json["aps"]?["alert"]?["title"] == .string(title))
        #expect(push.json["ck"]?["fet"]?["sid"] == .string("zone-sub"))
        #expect(push.json["ck"]?["p"] == .int(1))
        #expect(size(push.json) <= PushPayload.maximumSize)
    }

    @Test func prunedSoundMakesThePushSilent() {
        let info = NotificationInfo(soundName: String(repeating: "s", count: 5000), shouldSendContentAvailable: true)
        let push = queryPush(info)
        #expect(push.json["aps"]?.serialized == #"{"content-available":1}"#)
        #expect(push.isPruned && push.priority == 5 && push.pushType == "background")
    }

    static let oversizedTexts: [String] = [
        String(repeating: "x", count: 10_000),
        String(repeating: "\"\\\n", count: 3000),
        String(repeating: "👩‍👩‍👧é", count: 1000),
        String(repeating: "\u{1}", count: 2000),
    ]

    /// After every listed key is gone, the longest remaining alert strings are cut (ending with "…").
    @Test(arguments: oversizedTexts)
    func oversizedTitleIsTruncated(text: String) throws {
        let info = NotificationInfo(title: text, subtitle: "Sub", soundName: "s", shouldBadge: true,
                                    category: "NEW_ART")
        let push = queryPush(info, record: Self.prunableRecord)
        #expect(size(push.json) <= PushPayload.maximumSize)
        #expect(size(push.json) > PushPayload.maximumSize - 64)
        #expect(push.isPruned && push.json["ck"]?["p"] == .int(1))
        #expect(push.json["ck"]?["nid"] == .string(fixedID))
        #expect(Self.pruningPaths.allSatisfy { !has(push.json, $0) })
        let title = try #require(push.json["aps"]?["alert"]?["title"]?.stringValue)
        #expect(title.hasSuffix("…"))
        #expect(text.hasPrefix(title.dropLast()))
        #expect(push.json["aps"]?["alert"]?["subtitle"] == .string("Sub"))
        #expect(push.json["aps"]?["category"] == .string("NEW_ART"))
        #expect(push.priority == 10)
    }

    /// Long strings are cut to one common length, so a long title does not wipe out a shorter subtitle.
    @Test func longStringsAreCutToACommonLength() throws {
        let info = NotificationInfo(
            title: String(repeating: "x", count: 6000), subtitle: String(repeating: "y", count: 3000), shouldBadge: true,
            category: String(repeating: "c", count: 100))
        let push = zonePush(info)
        #expect(size(push.json) <= PushPayload.maximumSize)
        #expect(size(push.json) > PushPayload.maximumSize - 8)
        let title = try #require(push.json["aps"]?["alert"]?["title"]?.stringValue)
        let subtitle = try #require(push.json["aps"]?["alert"]?["subtitle"]?.stringValue)
        #expect(title.hasSuffix("…") && subtitle.hasSuffix("…"))
        #expect(abs(title.utf8.count - subtitle.utf8.count) <= 1)
        #expect(title.utf8.count > 1800)
        #expect(push.json["aps"]?["category"] == .string(String(repeating: "c", count: 100)))
        #expect(push.json["aps"]?["badge"] == nil)
    }

    @Test func oversizedCategoryIsTruncated() throws {
        let push = zonePush(NotificationInfo(shouldSendContentAvailable: true, category: String(repeating: "c", count: 6000)))
        #expect(size(push.json) <= PushPayload.maximumSize)
        let category = try #require(push.json["aps"]?["category"]?.stringValue)
        #expect(category.hasSuffix("…") && category.count > 3000)
        #expect(push.priority == 5)
    }

    @Test func thousandsOfArgumentsAreDropped() {
        let names = (0..<3000).map { "f\($0)" }
        let push = zonePush(NotificationInfo(title: "Hello", titleLocalizationArgs: names))
        #expect(size(push.json) <= PushPayload.maximumSize)
        #expect(push.json["aps"]?["alert"]?["title-loc-args"] == nil)
        #expect(push.json["aps"]?["alert"]?["title"] == .string("Hello"))
    }

    @Test func oversizedIdentifiersAreCutButNidSurvives() {
        let huge = String(repeating: "z", count: 8000)
        let record = Record(recordType: "T", recordID: RecordID(recordName: "r", zoneID: ZoneID(zoneName: huge, ownerName: "_o")))
        let push = PushPayload.query(
            subscriptionID: huge, record: record, reason: .recordUpdated, notificationInfo: NotificationInfo(title: huge),
            context: PushContext(containerIdentifier: huge, userRecordName: huge), notificationID: fixedID)
        #expect(size(push.json) <= PushPayload.maximumSize)
        #expect(push.json["ck"]?["nid"] == .string(fixedID))
        #expect(push.json["ck"]?["p"] == .int(1))

        let hugeID = PushPayload.recordZone(
            subscriptionID: "s", zoneID: ZoneID(), notificationInfo: NotificationInfo(), context: context, notificationID: huge)
        // Only a notificationID of pathological length is ever cut, and only after every other identifier.
        #expect(size(hugeID.json) <= PushPayload.maximumSize)
        let nid = hugeID.json["ck"]?["nid"]?.stringValue ?? ""
        #expect(nid.count > 3000 && huge.hasPrefix(nid))
    }

    // MARK: Notification IDs

    @Test func everyPushGetsAFreshUUID() throws {
        let info = NotificationInfo(alertBody: "b")
        let record = artwork("r", [])
        let pushes = [
            PushPayload.query(subscriptionID: "s", record: record, reason: .recordCreated, notificationInfo: info, context: context),
            PushPayload.query(subscriptionID: "s", record: record, reason: .recordCreated, notificationInfo: info, context: context),
            PushPayload.recordZone(subscriptionID: "s", zoneID: ZoneID(), notificationInfo: info, context: context),
            PushPayload.database(subscriptionID: "s", zoneID: nil, notificationInfo: info, context: context),
        ]
        let ids = try pushes.map { try #require($0.json["ck"]?["nid"]?.stringValue) }
        #expect(Set(ids).count == ids.count)
        for id in ids { #expect(UUID(uuidString: id) != nil) }
    }

    /// Notification IDs are version 4 UUIDs in `UUID().uuidString`'s form: upper case, dashes
    /// after 8, 12, 16 and 20 digits, and the version and variant bits set.
    @Test func notificationIDsAreVersion4UUIDText() throws {
        for _ in 0..<1_000 {
            let text = UUIDText.random()
            let uuid = try #require(UUID(uuidString: text))
            #expect(uuid.uuidString == text)
            let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4 && bytes[8] >> 6 == 0b10)
        }
    }

    // MARK: NotificationInfo(json:)

    @Test func notificationInfoFromJSON() throws {
        let json = try JSON.parse("""
            {"alertBody":"b","alertLocalizationKey":"K","alertLocalizationArgs":["a","b"],"alertActionLocalizationKey":"VIEW",
             "alertLaunchImage":"l.png","soundName":"default","shouldBadge":true,"shouldSendContentAvailable":false,
             "shouldSendMutableContent":true,"category":"C","desiredKeys":["title"],"title":"t","titleLocalizationKey":"TK",
             "titleLocalizationArgs":["x"],"subtitle":"s","subtitleLocalizationKey":"SK","subtitleLocalizationArgs":[]}
            """)
        let info = try NotificationInfo(json: json)
        #expect(info == NotificationInfo(
            alertBody: "b", alertLocalizationKey: "K", alertLocalizationArgs: ["a", "b"], title: "t", titleLocalizationKey: "TK",
            titleLocalizationArgs: ["x"], subtitle: "s", subtitleLocalizationKey: "SK", subtitleLocalizationArgs: [],
            alertActionLocalizationKey: "VIEW", alertLaunchImage: "l.png", soundName: "default", shouldBadge: true,
            shouldSendContentAvailable: false, shouldSendMutableContent: true, category: "C", desiredKeys: ["title"]))
        #expect(try NotificationInfo(json: JSON.parse("{}")) == NotificationInfo())
        #expect(try NotificationInfo(json: JSON.parse(#"{"alertBody":null,"shouldBadge":null}"#)) == NotificationInfo())
    }

    @Test(arguments: [
        (#"[]"#, "notificationInfo must be an object, found an array"),
        (#"{"alertbody":"b"}"#, "notificationInfo: unknown key 'alertbody'"),
        (#"{"alertBody":1}"#, "notificationInfo.alertBody: expected a string, found a number"),
        (#"{"shouldBadge":"yes"}"#, "notificationInfo.shouldBadge: expected a boolean, found a string"),
        (#"{"shouldSendContentAvailable":1}"#, "notificationInfo.shouldSendContentAvailable: expected a boolean, found a number"),
        (#"{"desiredKeys":"title"}"#, "notificationInfo.desiredKeys: expected an array of strings, found a string"),
        (#"{"alertLocalizationArgs":["a",2]}"#, "notificationInfo.alertLocalizationArgs[1]: expected a string, found a number"),
        (#"{"category":{}}"#, "notificationInfo.category: expected a string, found an object"),
        (#"{"soundName":"a","soundName":"b"}"#, "notificationInfo: duplicate key 'soundName'"),
    ])
    func badNotificationInfo(text: String, message: String) throws {
        let json = try JSON.parse(text)
        #expect(throws: NotificationInfoError(message: message)) { try NotificationInfo(json: json) }
        #expect(NotificationInfoError(message: message).description == message)
    }
}

/// Query push templates make, for every notification info a template takes, exactly the push
/// `PushPayload.query` makes, or nothing when that push might be pruned.
@Suite struct QueryPushTemplateTests {
    /// Text of `length` bytes or so, now and then with what JSON escapes, or multi-byte letters.
    private static func text(_ rng: inout SplitMix, length: Int) -> String {
        let pieces = ["a", "Z", "0", "-", "_", "é", "→", "\"", "\\", "\n", "\u{1}", " "]
        return String((0..<length).map { _ in pieces[Int.random(in: 0..<pieces.count, using: &rng)] }.joined().prefix(length))
    }

    private static func maybe(_ rng: inout SplitMix, _ make: (inout SplitMix) -> String) -> String? {
        Bool.random(using: &rng) ? make(&rng) : nil
    }

    /// Mostly short strings; one run in eight near or over APNs' limit.
    private static func length(_ rng: inout SplitMix) -> Int {
        Int.random(in: 0..<8, using: &rng) == 0 ? Int.random(in: 500...4_200, using: &rng) : Int.random(in: 0...20, using: &rng)
    }

    @Test func filledTemplatesAreTheQueryPush() async {
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var rng = SplitMix(seed: seed)
            var info = NotificationInfo()
            info.alertBody = Self.maybe(&rng) { Self.text(&$0, length: Self.length(&$0)) }
            info.title = Self.maybe(&rng) { Self.text(&$0, length: Self.length(&$0)) }
            info.subtitle = Self.maybe(&rng) { Self.text(&$0, length: 5) }
            info.alertLocalizationKey = Self.maybe(&rng) { Self.text(&$0, length: 5) }
            info.soundName = Self.maybe(&rng) { Self.text(&$0, length: 5) }
            info.category = Self.maybe(&rng) { Self.text(&$0, length: Self.length(&$0)) }
            info.shouldBadge = Bool.random(using: &rng)
            info.shouldSendContentAvailable = Bool.random(using: &rng)
            info.shouldSendMutableContent = Bool.random(using: &rng)
            info.collapseIDKey = Bool.random(using: &rng) ? "title" : nil
            // Infos that take more from the record have no template.
            let takesMore = Int.random(in: 0..<6, using: &rng) == 0
            if takesMore { info.desiredKeys = ["title"] }
            let context = PushContext(containerIdentifier: Self.text(&rng, length: 12), environment: Bool.random(using: &rng) ? .production : .development,
                                      database: [.public, .private, .shared][Int.random(in: 0..<3, using: &rng)],
                                      userRecordName: Self.text(&rng, length: 10))
            let subscriptionID = Self.text(&rng, length: Int.random(in: 1...12, using: &rng))
            let template = QueryPushTemplate(subscriptionID: subscriptionID, notificationInfo: info, context: context)
            #expect((template == nil) == (takesMore || PushPayload.query(
                subscriptionID: subscriptionID, record: Record(recordType: "", recordID: RecordID(recordName: "", zoneID: ZoneID(zoneName: "", ownerName: ""))),
                reason: .recordCreated, notificationInfo: info, context: context, notificationID: "").isPruned))
            guard let template else { return }
            for _ in 0..<4 {
                let id = RecordID(recordName: Self.text(&rng, length: Self.length(&rng) / 2 + 1),
                                  zoneID: ZoneID(zoneName: Self.text(&rng, length: 8), ownerName: Self.text(&rng, length: 8)))
                let record = Record(recordType: "Note", recordID: id, fields: Fields([("title", .string(Self.text(&rng, length: 70)))]))
                let reason = [QueryNotificationReason.recordCreated, .recordUpdated, .recordDeleted][Int.random(in: 0..<3, using: &rng)]
                let notificationID = UUIDText.random()
                let built = PushPayload.query(subscriptionID: subscriptionID, record: record, reason: reason, notificationInfo: info, context: context,
                                              notificationID: notificationID)
                if let filled = template.payload(record: record, reason: reason, notificationID: notificationID) {
                    #expect(filled == built)
                    #expect(filled.json.serialized == built.json.serialized)
                    // Kept as the template and its holes, equal to the JSON made and hashed alike.
                    #expect(filled.content == PushJSON(built.json))
                    #expect(Set([filled, built]).count == 1)
                } else {
                    // Left to the builder only when the unpruned push's size bound is over the
                    // limit: a pruned push was over the limit itself.
                    #expect(built.isPruned || built.json.serializedSizeBound > PushPayload.maximumSize)
                }
            }
        }
    }

    /// Across the size where the push's bound crosses APNs' limit, a template fills the push
    /// exactly while the bound fits, counting every part filled in.
    @Test func templatesStopWhereTheBoundCrossesTheLimit() throws {
        let context = PushContext(containerIdentifier: "iCloud.c", database: .private, userRecordName: "_u")
        let record = Record(recordType: "Note", recordID: RecordID(recordName: "note-1", zoneID: ZoneID(zoneName: "Notes", ownerName: "_u")))
        var filled = 0, built = 0
        for length in 450...720 {
            var info = NotificationInfo()
            info.alertBody = String(repeating: "a", count: length)
            let template = try #require(QueryPushTemplate(subscriptionID: "s", notificationInfo: info, context: context))
            let push = PushPayload.query(subscriptionID: "s", record: record, reason: .recordUpdated, notificationInfo: info, context: context,
                                         notificationID: fixedID)
            if let payload = template.payload(record: record, reason: .recordUpdated, notificationID: fixedID) {
                #expect(payload == push)
                #expect(push.json.serializedSizeBound <= PushPayload.maximumSize)
                filled += 1
            } else {
                #expect(push.json.serializedSizeBound > PushPayload.maximumSize)
                built += 1
            }
        }
        #expect(filled > 0 && built > 0)
    }

    /// A cached template serves only the subscription, info and context it was made for.
    @Test func templatesFollowTheirSubscriptions() throws {
        var set = SubscriptionSet(database: .private)
        var info = NotificationInfo()
        info.alertBody = "first"
        try set.save(try .query("s", recordType: "Note", predicate: "TRUEPREDICATE", notificationInfo: info))
        let context = PushContext(containerIdentifier: "iCloud.c", database: .private, userRecordName: "_u")
        var templates = QueryPushTemplates(capacity: 2)
        func push(_ name: String, _ context: PushContext = context) throws -> JSON {
            let firings = set.firings(for: .created(Record(recordType: "Note", recordName: name)), now: 0)
            let firing = try #require(firings.first)
            let pushed = firing.payload(context: context, notificationID: "n", templates: &templates)
            #expect(pushed == firing.payload(context: context, notificationID: "n"))
            return pushed.json
        }
        #expect(try push("a")["aps"]?["alert"]?["body"] == .string("first"))
        #expect(try push("b")["ck"]?["qry"]?["rid"] == .string("b"))
        info.alertBody = "second"
        try set.save(try .query("s", recordType: "Note", predicate: "TRUEPREDICATE", notificationInfo: info))
        #expect(try push("c")["aps"]?["alert"]?["body"] == .string("second"))
        #expect(try push("d", PushContext(containerIdentifier: "iCloud.other", database: .private))["ck"]?["cid"] == .string("iCloud.other"))
        // Past its capacity the cache starts over, and still serves.
        let types = ["T1", "T2", "T3"]
        for type in types { try set.save(try .query(type.lowercased(), recordType: type, predicate: "TRUEPREDICATE", notificationInfo: info)) }
        for name in ["e", "f"] {
            for type in types {
                let firing = try #require(set.firings(for: .created(Record(recordType: type, recordName: name)), now: 0).first)
                #expect(firing.payload(context: context, notificationID: "n", templates: &templates) == firing.payload(context: context, notificationID: "n"))
            }
        }
    }
}
