import KQuery
import KQueryContainer

/// A write transaction's record and outbox writes, held back and sent together, as few
/// statements as the run of writes allows, just before the next statement that must follow them
/// (a read, another write, the COMMIT).
///
/// Each modify of a batch was four statements on the connection (its savepoint, its record, its
/// push, the savepoint's release), each one a message the node wrote and PostgreSQL answered:
/// with three modifies a batch, 20 messages, most of the node's CPU in a modify (the connections'
/// event loop alone spent more than the committer). Held, a modify that changes records and
/// queues pushes sends nothing until its batch ends, then the batch's records go in one
/// statement (two with several: `saveRecords`) and its pushes in one more. A modify that sends
/// nothing needs no savepoint either: it is undone by dropping what it held. One that does send
/// (it reads what it wrote, deletes a zone) opens its savepoint with its first statement.
///
/// A held statement that fails reports its error as any statement sent without waiting does: to
/// the next statement waited for, failing the batch (`PostgresBatch`), as before.
final class HeldWrites {
    enum Write {
        case save(Record, sequence: Int64, database: Int64)
        case delete(Record, sequence: Int64, database: Int64)
        /// A push numbered in the outbox (`OutboxNotification.id` set).
        case push(OutboxNotification)
    }

    /// The savepoint of a batch's write in progress.
    enum Savepoint {
        /// No write of a batch in progress: statements go without one.
        case none
        /// A batch's write that has sent nothing yet: its first statement opens it.
        case wanted
        case open
    }

    let containerID: Int64
    private var writes: [Write] = []
    /// Where the current write's own writes start in `writes` (those before are earlier writes').
    private var ownStart = 0
    private(set) var savepoint = Savepoint.none
    /// The number of the current write's first statement, its savepoint (nil: none sent).
    private(set) var firstStatement: Int?
    /// Why sending what was held failed, once it has: writes already applied may be lost with
    /// it, so the transaction must not commit.
    private(set) var failure: ContainerError?

    init(containerID: Int64) {
        self.containerID = containerID
    }

    /// Whether the next statement must be preceded by some.
    var isWaiting: Bool { !writes.isEmpty || savepoint == .wanted }

    func hold(_ write: Write) {
        writes.append(write)
    }

    /// A write of a batch begins: its statements, if any, go after a savepoint.
    func beginWrite() {
        ownStart = writes.count
        savepoint = .wanted
        firstStatement = nil
    }

    /// The write applied (its savepoint, if open, released): what it holds stays held.
    func endWrite() {
        ownStart = writes.count
        savepoint = .none
    }

    /// The write failed: what it held is dropped. True when its savepoint is open (the caller
    /// rolls back to it).
    func abandonWrite() -> Bool {
        writes.removeSubrange(ownStart...)
        defer { savepoint = .none }
        return savepoint == .open
    }

    /// Drops everything held (the transaction rolls back).
    func discard() {
        writes = []
        ownStart = 0
        savepoint = .none
    }

    /// Sends what is held on `session` (one that holds nothing), and the current write's
    /// savepoint when it is wanted: after the earlier writes', before its own.
    func send(on session: PostgresSession) throws(ContainerError) {
        do throws(ContainerError) {
            try sendHeld(on: session)
        } catch {
            failure = failure ?? error
            throw error
        }
    }

    private func sendHeld(on session: PostgresSession) throws(ContainerError) {
        let all = writes
        writes = []
        let own = ownStart
        ownStart = 0
        let tx = PostgresTransaction(session: session, containerID: containerID)
        if savepoint == .wanted {
            try Self.send(all[..<own], tx)
            firstStatement = session.sentCount
            try session.send("SAVEPOINT kquery_write")
            savepoint = .open
            try Self.send(all[own...], tx)
        } else {
            try Self.send(all[...], tx)
        }
    }

    /// The pushes in one statement; the record writes in order, each run of saves to one database
    /// (pushes between them aside: the outbox and the records are independent) in one go.
    private static func send(_ writes: ArraySlice<Write>, _ tx: PostgresTransaction) throws(ContainerError) {
        var pushes: [OutboxNotification] = []
        var saves: [(record: Record, sequence: Int64)] = []
        var savesDatabase: Int64 = 0
        func sendSaves() throws(ContainerError) {
            guard !saves.isEmpty else { return }
            try tx.saveRecords(saves, inDatabase: savesDatabase)
            saves = []
        }
        for write in writes {
            switch write {
            case .save(let record, let sequence, let database):
                if database != savesDatabase { try sendSaves() }
                savesDatabase = database
                saves.append((record, sequence))
            case .delete(let record, let sequence, let database):
                try sendSaves()
                try tx.deleteRecord(record, sequence: sequence, inDatabase: database)
            case .push(let notification):
                pushes.append(notification)
            }
        }
        try sendSaves()
        if !pushes.isEmpty { try tx.insertOutbox(pushes) }
    }
}
