import Foundation
import KQuery

/// Paths under the temporary directory for the tests' files, databases and server data
/// directories: each is removed, with whatever was made under it, when the test process exits,
/// whether its tests passed or not, so a run leaves nothing behind.
public enum TemporaryFiles {
    private static let paths = Locked<[String]>([])
    /// Registers the removal at exit, once.
    private static let removal: Void = { atexit { TemporaryFiles.removeAll() } }()

    /// A fresh path (nothing made there yet): `prefix`, a UUID, then `suffix`.
    public static func path(_ prefix: String, suffix: String = "") -> String {
        register(NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString)\(suffix)")
    }

    /// Removes `path` at exit too; returns it.
    @discardableResult
    public static func register(_ path: String) -> String {
        _ = removal
        paths.withLock { $0.append(path) }
        return path
    }

    private static func removeAll() {
        for path in paths.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
    }
}
