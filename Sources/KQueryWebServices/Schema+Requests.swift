import KQuery
import KQueryContainer
import KQueryStore

/// The `.ckdb` schema as `kquery serve --schema` enforces it, with CloudKit's own messages
/// (`Field 'x' is not marked queryable`).
extension Schema {
    /// `record` with its untyped numbers given the type the schema declares (a client sends a date as
    /// `{"value": 1704164645000}`, which reads as INT64), then checked against the schema.
    func conforming(_ record: Record) throws(SchemaViolation) -> Record {
        // Shares are CloudKit's own type, and sharing keys are system values: no schema declares them.
        if SharingKeys.isShareType(record.recordType) { return record }
        var record = record
        var reserved: [(FieldKey, FieldValue)] = []
        for key in record.fields.keys where SharingKeys.isReserved(key.name) {
            if let value = record.fields[key] { reserved.append((key, value)) }
            record.fields[key] = nil
        }
        if let type = self[record.recordType] {
            for key in record.fields.keys {
                guard let field = type.field(.user(key)), let value = record.fields[key] else { continue }
                record.fields[key] = Self.coerce(value, to: field.type)
            }
        }
        try check(record)
        for (key, value) in reserved { record.fields[key] = value }
        return record
    }

    static func coerce(_ value: FieldValue, to type: FieldSchema.ValueType) -> FieldValue {
        switch (value, type) {
        case (.int64(let n), .scalar(.timestamp)): .timestamp(n)
        case (.int64(let n), .scalar(.double)): .double(Double(n))
        case (.list(.int64, let values), .list(let member)) where member == .timestamp || member == .double:
            .list(member, values.map { coerce($0, to: .scalar(member)) })
        default: value
        }
    }

    /// The operations with their records conformed; a violation refuses the whole request
    /// (BAD_REQUEST naming the operation), so nothing is half applied.
    func conforming(_ operations: [RecordOperation]) throws(ContainerError) -> [RecordOperation] {
        var conformed = operations
        for (index, operation) in operations.enumerated() where operation.kind != .delete && operation.kind != .forceDelete {
            do throws(SchemaViolation) {
                conformed[index].record = try conforming(operation.record)
            } catch {
                throw ContainerError(.badRequest, "operations[\(index)]: \(error.message)")
            }
        }
        return conformed
    }

    /// Refuses a query whose predicate or sort needs an index the schema does not declare.
    func check(_ query: Query) throws(ServerError) {
        do throws(SchemaViolation) {
            try check(query.predicate.condition, sortDescriptors: query.sortDescriptors, recordType: query.recordType)
        } catch {
            throw ServerError.badRequest(error.message)
        }
    }
}
