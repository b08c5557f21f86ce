import KQuery

import Foundation

/// A local user of `kquery serve` (SPEC §13): the name is the `userRecordName` everywhere (what
/// `kquery token --user` signs in), and the rest is what user discovery may reveal of them, only
/// when they made themselves discoverable.
public struct DirectoryUser: Hashable, Sendable {
    public var name: String
    public var emailAddress: String?
    public var phoneNumber: String?
    public var givenName: String?
    public var familyName: String?
    /// Whether discovery and lookups may return this user (CloudKit: the user granted the
    /// permission to be discovered). Undiscoverable users are never revealed.
    public var discoverable: Bool

    /// A user, every part checked (BAD_REQUEST naming the part that is wrong).
    public init(
        name: String, emailAddress: String? = nil, phoneNumber: String? = nil, givenName: String? = nil, familyName: String? = nil,
        discoverable: Bool = false
    ) throws(ServerError) {
        try Self.checkName(name)
        if let emailAddress { try Self.checkEmailAddress(emailAddress) }
        if let phoneNumber { try Self.checkPhoneNumber(phoneNumber) }
        if let givenName { try Self.checkPersonalName(givenName, "given name") }
        if let familyName { try Self.checkPersonalName(familyName, "family name") }
        self.name = name
        self.emailAddress = emailAddress
        self.phoneNumber = phoneNumber
        self.givenName = givenName
        self.familyName = familyName
        self.discoverable = discoverable
    }

    /// Reads `{"name", "emailAddress"?, "phoneNumber"?, "givenName"?, "familyName"?, "discoverable"?}`.
    public init(json: JSON) throws(ServerError) {
        guard case .object = json else { throw ServerError.badRequest("a user must be a JSON object, not \(json.kindName)") }
        guard let name = json["name"]?.stringValue else { throw ServerError.badRequest("a user needs a \"name\" string") }
        func text(_ key: String) throws(ServerError) -> String? {
            switch json[key] {
            case nil, .null?: return nil
            case .string(let value)?: return value
            case let other?: throw ServerError.badRequest("user '\(name)': \"\(key)\" must be a string, not \(other.kindName)")
            }
        }
        var discoverable = false
        switch json["discoverable"] {
        case nil, .null?: break
        case .bool(let value)?: discoverable = value
        case let other?: throw ServerError.badRequest("user '\(name)': \"discoverable\" must be true or false, not \(other.kindName)")
        }
        try self.init(
            name: name, emailAddress: try text("emailAddress"), phoneNumber: try text("phoneNumber"), givenName: try text("givenName"),
            familyName: try text("familyName"), discoverable: discoverable)
    }

    /// The form `init(json:)` reads, as `users.json` and `kquery users list` hold it.
    public var json: JSON {
        var members: [(String, JSON)] = [("name", .string(name))]
        if let emailAddress { members.append(("emailAddress", .string(emailAddress))) }
        if let phoneNumber { members.append(("phoneNumber", .string(phoneNumber))) }
        if let givenName { members.append(("givenName", .string(givenName))) }
        if let familyName { members.append(("familyName", .string(familyName))) }
        members.append(("discoverable", .bool(discoverable)))
        return .object(members)
    }

    // MARK: Matching lookups

    /// Whether this user's email address is `address` (email addresses compare without case).
    func hasEmailAddress(_ address: String) -> Bool {
        emailAddress.map { $0.lowercased() == address.lowercased() } ?? false
    }

    /// Whether this user's phone number is `number`, comparing digits only (`+1 (555) 010-0100`
    /// and `15550100100` are one number).
    func hasPhoneNumber(_ number: String) -> Bool {
        guard let phoneNumber else { return false }
        let digits = Self.digits(number)
        return !digits.isEmpty && Self.digits(phoneNumber) == digits
    }

    static func digits(_ text: String) -> String { String(text.unicodeScalars.filter { ("0"..."9").contains($0) }.map(Character.init)) }

    // MARK: Web Services forms

    /// CloudKit's UserIdentity: `{"userRecordName", "lookupInfo": {"emailAddress"?, "phoneNumber"?,
    /// "userRecordName"}, "nameComponents": {"givenName"?, "familyName"?}}`, names only for a
    /// discoverable user (CloudKit JS: "otherwise … contains only the lookupInfo key").
    var identityJSON: JSON {
        var lookupInfo: [(String, JSON)] = []
        if let emailAddress { lookupInfo.append(("emailAddress", .string(emailAddress))) }
        if let phoneNumber { lookupInfo.append(("phoneNumber", .string(phoneNumber))) }
        lookupInfo.append(("userRecordName", .string(name)))
        var members: [(String, JSON)] = [("userRecordName", .string(name)), ("lookupInfo", .object(lookupInfo))]
        if discoverable { members.append(("nameComponents", nameComponentsJSON)) }
        return .object(members)
    }

    var nameComponentsJSON: JSON {
        var members: [(String, JSON)] = []
        if let givenName { members.append(("givenName", .string(givenName))) }
        if let familyName { members.append(("familyName", .string(familyName))) }
        return .object(members)
    }

    /// The older User dictionary of `users/lookup/*`: `{"userRecordName", "firstName", "lastName"}`
    /// (null when unknown), with `emailAddress` for email lookups, plus `lookupInfo` and
    /// `nameComponents`, which MistKit decodes there (research sharing-users §4.21: a superset
    /// that both kinds of client read).
    func lookupJSON(withEmailAddress: Bool) -> JSON {
        var members: [(String, JSON)] = [
            ("userRecordName", .string(name)), ("firstName", givenName.map(JSON.string) ?? .null), ("lastName", familyName.map(JSON.string) ?? .null),
        ]
        if withEmailAddress, let emailAddress { members.append(("emailAddress", .string(emailAddress))) }
        guard case .object(let identity) = identityJSON else { return .object(members) }
        return .object(members + identity.filter { $0.0 != "userRecordName" })
    }

    // MARK: Checking

    /// A user name: 1 to 255 bytes, no white space or control characters (it travels in tokens,
    /// record names and zone owners); not CloudKit's `__defaultOwner__`, which means "the caller".
    static func checkName(_ name: String) throws(ServerError) {
        guard !name.isEmpty, name.utf8.count <= 255 else { throw ServerError.badRequest("a user name must be 1 to 255 bytes, not \(name.utf8.count)") }
        guard !name.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control }) else {
            throw ServerError.badRequest("user name '\(name)' must not contain white space or control characters")
        }
        guard name != ZoneID.defaultOwnerName else {
            throw ServerError.badRequest("'\(ZoneID.defaultOwnerName)' stands for the current user and cannot name one")
        }
    }

    /// `local@domain.tld`: one `@`, no white space, a dot inside the domain, at most 254 bytes.
    static func checkEmailAddress(_ address: String) throws(ServerError) {
        let parts = address.split(separator: "@", omittingEmptySubsequences: false)
        let fail = ServerError.badRequest("'\(address)' is not an email address (expected name@domain.tld)")
        guard address.utf8.count <= 254, parts.count == 2, !parts[0].isEmpty,
              !address.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control })
        else { throw fail }
        let domain = parts[1]
        guard domain.contains("."), !domain.hasPrefix("."), !domain.hasSuffix("."), !domain.contains("..") else { throw fail }
    }

    /// A phone number: digits with optional `+` first and spaces, `-`, `.`, `(`, `)` between, 4 to
    /// 15 digits (E.164's most).
    static func checkPhoneNumber(_ number: String) throws(ServerError) {
        let allowed = Set(" -.()".unicodeScalars)
        let body = number.hasPrefix("+") ? number.dropFirst() : Substring(number)
        let digitCount = digits(number).count
        guard body.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) || allowed.contains($0) }), (4...15).contains(digitCount) else {
            throw ServerError.badRequest("'\(number)' is not a phone number (4 to 15 digits, an optional leading +, and spaces, -, ., ( or ) between)")
        }
    }

    /// A given or family name: 1 to 255 bytes on one line.
    static func checkPersonalName(_ text: String, _ what: String) throws(ServerError) {
        guard !text.isEmpty, text.utf8.count <= 255, !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw ServerError.badRequest("a \(what) must be 1 to 255 bytes on one line")
        }
    }
}

/// The local user directory: who the users are and what discovery may say of them. It stands for
/// what CloudKit learns from iCloud accounts and the caller's address book. Kept in
/// `DIR/users.json` (what `kquery users` writes) and, for users set up with the server, in the
/// configuration file's `users` list; the file's entry wins for a name in both.
public struct UserDirectory: Hashable, Sendable {
    /// By name, without duplicates.
    public private(set) var users: [DirectoryUser] = []

    public static let fileName = "users.json"

    public init(users: [DirectoryUser] = []) {
        for user in users { save(user) }
    }

    public subscript(name: String) -> DirectoryUser? { users.first { $0.name == name } }

    /// Adds a user, or replaces the one of that name.
    public mutating func save(_ user: DirectoryUser) {
        if let position = users.firstIndex(where: { $0.name == user.name }) {
            users[position] = user
        } else {
            users.append(user)
            users.sort { $0.name < $1.name }
        }
    }

    /// This directory's users, and `base`'s whose names it lacks.
    public func overlaying(_ base: UserDirectory) -> UserDirectory {
        var merged = base
        for user in users { merged.save(user) }
        return merged
    }

    /// Reads a JSON array of users (`DirectoryUser(json:)`).
    public init(json: JSON) throws(ServerError) {
        guard case .array(let elements) = json else { throw ServerError.badRequest("users must be a JSON array, not \(json.kindName)") }
        for element in elements { save(try DirectoryUser(json: element)) }
    }

    public var json: JSON { .array(users.map(\.json)) }

    /// Reads a directory kept as one JSON object a user (`kquery users --postgres`); `what` says
    /// where, in errors.
    public init(entries: [(name: String, entry: String)], in what: String) throws(ServerError) {
        for (name, entry) in entries {
            do {
                save(try DirectoryUser(json: try JSON.parse(entry)))
            } catch {
                throw ServerError("INTERNAL_ERROR", "\(what): the entry of '\(name)' does not read: \(error)", httpStatus: 500)
            }
        }
    }

    /// The directory kept in the data directory `directory` (empty when there is no file yet).
    public static func load(directory: String) throws(ServerError) -> UserDirectory {
        let path = Self.path(directory: directory)
        guard let data = FileManager.default.contents(atPath: path) else { return UserDirectory() }
        let json: JSON
        do { json = try JSON.parse(String(decoding: data, as: UTF8.self)) } catch {
            throw ServerError("INTERNAL_ERROR", "\(path) is not valid JSON: \(error)", httpStatus: 500)
        }
        do throws(ServerError) { return try UserDirectory(json: json) } catch {
            throw ServerError("INTERNAL_ERROR", "\(path): \(error.reason)", httpStatus: 500)
        }
    }

    /// Writes the directory to `directory`'s `users.json`, atomically (a reader sees the old file
    /// or the new one, never half of one).
    public func write(directory: String) throws(ServerError) {
        let path = Self.path(directory: directory)
        do { try Data((json.serialized + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic) } catch {
            throw ServerError("INTERNAL_ERROR", "cannot write \(path): \(error.localizedDescription)", httpStatus: 500)
        }
    }

    static func path(directory: String) -> String { (directory as NSString).appendingPathComponent(fileName) }

    // MARK: Discovery

    /// The discoverable user a lookup info names (`emailAddress`, `phoneNumber` or `userRecordName`).
    func discoverable(matching lookupInfo: LookupInfo) -> DirectoryUser? {
        users.first { user in
            guard user.discoverable else { return false }
            switch lookupInfo {
            case .emailAddress(let address): return user.hasEmailAddress(address)
            case .phoneNumber(let number): return user.hasPhoneNumber(number)
            case .userRecordName(let name): return user.name == name
            }
        }
    }
}

/// How a discovery or lookup request names a user.
enum LookupInfo: Hashable {
    case emailAddress(String)
    case phoneNumber(String)
    case userRecordName(String)

    /// Reads `{"emailAddress"}`, `{"phoneNumber"}` or `{"userRecordName"}` (the first present, in
    /// that order); `what` names the element in errors.
    init(json: JSON, _ what: String) throws(ServerError) {
        guard case .object = json else { throw ServerError.badRequest("\(what) must be an object, not \(json.kindName)") }
        for (key, make) in [("emailAddress", LookupInfo.emailAddress), ("phoneNumber", LookupInfo.phoneNumber), ("userRecordName", LookupInfo.userRecordName)] {
            guard let value = json[key] else { continue }
            guard let text = value.stringValue, !text.isEmpty else { throw ServerError.badRequest("\(what).\(key) must be a non-empty string") }
            self = make(text)
            return
        }
        throw ServerError.badRequest("\(what) needs an \"emailAddress\", a \"phoneNumber\" or a \"userRecordName\"")
    }
}
