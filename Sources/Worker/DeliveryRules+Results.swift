import APNs
import Queue

/// Receipts: the results-stream entries `DeliveryRules` adds to a job's finishing writes when
/// results are on for its queue or the job asks (`receipt`). Nothing here runs, and nothing is
/// allocated, for a job without receipts: each call checks `record.receipts` first.
///
/// One entry per notification outcome, written in the same MULTI/EXEC as the job's
/// acknowledgement: accepted, dead token, dead-lettered (any reason, `expired` included), or
/// superseded. A notification that goes to the retry set gets no entry then; it gets one when
/// its retry ends (the retry entry carries the job's `receipt`).
extension DeliveryRules {
    /// Whether every outcome of `queue` goes to its results stream.
    func wantsResults(queue: Int) -> Bool {
        queue < resultsByQueue.count && resultsByQueue[queue]
    }

    func noteSuperseded(_ record: JobRecord, tokenIndex: Int, now: Int64) {
        guard record.receipts else { return }
        noteResult(record, tokenIndex: tokenIndex, status: ResultEntry.Status.superseded, reason: nil, httpStatus: 0,
                   uniqueID: nil, attempts: record.attemptsBefore(tokenIndex), now: now)
    }

    func noteResult(_ record: JobRecord, tokenIndex: Int, status: String, reason: String?, httpStatus: Int,
                    uniqueID: UUIDBits?, attempts: Int, now: Int64) {
        guard record.receipts else { return }
        let job = record.job
        let token = job.tokens[tokenIndex]
        record.results.append(ResultEntry.Draft(
            job: job.origin, token: token, index: job.tokens.count + job.invalidTokens.count > 1 ? tokenIndex : nil,
            status: status, reason: reason, httpStatus: httpStatus, apnsID: job.notification(forToken: token).apnsID,
            uniqueID: uniqueID, at: now, attempts: attempts))
    }

    /// One result per dead-lettered token of a finishing job. A token refused by validation is
    /// not among the job's sendable tokens: it has no index and no apns-id.
    func addDeadLetterResults(_ record: JobRecord, now: Int64) {
        guard record.receipts else { return }
        let job = record.job
        let fanOut = job.tokens.count + job.invalidTokens.count > 1
        // A fan-out job may dead-letter thousands of tokens: find their indices in one table.
        var positions: [String: Int] = [:]
        if fanOut && record.deadLetters.count > 8 {
            for (index, token) in job.tokens.enumerated() where positions[token] == nil { positions[token] = index }
        }
        for letter in record.deadLetters {
            let index = fanOut ? (positions.isEmpty ? job.tokens.firstIndex(of: letter.token) : positions[letter.token]) : 0
            let sendable = index != nil && !job.tokens.isEmpty
            record.results.append(ResultEntry.Draft(
                job: job.origin, token: letter.token, index: fanOut ? index : nil, status: ResultEntry.Status.deadLettered,
                reason: letter.reason, httpStatus: letter.status,
                apnsID: sendable ? job.notification(forToken: letter.token).apnsID : nil,
                uniqueID: nil, at: now, attempts: letter.attempts))
        }
    }

    /// Results for an entry dead-lettered whole (it could not be decoded, names an unknown app,
    /// …): one per token its `token` and `tokens` fields name (or one without a token), when its
    /// queue has results on or the entry asks with `receipt`.
    func appendEntryResults(to writes: inout [OutcomeWrite], entryID: StreamEntryID, queue: Int,
                            fields: [(name: String, value: [UInt8])], reason: String, now: Int64) {
        var asked = wantsResults(queue: queue)
        var tokens: [String] = []
        var origin: String? = nil
        for (name, value) in fields {
            switch name {
            case JobField.receipt: if value.elementsEqual("1".utf8) || value.elementsEqual("true".utf8) { asked = true }
            case JobField.token: if !value.isEmpty { tokens.insert(String(decoding: value, as: UTF8.self), at: 0) }
            case JobField.tokens:
                for part in value.split(separator: 0x2C) {
                    let trimmed = part.drop { $0 == 0x20 }.reversed().drop { $0 == 0x20 }.reversed()
                    if !trimmed.isEmpty { tokens.append(String(decoding: trimmed, as: UTF8.self)) }
                }
            case JobField.origin: origin = String(decoding: value, as: UTF8.self)
            default: break
            }
        }
        guard asked else { return }
        // A huge or hostile entry: results for at most 10,000 tokens (a job's limit), each cut to 200 characters.
        if tokens.isEmpty { tokens = [""] }
        let job = origin.flatMap { $0.isEmpty ? nil : $0 } ?? entryID.description
        for (index, token) in tokens.prefix(10_000).enumerated() {
            writes.append(.result(ResultEntry.Draft(
                job: job, token: String(token.prefix(200)), index: tokens.count > 1 ? index : nil, status: ResultEntry.Status.deadLettered,
                reason: reason, httpStatus: 0, apnsID: nil, uniqueID: nil, at: now, attempts: 0)))
        }
    }
}
