import KQuery

extension Record {
    /// The references whose action the container enforces (DELETE_SELF and VALIDATE), from single
    /// fields and lists alike. NONE references are left alone: dangling ones are allowed.
    var trackedReferences: [Reference] {
        var references: [Reference] = []
        for (_, value) in fields {
            switch value {
            case .reference(let reference) where reference.action != .none:
                references.append(reference)
            case .list(.reference, let members):
                for case .reference(let reference) in members where reference.action != .none { references.append(reference) }
            default:
                break
            }
        }
        return references
    }

    /// Whether the record holds a reference with `action` to the record named `target` (in its zone).
    func references(_ target: String, action: Reference.Action) -> Bool {
        trackedReferences.contains { $0.action == action && $0.recordID.recordName == target && $0.recordID.zoneID == recordID.zoneID }
    }
}
