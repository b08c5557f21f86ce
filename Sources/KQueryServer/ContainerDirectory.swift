import KQuery
import KQueryContainer
import KQueryWebServices

import Foundation

/// The containers a server serves: every container identifier a request names, each kept in its
/// own file `DIR/<identifier>.container` (or, for one node of many, in the shared database),
/// opened at its first request and then kept open.
public final class ContainerDirectory: Sendable {
    public let path: String
    private let opened = Locked<[String: Container]>([:])
    private let learned = Locked<[String: LearnedSchema]>([:])
    /// The asset limits and lifetimes every container opened here keeps.
    let assetPolicy: AssetPolicy
    /// Where the containers are when not in files of `path`.
    let shared: (any SharedContainerStore)?

    public init(path: String, assetPolicy: AssetPolicy = AssetPolicy(), shared: (any SharedContainerStore)? = nil) throws(ServerError) {
        self.assetPolicy = assetPolicy
        self.shared = shared
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                throw ServerError("INTERNAL_ERROR", "cannot create the data directory \(path)", httpStatus: 500)
            }
        } else if !isDirectory.boolValue {
            throw ServerError.badRequest("\(path) is not a directory")
        }
        self.path = path
    }

    static let fileExtension = "container"

    /// Whether `identifier` may name a container: letters, digits, `.`, `-` and `_`, not starting
    /// with a dot (so it stays one file inside the directory).
    static func isValidIdentifier(_ identifier: String) -> Bool {
        !identifier.isEmpty && identifier.utf8.count <= 200 && !identifier.hasPrefix(".")
            && identifier.utf8.allSatisfy { c in
                (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 46 || c == 45 || c == 95
            }
    }

    /// The container `identifier`, opened (and created) on first use.
    public func container(_ identifier: String) throws(ServerError) -> Container {
        guard Self.isValidIdentifier(identifier) else {
            throw ServerError.badRequest("invalid container identifier '\(identifier)'")
        }
        return try opened.withLock { containers throws(ServerError) -> Container in
            if let container = containers[identifier] { return container }
            let file = (path as NSString).appendingPathComponent("\(identifier).\(Self.fileExtension)")
            do throws(ContainerError) {
                let container = if let shared { try shared.openContainer(identifier, assetPolicy: assetPolicy) } else {
                    try Container(containerIdentifier: identifier, path: file, assetPolicy: assetPolicy)
                }
                containers[identifier] = container
                return container
            } catch {
                throw ServerError(error)
            }
        }
    }

    /// The container `identifier` if it exists already: what a request that is not authenticated
    /// yet (an upload URL's body) may open, so it never creates a container.
    func existingContainer(_ identifier: String) throws(ServerError) -> Container? {
        guard Self.isValidIdentifier(identifier) else { return nil }
        if let container = opened.withLock({ $0[identifier] }) { return container }
        if let shared {
            do throws(ContainerError) {
                guard try shared.containerIdentifiers().contains(identifier) else { return nil }
            } catch {
                throw ServerError(error)
            }
        } else {
            let file = (path as NSString).appendingPathComponent("\(identifier).\(Self.fileExtension)")
            guard FileManager.default.fileExists(atPath: file) else { return nil }
        }
        return try container(identifier)
    }

    /// Makes container `identifier` from the container file at `source` (the console's import):
    /// only a new identifier (no file, not open), and only for containers kept in files.
    func importContainer(_ identifier: String, from source: String) throws(ServerError) {
        guard Self.isValidIdentifier(identifier) else { throw ServerError.badRequest("invalid container identifier '\(identifier)'") }
        guard shared == nil else { throw ServerError.badRequest("import makes container files: this server keeps its containers in PostgreSQL") }
        guard Container.isContainerFile(atPath: source) else { throw ServerError.badRequest("the upload is not a container file (export one from the console)") }
        try opened.withLock { containers throws(ServerError) in
            let file = (path as NSString).appendingPathComponent("\(identifier).\(Self.fileExtension)")
            guard containers[identifier] == nil, !FileManager.default.fileExists(atPath: file) else {
                throw ServerError("EXISTS", "container '\(identifier)' exists: import into a new identifier", httpStatus: 409)
            }
            do throws(ContainerError) {
                _ = try ContainerCopy.copy(from: ContainerCopy.fileStorage(path: source), to: ContainerCopy.fileStorage(path: file))
            } catch {
                try? FileManager.default.removeItem(atPath: file)
                throw ServerError(error)
            }
        }
    }

    /// The schema container `identifier` learned from its saves (kept in `DIR/<identifier>.container.ckdb`,
    /// or in the shared database for every node), for a server without `--schema`.
    func learnedSchema(_ identifier: String) throws(ServerError) -> LearnedSchema {
        guard Self.isValidIdentifier(identifier) else {
            throw ServerError.badRequest("invalid container identifier '\(identifier)'")
        }
        return try learned.withLock { schemas throws(ServerError) -> LearnedSchema in
            if let schema = schemas[identifier] { return schema }
            let schema: LearnedSchema
            if let shared {
                // The container's row must be there for the schema's (a modify opened it already).
                _ = try container(identifier)
                schema = try LearnedSchema(keeper: shared.learnedSchemaKeeper(identifier))
            } else {
                schema = try LearnedSchema(path: (path as NSString).appendingPathComponent("\(identifier).\(Self.fileExtension).ckdb"))
            }
            schemas[identifier] = schema
            return schema
        }
    }

    /// The containers opened so far.
    var openContainers: [Container] { opened.withLock { Array($0.values) } }

    /// Every container of the directory, opening those no request has named yet (so pushes queued
    /// before a restart are delivered); one that cannot be opened is skipped and named in `failures`.
    func allContainers(failures: inout [String]) -> [Container] {
        var identifiers: [String]
        if let shared {
            do throws(ContainerError) { identifiers = try shared.containerIdentifiers() } catch {
                failures.append(error.reason)
                identifiers = []
            }
        } else {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            identifiers = names.filter { $0.hasSuffix(".\(Self.fileExtension)") }.map { String($0.dropLast(Self.fileExtension.count + 1)) }
        }
        var containers: [Container] = []
        for identifier in identifiers.sorted() {
            guard Self.isValidIdentifier(identifier) else { continue }
            do throws(ServerError) { containers.append(try container(identifier)) } catch {
                failures.append("\(identifier): \(error.reason)")
            }
        }
        return containers
    }

    /// Deletes every container file of the directory (`kquery serve --reset`); the web auth secret stays,
    /// so issued tokens keep working.
    public static func reset(path: String) throws(ServerError) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return }
        for name in names where name.contains(".\(fileExtension)") {
            let file = (path as NSString).appendingPathComponent(name)
            do { try FileManager.default.removeItem(atPath: file) } catch {
                throw ServerError("INTERNAL_ERROR", "cannot remove \(file)", httpStatus: 500)
            }
        }
    }
}
