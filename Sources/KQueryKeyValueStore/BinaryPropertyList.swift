import Foundation

/// Writes `bplist00`, the binary property list format, for a `PropertyListValue`: what a store
/// measures its limits on and stores and uploads. Foundation's `PropertyListSerialization` writes
/// the same format (and decodes what this writes), but takes about 60 µs for a short string on
/// Linux, three times a `set`'s whole budget; this takes under one. Dictionary keys are written in
/// sorted order, so equal values have equal bytes. Objects are not shared between references
/// (Apple's writer shares equal ones), so a value with repeats measures a little larger here: the
/// limits err on the side of refusing.
enum BinaryPropertyList {
    private static let referenceDate = Date(timeIntervalSinceReferenceDate: 0)

    /// The value's binary property list.
    static func encode(_ value: PropertyListValue) -> Data {
        var objects: [PropertyListValue] = []
        var children: [[Int]] = []
        flatten(value, into: &objects, children: &children)
        let count = objects.count
        let referenceSize = count < 1 << 8 ? 1 : count < 1 << 16 ? 2 : 4
        var out: [UInt8] = Array("bplist00".utf8)
        var offsets: [Int] = []
        offsets.reserveCapacity(count)
        for index in 0..<count {
            offsets.append(out.count)
            write(objects[index], children: children[index], referenceSize: referenceSize, to: &out)
        }
        let tableOffset = out.count
        let offsetSize = byteCount(UInt64(tableOffset))
        for offset in offsets { appendBigEndian(UInt64(offset), size: offsetSize, to: &out) }
        out.append(contentsOf: [0, 0, 0, 0, 0, 0, UInt8(offsetSize), UInt8(referenceSize)])
        appendBigEndian(UInt64(count), size: 8, to: &out)
        appendBigEndian(0, size: 8, to: &out)
        appendBigEndian(UInt64(tableOffset), size: 8, to: &out)
        return Data(out)
    }

    /// The objects in reference order (the value first), each container with its members' indices.
    private static func flatten(_ value: PropertyListValue, into objects: inout [PropertyListValue], children: inout [[Int]]) {
        let index = objects.count
        objects.append(value)
        children.append([])
        switch value {
        case .array(let members):
            var references: [Int] = []
            references.reserveCapacity(members.count)
            for member in members {
                references.append(objects.count)
                flatten(member, into: &objects, children: &children)
            }
            children[index] = references
        case .dictionary(let members):
            let keys = members.keys.sorted()
            var references: [Int] = []
            references.reserveCapacity(keys.count * 2)
            for key in keys {
                references.append(objects.count)
                objects.append(.string(key))
                children.append([])
            }
            for key in keys {
                references.append(objects.count)
                // The key is there: it came from the dictionary's own keys.
                flatten(members[key] ?? .bool(false), into: &objects, children: &children)
            }
            children[index] = references
        default: break
        }
    }

    private static func write(_ value: PropertyListValue, children: [Int], referenceSize: Int, to out: inout [UInt8]) {
        switch value {
        case .bool(let flag): out.append(flag ? 0x09 : 0x08)
        case .integer(let number): appendInteger(number, to: &out)
        case .real(let number):
            out.append(0x23)
            appendBigEndian(number.bitPattern, size: 8, to: &out)
        case .date(let date):
            out.append(0x33)
            appendBigEndian(date.timeIntervalSince(referenceDate).bitPattern, size: 8, to: &out)
        case .data(let bytes):
            appendMarker(0x40, count: bytes.count, to: &out)
            out.append(contentsOf: bytes)
        case .string(let text):
            if text.utf8.allSatisfy({ $0 < 0x80 }) {
                appendMarker(0x50, count: text.utf8.count, to: &out)
                out.append(contentsOf: text.utf8)
            } else {
                appendMarker(0x60, count: text.utf16.count, to: &out)
                for unit in text.utf16 { out.append(UInt8(unit >> 8)); out.append(UInt8(unit & 0xFF)) }
            }
        case .array:
            appendMarker(0xA0, count: children.count, to: &out)
            for reference in children { appendBigEndian(UInt64(reference), size: referenceSize, to: &out) }
        case .dictionary:
            appendMarker(0xD0, count: children.count / 2, to: &out)
            for reference in children { appendBigEndian(UInt64(reference), size: referenceSize, to: &out) }
        }
    }

    /// A marker with its count in the low nibble, or 0xF and the count as an integer object.
    private static func appendMarker(_ marker: UInt8, count: Int, to out: inout [UInt8]) {
        if count < 15 {
            out.append(marker | UInt8(count))
        } else {
            out.append(marker | 0x0F)
            appendInteger(Int64(count), to: &out)
        }
    }

    /// Integers take 1, 2, 4 or 8 bytes; negative ones always 8 (signed).
    private static func appendInteger(_ number: Int64, to out: inout [UInt8]) {
        if number < 0 {
            out.append(0x13)
            appendBigEndian(UInt64(bitPattern: number), size: 8, to: &out)
            return
        }
        let size = byteCount(UInt64(number))
        out.append(0x10 | UInt8(size.trailingZeroBitCount))
        appendBigEndian(UInt64(number), size: size, to: &out)
    }

    /// 1, 2, 4 or 8: the fewest bytes that hold `value`.
    private static func byteCount(_ value: UInt64) -> Int {
        value <= 0xFF ? 1 : value <= 0xFFFF ? 2 : value <= 0xFFFF_FFFF ? 4 : 8
    }

    private static func appendBigEndian(_ value: UInt64, size: Int, to out: inout [UInt8]) {
        for shift in stride(from: (size - 1) * 8, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }
}

extension PropertyListValue {
    /// The value's binary property list: what the limits measure, and what a `KVSRecord` holds.
    public static func binaryPropertyList(_ value: PropertyListValue) -> Data { BinaryPropertyList.encode(value) }
}

extension BinaryPropertyList {
    /// Whether `bytes` is a well-formed binary property list made only of the types a store holds,
    /// with string dictionary keys. Checked before Foundation's decoder sees server bytes: it
    /// crashes on some hostile inputs (a dictionary keyed by a set, found by `PlistFuzz`), and
    /// what is checked here is all it needs to be safe.
    static func isWellFormed(_ bytes: Data) -> Bool {
        let data = [UInt8](bytes)
        guard data.count >= 40, data.starts(with: Array("bplist00".utf8)) else { return false }
        func integer(_ at: Int, _ size: Int) -> Int? {
            guard at >= 0, size > 0, size <= 8, at + size <= data.count else { return nil }
            var value: UInt64 = 0
            for index in at..<(at + size) { value = value << 8 | UInt64(data[index]) }
            return value <= UInt64(Int.max) ? Int(value) : nil
        }
        let trailer = data.count - 32
        let offsetSize = Int(data[trailer + 6]), referenceSize = Int(data[trailer + 7])
        guard [1, 2, 4, 8].contains(offsetSize), [1, 2, 4, 8].contains(referenceSize),
              let count = integer(trailer + 8, 8), let top = integer(trailer + 16, 8), let table = integer(trailer + 24, 8),
              count >= 1, count <= data.count, top < count, table >= 8, table <= trailer, count <= (trailer - table) / offsetSize
        else { return false }
        var offsets: [Int] = []
        offsets.reserveCapacity(count)
        for index in 0..<count {
            guard let offset = integer(table + index * offsetSize, offsetSize), offset >= 8, offset < table else { return false }
            offsets.append(offset)
        }
        /// The count of the object at `offset` (its low nibble, or the integer after it) and where its contents start.
        func length(_ offset: Int) -> (count: Int, start: Int)? {
            let nibble = Int(data[offset] & 0x0F)
            guard nibble == 0x0F else { return (nibble, offset + 1) }
            guard offset + 1 < table, data[offset + 1] & 0xF0 == 0x10 else { return nil }
            let size = 1 << Int(data[offset + 1] & 0x0F)
            guard let value = integer(offset + 2, size) else { return nil }
            return (value, offset + 2 + size)
        }
        // Each container's members, for the shape check at the end.
        var members: [Int: [Int]] = [:]
        for (object, offset) in offsets.enumerated() {
            let marker = data[offset]
            switch marker >> 4 {
            case 0x0: guard marker == 0x08 || marker == 0x09 else { return false }
            case 0x1: guard marker & 0x0F <= 3, offset + 1 + (1 << Int(marker & 0x0F)) <= table else { return false }
            case 0x2: guard marker == 0x22 || marker == 0x23, offset + 1 + (1 << Int(marker & 0x0F)) <= table else { return false }
            case 0x3: guard marker == 0x33, offset + 9 <= table else { return false }
            case 0x4, 0x5, 0x6:
                guard let (items, start) = length(offset) else { return false }
                let width = marker >> 4 == 0x6 ? 2 : 1
                guard items <= (table - start) / width else { return false }
            case 0xA, 0xD:
                guard let (items, start) = length(offset), items <= data.count else { return false }
                let references = marker >> 4 == 0xD ? items * 2 : items
                guard references <= (table - start) / referenceSize else { return false }
                var found: [Int] = []
                found.reserveCapacity(references)
                for index in 0..<references {
                    guard let reference = integer(start + index * referenceSize, referenceSize), reference < count else { return false }
                    // Dictionary keys are strings.
                    if marker >> 4 == 0xD, index < items, !(data[offsets[reference]] >> 4 == 0x5 || data[offsets[reference]] >> 4 == 0x6) { return false }
                    found.append(reference)
                }
                members[object] = found
            default: return false
            }
        }
        return isBoundedTree(top: top, members: members)
    }

    /// How deep a value may nest, and how many objects it may hold once shared references are
    /// copied out (as decoding does): a few hundred bytes of arrays that each name the next one
    /// twice would otherwise expand to 2^40 objects, and a reference cycle would never end.
    static let maximumDepth = 512
    static let maximumExpandedObjects = 1 << 20

    /// Whether the objects reachable from `top` form no cycle, nest at most `maximumDepth` deep
    /// and expand to at most `maximumExpandedObjects` (walked without recursion).
    private static func isBoundedTree(top: Int, members: [Int: [Int]]) -> Bool {
        var expanded: [Int: Int] = [:]
        var depth: [Int: Int] = [:]
        var onPath: Set<Int> = []
        var stack: [(object: Int, next: Int)] = [(top, 0)]
        onPath.insert(top)
        while let (object, next) = stack.last {
            let children = members[object] ?? []
            if next < children.count {
                stack[stack.count - 1].next += 1
                let child = children[next]
                if let below = depth[child] {
                    guard stack.count + below <= maximumDepth else { return false }
                    continue
                }
                guard !onPath.contains(child), stack.count < maximumDepth else { return false }
                onPath.insert(child)
                stack.append((child, 0))
                continue
            }
            var total = 1, deepest = 0
            for child in children {
                total += expanded[child] ?? 0
                deepest = max(deepest, depth[child] ?? 0)
                if total > maximumExpandedObjects { return false }
            }
            expanded[object] = total
            depth[object] = deepest + 1
            onPath.remove(object)
            stack.removeLast()
        }
        return true
    }
}
