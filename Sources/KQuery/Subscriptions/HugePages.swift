import CKQuerySupport

extension Array {
    /// Appends `element`; an array of more than `hugePageThreshold` bytes that is full first moves
    /// to storage twice as large that is advised to use huge pages before anything is copied in
    /// (advice given after the copy would cover pages already faulted in small).
    ///
    /// The matcher's slots and entries are read at random, a cache miss and a TLB miss each:
    /// at a million subscriptions they are over a hundred megabytes, far past what the TLB maps
    /// in 4 KiB pages, while 2 MiB pages keep the whole table mapped.
    mutating func appendAdvisingHugePages(_ element: Element) {
        if count == capacity, count * MemoryLayout<Element>.stride >= hugePageThreshold {
            var grown: [Element] = []
            grown.reserveCapacity(count * 2)
            let bytes = grown.capacity * MemoryLayout<Element>.stride
            grown.withUnsafeMutableBufferPointer { storage in
                if let base = storage.baseAddress { kquery_advise_huge_pages(base, bytes) }
            }
            grown.append(contentsOf: self)
            self = grown
        }
        append(element)
    }
}

/// Tables smaller than this (4 MiB) are left in small pages: they stay mapped by the TLB anyway.
let hugePageThreshold = 4 << 20
