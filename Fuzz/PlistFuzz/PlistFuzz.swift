import Foundation
import KQueryKeyValueStore

/// libFuzzer entry point for what a key-value store reads that it did not write itself: the
/// first byte chooses a value's property list as a server hands it over (decoded with
/// Foundation, checked for the types a store holds, then written again by the store's own
/// binary writer and decoded to the same value), or a device's journal file (replayed).
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let bytes = Data(UnsafeBufferPointer(start: data + 1, count: size - 1))
    if data[0] & 1 == 0 {
        guard let value = try? PropertyListValue(propertyListBytes: bytes) else { return 0 }
        let written = PropertyListValue.binaryPropertyList(value)
        let again = try? PropertyListValue(propertyListBytes: written)
        // Compared by their bytes: NaN is not equal to itself.
        if again.map(PropertyListValue.binaryPropertyList) != written {
            fatalError("the store's binary property list of \(value) decodes to \(String(describing: again))")
        }
    } else {
        KeyValueStoreProbe.replayJournal(bytes)
    }
    return 0
}
