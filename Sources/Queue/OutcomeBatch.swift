import Transport

/// One Redis write that ends (part of) a job, besides its acknowledgement.
public enum OutcomeWrite: Sendable {
    case feedback(FeedbackEntry.Draft)
    case deadLetter(DeadLetter.Draft)
    case retry(RetryEntry)
    /// A receipt in the results stream (results on for the queue, or `receipt` on the job).
    case result(ResultEntry.Draft)
}

/// The writes that end one stream entry; the entry is acknowledged in the same MULTI/EXEC (or by
/// a lone XACK when no entry of the batch has a write).
public struct EntryOutcome: Sendable {
    public var entryID: StreamEntryID
    /// Empty for the usual job (every token accepted or superseded): only the acknowledgement.
    public var writes: [OutcomeWrite]

    public init(entryID: StreamEntryID, writes: [OutcomeWrite] = []) {
        self.entryID = entryID
        self.writes = writes
    }
}

/// The entries one loop tick finished, written as one transaction: every outcome write, then
/// `XACK` of all the entries, so no entry is acknowledged without its writes and none of its
/// writes lands without the acknowledgement. A batch without writes (the usual case: every token
/// accepted) is one `XACK`, atomic on its own, without MULTI/EXEC around it. Finished entries are
/// not deleted here: the worker trims the stream below what every consumer finished now and then
/// (`StreamTrim`), which costs Redis far less than an `XDEL` of each. `sequence` names the batch
/// until Redis confirms it.
public struct OutcomeBatch: Sendable {
    public let sequence: UInt64
    public private(set) var entries: [EntryOutcome]
    /// The index of the queue (among the worker's queues) whose entries these are: the batch is
    /// written with that queue's keys on that queue's connection, never mixed with another queue.
    public let queue: Int

    public init(sequence: UInt64, entries: [EntryOutcome], queue: Int = 0) {
        self.sequence = sequence
        self.entries = entries
        self.queue = queue
    }

    /// Moves the entry array out, leaving this batch empty: the worker takes it back when Redis
    /// has confirmed the batch, to reuse its storage for a later one.
    public mutating func takeEntries() -> [EntryOutcome] {
        var taken: [EntryOutcome] = []
        swap(&taken, &entries)
        return taken
    }

    /// Whether any entry has a write besides its acknowledgement (then the batch needs MULTI/EXEC).
    public var hasWrites: Bool { entries.contains { !$0.writes.isEmpty } }

    /// How a batch's entries are acknowledged: the entries read under a lease by setting their
    /// positions (`StreamLease`), the others (read from the pending list, claimed) by `XACK`.
    /// Positions to set in one lease (`QueueScripts.leaseFinish`): its field, how many entries its
    /// read returned and the last of them, and the positions (a hex mask, see `StreamLease`).
    public typealias LeasePositions = (field: String, read: Int, last: StreamEntryID, mask: [UInt8])

    public struct Acknowledgement: Sendable {
        /// Entries acknowledged with `XACK`.
        public var pending: [StreamEntryID] = []
        /// Per lease, the positions finished in this batch.
        public var leases: [LeasePositions] = []

        public init() {}
    }

    /// Queues `MULTI`, the writes, `XACK`, `EXEC` on `connection` (`completion` gets EXEC's reply,
    /// an array), or only `XACK` when no entry has a write (`completion` gets its integer reply).
    /// With `acknowledgement` (nil: `XACK` of every entry), its `XACK` and then its lease script
    /// (`QueueScripts.leaseFinish`, whose reply is then the last of EXEC's) are the
    /// acknowledgement; a batch with a lease always goes in a MULTI.
    /// Dead letters and feedback are trimmed to about `maxLength`, results to `resultsMaxLength`
    /// (nil: `maxLength`).
    public func send(on connection: RedisConnection, keys: QueueKeys, maxLength: Int, resultsMaxLength: Int? = nil,
                     acknowledgement: Acknowledgement? = nil, _ completion: @escaping RedisConnection.Completion) {
        let leases = acknowledgement?.leases ?? []
        guard hasWrites || !leases.isEmpty else {
            sendAcknowledgement(on: connection, keys: keys, ids: acknowledgement?.pending, completion)
            return
        }
        connection.send(["MULTI"])
        for entry in entries {
            for write in entry.writes {
                switch write {
                case .feedback(let draft): connection.send(draft.command(stream: keys.feedback, maxLength: maxLength))
                case .deadLetter(let draft): connection.send(draft.command(stream: keys.dead, maxLength: maxLength))
                case .retry(let retry): connection.send(retry.command(key: retry.scheduled ? keys.scheduled : keys.retry))
                case .result(let draft): connection.send(draft.command(stream: keys.results, maxLength: resultsMaxLength ?? maxLength))
                }
            }
        }
        if acknowledgement.map({ !$0.pending.isEmpty }) ?? true {
            sendAcknowledgement(on: connection, keys: keys, ids: acknowledgement?.pending, nil)
        }
        if !leases.isEmpty { connection.send(QueueScripts.leaseFinishCommand(leases: keys.leases, leases)) }
        connection.send(["EXEC"], completion)
    }

    /// `XACK <jobs> <group> <ids>` (nil: every entry's id).
    private func sendAcknowledgement(on connection: RedisConnection, keys: QueueKeys, ids: [StreamEntryID]?,
                                     _ completion: RedisConnection.Completion?) {
        if let ids {
            OutcomeBatch.acknowledge(ids, on: connection, keys: keys, completion)
        } else {
            OutcomeBatch.acknowledge(entries.lazy.map(\.entryID), count: entries.count, on: connection, keys: keys, completion)
        }
    }

    /// `XACK <jobs> <group> <ids>`.
    public static func acknowledge(_ ids: [StreamEntryID], on connection: RedisConnection, keys: QueueKeys,
                                   _ completion: RedisConnection.Completion? = nil) {
        acknowledge(ids, count: ids.count, on: connection, keys: keys, completion)
    }

    private static func acknowledge(_ ids: some Sequence<StreamEntryID>, count: Int, on connection: RedisConnection, keys: QueueKeys,
                                    _ completion: RedisConnection.Completion?) {
        connection.send(argumentCount: 3 + count, { builder in
            builder.add("XACK"); builder.add(keys.jobs); builder.add(keys.group)
            for id in ids { builder.add(entryMilliseconds: id.milliseconds, sequence: id.sequence) }
        }, completion)
    }
}
