import KQuery
import KQueryWebServices

import Foundation

/// The APNs device tokens users registered (`tokens/register`), kept in `DIR/device-tokens.json`
/// so a restart keeps them, or, on one of many nodes (`--postgres`), in the shared database so
/// the node holding the APNs duty knows every node's registrations.
final class DeviceTokens: Sendable {
    struct Registration: Hashable, Sendable {
        var containerIdentifier: String
        var environment: String
        var user: String
        var apnsEnvironment: String
        var apnsToken: String

        var json: JSON {
            .object([
                ("containerIdentifier", .string(containerIdentifier)), ("environment", .string(environment)), ("user", .string(user)),
                ("apnsEnvironment", .string(apnsEnvironment)), ("apnsToken", .string(apnsToken)),
            ])
        }
    }

    let path: String
    private let registrations = Locked<[Registration]>([])
    let shared: (any SharedContainerStore)?

    init(directory: String, shared: (any SharedContainerStore)? = nil) {
        path = (directory as NSString).appendingPathComponent("device-tokens.json")
        self.shared = shared
        guard shared == nil else { return }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8),
              case .array(let elements)? = try? JSON.parse(text)
        else { return }
        let loaded = elements.compactMap { element -> Registration? in
            guard let container = element["containerIdentifier"]?.stringValue, let environment = element["environment"]?.stringValue,
                  let user = element["user"]?.stringValue, let apnsEnvironment = element["apnsEnvironment"]?.stringValue,
                  let apnsToken = element["apnsToken"]?.stringValue
            else { return nil }
            return Registration(containerIdentifier: container, environment: environment, user: user, apnsEnvironment: apnsEnvironment, apnsToken: apnsToken)
        }
        registrations.withLock { $0 = loaded }
    }

    /// Registers a device token (again: registering twice keeps one).
    func register(_ registration: Registration) throws(ServerError) {
        if let shared {
            do {
                try shared.registerDevice(
                    containerIdentifier: registration.containerIdentifier, environment: registration.environment, user: registration.user,
                    apnsEnvironment: registration.apnsEnvironment, apnsToken: registration.apnsToken)
            } catch { throw ServerError(error) }
            return
        }
        try registrations.withLock { all throws(ServerError) in
            guard !all.contains(registration) else { return }
            try save(all + [registration])
            all.append(registration)
        }
    }

    /// Forgets a device token APNs reported unregistered (410), for every user and container (in
    /// a shared database, of the container it was sent for).
    func remove(apnsToken: String, apnsEnvironment: String, containerIdentifier: String) throws(ServerError) {
        if let shared {
            do { try shared.removeDevice(containerIdentifier: containerIdentifier, apnsEnvironment: apnsEnvironment, apnsToken: apnsToken) } catch {
                throw ServerError(error)
            }
            return
        }
        try registrations.withLock { all throws(ServerError) in
            let kept = all.filter { $0.apnsToken != apnsToken || $0.apnsEnvironment != apnsEnvironment }
            guard kept.count != all.count else { return }
            try save(kept)
            all = kept
        }
    }

    /// The devices a user registered in a container's environment.
    func registrations(containerIdentifier: String, environment: String, user: String) throws(ServerError) -> [Registration] {
        if let shared {
            do {
                return try shared.devices(containerIdentifier: containerIdentifier, environment: environment, user: user).map {
                    Registration(containerIdentifier: containerIdentifier, environment: environment, user: user, apnsEnvironment: $0.apnsEnvironment, apnsToken: $0.apnsToken)
                }
            } catch { throw ServerError(error) }
        }
        return registrations.withLock { all in
            all.filter { $0.containerIdentifier == containerIdentifier && $0.environment == environment && $0.user == user }
        }
    }

    private func save(_ registrations: [Registration]) throws(ServerError) {
        let text = JSON.array(registrations.map(\.json)).serialized + "\n"
        do { try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic) } catch {
            throw ServerError("INTERNAL_ERROR", "cannot write \(path)", httpStatus: 500)
        }
    }
}
