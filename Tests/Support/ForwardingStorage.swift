import KQueryContainer

/// A container storage that passes everything to another, for tests that change one part of it
/// (count its commits, fail them, fail a read-ahead): a conforming type implements what it changes.
package protocol ForwardingStorage: ContainerStorage {
    var inner: any ContainerStorage { get }
}

extension ForwardingStorage {
    package var secret: (UInt64, UInt64) { inner.secret }

    package func read<T>(_ body: (any StorageTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T { try inner.read(body) }

    package func write<T>(_ body: (any StorageWriteTransaction) throws(ContainerError) -> T) throws(ContainerError) -> T { try inner.write(body) }

    package func waitUntilDurable() throws(ContainerError) { try inner.waitUntilDurable() }

    package func batch<T>(_ body: ((any StorageBatchWriter)?) throws(ContainerError) -> T) throws(ContainerError) -> T { try inner.batch(body) }
}
