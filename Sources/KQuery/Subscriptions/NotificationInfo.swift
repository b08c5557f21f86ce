/// CKSubscription.NotificationInfo: what a push shows. Localization args name record fields; their values are filled in.
///
/// For query subscriptions the `...LocalizationArgs` are field names whose values the push carries;
/// zone and database pushes have no record, so their args are sent as given (see `PushPayload`).
public struct NotificationInfo: Hashable, Sendable {
    /// The alert text (`aps.alert.body`).
    public var alertBody: String?
    /// A key in the app's Localizable.strings for the alert text (`aps.alert.loc-key`).
    public var alertLocalizationKey: String?
    /// Field names whose values fill the `alertLocalizationKey` format (`aps.alert.loc-args`).
    public var alertLocalizationArgs: [String]?
    /// The alert title (`aps.alert.title`).
    public var title: String?
    /// A localization key for the title (`aps.alert.title-loc-key`).
    public var titleLocalizationKey: String?
    /// Field names whose values fill the title format (`aps.alert.title-loc-args`).
    public var titleLocalizationArgs: [String]?
    /// The alert subtitle (`aps.alert.subtitle`).
    public var subtitle: String?
    /// A localization key for the subtitle (`aps.alert.subtitle-loc-key`).
    public var subtitleLocalizationKey: String?
    /// Field names whose values fill the subtitle format (`aps.alert.subtitle-loc-args`).
    public var subtitleLocalizationArgs: [String]?
    /// A localization key for the alert's action button (`aps.alert.action-loc-key`).
    public var alertActionLocalizationKey: String?
    /// The launch image shown when the app opens from the push (`aps.alert.launch-image`).
    public var alertLaunchImage: String?
    /// The sound to play (`aps.sound`), e.g. `"default"`.
    public var soundName: String?
    /// Whether the push sets the app's badge (`aps.badge: 1`).
    public var shouldBadge: Bool
    /// Whether the push wakes the app in the background (`aps.content-available: 1`).
    public var shouldSendContentAvailable: Bool
    /// Whether a notification service extension may modify the push (`aps.mutable-content: 1`).
    public var shouldSendMutableContent: Bool
    /// The notification category, for actionable notifications (`aps.category`).
    public var category: String?
    /// Fields sent in `af` (at most 3 are used).
    public var desiredKeys: [String]?
    /// The field whose value becomes the push's APNs `apns-collapse-id` (query subscriptions).
    public var collapseIDKey: String?

    /// Creates notification info; every property defaults to absent (or false).
    public init(
        alertBody: String? = nil, alertLocalizationKey: String? = nil, alertLocalizationArgs: [String]? = nil,
        title: String? = nil, titleLocalizationKey: String? = nil, titleLocalizationArgs: [String]? = nil,
        subtitle: String? = nil, subtitleLocalizationKey: String? = nil, subtitleLocalizationArgs: [String]? = nil,
        alertActionLocalizationKey: String? = nil, alertLaunchImage: String? = nil, soundName: String? = nil,
        shouldBadge: Bool = false, shouldSendContentAvailable: Bool = false, shouldSendMutableContent: Bool = false,
        category: String? = nil, desiredKeys: [String]? = nil, collapseIDKey: String? = nil
    ) {
        self.alertBody = alertBody
        self.alertLocalizationKey = alertLocalizationKey
        self.alertLocalizationArgs = alertLocalizationArgs
        self.title = title
        self.titleLocalizationKey = titleLocalizationKey
        self.titleLocalizationArgs = titleLocalizationArgs
        self.subtitle = subtitle
        self.subtitleLocalizationKey = subtitleLocalizationKey
        self.subtitleLocalizationArgs = subtitleLocalizationArgs
        self.alertActionLocalizationKey = alertActionLocalizationKey
        self.alertLaunchImage = alertLaunchImage
        self.soundName = soundName
        self.shouldBadge = shouldBadge
        self.shouldSendContentAvailable = shouldSendContentAvailable
        self.shouldSendMutableContent = shouldSendMutableContent
        self.category = category
        self.desiredKeys = desiredKeys
        self.collapseIDKey = collapseIDKey
    }

    /// Reads the CloudKit Web Services notificationInfo dictionary: alertBody, alertLocalizationKey, alertLocalizationArgs, alertActionLocalizationKey, alertLaunchImage, soundName, shouldBadge, shouldSendContentAvailable, collapseIDKey, plus the extensions shouldSendMutableContent, category, desiredKeys, title, titleLocalizationKey, titleLocalizationArgs, subtitle, subtitleLocalizationKey, subtitleLocalizationArgs. Unknown keys or wrong types → error naming the key.
    ///
    /// A member whose value is `null` counts as absent; a key given twice is an error.
    public init(json: JSON) throws(NotificationInfoError) {
        guard case .object(let members) = json else {
            throw NotificationInfoError(message: "notificationInfo must be an object, found \(json.kindName)")
        }
        self.init()
        var seen = Set<String>()
        for (key, value) in members {
            guard seen.insert(key).inserted else {
                throw NotificationInfoError(message: "notificationInfo: duplicate key '\(key)'")
            }
            if case .null = value { continue }
            switch key {
            case "alertBody": alertBody = try Self.string(value, key)
            case "alertLocalizationKey": alertLocalizationKey = try Self.string(value, key)
            case "alertLocalizationArgs": alertLocalizationArgs = try Self.strings(value, key)
            case "title": title = try Self.string(value, key)
            case "titleLocalizationKey": titleLocalizationKey = try Self.string(value, key)
            case "titleLocalizationArgs": titleLocalizationArgs = try Self.strings(value, key)
            case "subtitle": subtitle = try Self.string(value, key)
            case "subtitleLocalizationKey": subtitleLocalizationKey = try Self.string(value, key)
            case "subtitleLocalizationArgs": subtitleLocalizationArgs = try Self.strings(value, key)
            case "alertActionLocalizationKey": alertActionLocalizationKey = try Self.string(value, key)
            case "alertLaunchImage": alertLaunchImage = try Self.string(value, key)
            case "soundName": soundName = try Self.string(value, key)
            case "shouldBadge": shouldBadge = try Self.bool(value, key)
            case "shouldSendContentAvailable": shouldSendContentAvailable = try Self.bool(value, key)
            case "shouldSendMutableContent": shouldSendMutableContent = try Self.bool(value, key)
            case "category": category = try Self.string(value, key)
            case "desiredKeys": desiredKeys = try Self.strings(value, key)
            case "collapseIDKey": collapseIDKey = try Self.string(value, key)
            default: throw NotificationInfoError(message: "notificationInfo: unknown key '\(key)'")
            }
        }
    }

    private static func string(_ value: JSON, _ key: String) throws(NotificationInfoError) -> String {
        guard case .string(let string) = value else {
            throw NotificationInfoError(message: "notificationInfo.\(key): expected a string, found \(value.kindName)")
        }
        return string
    }

    private static func bool(_ value: JSON, _ key: String) throws(NotificationInfoError) -> Bool {
        guard case .bool(let bool) = value else {
            throw NotificationInfoError(message: "notificationInfo.\(key): expected a boolean, found \(value.kindName)")
        }
        return bool
    }

    private static func strings(_ value: JSON, _ key: String) throws(NotificationInfoError) -> [String] {
        guard case .array(let elements) = value else {
            throw NotificationInfoError(message: "notificationInfo.\(key): expected an array of strings, found \(value.kindName)")
        }
        var strings: [String] = []
        strings.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            guard case .string(let string) = element else {
                throw NotificationInfoError(
                    message: "notificationInfo.\(key)[\(index)]: expected a string, found \(element.kindName)")
            }
            strings.append(string)
        }
        return strings
    }
}

/// Why a notificationInfo dictionary could not be read; the message names the offending key.
public struct NotificationInfoError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong, e.g. `notificationInfo.shouldBadge: expected a boolean, found a string`.
    public var message: String
    /// The message.
    public var description: String { message }

    /// Creates an error with `message`.
    public init(message: String) { self.message = message }
}
