import Foundation
import KQuery

/// An `NSMetadataItem`: an item's attributes by their raw names (research 2.3).
public struct MetadataItem: Hashable, Sendable {
    public var attributes: [String: FieldValue]

    public func value(forAttribute name: String) -> FieldValue? { attributes[name] }

    /// The item's path in the container (`kMDItemPath` is the absolute one).
    public var relativePath: String
    public var path: String? { if case .string(let text)? = attributes[MetadataQuery.Attribute.path] { text } else { nil } }
    public var fileName: String? { if case .string(let text)? = attributes[MetadataQuery.Attribute.fsName] { text } else { nil } }

    var record: Record {
        Record(recordType: "NSMetadataItem", recordID: RecordID(recordName: relativePath.isEmpty ? "-" : relativePath), fields: Fields(attributes.map { ($0.key, $0.value) }))
    }

    init(_ status: ItemStatus, directory: String) {
        relativePath = status.path
        let name = (status.path as NSString).lastPathComponent
        let absolute = directory + "/" + status.path
        let downloaded = status.downloadingStatus != .notDownloaded
        typealias A = MetadataQuery.Attribute
        attributes = [
            A.fsName: .string(name), A.displayName: .string(name), A.path: .string(absolute),
            A.url: .string(URL(fileURLWithPath: absolute).absoluteString), A.fsSize: .int64(status.size),
            A.fsCreationDate: .timestamp(Int64(status.creationDate.timeIntervalSince1970 * 1000)),
            A.fsContentChangeDate: .timestamp(Int64(status.contentChangeDate.timeIntervalSince1970 * 1000)),
            A.contentType: .string(status.contentType), A.isUbiquitous: .int64(1),
            A.downloadingStatus: .string(status.downloadingStatus.rawValue),
            A.hasUnresolvedConflicts: .int64(status.hasUnresolvedConflicts ? 1 : 0), A.isUploaded: .int64(status.isUploaded ? 1 : 0),
            A.isUploading: .int64(0), A.isDownloading: .int64(0), A.percentDownloaded: .double(downloaded ? 100 : 0),
            A.percentUploaded: .double(status.isUploaded ? 100 : 0),
        ]
    }
}

/// `NSMetadataQueryAttributeValueTuple`: a distinct value of an attribute and how many results hold it.
public struct MetadataValueTuple: Hashable, Sendable {
    public var attribute: String
    public var value: FieldValue
    public var count: Int
}

/// `NSMetadataQueryResultGroup`: the results sharing a value of the first grouping attribute,
/// grouped further by the next ones.
public struct MetadataResultGroup: Hashable, Sendable {
    public var attribute: String
    public var value: FieldValue?
    public var results: [MetadataItem]
    public var subgroups: [MetadataResultGroup]
    public var resultCount: Int { results.count }
}

/// The four notifications of `NSMetadataQuery`, in Apple's order: did start gathering,
/// gathering progress, did finish gathering, then did update (added, changed, removed).
public enum MetadataQueryNotification: Sendable {
    case didStartGathering
    case gatheringProgress(added: [MetadataItem])
    case didFinishGathering(results: [MetadataItem])
    case didUpdate(added: [MetadataItem], changed: [MetadataItem], removed: [MetadataItem])

    public var name: String {
        switch self {
        case .didStartGathering: "NSMetadataQueryDidStartGatheringNotification"
        case .gatheringProgress: "NSMetadataQueryGatheringProgressNotification"
        case .didFinishGathering: "NSMetadataQueryDidFinishGatheringNotification"
        case .didUpdate: "NSMetadataQueryDidUpdateNotification"
        }
    }
}

/// `NSMetadataQuery` over a ubiquity container (SPEC §15): a predicate over the items' raw
/// attribute names, parsed and evaluated by KQuery in the extended profile
/// (`kMDItemFSName LIKE '*.txt'`), scopes, sort descriptors, grouping and value lists; live
/// results from the container's change feed (each sync's items), batched.
public final class MetadataQuery: @unchecked Sendable {
    public static let ubiquitousDocumentsScope = "NSMetadataQueryUbiquitousDocumentsScope"
    public static let ubiquitousDataScope = "NSMetadataQueryUbiquitousDataScope"

    /// The raw attribute names (`NSMetadataItem…Key`'s values).
    public enum Attribute {
        public static let fsName = "kMDItemFSName"
        public static let displayName = "kMDItemDisplayName"
        public static let path = "kMDItemPath"
        public static let url = "kMDItemURL"
        public static let fsSize = "kMDItemFSSize"
        public static let fsCreationDate = "kMDItemFSCreationDate"
        public static let fsContentChangeDate = "kMDItemFSContentChangeDate"
        public static let contentType = "kMDItemContentType"
        public static let isUbiquitous = "NSMetadataItemIsUbiquitousKey"
        public static let downloadingStatus = "NSMetadataUbiquitousItemDownloadingStatusKey"
        public static let hasUnresolvedConflicts = "NSMetadataUbiquitousItemHasUnresolvedConflictsKey"
        public static let isUploaded = "NSMetadataUbiquitousItemIsUploadedKey"
        public static let isUploading = "NSMetadataUbiquitousItemIsUploadingKey"
        public static let isDownloading = "NSMetadataUbiquitousItemIsDownloadingKey"
        public static let percentDownloaded = "NSMetadataUbiquitousItemPercentDownloadedKey"
        public static let percentUploaded = "NSMetadataUbiquitousItemPercentUploadedKey"
    }

    private struct State {
        var results: [MetadataItem] = []
        var disabled = 0
        var held: (added: [String: MetadataItem], changed: [String: MetadataItem], removed: [String: MetadataItem]) = ([:], [:], [:])
        /// The results by path, as the last snapshot left them.
        var last: [String: MetadataItem] = [:]
        /// Where a running query sends its notifications.
        var receiver: (@Sendable (MetadataQueryNotification) -> Void)?
    }

    public let predicate: ValidatedPredicate
    public var searchScopes: [String]
    /// Attribute names, each ascending or not.
    public var sortDescriptors: [(attribute: String, ascending: Bool)]
    public var groupingAttributes: [String] = []
    public var valueListAttributes: [String] = []
    /// How long updates gather before one `didUpdate` (Apple's default: 1 s).
    public var notificationBatchingInterval: Duration = .seconds(1)
    private let compiled: CompiledPredicate
    private let state = Locked(State())

    /// A query for `predicate` (NSPredicate syntax over the raw attribute names). Mixing the
    /// ubiquitous scopes with others throws, as Apple's does.
    public init(predicate: String, searchScopes: [String] = [ubiquitousDocumentsScope], sortDescriptors: [(attribute: String, ascending: Bool)] = [])
        throws(DocumentsError)
    {
        do { self.predicate = try ValidatedPredicate(predicate, profile: .extended) } catch {
            throw DocumentsError(.refused, "the predicate is not valid: \(error)")
        }
        let known: Set<String> = [Self.ubiquitousDocumentsScope, Self.ubiquitousDataScope]
        guard searchScopes.allSatisfy(known.contains) else {
            throw DocumentsError(.refused, "only NSMetadataQueryUbiquitousDocumentsScope and NSMetadataQueryUbiquitousDataScope can be searched")
        }
        compiled = CompiledPredicate(self.predicate)
        self.searchScopes = searchScopes
        self.sortDescriptors = sortDescriptors
    }

    /// Whether an item is in the scopes: `Documents/…` for the documents scope, the rest for data.
    func inScope(_ path: String) -> Bool {
        let documents = path == "Documents" || path.hasPrefix("Documents/")
        if path == "Documents" { return false }
        return (documents && searchScopes.contains(Self.ubiquitousDocumentsScope)) || (!documents && searchScopes.contains(Self.ubiquitousDataScope))
    }

    /// The items of a snapshot that match, sorted.
    func matching(_ statuses: [ItemStatus], directory: String) -> [MetadataItem] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let items = statuses.filter { inScope($0.path) }.map { MetadataItem($0, directory: directory) }.filter { compiled.matches($0.record, now: now) }
        return sorted(items)
    }

    func sorted(_ items: [MetadataItem]) -> [MetadataItem] {
        items.sorted { left, right in
            for descriptor in sortDescriptors {
                let order = ValueOrder.compare(left.attributes[descriptor.attribute] ?? .int64(0), right.attributes[descriptor.attribute] ?? .int64(0)) ?? 0
                if order != 0 { return descriptor.ascending ? order < 0 : order > 0 }
            }
            return left.relativePath < right.relativePath
        }
    }

    // MARK: Results

    public var resultCount: Int { state.withLock { $0.results.count } }
    public var results: [MetadataItem] { state.withLock { $0.results } }
    public func result(at index: Int) -> MetadataItem? { state.withLock { $0.results.indices.contains(index) ? $0.results[index] : nil } }

    /// `valueLists`: for each value-list attribute, its distinct values with counts.
    public var valueLists: [String: [MetadataValueTuple]] {
        let results = self.results
        var lists: [String: [MetadataValueTuple]] = [:]
        for attribute in valueListAttributes {
            var counts: [FieldValue: Int] = [:]
            for item in results { if let value = item.attributes[attribute] { counts[value, default: 0] += 1 } }
            lists[attribute] = counts.map { MetadataValueTuple(attribute: attribute, value: $0.key, count: $0.value) }
                .sorted { (ValueOrder.compare($0.value, $1.value) ?? 0) < 0 }
        }
        return lists
    }

    /// `groupedResults`: groups for the first grouping attribute, subgroups for the next.
    public var groupedResults: [MetadataResultGroup] { Self.groups(results, by: groupingAttributes[...]) }

    private static func groups(_ items: [MetadataItem], by attributes: ArraySlice<String>) -> [MetadataResultGroup] {
        guard let attribute = attributes.first else { return [] }
        var order: [FieldValue?] = []
        var members: [FieldValue?: [MetadataItem]] = [:]
        for item in items {
            let value = item.attributes[attribute]
            if members[value] == nil { order.append(value) }
            members[value, default: []].append(item)
        }
        return order.map { value in
            let results = members[value] ?? []
            return MetadataResultGroup(attribute: attribute, value: value, results: results, subgroups: groups(results, by: attributes.dropFirst()))
        }
    }

    // MARK: Updates

    /// `disableUpdates`: updates wait until as many `enableUpdates` (they nest). The last
    /// `enableUpdates` delivers what waited at once, as Apple's does, to the running query's
    /// receiver.
    public func disableUpdates() { state.withLock { $0.disabled += 1 } }
    public func enableUpdates() {
        let notify = state.withLock { state -> (@Sendable (MetadataQueryNotification) -> Void)? in
            state.disabled = max(0, state.disabled - 1)
            return state.disabled == 0 ? state.receiver : nil
        }
        if let notify { flush(notify) }
    }

    /// Runs the query on a container: gathers its items, then follows the container's change
    /// feed until the task is cancelled, sending each notification to `notify` in order.
    public func run(on container: UbiquityContainer, notify: @escaping @Sendable (MetadataQueryNotification) -> Void) async {
        let feed = await container.changeFeed()
        state.withLock { $0.receiver = notify }
        defer { state.withLock { $0.receiver = nil } }
        for note in gather((try? await container.status()) ?? [], directory: container.directory) { notify(note) }
        let scheduled = Locked(false)
        for await snapshot in feed {
            update(snapshot, directory: container.directory)
            let interval = notificationBatchingInterval
            if interval <= .zero {
                flush(notify)
            } else if !scheduled.withLock({ pending in defer { pending = true }; return pending }) {
                // Updates in the next `interval` join this batch.
                Task {
                    try? await Task.sleep(for: interval)
                    scheduled.withLock { $0 = false }
                    self.flush(notify)
                }
            }
        }
    }

    /// The gathering phase over a snapshot of the container's items: did start, progress (the
    /// items found), did finish (with the results).
    public func gather(_ snapshot: [ItemStatus], directory: String) -> [MetadataQueryNotification] {
        let initial = matching(snapshot, directory: directory)
        state.withLock { state in
            state.results = initial
            state.last = Dictionary(initial.map { ($0.relativePath, $0) }, uniquingKeysWith: { first, _ in first })
        }
        return [.didStartGathering] + (initial.isEmpty ? [] : [.gatheringProgress(added: initial)]) + [.didFinishGathering(results: initial)]
    }

    /// Takes a new snapshot of the container's items: the results follow it, and what was added,
    /// changed or removed waits for the next `flush`.
    public func update(_ snapshot: [ItemStatus], directory: String) {
        let current = Dictionary(matching(snapshot, directory: directory).map { ($0.relativePath, $0) }, uniquingKeysWith: { first, _ in first })
        state.withLock { state in
            for (path, item) in current {
                if let old = state.last[path] {
                    if old != item {
                        if state.held.added[path] != nil { state.held.added[path] = item } else { state.held.changed[path] = item }
                    }
                } else {
                    state.held.removed[path] = nil
                    state.held.added[path] = item
                }
            }
            for (path, item) in state.last where current[path] == nil {
                if state.held.added.removeValue(forKey: path) == nil { state.held.removed[path] = item }
                state.held.changed[path] = nil
            }
            state.results = sorted(Array(current.values))
            state.last = current
        }
    }

    /// Delivers the held changes, unless updates are disabled.
    public func flush(_ notify: @Sendable (MetadataQueryNotification) -> Void) {
        let batch = state.withLock { state -> (added: [MetadataItem], changed: [MetadataItem], removed: [MetadataItem])? in
            guard state.disabled == 0, !(state.held.added.isEmpty && state.held.changed.isEmpty && state.held.removed.isEmpty) else { return nil }
            let held = state.held
            state.held = ([:], [:], [:])
            return (sorted(Array(held.added.values)), sorted(Array(held.changed.values)), sorted(Array(held.removed.values)))
        }
        if let batch { notify(.didUpdate(added: batch.added, changed: batch.changed, removed: batch.removed)) }
    }
}
