#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Fresh notification IDs.
enum UUIDText {
    static func random() -> String { UUID().uuidString }
}
