extension Container {
    /// Rebuilds the subscription set of every database that has subscriptions, so the matcher is
    /// ready before the first write and a stored subscription that no longer loads fails the open
    /// rather than some later modify.
    func restoreSubscriptions() throws(ContainerError) {
        try write { state, tx throws(ContainerError) in
            for key in try tx.subscribedDatabases() { _ = try subscriptionSet(key, &state, tx) }
        }
    }
}
