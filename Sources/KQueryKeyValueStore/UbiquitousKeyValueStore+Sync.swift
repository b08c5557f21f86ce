import Foundation

extension UbiquitousKeyValueStore {
    /// Syncs now and returns once both sides agree: uploads what is pending, pulls what other
    /// devices wrote, merges it (SPEC §14) and posts a notification for what changed, which it
    /// also returns. Writes the server refused for a conflict are merged and sent again.
    @discardableResult
    public func syncNow() async throws(KeyValueStoreError) -> [KeyValueStoreChange] {
        guard let transport = configuration.transport else {
            throw KeyValueStoreError(.notConfigured, "the store has no server or container to sync with")
        }
        do {
            let changes = try await syncSerializer.run { () async throws(KeyValueStoreError) -> [KeyValueStoreChange] in
                try await self.sync(transport)
            }
            state.withLock { $0.lastSyncError = nil }
            return changes
        } catch {
            state.withLock { $0.lastSyncError = error }
            throw error
        }
    }

    private func sync(_ transport: any KeyValueStoreTransport) async throws(KeyValueStoreError) -> [KeyValueStoreChange] {
        let user = try await transport.currentUser()
        try Self.checkServerText(user, "user record name")
        try state.withLock { state throws(KeyValueStoreError) in
            let meta = state.journal.meta
            if let previous = meta.user, previous != user {
                // Another account: everything this device holds goes, pending writes too (reason 3).
                state.previousAccountValues = state.journal.entries.compactMapValues(\.value)
                try state.journal.replaceAll(entries: [:], meta: DeviceMeta(user: user, token: nil, initialSynced: false, accountChanged: true))
                state.keyCount = 0
                state.totalBytes = 0
            } else if meta.user == nil {
                var meta = meta
                meta.user = user
                try state.journal.setMeta(meta)
            }
        }
        if !state.withLock({ $0.prepared }) {
            try await transport.prepare(device: deviceIdentifier)
            state.withLock { $0.prepared = true }
        }
        var posted: [KeyValueStoreChange] = []
        var failures: [String] = []
        var unresolved = false
        for _ in 0..<16 {
            if let change = try await pull(transport) { posted.append(change) }
            let outcome = try await push(transport)
            failures = outcome.failures
            unresolved = outcome.conflicts
            if !outcome.conflicts {
                if outcome.uploaded, let change = try await pull(transport) { posted.append(change) }
                break
            }
        }
        if unresolved { failures.append("writes still conflict with other devices' after 16 rounds; they stay pending") }
        if !failures.isEmpty { throw KeyValueStoreError(.syncFailed, failures.joined(separator: "; ")) }
        return posted
    }

    /// Fetches the zone's changes since the device's token and merges them; the notification
    /// they cause, posted.
    private func pull(_ transport: any KeyValueStoreTransport) async throws(KeyValueStoreError) -> KeyValueStoreChange? {
        var token = state.withLock { $0.journal.meta.token }
        var received: [(key: String, value: PropertyListValue?, remote: RemoteKeyValue?)] = []
        var pages = 0
        // A token the server no longer honours: everything again, and what it lacks was deleted.
        var everything = token == nil
        while true {
            let page: RemoteKeyChanges
            do { page = try await transport.fetchChanges(since: token) } catch where error.code == .changeTokenExpired && token != nil && !everything {
                token = nil
                everything = true
                received.removeAll()
                continue
            }
            pages += 1
            // Everything is read before anything changes: a bad answer leaves the store as it was.
            for change in page.changes {
                switch change {
                case .saved(let remote):
                    try Self.checkServerText(remote.changeTag, "record change tag")
                    let value = try PropertyListValue(propertyListBytes: remote.bytes)
                    received.append((remote.key, value, remote))
                case .deleted(let key): received.append((key, nil, nil))
                }
            }
            let stuck = page.moreComing && page.token == token
            token = page.token
            guard page.moreComing else { break }
            if stuck || pages > 100_000 { throw KeyValueStoreError(.invalidServerAnswer, "the server keeps saying more changes are coming without moving its token") }
        }
        let limits = configuration.limits
        let (reason, keys) = try state.withLock { state throws(KeyValueStoreError) -> (KeyValueStoreChangeReason, [String]) in
            let meta = state.journal.meta
            let first = !meta.initialSynced || meta.accountChanged
            var changed: [String] = []
            var seen: Set<String> = []
            if everything, !first {
                let present = Set(received.map(\.key))
                for (key, entry) in state.journal.entries where !present.contains(key) && !(entry.pending && entry.value != nil) {
                    received.append((key, nil, nil))
                }
            }
            for item in received {
                // A key no device could have written is not taken.
                guard limits.keyProblem(item.key) == nil else { continue }
                let local = state.journal.entries[item.key]
                let before = local?.value
                if let remote = item.remote, let value = item.value {
                    let taken = DeviceEntry(value: value, bytes: remote.bytes, date: remote.date, pending: false, tag: remote.changeTag)
                    if first || local == nil {
                        try state.journal.put(item.key, taken)
                    } else if let local, local.pending {
                        // Newest localModificationDate wins; on a tie the pending write, which
                        // the server will see last.
                        if remote.date > local.date {
                            try state.journal.put(item.key, taken)
                        } else {
                            var kept = local
                            kept.tag = remote.changeTag
                            try state.journal.put(item.key, kept)
                        }
                    } else if let local, remote.date < local.date, local.value != nil {
                        // The server holds an older value than this device took: send it again.
                        var kept = local
                        kept.tag = remote.changeTag
                        kept.pending = true
                        try state.journal.put(item.key, kept)
                    } else {
                        try state.journal.put(item.key, taken)
                    }
                } else if let local {
                    if local.pending, local.value != nil, !first {
                        // Written here since: the write recreates the record.
                        var kept = local
                        kept.tag = nil
                        try state.journal.put(item.key, kept)
                    } else {
                        try state.journal.forget(item.key)
                    }
                }
                let after = state.journal.entries[item.key]?.value
                if before != after, seen.insert(item.key).inserted { changed.append(item.key) }
            }
            var reason = KeyValueStoreChangeReason.serverChange
            if meta.accountChanged {
                reason = .accountChange
                let previous = state.previousAccountValues ?? [:]
                let now = state.journal.entries.compactMapValues(\.value)
                changed = Set(previous.keys).union(now.keys).filter { previous[$0] != now[$0] }.sorted()
                state.previousAccountValues = nil
            } else if !meta.initialSynced {
                reason = .initialSyncChange
            }
            var newMeta = meta
            newMeta.token = token
            newMeta.initialSynced = true
            newMeta.accountChanged = false
            try state.journal.setMeta(newMeta)
            state.keyCount = 0
            state.totalBytes = 0
            for entry in state.journal.entries.values where entry.value != nil {
                state.keyCount += 1
                state.totalBytes += entry.bytes?.count ?? 0
            }
            return (reason, changed.sorted())
        }
        guard !keys.isEmpty else { return nil }
        let change = KeyValueStoreChange(reason: reason, changedKeys: keys)
        post(change)
        return change
    }

    /// Refuses a user name or change tag from the server longer than a device journal records
    /// (its lengths are 16 bits); CloudKit's are a few dozen bytes.
    static func checkServerText(_ text: String?, _ what: String) throws(KeyValueStoreError) {
        guard let text, text.utf8.count > 4_096 else { return }
        throw KeyValueStoreError(.invalidServerAnswer, "the server's \(what) is \(text.utf8.count) bytes long (at most 4,096)")
    }

    /// Uploads every pending write, conditional on the version each was based on.
    private func push(_ transport: any KeyValueStoreTransport) async throws(KeyValueStoreError) -> (conflicts: Bool, uploaded: Bool, failures: [String]) {
        let writes = try state.withLock { state throws(KeyValueStoreError) -> [KeyWrite] in
            var writes: [KeyWrite] = []
            for (key, entry) in state.journal.entries where entry.pending {
                if entry.value == nil, entry.tag == nil {
                    // Removed before the server ever had it: nothing to delete there.
                    try state.journal.forget(key)
                    continue
                }
                writes.append(KeyWrite(key: key, bytes: entry.value == nil ? nil : entry.bytes, date: entry.date, baseTag: entry.tag))
            }
            return writes.sorted { $0.key < $1.key }
        }
        var conflicts = false
        var failures: [String] = []
        var refused: [String] = []
        var start = 0
        while start < writes.count {
            let batch = Array(writes[start..<min(start + 200, writes.count)])
            start += batch.count
            let results = try await transport.save(batch, device: deviceIdentifier)
            guard results.count == batch.count else {
                throw KeyValueStoreError(.invalidServerAnswer, "the server answered \(results.count) results for \(batch.count) writes")
            }
            try state.withLock { state throws(KeyValueStoreError) in
                for (write, result) in zip(batch, results) {
                    guard var current = state.journal.entries[write.key] else { continue }
                    let same = current.date == write.date && current.pending
                    switch result {
                    case .saved(let tag):
                        try Self.checkServerText(tag, "record change tag")
                        current.tag = tag
                        if same { current.pending = false }
                        try state.journal.put(write.key, current)
                    case .deleted:
                        if same, current.value == nil {
                            try state.journal.forget(write.key)
                        } else {
                            current.tag = nil
                            try state.journal.put(write.key, current)
                        }
                    case .conflict: conflicts = true
                    case .failed(let reason, let quota):
                        failures.append("\(write.key): \(reason)")
                        if quota { refused.append(write.key) }
                    }
                }
            }
        }
        if !refused.isEmpty { post(KeyValueStoreChange(reason: .quotaViolationChange, changedKeys: refused)) }
        return (conflicts, !writes.isEmpty, failures)
    }
}
