import KQuery

/// A database schema, as CloudKit's: record types with typed fields, each marked with the indexes
/// it has (QUERYABLE, SORTABLE, SEARCHABLE).
///
/// A schema is optional. Without one a database accepts any record and any query (SPEC §3). With
/// one, saving a record of an undeclared type, an undeclared field or a value of the wrong type
/// fails, and a query fails with `Field 'x' is not marked queryable` (or sortable, searchable) when
/// it needs an index the field does not have. The text form is the CloudKit Schema Language
/// (`Schema(text:)`, `Schema.text`).
public struct Schema: Hashable, Sendable {
    /// Record types by name, in declaration order.
    public private(set) var recordTypes: [RecordTypeSchema] = []

    public init(_ recordTypes: [RecordTypeSchema] = []) {
        for recordType in recordTypes { self[recordType.name] = recordType }
    }

    public subscript(recordType: String) -> RecordTypeSchema? {
        get { recordTypes.first { $0.name == recordType } }
        set {
            let index = recordTypes.firstIndex { $0.name == recordType }
            switch (index, newValue) {
            case (let index?, let value?): recordTypes[index] = value
            case (let index?, nil): recordTypes.remove(at: index)
            case (nil, let value?): recordTypes.append(value)
            case (nil, nil): break
            }
        }
    }
}

/// One record type of a schema: its fields, in declaration order.
public struct RecordTypeSchema: Hashable, Sendable {
    public var name: String
    public var fields: [FieldSchema]

    public init(name: String, fields: [FieldSchema]) {
        self.name = name
        self.fields = fields
    }

    public func field(_ reference: FieldReference) -> FieldSchema? {
        fields.first { $0.field == reference }
    }

    /// The fields marked SEARCHABLE: the only ones a record's tokens come from (SPEC §2.4).
    public var searchableFields: [FieldKey] {
        fields.compactMap { field in
            guard field.indexes.contains(.searchable), case .user(let key) = field.field else { return nil }
            return key
        }
    }
}

/// A field of a record type: its value type and its indexes.
public struct FieldSchema: Hashable, Sendable {
    /// The value types the Schema Language names.
    public enum ValueType: Hashable, Sendable, CustomStringConvertible {
        case scalar(FieldType)
        case list(FieldType)
        /// NUMBER: an INT64 or a DOUBLE.
        case number

        /// Whether `value` may be stored in a field of this type.
        public func admits(_ value: FieldValue) -> Bool {
            switch (self, value) {
            case (.list(let type), .list(let valueType, _)): return type == valueType || (type.isNumeric && valueType.isNumeric)
            case (.list, _), (_, .list): return false
            case (.number, _): return value.type.isNumeric
            case (.scalar(let type), _): return type == value.type
            }
        }

        /// The scalar type of the field or of its members (NUMBER reads as DOUBLE).
        public var memberType: FieldType {
            switch self {
            case .scalar(let type), .list(let type): type
            case .number: .double
            }
        }

        public var isList: Bool {
            if case .list = self { return true }
            return false
        }

        /// The Schema Language spelling: `STRING`, `LIST<INT64>`, `NUMBER`, `ASSET`.
        public var description: String {
            switch self {
            case .scalar(let type): type.schemaName
            case .list(let type): "LIST<\(type.schemaName)>"
            case .number: "NUMBER"
            }
        }
    }

    /// The indexes a field can carry.
    public struct Indexes: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// Equality, IN, CONTAINS, BEGINSWITH and distance tests.
        public static let queryable = Indexes(rawValue: 1)
        /// Ranges (`<`, `>`, BETWEEN) and sorting.
        public static let sortable = Indexes(rawValue: 2)
        /// Token search.
        public static let searchable = Indexes(rawValue: 4)

        /// Each index and its Schema Language keyword, in the order the language writes them.
        public static let keywords: [(index: Indexes, keyword: String)] = [
            (.queryable, "QUERYABLE"), (.searchable, "SEARCHABLE"), (.sortable, "SORTABLE"),
        ]
    }

    public var field: FieldReference
    public var type: ValueType
    public var indexes: Indexes

    public init(_ field: FieldReference, _ type: ValueType, _ indexes: Indexes = []) {
        self.field = field
        self.type = type
        self.indexes = indexes
    }

    public init(_ name: String, _ type: ValueType, _ indexes: Indexes = []) {
        self.init(FieldReference(webServicesName: name), type, indexes)
    }
}

extension FieldType {
    /// The Schema Language name of the type (ASSETID is ASSET there).
    var schemaName: String { self == .assetID ? "ASSET" : rawValue }

    init?(schemaName: String) {
        if schemaName == "ASSET" { self = .assetID; return }
        guard let type = FieldType(rawValue: schemaName), type != .assetID else { return nil }
        self = type
    }
}

/// A record or query the schema refuses: what is wrong, and which field (to point at it).
public struct SchemaViolation: Error, Hashable, Sendable, CustomStringConvertible {
    public var message: String
    /// The field at fault, if one is.
    public var field: FieldReference?

    public init(_ message: String, field: FieldReference? = nil) {
        self.message = message
        self.field = field
    }

    public var description: String { message }
}

extension Schema {
    /// Checks that `record` fits the schema: a declared type, declared fields, values of their types.
    public func check(_ record: Record) throws(SchemaViolation) {
        guard let type = self[record.recordType] else {
            throw SchemaViolation("Cannot create new type '\(record.recordType)': the schema does not define it")
        }
        for (key, value) in record.fields {
            guard let field = type.field(.user(key)) else {
                throw SchemaViolation("Cannot create new field '\(key.name)' in record type '\(record.recordType)': the schema does not define it", field: .user(key))
            }
            guard field.type.admits(value) else {
                throw SchemaViolation(
                    "invalid attempt to set value type \(value.typeName) for field '\(key.name)' for type '\(record.recordType)', defined to be: \(field.type)",
                    field: .user(key))
            }
        }
    }

    /// Checks that a query's predicate and sort only use fields with the indexes they need, and
    /// compare them with values of their type.
    public func check(_ condition: Condition, sortDescriptors: [SortDescriptor] = [], recordType: String) throws(SchemaViolation) {
        guard let type = self[recordType] else {
            throw SchemaViolation("Did not find record type: \(recordType)")
        }
        try type.check(condition)
        try check(sortDescriptors: sortDescriptors, recordType: recordType)
    }

    /// Checks that every sort key is a field marked sortable (a LOCATION one for a distance sort).
    public func check(sortDescriptors: [SortDescriptor], recordType: String) throws(SchemaViolation) {
        guard let type = self[recordType] else {
            throw SchemaViolation("Did not find record type: \(recordType)")
        }
        for descriptor in sortDescriptors {
            switch descriptor.key {
            case .field(let field):
                try type.require(.sortable, on: field)
            case .distance(let field, _):
                let schema = try type.require(.sortable, on: field)
                guard schema.type == .scalar(.location) else {
                    throw SchemaViolation("Field '\(field.name)' is \(schema.type), not LOCATION: it cannot be sorted by distance", field: field)
                }
            }
        }
    }
}

extension RecordTypeSchema {
    /// The schema of `field`, or the error CloudKit gives for a field without the index.
    @discardableResult
    func require(_ index: FieldSchema.Indexes, on field: FieldReference) throws(SchemaViolation) -> FieldSchema {
        let schema = self.field(field)
        if schema == nil, case .user = field {
            throw SchemaViolation("Field '\(field.name)' is not defined in record type '\(name)'", field: field)
        }
        // System fields are always defined, and indexed only where the schema declares it.
        guard let schema, schema.indexes.contains(index) else {
            let word = index == .queryable ? "queryable" : index == .sortable ? "sortable" : "searchable"
            throw SchemaViolation("Field '\(field.name)' is not marked \(word)", field: field)
        }
        return schema
    }

    func check(_ condition: Condition) throws(SchemaViolation) {
        switch condition {
        case .constant:
            break
        case .and(let operands), .or(let operands):
            for operand in operands { try check(operand) }
        case .not(let operand):
            try check(operand)
        case .tokens:
            guard !searchableFields.isEmpty else {
                throw SchemaViolation("Record type '\(name)' has no field marked searchable, so it cannot be searched by tokens")
            }
        case .distance(let field, _, _, _):
            let schema = try require(.queryable, on: field)
            guard schema.type == .scalar(.location) else {
                throw SchemaViolation("Field '\(field.name)' is \(schema.type): distanceToLocation:fromLocation: needs a LOCATION field", field: field)
            }
        case .field(let field, let test):
            try check(test, on: field)
        }
    }

    private func check(_ test: FieldTest, on field: FieldReference) throws(SchemaViolation) {
        let needed: FieldSchema.Indexes = switch test {
        case .compare(let relation, _, _) where relation != .equal && relation != .notEqual: .sortable
        case .between: .sortable
        case .members(_, .compare(let relation, _, _)) where relation != .equal && relation != .notEqual: .sortable
        case .members(_, .between): .sortable
        default: .queryable
        }
        let schema = try require(needed, on: field)
        try checkValues(of: test, on: schema, asMember: false)
    }

    /// Reports a test that can never be true because of the field's type (SPEC §2.4: with a schema,
    /// the validator reports what evaluation would quietly treat as false).
    private func checkValues(of test: FieldTest, on schema: FieldSchema, asMember: Bool) throws(SchemaViolation) {
        let field = schema.field
        func fieldIsList() -> Bool { schema.type.isList && !asMember }
        func checkOperand(_ operand: Operand) throws(SchemaViolation) {
            let admitted: Bool
            switch operand {
            case .now: admitted = schema.type.memberType == .timestamp
            case .value(let value): admitted = Self.comparable(value, with: schema.type.memberType, number: schema.type == .number)
            }
            guard admitted else {
                let shown = switch operand {
                case .now: "now()"
                case .value(let value): "a \(value.typeName) value"
                }
                throw SchemaViolation("Field '\(field.name)' is \(schema.type) and cannot be compared with \(shown)", field: field)
            }
        }
        func scalarOnly() throws(SchemaViolation) {
            if fieldIsList() {
                throw SchemaViolation("Field '\(field.name)' is \(schema.type): compare its members with CONTAINS, IN or ANY", field: field)
            }
        }
        switch test {
        case .isNil, .isNotNil:
            break
        case .compare(_, let operand, _), .contains(let operand, _):
            if case .compare = test { try scalarOnly() }
            try checkOperand(operand)
        case .between(let lower, let upper):
            try scalarOnly()
            try checkOperand(lower)
            try checkOperand(upper)
        case .oneOf(let operands, _):
            try scalarOnly()
            for operand in operands { try checkOperand(operand) }
        case .containsAll(let operands):
            guard schema.type.isList else {
                throw SchemaViolation("Field '\(field.name)' is \(schema.type), not a list", field: field)
            }
            for operand in operands { try checkOperand(operand) }
        case .string:
            try scalarOnly()
            guard schema.type.memberType == .string else {
                throw SchemaViolation("Field '\(field.name)' is \(schema.type): string operators need a STRING field", field: field)
            }
        case .members(_, let member):
            guard schema.type.isList else {
                throw SchemaViolation("Field '\(field.name)' is \(schema.type), not a list", field: field)
            }
            try checkValues(of: member, on: schema, asMember: true)
        }
    }

    private static func comparable(_ value: FieldValue, with type: FieldType, number: Bool) -> Bool {
        if number || type.isNumeric { return value.type.isNumeric }
        return value.type == type
    }
}
