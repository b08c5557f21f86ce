import Foundation
import KQuery
import KQueryContainer
import KQueryDocuments
import KQueryTestSupport
import PropertyBased
import Testing

@Suite struct DocumentsPropertyTests {
    /// Random edits of a few files on 2–3 devices with syncs in random order, then every device
    /// syncs until they agree: the folders are equal, each file holds the newest edit made to
    /// it, and no edit is lost: every edit a sync saw is the file's content, a conflict version,
    /// or the base another device's edit was written over.
    @Test func randomEditsOnSeveralDevicesConvergeWithoutLosingAnEdit() async throws {
        await propertyCheck(count: 20, input: Gen.uint64()) { seed in
            do { try await Self.run(seed: seed) } catch { Issue.record("seed \(seed): \(error)") }
        }
    }

    static func run(seed: UInt64) async throws {
        var random = seed | 1
        func next(_ bound: Int) -> Int {
            random ^= random << 13
            random ^= random >> 7
            random ^= random << 17
            return Int(random % UInt64(bound))
        }
        let devices = try DocumentDevices()
        let count = 2 + next(2)
        let folders = try (0..<count).map { try devices.device("device\($0)") }
        let paths = ["Documents/a.txt", "Documents/b.txt", "Documents/sub/c.txt"]
        var clock = 1_000
        var base: [String: String] = [:]
        var synced: [(path: String, content: String)] = []
        for step in 0..<14 {
            let device = folders[next(count)]
            if next(3) == 0 {
                for path in paths {
                    if let text = try? String(contentsOfFile: device.directory + "/" + path, encoding: .utf8) { synced.append((path, text)) }
                }
                try await device.sync()
            } else {
                let path = paths[next(paths.count)]
                let text = "\(device.deviceName) step \(step)"
                base[text] = try? String(contentsOfFile: device.directory + "/" + path, encoding: .utf8)
                clock += 1
                try putFile(device.directory, path, text, modified: clock)
            }
        }
        for _ in 0..<3 {
            for device in folders {
                for path in paths {
                    if let text = try? String(contentsOfFile: device.directory + "/" + path, encoding: .utf8) { synced.append((path, text)) }
                }
                try await device.sync()
            }
        }
        let tree = folderTree(folders[0].directory)
        for device in folders.dropFirst() { #expect(folderTree(device.directory) == tree, "seed \(seed)") }
        var superseded: Set<String> = []
        for edit in synced {
            var ancestor = base[edit.content] ?? nil
            while let known = ancestor, superseded.insert(known).inserted { ancestor = base[known] ?? nil }
        }
        for path in paths {
            let current = tree[path].flatMap { $0 }.map { String(decoding: $0, as: UTF8.self) }
            let versions = try await folders[0].otherVersionsOfItem(at: path)
            for device in folders.dropFirst() {
                #expect(try await device.otherVersionsOfItem(at: path).map(\.persistentIdentifier) == versions.map(\.persistentIdentifier), "seed \(seed)")
            }
            let edits = Set(synced.filter { $0.path == path }.map(\.content))
            // The newest edit a sync saw wins (the clock only goes forward).
            let newest = edits.max { Int($0.split(separator: " ").last ?? "") ?? 0 < Int($1.split(separator: " ").last ?? "") ?? 0 }
            #expect(current == newest, "seed \(seed): \(path)")
            let kept = Set(versions.map(\.contentHash))
            for edit in edits where edit != current && !superseded.contains(edit) {
                let hash = Chunker.contentHash(Chunker.chunks(Array(edit.utf8)))
                #expect(kept.contains(hash), "seed \(seed): the edit '\(edit)' of \(path) was lost")
            }
        }
    }
}
