import APNs
import Queue
@_spi(Benchmarks) import Transport
import Worker

/// The worker's whole per-notification path with no socket, no TLS and no Redis, driven the way
/// `QueueWorker` drives it: stream entries (as `XREADGROUP` hands them over) go to
/// `DeliveryRules.entriesArrived` (decode and validate), `nextSend` fills the free stream slots of
/// a real `APNsConnection` (`submit`: slot, headers, nghttp2 HEADERS + DATA), an
/// `InMemoryAPNsResponder` answers over HTTP/2 in memory, the connection classifies each answer,
/// `answered` records it and finishes the job, and after each exchange (a loop tick) every
/// finished entry is taken as an `OutcomeBatch`, encoded as the RESP bytes (`XACK`, in `MULTI`/`EXEC` when there are writes)
/// the worker writes (into a `RedisConnection` that never connects), and `confirmed`.
///
/// Rounds of `entries.count` jobs: each round's entries are confirmed (and released) before the
/// next round takes the same entries in again, so a run of any length needs no new input.
public final class EndToEnd: APNsConnectionDelegate {
    public let loop: EventLoop
    public let connection: APNsConnection
    public let rules: DeliveryRules
    let responder: InMemoryAPNsResponder
    let redis: RedisConnection
    let keys = QueueKeys()
    /// One round's entries, read once.
    public let entries: [StreamRecord]
    /// With `fromReply`: the round's entries as the RESP bytes of an `XREADGROUP` reply, read
    /// again each round by a `RESPReader` onto a tape and taken off it by
    /// `RedisReplyReader.readEntries(tape:)`, as the worker reads them (nil: `entries` as is).
    let reply: [UInt8]?
    let reader: RESPReader
    let tape = RedisReplyTape()
    /// Notifications one round sends (the tokens of its entries).
    public let notificationsPerRound: Int
    public private(set) var accepted = 0
    public private(set) var other = 0
    /// RESP bytes of the outcome batches, all rounds.
    public private(set) var batchBytes = 0
    public private(set) var batches = 0
    private let now: Int64 = 1_717_171_800_000

    /// `tokensPerJob` 1: the usual job (`token`); more: a fan-out job (`tokens`, comma-separated).
    /// `collapseID`: every job carries `collapse_id` (the rules then track collapse keys).
    /// `fromReply`: each round starts from the bytes of an `XREADGROUP` reply (see `reply`).
    public init(jobs: Int = 1000, tokensPerJob: Int = 1, collapseID: Bool = false, streams: Int = 1000, fromReply: Bool = false) throws {
        var records: [StreamRecord] = []
        for job in 0..<jobs {
            var fields: [(name: String, value: [UInt8])] = []
            let tokens = (0..<tokensPerJob).map { Fixtures.token(job * tokensPerJob + $0) }
            if tokensPerJob == 1 {
                fields.append((JobField.token, Array(tokens[0].utf8)))
            } else {
                fields.append((JobField.tokens, Array(tokens.joined(separator: ",").utf8)))
            }
            fields.append((JobField.payload, Fixtures.payload256))
            fields.append((JobField.pushType, Array("alert".utf8)))
            fields.append((JobField.priority, Array("10".utf8)))
            if collapseID { fields.append((JobField.collapseID, Array("order-4711".utf8))) }
            records.append(StreamRecord(id: StreamEntryID(milliseconds: 1_717_171_717_171, sequence: UInt64(job)), fields: fields))
        }
        entries = records
        reader = RESPReader(tape: tape)
        reply = fromReply ? EndToEnd.xreadgroupReply(key: keys.jobs, records) : nil
        notificationsPerRound = jobs * tokensPerJob
        rules = DeliveryRules(policy: DeliveryPolicy(), apps: [(name: WorkerApp.defaultName, defaults: Fixtures.jobDefaults)],
                              queues: ["herald"], seed: 7)
        loop = try EventLoop()
        connection = APNsConnection(
            loop: loop, host: "api.push.apple.com", port: 443,
            tlsContext: try TLSContext(clientTrusting: nil), maxStreams: streams)
        responder = InMemoryAPNsResponder(loop: loop, status: 200, maxConcurrentStreams: UInt32(streams))
        redis = RedisConnection(loop: loop, endpoint: RedisEndpoint(host: "127.0.0.1", port: 6379))
        connection.delegate = self
        connection.prefetcher = rules
        connection.setAuthorization(jwt: String(decoding: Fixtures.authorization.dropFirst(7), as: UTF8.self), generation: 1)
        try connection.startInMemory()
        try responder.startInMemory()
        for _ in 0..<4 { exchange() }
        precondition(connection.streamSlots == streams, "SETTINGS did not arrive: \(connection.streamSlots) slots")
    }

    /// Moves whatever each side has queued to the other; returns the bytes moved.
    @discardableResult
    func exchange() -> Int {
        let sent = connection.sendInMemory { responder.receiveInMemory($0) }
        let received = responder.sendInMemory { connection.receiveInMemory($0) }
        return sent + received
    }

    /// Runs whole rounds until at least `notifications` were answered; returns how many were.
    @discardableResult
    public func run(_ notifications: Int) -> Int {
        var done = 0
        while done < notifications {
            round()
            done += notificationsPerRound
        }
        return done
    }

    /// One round: every entry taken in, sent, answered, finished, written and confirmed.
    public func round() {
        let answeredBefore = accepted + other
        rules.entriesArrived(reply.map(readReply) ?? entries, queue: 0, deliveries: nil, now: now)
        while true {
            fillSlots()
            let moved = exchange()
            writeBatches()
            if rules.heldCount == 0 { break }
            if moved == 0 { fatalError("end-to-end pipeline stalled: \(accepted + other - answeredBefore) answered, \(rules.heldCount) held") }
        }
        precondition(accepted + other - answeredBefore == notificationsPerRound, "a round lost notifications")
    }

    /// `[[key, [[id, [field, value, …]], …]]]` in RESP, as Redis answers `XREADGROUP`.
    static func xreadgroupReply(key: String, _ records: [StreamRecord]) -> [UInt8] {
        var bytes: [UInt8] = []
        func bulk(_ value: [UInt8]) { bytes += Array("$\(value.count)\r\n".utf8) + value + [0x0D, 0x0A] }
        bytes += Array("*1\r\n*2\r\n".utf8)
        bulk(Array(key.utf8))
        bytes += Array("*\(records.count)\r\n".utf8)
        for record in records {
            bytes += Array("*2\r\n".utf8)
            bulk(Array(record.id.description.utf8))
            bytes += Array("*\(2 * record.fields.count)\r\n".utf8)
            for field in record.fields { bulk(FieldName.bytes(field.name)); bulk(field.value) }
        }
        return bytes
    }

    /// The worker's read of one reply: RESP onto the tape, the entries off it.
    private func readReply(_ bytes: [UInt8]) -> [StreamRecord] {
        tape.reset()
        var offset = 0
        let complete = bytes.withUnsafeBytes { (try? reader.read($0, from: &offset)) ?? false }
        guard complete, case .success(let records) = RedisReplyReader.readEntries(tape: tape) else { fatalError("the canned XREADGROUP reply did not read back") }
        return records
    }

    /// `QueueWorker.pump`: the free slots get the lane's next notifications.
    private func fillSlots() {
        var free = connection.streamSlots
        while free > 0, let send = rules.nextSend(lane: 0, now: now) {
            let context = send.context
            guard connection.submit((consume send).request) else {
                rules.sendRefused(context: context, lane: 0)
                break
            }
            free -= 1
        }
    }

    /// `QueueWorker.endOfTick` and `write`: each batch as RESP bytes, then EXEC's confirmation.
    private func writeBatches() {
        while let batch = rules.takeBatch() {
            batch.send(on: redis, keys: keys, maxLength: 100_000) { _ in }
            redis.takeOutputInMemory { batchBytes += $0.count }
            batches += 1
            rules.confirmed(batch.sequence)
        }
    }

    public func connectionIsReady(_ connection: APNsConnection) {}
    public func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
        if outcome == .accepted { accepted += 1 } else { other += 1 }
        _ = rules.answered(context: request.context, attempts: request.attempts + 1, outcome: outcome, now: now)
    }
    public func connectionSlotsChanged(_ connection: APNsConnection) {}
    public func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) {
        fatalError("in-memory connection closed: \(String(describing: error))")
    }
}
