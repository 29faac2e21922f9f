import Logging
import Queue
import Transport

/// One read under a lease, as its worker keeps it (see `StreamLease`): the lease's field and the
/// ids read, in order (position k is `ids[k]`). Kept until every entry of it is confirmed
/// finished (or moved to the pending list), or Redis says the lease is gone. Loop-confined.
final class LocalLease {
    /// Its number among this worker's leases (`field` is `<instance>-<sequence>`).
    let sequence: UInt64
    let field: String
    let ids: [StreamEntryID]
    /// Positions moved to the pending list (their outcomes are acknowledged there, with XACK).
    private(set) var moved: [Bool]?
    /// Positions neither confirmed finished nor moved.
    var unsettled: Int
    /// Claim ticks in a row that found none of its positions held by the rules while some were
    /// unsettled (`QueueChannel.leasesLost`).
    var ticksWithNothingHeld = 0

    init(sequence: UInt64, field: String, ids: [StreamEntryID]) {
        self.sequence = sequence
        self.field = field
        self.ids = ids
        unsettled = ids.count
    }

    /// `position(of:)`, looking a few positions from `guess` on first: within a batch, answers
    /// mostly come in the order their entries were read (spread over the pool's connections,
    /// so the next one found lies a few positions on, not always the very next).
    func position(of id: StreamEntryID, guess: Int) -> Int? {
        if guess >= 0 {
            let end = min(ids.count, guess + 8)
            var position = guess
            while position < end {
                if ids[position] == id { return position }
                position += 1
            }
        }
        return position(of: id)
    }

    /// The position of `id` in the read (binary search: ids are in stream order).
    func position(of id: StreamEntryID) -> Int? {
        ids.withUnsafeBufferPointer { ids in
            var low = 0, high = ids.count - 1
            while low <= high {
                let middle = (low + high) / 2
                if ids[middle] == id { return middle }
                if ids[middle] < id { low = middle + 1 } else { high = middle - 1 }
            }
            return nil
        }
    }

    func markMoved(_ positions: Range<Int>) {
        var flags = moved ?? Array(repeating: false, count: ids.count)
        for position in positions where !flags[position] {
            flags[position] = true
            unsettled -= 1
        }
        moved = flags
    }

    func isMoved(_ position: Int) -> Bool { moved?[position] ?? false }

    /// Some position was moved (to the pending list, or to a newer lease by `takeOver`).
    var hasMoves: Bool { moved != nil }
}

/// Entries moved from a lease (or read without one) to this consumer's pending list, until Redis
/// confirms the move (`QueueWorker.moveToPending`).
struct PendingMove {
    /// The entries to move. For a move of entries this worker holds (`cursor` nil), those whose
    /// outcome batch Redis confirmed leave it (`QueueWorker.dropFromUnleasedMoves`).
    var ids: [StreamEntryID]
    /// The lease they leave (its positions are set), or nil.
    let lease: OutcomeBatch.LeasePositions?
    /// A lease field to delete with the move (a read whose lease did not cover it), or nil.
    let deleteField: String?
    /// Where the pending-list read starts once they are there; nil when the worker holds them
    /// already (sent without a lease): the pending list only keeps them should it stop.
    let cursor: String?
    /// Set by `moveToPending`: tells the moves apart when Redis answers.
    var serial: UInt64 = 0
    /// Sent and not answered yet.
    var sending = false
}

/// A lease write outside the outcome batches that has to land: kept until Redis confirms it and
/// sent again after a reconnect and at every claim tick (`QueueWorker.leaseWrite`). Both kinds
/// set what is set already when sent twice.
struct PendingLeaseWrite {
    enum Content {
        /// Entries whose outcomes Redis wrote while their lease was gone (`finishElsewhere`): set
        /// in the lease of this worker that holds them when sent, else acknowledged with XACK.
        case finished([StreamEntryID])
        /// Positions of older leases that a newer lease took over (`takeOver`).
        case takenOver([OutcomeBatch.LeasePositions])
    }
    let content: Content
    /// The newest lease of the queue when the write was made: a `.finished` write is planned
    /// again at each send, and only with leases up to this one. A later lease that names one of
    /// its entries read it after it was finished (a failover lost the read in between): a new
    /// delivery, whose own outcome sets its position.
    let newestLease: UInt64
    /// Set by `leaseWrite`: tells the writes apart when Redis answers.
    var serial: UInt64 = 0
    /// Sent and not answered yet: not sent again meanwhile (a second confirmation of a
    /// `.finished` write would settle its entries twice in the local lease).
    var sending = false
}

/// What an outcome batch's lease entries need once Redis answers: per lease, the local lease and
/// how many of its entries the batch finished (which ones: the positions of its mask).
struct LeaseAcknowledgementPlan {
    var acknowledgement = OutcomeBatch.Acknowledgement()
    var leases: [LocalLease] = []
    var counts: [Int] = []

    /// The ids the batch finished in lease `index`: the positions its mask sets.
    func ids(ofLease index: Int) -> [StreamEntryID] {
        let lease = leases[index], mask = acknowledgement.leases[index].mask
        return lease.ids.indices.filter { StreamLease.isSet($0, in: mask) }.map { lease.ids[$0] }
    }

    /// How many of lease `index`'s positions this batch settles: those its mask sets, less any
    /// a newer lease took over after the plan was made (`QueueChannel.takeOver` counted those
    /// already; counting them again dropped the lease while entries of it were still out).
    func settling(ofLease index: Int) -> Int {
        let lease = leases[index]
        guard lease.hasMoves else { return counts[index] }
        let mask = acknowledgement.leases[index].mask
        return lease.ids.indices.reduce(0) { $0 + (StreamLease.isSet($1, in: mask) && !lease.isMoved($1) ? 1 : 0) }
    }
}

extension QueueChannel {
    /// The lease of this worker that holds `id` (not moved), and its position. After a failover
    /// to a replica that had not seen a read, the same entries can be read again under a newer
    /// lease, and only the newer one exists on the new master (the older one's positions for them
    /// are then marked moved, `takeOver`). A handful of leases: a scan with two comparisons per
    /// lease, then a binary search in the one holding `id`.
    func lease(containing id: StreamEntryID) -> (LocalLease, Int)? {
        // The lease of the last answer first, then the others oldest first (entries finish
        // roughly in the order they were read), over the bounds: values, so the scan retains
        // nothing. At most one lease holds a position not moved for any id (`takeOver`), so
        // the order is only speed.
        let count = leaseBounds.count
        guard count > 0 else { return nil }
        if leasesInOrder {
            // The usual case: each read starts after the one before, so the bounds are sorted.
            var low = 0, high = count - 1
            while low <= high {
                let middle = (low + high) / 2
                if id < leaseBounds[middle].first {
                    high = middle - 1
                } else if id > leaseBounds[middle].last {
                    low = middle + 1
                } else {
                    let lease = leases[middle]
                    guard let position = lease.position(of: id), !lease.isMoved(position) else { return nil }
                    return (lease, position)
                }
            }
            return nil
        }
        let hint = lastLeaseHit < count ? lastLeaseHit : 0
        var index = hint
        for _ in 0..<count {
            let bounds = leaseBounds[index]
            if bounds.first <= id && id <= bounds.last {
                let lease = leases[index]
                if let position = lease.position(of: id), !lease.isMoved(position) {
                    lastLeaseHit = index
                    return (lease, position)
                }
            }
            index = index + 1 == count ? 0 : index + 1
        }
        return nil
    }

    /// `lease(containing:)` among the leases numbered up to `newest`: nil when a newer one holds
    /// `id` (a read after `newest` named it again).
    func lease(containing id: StreamEntryID, upTo newest: UInt64) -> (LocalLease, Int)? {
        guard let found = lease(containing: id), found.0.sequence <= newest else { return nil }
        return found
    }

    /// Adds a lease just read (the newest).
    func addLease(_ lease: LocalLease) {
        guard let first = lease.ids.first, let last = lease.ids.last else { return }
        if let previous = leaseBounds.last, first <= previous.last { leasesInOrder = false }
        leases.append(lease)
        leaseBounds.append((first, last))
    }

    /// `lease` was just read: entries of it an older lease of this worker holds too (read again
    /// after a failover lost the older read) now belong to `lease` alone, so their outcomes set
    /// positions in the lease that exists; the older lease marks them moved (a newer read starts
    /// after the older one's last entry otherwise, and this costs one comparison per lease).
    /// Returns the positions taken from older leases, to be set there in Redis should an older
    /// lease still exist (then it is not released with entries the newer one holds), and the older
    /// leases left with nothing to settle (removed; their fields are deleted).
    func takeOver(for lease: LocalLease) -> (taken: [OutcomeBatch.LeasePositions], emptied: [LocalLease]) {
        guard !leasesInOrder, let first = lease.ids.first, leases.count > 1 else { return ([], []) }
        var taken: [OutcomeBatch.LeasePositions] = []
        var emptied: [LocalLease] = []
        for older in leases.dropLast() {
            guard let last = older.ids.last, first <= last else { continue }
            var mask: [UInt8] = []
            for id in lease.ids {
                if let position = older.position(of: id), !older.isMoved(position) {
                    older.markMoved(position..<position + 1)
                    StreamLease.set(position, in: &mask)
                }
            }
            if !mask.isEmpty { taken.append((older.field, older.ids.count, last, mask)) }
            if older.unsettled <= 0 { emptied.append(older) }
        }
        for older in emptied { removeLease(older) }
        return (taken, emptied)
    }

    func removeLease(_ lease: LocalLease) {
        guard let index = leases.firstIndex(where: { $0 === lease }) else { return }
        leases.remove(at: index)
        leaseBounds.remove(at: index)
        if leases.isEmpty { leasesInOrder = true }
    }

    /// `count` entries of `lease` confirmed finished: drops the lease when none is left and
    /// returns true (then every position is set in Redis: its field can go).
    func settle(_ lease: LocalLease, count: Int) -> Bool {
        lease.unsettled -= count
        guard lease.unsettled <= 0 else { return false }
        removeLease(lease)
        return true
    }

    /// `lease` was just read; `isHeld` says which entries the worker holds already. A read that
    /// starts at or before the newest entry read so far (a failover's new master had not seen an
    /// earlier read) names again entries still in the worker's hands: `take` skips those, and
    /// their outcomes must set their positions in `lease`, the one Redis has. An outcome planned
    /// after this read does (`lease(containing:)` finds it); one planned before did not, so such
    /// entries are noted until their outcome is planned (`planned`) or confirmed
    /// (`QueueWorker.batchConfirmed`, which then sets them in `lease`).
    func noteRead(_ lease: LocalLease, isHeld: (StreamEntryID) -> Bool) {
        guard let first = lease.ids.first, let last = lease.ids.last else { return }
        if let newest = newestRead, first <= newest {
            for id in lease.ids where isHeld(id) { rereadWhileHeld.insert(id) }
        }
        noteNewest(last)
    }

    /// `id` is the last entry of a read (of new entries, of the pending list, or a claim).
    func noteNewest(_ id: StreamEntryID) {
        if newestRead.map({ id > $0 }) ?? true { newestRead = id }
    }

    /// An outcome of `id` is planned with the lease that holds it now: nothing more to set.
    func planned(_ id: StreamEntryID) {
        rereadWhileHeld.remove(id)
    }

    /// The leases whose unsettled positions the worker no longer holds, three claim ticks in a
    /// row: every entry of theirs left the rules (its outcome batch confirmed) while the lease
    /// still counts some unsettled, so no outcome will ever settle them. Such a lease would stay
    /// in Redis for good, holding back the stream's trim; it is dropped here, and the release
    /// that follows hands its unset positions to the pending list (read again: sent twice at
    /// worst, never lost). A safety net: nothing known leaves a lease so.
    func leasesLost(isHeld: (StreamEntryID) -> Bool) -> [LocalLease] {
        var lost: [LocalLease] = []
        for lease in leases {
            let holds = lease.ids.indices.contains { !lease.isMoved($0) && isHeld(lease.ids[$0]) }
            lease.ticksWithNothingHeld = holds ? 0 : lease.ticksWithNothingHeld + 1
            if lease.ticksWithNothingHeld >= 3 { lost.append(lease) }
        }
        for lease in lost { removeLease(lease) }
        return lost
    }
}

extension QueueWorker {
    /// A fresh lease: its sequence number, and its field (this worker's instance and that number).
    func nextLease() -> (sequence: UInt64, field: String) {
        leaseSequence &+= 1
        return (leaseSequence, "\(leaseInstance)-\(leaseSequence)")
    }

    /// One leased read of up to `count` new entries on `channel`'s reader: MULTI, the lease script,
    /// XREADGROUP … NOACK, EXEC (see `StreamLease`). Nothing to read: the next read is the
    /// group's blocking read (`QueueWorker.read`).
    func leasedRead(_ channel: QueueChannel, count: Int) {
        guard let reader = channel.reader else { return }
        channel.readInFlight = true
        let keys = channel.keys
        let (sequence, field) = nextLease()
        channel.leaseReadInFlight = sequence
        // A command refused while queued makes EXEC answer EXECABORT; its own error says why
        // (MOVED, NOPERM), so keep the first.
        var refusal: String?
        let queued: RedisConnection.Completion = { result in
            if case .success(.error(let message)) = result, refusal == nil { refusal = message }
        }
        reader.send(["MULTI"], queued)
        // A plain HSET first: a user without the right to write the lease (an ACL not updated),
        // or a Redis out of memory, refuses it while it is queued, and EXEC then runs nothing; a
        // refusal inside the script would come only after the read had run. The script
        // overwrites this placeholder.
        reader.send(["HSET", keys.leases, field, "-"], queued)
        reader.send(["EVAL", QueueScripts.leaseRead, "2", keys.jobs, keys.leases, keys.group, field, String(count),
                     configuration.consumer], queued)
        reader.send(["XREADGROUP", "GROUP", keys.group, configuration.consumer, "COUNT", String(count), "NOACK",
                     "STREAMS", keys.jobs, ">"], queued)
        reader.sendRaw(["EXEC"]) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            channel.readInFlight = false
            if channel.leaseReadInFlight == sequence { channel.leaseReadInFlight = nil }
            guard case .success(let tape) = result else { return }
            switch RedisReplyReader.leasedRead(tape: tape) {
            case .failure(let error):
                let message: String
                switch error {
                case .server(let text): message = refusal ?? text
                default: message = "\(error)"
                }
                self.readFailed(channel, message: message)
            case .success(let read):
                channel.noteReply(bytes: tape.byteCount, entries: read.entries.count)
                self.leasedReadArrived(channel, sequence: sequence, field: field, read: read)
            }
            self.maybeRead()
        }
    }

    /// A leased read's answer: the entries go to the rules under their lease; those a reply cut
    /// for its byte budget, or a read the lease does not cover, go to the pending list.
    private func leasedReadArrived(_ channel: QueueChannel, sequence: UInt64, field: String, read: RedisReplyReader.LeasedRead) {
        let entries = read.entries
        if let error = read.scriptError {
            // The read ran without its lease (the script failed after the placeholder was
            // written). Its entries are sent now and also moved to the pending list, which keeps
            // them if this worker stops; reads pause, longer each time, while the script fails.
            handleRedisError(error, channel: channel)
            channel.logger.error("the lease script failed; the entries read go to the pending list",
                                 metadata: ["entries": "\(entries.count)", "error": "\(error)"])
            takeUnleased(channel, entries, field: field)
            pauseReads(channel)
            return
        }
        channel.readFailures = 0
        channel.redirectsInARow = 0
        channel.active = !entries.isEmpty
        guard !entries.isEmpty else {
            channel.waitsForJobs = true
            // Without the lag the script counted on entries the read did not find (the last ones
            // were deleted): the lease covers nothing.
            if read.leased > 0 { channel.writer?.send(["HDEL", channel.keys.leases, field]) }
            return
        }
        guard read.leased >= entries.count else {
            // Redis returned more than the lease counted (it should not): the pending list holds them.
            channel.logger.warning("a read returned more entries than its lease covers; they go to the pending list",
                                   metadata: ["entries": "\(entries.count)", "leased": "\(read.leased)"])
            takeUnleased(channel, entries, field: field)
            return
        }
        let lease = LocalLease(sequence: sequence, field: field, ids: entries.map(\.id))
        channel.addLease(lease)
        let takenOver = channel.takeOver(for: lease)
        if !takenOver.taken.isEmpty {
            // Usually gone (the failover lost the older read); where one exists, its positions
            // now read as finished, so releasing it does not hand out what the newer lease holds.
            leaseWrite(channel, .takenOver(takenOver.taken))
        }
        for older in takenOver.emptied { deleteLease(channel, older) }
        channel.noteRead(lease) { rules.isHeld($0, queue: channel.index) }
        let (taken, deferredAfter) = QueueWorker.deferringOverBudget(entries)
        if let deferredAfter {
            // The reply outgrew its byte budget: the entries past it are read again, fewer at a
            // time (the estimate just grew), from the pending list.
            let positions = taken.count..<entries.count
            var mask: [UInt8] = []
            for position in positions { StreamLease.set(position, in: &mask) }
            lease.markMoved(positions)
            moveToPending(channel, PendingMove(ids: Array(lease.ids[positions]), lease: (field, entries.count, lease.ids[lease.ids.count - 1], mask),
                                               deleteField: nil, cursor: deferredAfter.description))
            if lease.unsettled <= 0 {
                channel.removeLease(lease)
                deleteLease(channel, lease)
            }
        }
        take(taken, queue: channel.index, deliveries: nil)
    }

    /// Entries a read returned without a lease that covers them: those within the reply's byte
    /// budget are sent now and put in the pending list (which only keeps them should the worker
    /// stop), those past it go to the pending list to be read from there; the lease field goes.
    private func takeUnleased(_ channel: QueueChannel, _ entries: [StreamRecord], field: String) {
        let (taken, deferredAfter) = QueueWorker.deferringOverBudget(entries)
        moveToPending(channel, PendingMove(ids: taken.map(\.id), lease: nil, deleteField: field, cursor: nil))
        if let deferredAfter {
            moveToPending(channel, PendingMove(ids: entries[taken.count...].map(\.id), lease: nil, deleteField: nil,
                                               cursor: deferredAfter.description))
        }
        take(taken, queue: channel.index, deliveries: nil)
    }

    /// Moves entries to this consumer's pending list (XCLAIM … FORCE JUSTID), setting their
    /// positions in their lease in the same transaction; then reads the pending list from the
    /// move's cursor. Kept until Redis confirms it and sent again after a reconnect and at every
    /// claim tick, so a move that failed never leaves entries in a lease nobody reads.
    ///
    /// A move of entries this worker holds already (`cursor` nil: read without a lease) is what
    /// keeps them should the worker stop, so it is sent again too, without the entries whose
    /// outcome batch Redis confirmed (`dropFromUnleasedMoves`): after their `XACK`, a move would
    /// put finished entries back. (One sent again between a batch and its confirmation does:
    /// such an entry is delivered twice, not lost.)
    func moveToPending(_ channel: QueueChannel, _ move: PendingMove) {
        var move = move
        channel.moveSerial &+= 1
        move.serial = channel.moveSerial
        channel.pendingMoves.append(move)
        sendMove(channel, move)
    }

    /// Entries whose outcome batch Redis confirmed leave the moves of entries read without a
    /// lease that Redis has not confirmed; a move left with nothing goes (its placeholder lease
    /// field with it).
    func dropFromUnleasedMoves(_ finished: StreamEntryIDSet, channel: QueueChannel) {
        for index in channel.pendingMoves.indices where channel.pendingMoves[index].cursor == nil {
            channel.pendingMoves[index].ids.removeAll { finished.contains($0) }
        }
        // An emptied move only removes its placeholder (and itself: `sendMove`).
        for move in channel.pendingMoves where move.cursor == nil && move.ids.isEmpty { sendMove(channel, move) }
    }

    /// Sends the moves not confirmed yet (after a reconnect, at a claim tick).
    /// A move whose last send is unanswered is not sent again: sent after an outcome batch of its
    /// entries, it would put them back in the pending list, finished.
    func resendPendingMoves(_ channel: QueueChannel) {
        for move in channel.pendingMoves where !move.sending { sendMove(channel, move) }
    }

    private func sendMove(_ channel: QueueChannel, _ move: PendingMove) {
        guard let writer = channel.writer, writer.isReady else { return }
        guard !move.ids.isEmpty else {
            // Nothing to move: only the placeholder lease to remove.
            channel.pendingMoves.removeAll { $0.serial == move.serial }
            if let field = move.deleteField { writer.send(["HDEL", channel.keys.leases, field]) }
            return
        }
        let keys = channel.keys
        writer.send(["MULTI"])
        writer.send(argumentCount: 7 + move.ids.count, { builder in
            builder.add("XCLAIM"); builder.add(keys.jobs); builder.add(keys.group); builder.add(self.configuration.consumer)
            builder.add(integer: 0)
            for id in move.ids { builder.add(entryMilliseconds: id.milliseconds, sequence: id.sequence) }
            builder.add("FORCE"); builder.add("JUSTID")
        })
        if let lease = move.lease { writer.send(QueueScripts.leaseFinishCommand(leases: keys.leases, [lease])) }
        if let field = move.deleteField { writer.send(["HDEL", keys.leases, field]) }
        let serial = move.serial
        if let index = channel.pendingMoves.firstIndex(where: { $0.serial == serial }) { channel.pendingMoves[index].sending = true }
        writer.send(["EXEC"]) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            if let index = channel.pendingMoves.firstIndex(where: { $0.serial == serial }) { channel.pendingMoves[index].sending = false }
            guard case .success(.array(let replies)) = result else {
                if case .success(.error(let message)) = result { self.handleRedisError(message, channel: channel) }
                return  // sent again at the next claim tick or reconnect
            }
            for reply in replies { if case .error(let message) = reply { self.handleRedisError(message, channel: channel); return } }
            guard let index = channel.pendingMoves.firstIndex(where: { $0.serial == serial }) else { return }
            let done = channel.pendingMoves.remove(at: index)
            guard let cursor = done.cursor else { return }
            self.readPendingList(channel, from: cursor)
        }
    }

    /// How `batch`'s entries are acknowledged: those of this worker's leases by their positions,
    /// the others with XACK. nil when the queue has no lease (every entry is acknowledged with XACK).
    func leasePlan(for batch: OutcomeBatch, channel: QueueChannel) -> LeaseAcknowledgementPlan? {
        guard !channel.leases.isEmpty else { return nil }
        return leasePlan(ids: batch.entries.lazy.map(\.entryID), channel: channel)
    }

    /// `leasePlan(for:channel:)` for `ids`, with the leases up to `newestLease`: an entry of a
    /// newer one is acknowledged with XACK (a no-op: its lease sets it).
    func leasePlan(ids: some Sequence<StreamEntryID>, channel: QueueChannel, newestLease: UInt64 = .max) -> LeaseAcknowledgementPlan? {
        var plan = LeaseAcknowledgementPlan()
        var masks: [[UInt8]] = []
        // Entries a failover's re-read named while held (`QueueChannel.noteRead`): planned with
        // the lease that holds them now, they need nothing more. Empty but after a failover.
        let rereads = !channel.rereadWhileHeld.isEmpty
        var current = -1  // the plan's lease of the entry before (entries of one lease come in runs)
        var next = 0  // the position after the entry before's, in `current`
        for id in ids {
            let index: Int
            let position: Int
            if current >= 0, let found = plan.leases[current].position(of: id, guess: next), !plan.leases[current].isMoved(found) {
                index = current
                position = found
            } else {
                guard let (lease, found) = channel.lease(containing: id, upTo: newestLease) else {
                    plan.acknowledgement.pending.append(id)
                    continue
                }
                position = found
                if let known = plan.leases.lastIndex(where: { $0 === lease }) {
                    index = known
                } else {
                    index = plan.leases.count
                    plan.leases.append(lease)
                    plan.counts.append(0)
                    masks.append(Array(repeating: UInt8(ascii: "0"), count: StreamLease.maskDigits(count: lease.ids.count)))
                }
                current = index
            }
            if rereads { channel.planned(id) }
            StreamLease.set(position, in: &masks[index])
            plan.counts[index] += 1
            next = position + 1
        }
        guard !plan.leases.isEmpty else { return nil }
        for (index, lease) in plan.leases.enumerated() {
            plan.acknowledgement.leases.append((lease.field, lease.ids.count, lease.ids[lease.ids.count - 1], masks[index]))
        }
        return plan
    }

    /// Redis confirmed a batch acknowledged by `plan`: `reply` is the lease script's answer, one
    /// status per lease. A lease gone already (another worker released it to the pending list)
    /// gets its entries acknowledged there. Returns false when the script failed: its entries'
    /// positions are not set, so the batch must be written again.
    func leasesAcknowledged(_ plan: LeaseAcknowledgementPlan, reply: RedisReply?, channel: QueueChannel) -> Bool {
        guard case .array(let statuses)? = reply, statuses.count == plan.leases.count else { return false }
        var gone: [StreamEntryID] = []
        for (index, lease) in plan.leases.enumerated() {
            if statuses[index].integer == -1 {
                channel.removeLease(lease)
                gone += plan.ids(ofLease: index)
            } else if channel.settle(lease, count: plan.settling(ofLease: index)) {
                deleteLease(channel, lease)
            }
        }
        if !gone.isEmpty { finishElsewhere(channel, gone) }
        return true
    }

    /// Entries whose outcomes Redis wrote while their lease was gone: if a newer lease of this
    /// worker holds them (read again after a failover, `takeOver`), their positions are set there;
    /// the rest were released to the pending list by another worker and are acknowledged there.
    /// Sent until Redis confirms it (`leaseWrite`): lost with a connection, or refused, such a
    /// write left the newer lease with positions nobody would set, released to the pending list
    /// by the safety net (`QueueChannel.leasesLost`), and finished entries pending: both sent twice.
    func finishElsewhere(_ channel: QueueChannel, _ ids: [StreamEntryID]) {
        leaseWrite(channel, .finished(ids))
    }

    /// Keeps `content` until Redis confirms it, and sends it.
    func leaseWrite(_ channel: QueueChannel, _ content: PendingLeaseWrite.Content) {
        channel.moveSerial &+= 1
        let newestLease = channel.leases.reduce(0) { max($0, $1.sequence) }
        let write = PendingLeaseWrite(content: content, newestLease: newestLease, serial: channel.moveSerial)
        channel.pendingLeaseWrites.append(write)
        sendLeaseWrite(channel, write)
    }

    /// Sends the lease writes not confirmed yet whose last send is not in flight (after a
    /// reconnect, at a claim tick).
    func resendLeaseWrites(_ channel: QueueChannel) {
        for write in channel.pendingLeaseWrites where !write.sending { sendLeaseWrite(channel, write) }
    }

    private func sendLeaseWrite(_ channel: QueueChannel, _ write: PendingLeaseWrite) {
        guard let writer = channel.writer, writer.isReady else { return }
        let keys = channel.keys
        let serial = write.serial
        switch write.content {
        case .takenOver(let positions):
            channel.setLeaseWrite(serial, sending: true)
            // One status per lease (-1: gone, nothing to set).
            writer.send(QueueScripts.leaseFinishCommand(leases: keys.leases, positions)) { [weak self, weak channel] result in
                guard let self, let channel else { return }
                _ = self.leaseWriteAnswered(serial, result, channel: channel)
            }
        case .finished(let ids):
            // Planned at each send: a lease may have gone, or been dropped, in between.
            let plan = channel.leases.isEmpty ? nil : leasePlan(ids: ids, channel: channel, newestLease: write.newestLease)
            let pending = plan?.acknowledgement.pending ?? ids
            let leases = plan?.acknowledgement.leases ?? []
            guard !pending.isEmpty || !leases.isEmpty else {
                channel.pendingLeaseWrites.removeAll { $0.serial == serial }
                return
            }
            channel.setLeaseWrite(serial, sending: true)
            writer.send(["MULTI"])
            if !pending.isEmpty { OutcomeBatch.acknowledge(pending, on: writer, keys: keys) }
            if !leases.isEmpty { writer.send(QueueScripts.leaseFinishCommand(leases: keys.leases, leases)) }
            writer.send(["EXEC"]) { [weak self, weak channel] result in
                guard let self, let channel, let replies = self.leaseWriteAnswered(serial, result, channel: channel) else { return }
                if let plan, !leases.isEmpty {
                    // A lease gone meanwhile: its entries are finished elsewhere again, in a new write.
                    _ = self.leasesAcknowledged(plan, reply: replies.last, channel: channel)
                }
            }
        }
    }

    /// Redis answered lease write `serial`: its replies when it is confirmed (and forgotten), nil
    /// when it was refused or lost (it is sent again).
    private func leaseWriteAnswered(_ serial: UInt64, _ result: Result<RedisReply, RedisError>, channel: QueueChannel) -> [RedisReply]? {
        channel.setLeaseWrite(serial, sending: false)
        switch result {
        case .success(.array(let replies)):
            for reply in replies {
                if case .error(let message) = reply { handleRedisError(message, channel: channel); return nil }
            }
            channel.pendingLeaseWrites.removeAll { $0.serial == serial }
            return replies
        case .success(.error(let message)):
            handleRedisError(message, channel: channel)
            return nil
        default:
            return nil  // connection lost: sent again after reconnecting
        }
    }

    /// Deletes the field of `lease`, every position of which Redis confirmed (set, or moved to the
    /// pending list), if Redis has every bit (`QueueScripts.leaseDelete`: after a failover the new
    /// master may not, and the lease then stays, to be released to the pending list at the next
    /// claim tick, as a lease this worker no longer holds).
    /// Not confirmed: a worker that stops first leaves a lease with nothing to release, which the
    /// next release removes.
    func deleteLease(_ channel: QueueChannel, _ lease: LocalLease) {
        channel.writer?.send(["EVAL", QueueScripts.leaseDelete, "1", channel.keys.leases, lease.field])
    }

    /// The leases nobody works on any more become pending entries (`QueueScripts.leaseRelease`):
    /// those of other instances idle past `--claim-idle`, or, with `ownConsumerOnly`, those of this
    /// consumer name left by an earlier process (at once); and at once those of this instance it
    /// no longer knows (a read whose answer the connection lost, a lease whose acknowledgement or
    /// deletion Redis lost), which it then reads back from its pending list. `then` runs when
    /// Redis answered.
    func releaseLeases(_ channel: QueueChannel, ownConsumerOnly: Bool, then: @escaping () -> Void) {
        guard let writer = channel.writer, writer.isReady else { then(); return }
        if !ownConsumerOnly {
            for lease in channel.leasesLost(isHeld: { rules.isHeld($0, queue: channel.index) }) {
                channel.logger.error("a lease still counts entries this worker no longer holds; its unfinished entries go to the pending list and are read again",
                                     metadata: ["lease": "\(lease.field)", "unsettled": "\(lease.unsettled)", "entries": "\(lease.ids.count)"])
            }
        }
        let keys = channel.keys
        let idle = ownConsumerOnly ? Int64.max / 2 : Int64(configuration.claimIdleMilliseconds)
        // Every lease this instance numbered below `top` and does not hold is one it no longer
        // knows. The read in flight is not one: its answer is on the way. The writer sends the
        // deletions of settled leases before this, so none of those is taken for one.
        let top = channel.leaseReadInFlight ?? (leaseSequence &+ 1)
        var arguments = ["EVAL", QueueScripts.leaseRelease, "2", keys.jobs, keys.leases, keys.group,
                         String(idle), leaseInstance, configuration.consumer, "64", String(top)]
        for lease in channel.leases where lease.sequence < top { arguments.append(String(lease.sequence)) }
        writer.send(arguments) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            switch result {
            case .success(.array(let counts)) where counts.count == 3:
                let own = counts[2].integer ?? 0
                if let leases = counts[0].integer, leases > 0, (counts[1].integer ?? 0) > own {
                    channel.logger.info("released the leases of a stopped worker to the pending list",
                                        metadata: ["leases": "\(leases)", "entries": "\((counts[1].integer ?? 0) - own)"])
                }
                if own > 0 {
                    // Entries this worker read but never got (or whose outcomes Redis lost): read
                    // them back from the pending list now, not after --claim-idle.
                    channel.logger.warning("entries of reads whose answer this worker lost go to its pending list and are read again",
                                           metadata: ["entries": "\(own)"])
                    self.readPendingList(channel, from: "0")
                }
            case .success(.error(let message)):
                self.handleRedisError(message, channel: channel)
            default:
                break
            }
            then()
        }
    }
}
