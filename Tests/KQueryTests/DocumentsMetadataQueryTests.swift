import Foundation
import KQuery
import KQueryTestSupport
@testable import KQueryDocuments
import Testing

@Suite struct DocumentsMetadataQueryTests {
    /// Waits (a bounded number of turns, no clock) until `condition` holds.
    static func settle(_ condition: () -> Bool) async {
        for _ in 0..<2_000 where !condition() { try? await Task.sleep(for: .milliseconds(5)) }
    }

    @Test func queriesDeliverGatheringThenAddedChangedAndRemovedInOrder() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone", policy: .onDemand)
        try putFile(a.directory, "Documents/one.txt", "1", modified: 1_000)
        try putFile(a.directory, "Documents/two.md", "2", modified: 1_000)
        try putFile(a.directory, "Library/data.txt", "app data", modified: 1_000)
        try await a.sync()
        try await b.sync()

        let query = try MetadataQuery(predicate: "kMDItemFSName LIKE[c] '*.TXT'", sortDescriptors: [(MetadataQuery.Attribute.fsName, true)])
        query.notificationBatchingInterval = .zero
        let log = Locked<[MetadataQueryNotification]>([])
        let running = Task { await query.run(on: b) { note in log.withLock { $0.append(note) } } }
        await Self.settle { log.withLock { $0.count } >= 3 }

        try putFile(a.directory, "Documents/three.txt", "3", modified: 2_000)
        try putFile(a.directory, "Documents/one.txt", "1 changed", modified: 2_000)
        try await a.sync()
        try await b.sync()
        await Self.settle { log.withLock { $0.count } >= 4 }
        try FileManager.default.removeItem(atPath: a.directory + "/Documents/one.txt")
        try await a.sync()
        try await b.sync()
        await Self.settle { log.withLock { $0.count } >= 5 }
        running.cancel()

        let notes = log.withLock { $0 }
        #expect(notes.map(\.name) == [
            "NSMetadataQueryDidStartGatheringNotification", "NSMetadataQueryGatheringProgressNotification",
            "NSMetadataQueryDidFinishGatheringNotification", "NSMetadataQueryDidUpdateNotification", "NSMetadataQueryDidUpdateNotification",
        ])
        guard notes.count == 5 else { return }
        if case .didFinishGathering(let results) = notes[2] { #expect(results.map(\.relativePath) == ["Documents/one.txt"]) } else { Issue.record("no results") }
        if case .didUpdate(let added, let changed, let removed) = notes[3] {
            #expect(added.map(\.relativePath) == ["Documents/three.txt"])
            #expect(changed.map(\.relativePath) == ["Documents/one.txt"])
            #expect(removed.isEmpty)
        } else { Issue.record("no first update") }
        if case .didUpdate(let added, let changed, let removed) = notes[4] {
            #expect(added.isEmpty && changed.isEmpty && removed.map(\.relativePath) == ["Documents/one.txt"])
        } else { Issue.record("no second update") }
        #expect(query.results.map(\.relativePath) == ["Documents/three.txt"])
        #expect(query.results.first?.value(forAttribute: MetadataQuery.Attribute.downloadingStatus)
            == .string("NSURLUbiquitousItemDownloadingStatusNotDownloaded"))
    }

    /// Changes while updates are disabled (nested) wait; the last `enableUpdates` delivers them
    /// at once, in one update.
    @Test func enablingUpdatesDeliversWhatWaited() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        let b = try devices.device("iphone", policy: .onDemand)
        try putFile(a.directory, "Documents/one.txt", "1", modified: 1_000)
        try await a.sync()
        try await b.sync()
        let query = try MetadataQuery(predicate: "kMDItemFSName LIKE '*.txt'")
        query.notificationBatchingInterval = .zero
        let log = Locked<[MetadataQueryNotification]>([])
        let running = Task { await query.run(on: b) { note in log.withLock { $0.append(note) } } }
        defer { running.cancel() }
        await Self.settle { log.withLock { $0.count } >= 3 }
        query.disableUpdates()
        query.disableUpdates()
        try putFile(a.directory, "Documents/two.txt", "2", modified: 2_000)
        try await a.sync()
        try await b.sync()
        await Self.settle { query.resultCount == 2 }
        try putFile(a.directory, "Documents/three.txt", "3", modified: 2_000)
        try await a.sync()
        try await b.sync()
        await Self.settle { query.resultCount == 3 }
        query.enableUpdates()
        #expect(log.withLock { $0.count } == 3)
        query.enableUpdates()
        let notes = log.withLock { $0 }
        #expect(notes.count == 4)
        if case .didUpdate(let added, let changed, let removed)? = notes.last {
            #expect(added.map(\.relativePath) == ["Documents/three.txt", "Documents/two.txt"] && changed.isEmpty && removed.isEmpty)
        } else { Issue.record("no update after enableUpdates") }
    }

    @Test(arguments: [
        ("kMDItemFSName LIKE '*.txt'", [MetadataQuery.ubiquitousDocumentsScope], ["Documents/a.txt", "Documents/b.txt"]),
        ("kMDItemFSName LIKE 'a.???'", [MetadataQuery.ubiquitousDocumentsScope], ["Documents/a.txt"]),
        ("kMDItemFSName BEGINSWITH[c] 'B'", [MetadataQuery.ubiquitousDocumentsScope], ["Documents/b.txt"]),
        ("kMDItemFSSize > 3 AND NOT kMDItemContentType == 'public.folder'", [MetadataQuery.ubiquitousDocumentsScope], ["Documents/b.txt"]),
        ("kMDItemFSName LIKE '*.txt'", [MetadataQuery.ubiquitousDataScope], ["Library/c.txt"]),
        ("kMDItemContentType == 'public.plain-text' OR kMDItemFSName ENDSWITH '.md'",
         [MetadataQuery.ubiquitousDocumentsScope, MetadataQuery.ubiquitousDataScope], ["Documents/a.txt", "Documents/b.txt", "Documents/d.md", "Library/c.txt"]),
    ])
    func predicatesOverRawAttributeNamesAndScopes(predicate: String, scopes: [String], expected: [String]) async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        try putFile(a.directory, "Documents/a.txt", "a", modified: 1_000)
        try putFile(a.directory, "Documents/b.txt", "bbbbbbb", modified: 1_000)
        try putFile(a.directory, "Documents/d.md", "d", modified: 1_000)
        try putFile(a.directory, "Library/c.txt", "c", modified: 1_000)
        try await a.sync()
        let query = try MetadataQuery(predicate: predicate, searchScopes: scopes)
        let results = query.matching(try await a.status(), directory: a.directory)
        #expect(results.map(\.relativePath) == expected)
    }

    @Test func sortGroupingAndValueLists() async throws {
        let devices = try DocumentDevices()
        let a = try devices.device("mac")
        try putFile(a.directory, "Documents/x.txt", "1", modified: 1_000)
        try putFile(a.directory, "Documents/y.txt", "123", modified: 1_000)
        try putFile(a.directory, "Documents/z.md", "12", modified: 1_000)
        try await a.sync()
        let query = try MetadataQuery(predicate: "kMDItemFSSize > 0", sortDescriptors: [(MetadataQuery.Attribute.fsSize, false)])
        query.groupingAttributes = [MetadataQuery.Attribute.contentType]
        query.valueListAttributes = [MetadataQuery.Attribute.contentType]
        let log = Locked<[MetadataQueryNotification]>([])
        let running = Task { await query.run(on: a) { note in log.withLock { $0.append(note) } } }
        await Self.settle { log.withLock { $0.count } >= 3 }
        running.cancel()
        #expect(query.results.map(\.relativePath) == ["Documents/y.txt", "Documents/z.md", "Documents/x.txt"])
        #expect(query.groupedResults.map(\.resultCount) == [2, 1])
        #expect(query.valueLists[MetadataQuery.Attribute.contentType]?.map(\.count).sorted() == [1, 2])
        #expect(throws: DocumentsError.self) { try MetadataQuery(predicate: "kMDItemFSName LIKE", searchScopes: [MetadataQuery.ubiquitousDocumentsScope]) }
        #expect(throws: DocumentsError.self) { try MetadataQuery(predicate: "kMDItemFSSize > 0", searchScopes: ["NSMetadataQueryUserHomeScope"]) }
    }
}
