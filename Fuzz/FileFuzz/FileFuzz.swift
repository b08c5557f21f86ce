import KQueryStore

/// libFuzzer entry point for the database file's binary forms: the first byte chooses a record
/// body (`RecordCoding`) or an index snapshot (`IndexSnapshot`, for a table of 1 to 64 sample
/// records, the second byte's count), the rest is the bytes. See `FileFormatProbe`.
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    if bytes[0] & 1 == 0 {
        FileFormatProbe.record(UnsafeRawBufferPointer(rebasing: bytes[1...]))
    } else {
        FileFormatProbe.snapshot(UnsafeRawBufferPointer(rebasing: bytes[2...]), count: 1 + Int(bytes[1] % 64))
    }
    return 0
}
