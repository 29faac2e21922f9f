import Transport

/// One Redis write that ends (part of) a job, besides its acknowledgement.
public enum OutcomeWrite: Sendable {
    case feedback(FeedbackEntry.Draft)
    case deadLetter(DeadLetter.Draft)
    case retry(RetryEntry)
}

/// The writes that end one stream entry; the entry is acknowledged in the same MULTI/EXEC.
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
/// `XACK` and `XDEL` of all the entries, so no entry is acknowledged without its writes and none
/// of its writes lands without the acknowledgement. `sequence` names the batch until EXEC confirms it.
public struct OutcomeBatch: Sendable {
    public let sequence: UInt64
    public let entries: [EntryOutcome]
    /// The index of the queue (among the worker's queues) whose entries these are: the batch is
    /// written with that queue's keys on that queue's connection, never mixed with another queue.
    public let queue: Int

    public init(sequence: UInt64, entries: [EntryOutcome], queue: Int = 0) {
        self.sequence = sequence
        self.entries = entries
        self.queue = queue
    }

    /// Queues `MULTI`, the writes, `XACK`, `XDEL`, `EXEC` on `connection`; `completion` gets EXEC's reply.
    public func send(on connection: RedisConnection, keys: QueueKeys, maxLength: Int,
                     _ completion: @escaping RedisConnection.Completion) {
        connection.send(["MULTI"])
        for entry in entries {
            for write in entry.writes {
                switch write {
                case .feedback(let draft): connection.send(draft.command(stream: keys.feedback, maxLength: maxLength))
                case .deadLetter(let draft): connection.send(draft.command(stream: keys.dead, maxLength: maxLength))
                case .retry(let retry): connection.send(retry.command(key: retry.scheduled ? keys.scheduled : keys.retry))
                }
            }
        }
        connection.send(argumentCount: 3 + entries.count, { builder in
            builder.add("XACK"); builder.add(keys.jobs); builder.add(keys.group)
            for entry in entries { builder.add(entryMilliseconds: entry.entryID.milliseconds, sequence: entry.entryID.sequence) }
        })
        connection.send(argumentCount: 2 + entries.count, { builder in
            builder.add("XDEL"); builder.add(keys.jobs)
            for entry in entries { builder.add(entryMilliseconds: entry.entryID.milliseconds, sequence: entry.entryID.sequence) }
        })
        connection.send(["EXEC"], completion)
    }
}
