import KQuery
import KQueryContainer
import KQueryStore

import Foundation

/// The schema a container grows from its saves when the server runs without `--schema`, as
/// CloudKit's development environment does: the first save of a record type or field creates it,
/// and that save's value fixes the field's type. A later save of another type is refused with
/// CloudKit's message ("invalid attempt to set value type STRING for field 'price' for type
/// 'Artwork', defined to be: INT64"), and an untyped value (`{"value": 1704164645000}`) takes the
/// type the field already has (a date).
///
/// The schema is kept in the Schema Language next to the container file (`ID.container.ckdb`), so
/// a restart keeps it and it can be handed to `kquery serve --schema` or to `cktool`. It is written
/// before the modify that grew it runs: a crash in between leaves a field defined without a record,
/// as CloudKit's own schema would, never a record whose field has no type.
package final class LearnedSchema: Sendable {
    package let path: String
    private let schema: Locked<Schema>

    /// Reads the schema kept at `path`, or starts an empty one when there is no file.
    package init(path: String) throws(ServerError) {
        self.path = path
        guard FileManager.default.fileExists(atPath: path) else {
            schema = Locked(Schema())
            return
        }
        do throws(SchemaFileError) {
            schema = Locked(try Schema(contentsOfFile: path))
        } catch {
            throw ServerError("INTERNAL_ERROR", "the learned schema \(error)", httpStatus: 500)
        }
    }

    /// The schema as learned so far.
    package var current: Schema { schema.withLock { $0 } }

    /// The operations with their untyped values given the learned types, after learning the record
    /// types and fields they introduce (written to the file before this returns). A value of
    /// another type than its field's refuses the whole request, naming the operation, and learns
    /// nothing.
    package func conforming(_ operations: [RecordOperation]) throws(ContainerError) -> [RecordOperation] {
        try schema.withLock { schema throws(ContainerError) -> [RecordOperation] in
            var grown = schema
            for operation in operations where operation.kind != .delete && operation.kind != .forceDelete {
                Self.learn(operation.record, into: &grown)
            }
            let conformed = try grown.conforming(operations)
            if grown != schema {
                try write(grown)
                schema = grown
            }
            return conformed
        }
    }

    /// Adds the record type and the fields of `record` that `schema` does not have yet, each typed
    /// by its value (an untyped whole number is an INT64, as the JSON reads).
    /// A record type whose name the Schema Language cannot write is not learned (the container
    /// refuses such records anyway), so the file always reads back.
    static func learn(_ record: Record, into schema: inout Schema) {
        guard FieldKey.isValidName(record.recordType) else { return }
        var type = schema[record.recordType] ?? RecordTypeSchema(name: record.recordType, fields: [])
        let before = type
        for key in record.fields.keys.sorted(by: { $0.name < $1.name }) where type.field(.user(key)) == nil && !SharingKeys.isReserved(key.name) {
            guard let value = record.fields[key] else { continue }
            type.fields.append(FieldSchema(.user(key), value.isList ? .list(value.type) : .scalar(value.type)))
        }
        if type != before || schema[record.recordType] == nil { schema[record.recordType] = type }
    }

    private func write(_ schema: Schema) throws(ContainerError) {
        let text = "// Learned by kquery serve from the first save of each record type and field.\n" + schema.text
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw ContainerError(.internalError, "cannot write the learned schema \(path): \(error.localizedDescription)")
        }
    }
}
