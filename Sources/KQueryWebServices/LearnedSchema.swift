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
    private let keeper: any LearnedSchemaKeeper
    /// The schema as last read or written, and the version it was kept at.
    private let schema: Locked<(schema: Schema, version: Int64)>

    /// Reads the schema kept at `path`, or starts an empty one when there is no file.
    package convenience init(path: String) throws(ServerError) {
        try self.init(keeper: LearnedSchemaFile(path: path))
    }

    /// Reads the schema `keeper` keeps.
    package init(keeper: any LearnedSchemaKeeper) throws(ServerError) {
        self.keeper = keeper
        do throws(ContainerError) { schema = Locked(try keeper.load()) } catch { throw ServerError(error) }
    }

    /// The schema as learned so far (by this server; with a shared keeper, other nodes' learning
    /// shows once this one grows it again).
    package var current: Schema { schema.withLock { $0.schema } }

    /// The schema as kept now, read again (what other servers sharing the keeper learned too).
    package func kept() throws(ContainerError) -> Schema {
        try schema.withLock { kept throws(ContainerError) -> Schema in
            kept = try keeper.load()
            return kept.schema
        }
    }

    /// How many times a grown schema is written over another node's newer one before the request
    /// is refused: each retry reads what the other node kept first.
    static let replaceAttempts = 16

    /// The operations with their untyped values given the learned types, after learning the record
    /// types and fields they introduce (kept before this returns). A value of another type than
    /// its field's refuses the whole request, naming the operation, and learns nothing.
    ///
    /// A schema only grows (a field's type, once learned, never changes), so one read earlier is
    /// right about every field it has; only growing it needs the keeper, and a keeper shared by
    /// several nodes keeps a grown schema only over the version it was grown from, or the growing
    /// starts again from the newer one (where another node may have given the field a type first).
    package func conforming(_ operations: [RecordOperation]) throws(ContainerError) -> [RecordOperation] {
        try schema.withLock { kept throws(ContainerError) -> [RecordOperation] in
            for _ in 0..<Self.replaceAttempts {
                var grown = kept.schema
                for operation in operations where operation.kind != .delete && operation.kind != .forceDelete {
                    Self.learn(operation.record, into: &grown)
                }
                let conformed = try grown.conforming(operations)
                if grown == kept.schema { return conformed }
                if try keeper.replace(grown, over: kept.version) {
                    kept = (grown, kept.version + 1)
                    return conformed
                }
                kept = try keeper.load()
            }
            throw ContainerError(.internalError, "the learned schema kept changing under this request (other servers growing it): try again")
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

    /// The text a learned schema is kept as: the Schema Language, under a line saying where it came from.
    package static func text(_ schema: Schema) -> String {
        "// Learned by kquery serve from the first save of each record type and field.\n" + schema.text
    }

    /// Reads kept text back (`what` names where, in the error).
    package static func schema(_ text: String, _ what: String) throws(ContainerError) -> Schema {
        do throws(SchemaTextError) { return try Schema(text: text) } catch {
            throw ContainerError(.internalError, "the learned schema in \(what) does not read back: \(error)")
        }
    }
}

/// Where a learned schema is kept: a file beside the container file (`LearnedSchemaFile`), or the
/// database several servers share.
public protocol LearnedSchemaKeeper: Sendable {
    /// The schema kept, and its version (0: none kept yet).
    func load() throws(ContainerError) -> (schema: Schema, version: Int64)
    /// Keeps `schema` as the next version if the one kept is still at `version`: false when
    /// another server changed it first.
    func replace(_ schema: Schema, over version: Int64) throws(ContainerError) -> Bool
}

/// A learned schema in a file of its own (`ID.container.ckdb`), which one server writes: it can be
/// handed to `kquery serve --schema` or to `cktool`.
package struct LearnedSchemaFile: LearnedSchemaKeeper {
    package let path: String

    package init(path: String) { self.path = path }

    package func load() throws(ContainerError) -> (schema: Schema, version: Int64) {
        guard FileManager.default.fileExists(atPath: path) else { return (Schema(), 0) }
        do throws(SchemaFileError) { return (try Schema(contentsOfFile: path), 1) } catch {
            throw ContainerError(.internalError, "the learned schema \(error)")
        }
    }

    package func replace(_ schema: Schema, over version: Int64) throws(ContainerError) -> Bool {
        do {
            try Data(LearnedSchema.text(schema).utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw ContainerError(.internalError, "cannot write the learned schema \(path): \(error.localizedDescription)")
        }
        return true
    }
}
