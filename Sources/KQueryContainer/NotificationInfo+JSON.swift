import KQuery

extension NotificationInfo {
    /// The Web Services `notificationInfo` dictionary, with only the members that are set: the
    /// inverse of `NotificationInfo(json:)`.
    public var json: JSON {
        var members: [(String, JSON)] = []
        func add(_ key: String, _ value: String?) { if let value { members.append((key, .string(value))) } }
        func add(_ key: String, _ values: [String]?) { if let values { members.append((key, .array(values.map(JSON.string)))) } }
        func add(_ key: String, _ flag: Bool) { if flag { members.append((key, .bool(true))) } }
        add("alertBody", alertBody)
        add("alertLocalizationKey", alertLocalizationKey)
        add("alertLocalizationArgs", alertLocalizationArgs)
        add("title", title)
        add("titleLocalizationKey", titleLocalizationKey)
        add("titleLocalizationArgs", titleLocalizationArgs)
        add("subtitle", subtitle)
        add("subtitleLocalizationKey", subtitleLocalizationKey)
        add("subtitleLocalizationArgs", subtitleLocalizationArgs)
        add("alertActionLocalizationKey", alertActionLocalizationKey)
        add("alertLaunchImage", alertLaunchImage)
        add("soundName", soundName)
        add("shouldBadge", shouldBadge)
        add("shouldSendContentAvailable", shouldSendContentAvailable)
        add("shouldSendMutableContent", shouldSendMutableContent)
        add("category", category)
        add("desiredKeys", desiredKeys)
        add("collapseIDKey", collapseIDKey)
        return .object(members)
    }
}
