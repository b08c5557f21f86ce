import KQuery

extension Record {
    /// The references whose action the container enforces (DELETE_SELF and VALIDATE), from single
    /// fields and lists alike. NONE references are left alone: dangling ones are allowed.
    package var trackedReferences: [Reference] {
        // Most records hold none: found without building the list or copying a field out.
        guard fields.containsValue(where: Self.mayHoldTrackedReference) else { return [] }
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

    /// Whether a field value is a reference, or a list of them, that may have an enforced action.
    private static func mayHoldTrackedReference(_ value: FieldValue) -> Bool {
        switch value {
        case .reference(let reference): reference.action != .none
        case .list(.reference, _): true
        default: false
        }
    }

    /// Whether the record holds a reference with `action` to the record named `target` (in its zone).
    func references(_ target: String, action: Reference.Action) -> Bool {
        trackedReferences.contains { $0.action == action && $0.recordID.recordName == target && $0.recordID.zoneID == recordID.zoneID }
    }
}
