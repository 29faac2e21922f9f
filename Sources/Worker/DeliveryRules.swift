import APNs
import Queue
import Transport

/// The limits `DeliveryRules` applies: when a notification is resent at once, retried later, or
/// given up on. One policy for every counted attempt (the pool resends on its own only what APNs
/// provably never processed, and a 403 ExpiredProviderToken once with a fresh token).
public struct DeliveryPolicy: Sendable {
    /// Attempts per notification before it is dead-lettered (`--max-attempts`).
    public var maxAttempts = 8
    /// Deliveries of one entry (its pending-list count) before it is dead-lettered (`--max-deliveries`).
    public var maxDeliveries = 10
    /// Counted transport and 5xx failures resent at once on the pool (attempts up to this many)
    /// before the retry set takes over.
    public var immediateRetries = 2
    /// How long jobs of an app whose credentials APNs refused wait in the retry set before the next look.
    public var credentialsRetryMilliseconds: Int64 = 60_000
    /// How long a notification waits after 429 TooManyProviderTokenUpdates.
    public var tokenUpdatesThrottledMilliseconds: Int64 = 60_000
    /// Device tokens remembered as backed off after 429 TooManyRequests (`--token-backoff-capacity`; 0: off).
    public var tokenBackoffCapacity = WorkerConfiguration.defaultTokenBackoffCapacity

    public init() {}

    public init(_ configuration: WorkerConfiguration) {
        maxAttempts = configuration.maxAttempts
        maxDeliveries = configuration.maxDeliveries
        immediateRetries = configuration.immediateRetries
        tokenBackoffCapacity = configuration.tokenBackoffCapacity
    }
}

/// One notification to hand to an app's pool: the action `DeliveryRules.nextSend` returns.
///
/// It carries the request itself, which names the job for its template: the worker hands
/// `request` to the pool as it is (`(consume send).request`), and no copy of the notification is
/// made on the way (each copy retained and released every reference in it).
public struct NotificationSend: Sendable {
    /// What the pool sends: the notification, its context and its attempts so far.
    public var request: PendingRequest
    /// The stream entry the notification came from.
    public let entryID: StreamEntryID

    /// `job index << 16 | token index`: handed back with APNs' answer.
    public var context: UInt64 { request.context }
    public var notification: Notification { request.notification }
    /// Attempts spent before this send.
    public var attempts: Int { request.attempts }
}

/// Herald's delivery rules as one state machine with no socket, timer or Redis in it.
///
/// Events in: entries read or claimed (with their delivery counts), a free stream slot on an
/// app's pool (`nextSend`), APNs' answer per notification, an app's credentials halted or
/// resumed, drain, the end of a loop tick, a batch of writes confirmed, and a Redis reconnect.
/// Actions out: the next notification for an app's pool, and once per tick one `OutcomeBatch`
/// holding every finished entry's writes (feedback, dead letters, retry-set members) with its
/// acknowledgement. Wall-clock time comes in with each event as `now` (ms since the epoch).
///
/// The rules: every notification ends in exactly one outcome (accepted, dead token, dead-lettered
/// with a reason, superseded, or back in the retry set); an entry is acknowledged only in the
/// batch that writes its outcomes, and stays held (never taken in again) until that batch is
/// confirmed; nothing is sent or retried once its apns-expiration has passed; no notification
/// spends more than `maxAttempts`; a credentials fault never spends an attempt.
///
/// `QueueWorker` drives it on its loop; the tests drive it with random event sequences. No Task,
/// closure or avoidable allocation per notification: tokens are `UInt64` contexts in per-app queues.
public final class DeliveryRules {
    public let policy: DeliveryPolicy
    /// What the rules did, over every queue.
    public var counters: WorkerCounters {
        queueCounters.count == 1 ? queueCounters[0] : queueCounters.dropFirst().reduce(queueCounters[0], +)
    }
    /// What the rules did, per queue (in the order the queues were given).
    public internal(set) var queueCounters: [WorkerCounters]
    public private(set) var draining = false
    /// Per queue (by index), whether every notification's outcome is written to the queue's
    /// results stream; jobs with `receipt` get theirs written either way. Empty: none.
    public var resultsByQueue: [Bool] = []
    /// Per queue (the rules' indices), whether it is a queue's urgent stream: its tokens wait in
    /// their app's urgent line and its retries go back to the urgent stream. Empty: none is.
    public var urgentQueues: [Bool] = []

    var lanes: [Lane]
    private let laneByName: [String: Int]
    /// `laneByName[WorkerApp.defaultName]`, looked up once: most jobs name no app.
    private let defaultLaneIndex: Int?
    /// An app with both APNs environments: its production lane's index → its sandbox lane's
    /// (a lane no job names; it only takes what production called a bad device token).
    let sandboxLanes: [Int: Int]
    /// An app with a broadcast host: its lane's index → the lane of its broadcast pool, where its
    /// broadcast jobs wait and are sent (see DeliveryRules+Broadcast).
    let broadcastLanes: [Int: Int]
    /// Tokens sandbox accepted after production called them bad: sent straight to sandbox.
    var sandboxTokens = BoundedTokenSet(capacity: DeliveryRules.sandboxTokenCapacity)
    /// Each app's job defaults per queue (`[queue][lane]`): the apns-id namespace is the queue's name.
    private let defaultsByQueue: [[JobDefaults]]
    private var jobs: [JobRecord?] = []
    private var freeJobIndices: [Int] = []
    /// Records of finished jobs, reused for the next jobs read (one allocation less per job).
    /// Never more than the table has slots: each stands for one finished job.
    private var freeRecords: [JobRecord] = []
    /// The address of each of `freeRecords`' finished jobs, in step with it: the prefetch hints
    /// read these instead of the records, which have left the caches too (reading one stalled,
    /// and binding it to a local retained it, a write to its cold line).
    private var freeJobAddresses: [UnsafeRawPointer] = []
    /// Per queue, entries taken in and not yet confirmed acknowledged: re-reading the pending
    /// list or a claim must not take them in (and send them) again. Per queue because two streams
    /// may hold the same entry id.
    private var heldEntries: [StreamEntryIDSet]
    /// Collapse ids are compared within a queue (entry ids order updates only within one stream;
    /// producers that shard by device token keep a token's updates in one queue).
    private var queuedCollapse: [[CollapseKey: UInt64]]
    private var acceptedCollapse: [[CollapseKey: StreamEntryID]]
    /// Per queue, entries finished since the last batch of that queue.
    private var finishing: [[EntryOutcome]]
    private var finishingCount = 0
    /// The queue whose batch `takeBatch` looks at first.
    private var nextBatchQueue = 0
    public private(set) var unconfirmed: [OutcomeBatch] = []
    /// Emptied entry arrays of confirmed batches, kept with their capacity: the next batch takes
    /// one instead of allocating (a batch array is kilobytes, and glibc consolidates its free
    /// lists on each allocation that large: 2 % of a draining worker's time before this).
    private var spareEntryArrays: [[EntryOutcome]] = []
    private var nextBatchSequence: UInt64 = 1
    var random: SplitMix64
    /// Device tokens backing off after 429 TooManyRequests: their other notifications wait it out
    /// in the retry set instead of being sent into another 429 (see `TokenBackoffTable`).
    public internal(set) var tokenBackoff: TokenBackoffTable

    /// A line of token contexts: an array read from `head` on, so popping is O(1) and a resend
    /// can go first again without moving the rest. Stored inline in its `Lane`: no allocation
    /// or indirection per pop.
    struct ContextQueue {
        private var items: [UInt64] = []
        private var head = 0

        var count: Int { items.count - head }
        var isEmpty: Bool { head >= items.count }

        mutating func append(_ context: UInt64) { items.append(context) }

        mutating func pop() -> UInt64? {
            guard head < items.count else { return nil }
            head += 1
            let context = items[head - 1]
            if head == items.count {
                items.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 65_536 {
                // The consumed prefix is dropped now and then, not on every pop.
                items.removeFirst(head)
                head = 0
            }
            return context
        }

        /// The context `ahead` places behind the next one `pop` returns (0: that one), if any.
        func peek(ahead: Int) -> UInt64? {
            let position = head + ahead
            return position < items.count ? items[position] : nil
        }

        /// Puts `context` first in line.
        mutating func pushFront(_ context: UInt64) {
            if head > 0 {
                head -= 1
                items[head] = context
            } else {
                items.insert(context, at: 0)
            }
        }

        /// Everything waiting, in order; the line is empty afterwards.
        mutating func takeAll() -> ArraySlice<UInt64> {
            let taken = items[head...]
            items = []
            head = 0
            return taken
        }
    }

    /// An app's queue of tokens waiting for a stream slot, and whether APNs refused its credentials.
    struct Lane {
        let name: String
        let defaults: JobDefaults
        var queue = ContextQueue()
        var halted = false
        /// Tokens of jobs read from an urgent stream (`JobLane.urgent`): served before `queue`, so
        /// an urgent job never waits behind the bulk tokens already read.
        var urgent = ContextQueue()
        /// Urgent tokens popped in a row while bulk tokens waited: after `urgentRunLimit` one bulk
        /// token goes, so a flood of urgent jobs leaves bulk at least a quarter of the sends.
        var urgentRun = 0

        var queued: Int { queue.count + urgent.count }

        mutating func pop() -> UInt64? {
            if !urgent.isEmpty, queue.isEmpty || urgentRun < DeliveryRules.urgentRunLimit {
                urgentRun += 1
                return urgent.pop()
            }
            urgentRun = 0
            return queue.pop()
        }

        /// Puts a token first in line (a resend, or one the pool could not take).
        mutating func pushFront(_ context: UInt64) { queue.pushFront(context) }

        /// A context `ahead` places behind the next `pop`, for prefetch hints: exact while one
        /// line serves, a guess when urgent and bulk tokens take turns.
        func peek(ahead: Int) -> UInt64? {
            urgent.isEmpty ? queue.peek(ahead: ahead) : urgent.peek(ahead: ahead)
        }

        mutating func takeAll() -> ArraySlice<UInt64> {
            var taken = urgent.takeAll()
            taken.append(contentsOf: queue.takeAll())
            return taken
        }
    }

    /// One job's progress: how many tokens still wait for an outcome, and what the others got.
    ///
    /// Recycled (`freeRecords`): a finished job's record holds the next job read, through
    /// `reuse(job:lane:queue:)`, which must reset every stored property (add new ones there).
    final class JobRecord {
        // The fields the usual answer (accepted, no collapse id) reads come first, so it touches
        // the record's first cache lines and nothing else: what it needs of the job is copied
        // here, and what only unusual outcomes use lives in `rare`, made on first use.
        private(set) var tokenCount: Int
        /// The attempts the job's entry states (never below 0).
        private(set) var readAttempts: Int
        var remaining: Int
        private(set) var lane: Int
        /// The queue (index) the job was read from: its outcomes are written to that queue's keys.
        private(set) var queue: Int
        private(set) var enqueuedAt: Int64
        private var rare: Rare?
        private(set) var hasCollapseID: Bool
        /// Whether this job's outcomes go to the results stream (its queue's setting, or its `receipt`).
        var receipts = false
        private(set) var entryID: StreamEntryID
        /// `job`'s address, for the prefetch hints (read without retaining anything).
        private(set) var jobAddress: UnsafeRawPointer
        /// The job; a finished job stays until the record is reused (freeing jobs as answers come,
        /// in bursts, sent glibc's malloc and free down their slow paths, coalescing chunks).
        private(set) var job: Job {
            didSet { jobAddress = UnsafeRawPointer(Unmanaged.passUnretained(job).toOpaque()) }
        }
        /// Accepted, superseded and dead-token outcomes so far, when `receipts` (dead letters are
        /// turned into results when the job finishes).
        var results: [ResultEntry.Draft] = []

        /// What a job whose every token is simply accepted never needs.
        final class Rare {
            /// Per token, set when a newer job with its collapse id arrived; empty until one does.
            var superseded: [Bool] = []
            /// Per token, attempts spent when it is resent at once; empty until one is.
            var tokenAttempts: [Int] = []
            var feedback: [FeedbackEntry.Draft] = []
            /// Each with the attempts its token spent: a letter states the most of its tokens'.
            var deadLetters: [(token: String, reason: String, message: String, status: Int, attempts: Int)] = []
            var retryTokens: [String] = []
            /// The most attempts a token in `retryTokens` spent: the retry entry states it, so a
            /// token parked unsent does not come back charged with another token's failures.
            var retryAttempts = 0
            var retryDelay: Int64 = 0
            /// Tokens put back without a counted failure (drain, refused credentials): in
            /// `retryTokens`, not retries.
            var handedBack = 0
            /// Per token, set when it was sent to the app's other APNs environment; empty until one is.
            var onOtherEnvironment: [Bool] = []
        }

        /// `rare`, made when first written to.
        private var rareForWriting: Rare {
            if let rare { return rare }
            let made = Rare()
            rare = made
            return made
        }

        /// Whether every token so far was accepted or superseded with nothing to write (the
        /// usual job): no feedback, dead letter, retry or result.
        var onlyAcknowledgement: Bool {
            results.isEmpty && (rare.map { $0.feedback.isEmpty && $0.deadLetters.isEmpty && $0.retryTokens.isEmpty } ?? true)
        }

        var feedback: [FeedbackEntry.Draft] {
            get { rare?.feedback ?? [] }
            _modify { yield &rareForWriting.feedback }
        }
        var deadLetters: [(token: String, reason: String, message: String, status: Int, attempts: Int)] {
            get { rare?.deadLetters ?? [] }
            _modify { yield &rareForWriting.deadLetters }
        }
        var retryTokens: [String] {
            get { rare?.retryTokens ?? [] }
            _modify { yield &rareForWriting.retryTokens }
        }
        var retryAttempts: Int {
            get { rare?.retryAttempts ?? 0 }
            _modify { yield &rareForWriting.retryAttempts }
        }
        var retryDelay: Int64 {
            get { rare?.retryDelay ?? 0 }
            _modify { yield &rareForWriting.retryDelay }
        }
        var handedBack: Int {
            get { rare?.handedBack ?? 0 }
            _modify { yield &rareForWriting.handedBack }
        }
        var onOtherEnvironment: [Bool] {
            get { rare?.onOtherEnvironment ?? [] }
            _modify { yield &rareForWriting.onOtherEnvironment }
        }

        init(job: Job, lane: Int, queue: Int) {
            tokenCount = job.tokens.count
            readAttempts = max(0, job.attempts)
            remaining = tokenCount
            self.lane = lane
            self.queue = queue
            enqueuedAt = job.enqueuedAt
            hasCollapseID = job.template.collapseID != nil
            entryID = job.entryID
            jobAddress = UnsafeRawPointer(Unmanaged.passUnretained(job).toOpaque())
            self.job = job
        }

        /// This record, whose job finished, as a fresh record of `job`: every property as `init` sets it.
        func reuse(job: Job, lane: Int, queue: Int) {
            self.job = job
            entryID = job.entryID
            enqueuedAt = job.enqueuedAt
            tokenCount = job.tokens.count
            readAttempts = max(0, job.attempts)
            hasCollapseID = job.template.collapseID != nil
            self.lane = lane
            self.queue = queue
            remaining = tokenCount
            receipts = false
            // The usual job left these empty: an assignment would still release and retain the
            // empty array's storage, a runtime call.
            if rare != nil { rare = nil }
            if !results.isEmpty { results = [] }
        }

        func isSuperseded(_ tokenIndex: Int) -> Bool {
            guard let rare, !rare.superseded.isEmpty else { return false }
            return rare.superseded[tokenIndex]
        }

        func markSuperseded(_ tokenIndex: Int) {
            let rare = rareForWriting
            if rare.superseded.isEmpty { rare.superseded = Array(repeating: false, count: tokenCount) }
            rare.superseded[tokenIndex] = true
        }

        /// Whether `tokens[index]` is `token` with `collapseID`: a collapse entry still names this job's token
        /// (and not a token of a job that since took over the same slot).
        func holds(token: DeviceToken, collapseID: String, at index: Int) -> Bool {
            index < job.tokens.count && job.tokens.token(at: index) == token && job.template.collapseID == collapseID
        }

        func attemptsBefore(_ tokenIndex: Int) -> Int {
            guard let rare, !rare.tokenAttempts.isEmpty else { return readAttempts }
            return rare.tokenAttempts[tokenIndex]
        }

        func setAttempts(_ tokenIndex: Int, _ attempts: Int) {
            let rare = rareForWriting
            if rare.tokenAttempts.isEmpty { rare.tokenAttempts = Array(repeating: readAttempts, count: tokenCount) }
            rare.tokenAttempts[tokenIndex] = attempts
        }
    }

    /// `apps`: each app's name (a job's `app` field) and job defaults, in lane order. `queues`:
    /// the names of the queues the jobs come from, in the order their indices name them (each
    /// queue's name is the apns-id namespace of its jobs); nil for one queue whose namespace the
    /// apps' defaults already carry.
    /// `sandboxTwins`: for an app with both APNs environments, its lane → the lane of its sandbox
    /// pool (named in `apps` too, never by a job).
    public init(policy: DeliveryPolicy, apps: [(name: String, defaults: JobDefaults)], queues: [String]? = nil, seed: UInt64,
                sandboxTwins: [Int: Int] = [:], broadcastTwins: [Int: Int] = [:]) {
        self.policy = policy
        sandboxLanes = sandboxTwins
        broadcastLanes = broadcastTwins
        lanes = apps.map { Lane(name: $0.name, defaults: $0.defaults) }
        if let queues, !queues.isEmpty {
            defaultsByQueue = queues.map { queue in
                apps.map { app in
                    var defaults = app.defaults
                    defaults.apnsIDNamespace = queue
                    return defaults
                }
            }
        } else {
            defaultsByQueue = [apps.map(\.defaults)]
        }
        let queueCount = defaultsByQueue.count
        queueCounters = Array(repeating: WorkerCounters(apps: apps.count), count: queueCount)
        heldEntries = (0..<queueCount).map { _ in StreamEntryIDSet(capacity: 1024) }
        queuedCollapse = Array(repeating: [:], count: queueCount)
        acceptedCollapse = Array(repeating: [:], count: queueCount)
        finishing = Array(repeating: [], count: queueCount)
        var names: [String: Int] = [:]
        let twins = Set(sandboxTwins.values).union(broadcastTwins.values)
        for (index, app) in apps.enumerated() where names[app.name] == nil && !twins.contains(index) { names[app.name] = index }
        laneByName = names
        defaultLaneIndex = names[WorkerApp.defaultName]
        random = SplitMix64(seed: seed)
        tokenBackoff = TokenBackoffTable(capacity: policy.tokenBackoffCapacity)
    }

    // MARK: state read by the consumer

    /// Tokens waiting in `lane` for a stream slot.
    public func queued(lane: Int) -> Int { lanes[lane].queued }

    /// Tokens waiting in every lane.
    public var queuedTokens: Int { lanes.reduce(0) { $0 + $1.queued } }

    /// The queues the rules take entries from.
    public var queueCount: Int { defaultsByQueue.count }

    public func isHeld(_ id: StreamEntryID, queue: Int = 0) -> Bool { heldEntries[queue].contains(id) }

    /// Entries held: taken in and not yet confirmed acknowledged.
    public var heldCount: Int { heldEntries.reduce(0) { $0 + $1.count } }

    /// Entries of `queue` held.
    public func heldCount(queue: Int) -> Int { heldEntries[queue].count }

    /// Finished entries whose batch was not yet taken.
    public var hasOutcomesToWrite: Bool { finishingCount > 0 }

    /// Every outcome taken and confirmed written (drain waits for this and for the pool).
    public var writesSettled: Bool { finishingCount == 0 && unconfirmed.isEmpty }

    public func isHalted(lane: Int) -> Bool { lanes[lane].halted }

    // MARK: events: entries in

    /// Entries read (`deliveries` nil) or claimed from another consumer (with their delivery
    /// counts): decodes them, dead-letters the malformed and the hopeless, queues the rest.
    public func entriesArrived(_ entries: [StreamRecord], queue: Int = 0, deliveries: [StreamEntryID: Int]?, now: Int64) {
        // The records these entries take hold finished jobs, freed as each is taken, long after
        // they left the caches: a job's lines are requested one entry before its record is
        // taken, the objects it owns (which needs those lines) as that entry is read, before
        // it is decoded; so freeing it waits on neither.
        prefetchFinishedJob(upcoming: 0)
        // By index, each entry read where it lies: `for entry in` copied each one (a retain and
        // a release of its buffers), and so did binding its fields to a local.
        if !entries.isEmpty { heldEntries[queue].prefetch(entries[0].id) }
        for position in entries.indices {
            prefetchFinishedJob(upcoming: 1)
            prefetchFinishedJobsObjects()
            if position + 1 < entries.count { heldEntries[queue].prefetch(entries[position + 1].id) }
            let entryID = entries[position].id
            // Held from here on: every path below ends in a queued token or an outcome, and the
            // entry leaves `heldEntries` only when its batch is confirmed.
            guard heldEntries[queue].insert(entryID) else { continue }
            if deliveries != nil { queueCounters[queue].jobsReclaimed += 1 }
            guard !entries[position].packed.isEmpty else {
                // Deleted while pending: nothing to deliver; acknowledge it.
                addFinishing(EntryOutcome(entryID: entryID), queue: queue)
                continue
            }
            queueCounters[queue].jobsRead += 1
            let appName = entries[position].packed.firstValue(JobField.app).map { String(decoding: $0, as: UTF8.self) }
            let laneIndex: Int?
            if let appName, !appName.isEmpty { laneIndex = laneByName[appName] } else { laneIndex = defaultLaneIndex }
            if let cut = entries[position].truncated.first {
                // An outsized value (see RESPReader): never sent; the dead letter keeps its first
                // bytes, its full length and its SHA-256.
                let what = cut.byBudget ? "it holds more than the 32 MiB Herald reads of one entry"
                    : cut.field.map { "field \(DeadLetterText.quoted($0)) holds \(cut.length) bytes, more than the 3 MiB Herald reads of one value" }
                    ?? "it has \(cut.length / 2) fields, more than the 65,536 Herald reads of one entry"
                // Counted for the job's app only when its `app` field was read whole.
                let appWasRead = cut.field != nil && cut.field != JobField.app && !cut.byBudget
                deadLetterEntry(entryID, queue: queue, lane: appWasRead ? laneIndex : nil, fields: entries[position].fields, reason: "field_too_large",
                                message: "The job is too large to read: \(what). The dead letter keeps the value's first 4,096 bytes, its full length (truncated_length) and its SHA-256 (truncated_sha256).",
                                now: now,
                                extra: [("truncated_field", cut.field ?? ""), ("truncated_length", String(cut.length)), ("truncated_sha256", cut.sha256 ?? "")])
                continue
            }
            if let deliveries, let count = deliveries[entryID], count > policy.maxDeliveries {
                deadLetterEntry(entryID, queue: queue, lane: laneIndex, fields: entries[position].fields, reason: "max_deliveries",
                                message: "The entry was delivered to workers \(count) times without an outcome (more than --max-deliveries \(policy.maxDeliveries)); a worker may be crashing on it.",
                                now: now)
                continue
            }
            guard let laneIndex else {
                deadLetterEntry(entryID, queue: queue, lane: nil, fields: entries[position].fields, reason: "unknown_app",
                                message: "The job names app \(DeadLetterText.quoted(appName ?? "")), which this worker is not configured for (apps: \(lanes.map(\.name).joined(separator: ", "))).",
                                now: now)
                continue
            }
            switch JobDecoder.decode(entryID: entryID, fields: entries[position].packed, defaults: defaultsByQueue[queue][laneIndex]) {
            case .failure(let error):
                deadLetterEntry(entryID, queue: queue, lane: laneIndex, fields: entries[position].fields, reason: error.code, message: error.description, now: now)
            case .success(let job):
                queueCounters[queue].unknownFields += job.unknownFields
                admit(job, lane: laneIndex, queue: queue, now: now)
            }
        }
    }

    private func admit(_ job: Job, lane laneIndex: Int, queue: Int, now: Int64) {
        // One compare for the usual job (no deliver_at, or one already held for: nil).
        if let deliverAt = job.deliverAt, deliverAt > now, job.attempts < policy.maxAttempts {
            hold(job, until: deliverAt, lane: laneIndex, queue: queue, now: now)
            return
        }
        let record: JobRecord
        if let free = freeRecords.popLast() {
            freeJobAddresses.removeLast()
            assert(freeJobAddresses.count == freeRecords.count, "the free records and their jobs' addresses go in step")
            free.reuse(job: job, lane: laneIndex, queue: queue)
            record = free
        } else {
            record = JobRecord(job: job, lane: laneIndex, queue: queue)
        }
        record.receipts = wantsResults(queue: queue) || job.wantsReceipt
        let index: Int
        if let free = freeJobIndices.popLast() {
            index = free
            jobs[index] = record
        } else {
            index = jobs.count
            jobs.append(record)
        }
        for token in job.invalidTokens {
            record.deadLetters.append((token.token, token.error.code, token.error.description, 0, record.attemptsBefore(0)))
        }
        let origin = job.originID
        let expired = DeliveryRules.hasExpired(job.template.expiration, by: now)
        let readAttempts = max(0, job.attempts)
        let spent = readAttempts >= policy.maxAttempts
        let sendingLane = admittedLane(job, lane: laneIndex)
        for tokenIndex in 0..<job.tokens.count {
            // Read where it is needed: the usual token (no collapse id, not expired) never is.
            var token: String { job.tokens[tokenIndex] }
            let context = UInt64(index) << 16 | UInt64(tokenIndex)
            if expired {
                // Already past its apns-expiration when read: never sent.
                record.deadLetters.append((token, "expired", DeliveryRules.expiredWhenReadMessage(job.template.expiration), 0, readAttempts))
                record.remaining -= 1
                continue
            }
            if spent {
                // Its entry already states every attempt allowed (e.g. --max-attempts was lowered): never sent again.
                record.deadLetters.append((token, "max_attempts",
                                           "The job had spent \(readAttempts) attempts when read (--max-attempts \(policy.maxAttempts)); it was not sent again.", 0, readAttempts))
                record.remaining -= 1
                continue
            }
            let collapseKey = job.template.collapseID.map { DeliveryRules.collapseKey($0, job.tokens.token(at: tokenIndex)) }
            if let collapseKey, let newest = acceptedCollapse[queue][collapseKey], newest > origin {
                // A newer update with this collapse id already reached the device.
                queueCounters[queue].apps[laneIndex].superseded += 1
                noteSuperseded(record, tokenIndex: tokenIndex, now: now)
                record.remaining -= 1
                continue
            }
            if lanes[sendingLane].halted || draining {
                // Refused credentials park the job (no attempt spent); a draining worker hands it back.
                // Never queued, so never in `queuedCollapse`: nothing newer may supersede it there.
                park(record, token: token, attempts: readAttempts, delay: draining ? 0 : policy.credentialsRetryMilliseconds, now: now)
                record.remaining -= 1
                continue
            }
            if let collapseKey, let collapseID = job.template.collapseID {
                let key = collapseKey
                if let older = queuedCollapse[queue][key], let olderRecord = jobRecord(for: older),
                   olderRecord.holds(token: key.token, collapseID: collapseID, at: Int(older & 0xFFFF)) {
                    if olderRecord.job.originID < origin {
                        olderRecord.markSuperseded(Int(older & 0xFFFF))
                    } else {
                        queueCounters[queue].apps[laneIndex].superseded += 1
                        noteSuperseded(record, tokenIndex: tokenIndex, now: now)
                        record.remaining -= 1
                        continue
                    }
                }
                queuedCollapse[queue][key] = context
            }
            lanes[sendingLane].append(context, urgent: isUrgent(queue: queue))
        }
        if record.remaining <= 0 { finish(index, now: now) }
    }

    private func jobRecord(for context: UInt64) -> JobRecord? {
        let index = Int(context >> 16)
        return index < jobs.count ? jobs[index] : nil
    }

    /// The key of a collapsible notification: its collapse id and its device token (tokens are
    /// lowercase from `JobDecoder` on, so no folding here).
    static func collapseKey(_ collapseID: String, _ token: DeviceToken) -> CollapseKey {
        CollapseKey(collapseID: collapseID, token: token)
    }

    // MARK: events: a stream slot is free

    /// The next notification for `lane`'s pool, or nil when none waits (or the app is halted).
    /// Superseded tokens and tokens whose apns-expiration passed while they waited get their
    /// outcome here instead of being returned.
    public func nextSend(lane laneIndex: Int, now: Int64) -> NotificationSend? {
        guard !lanes[laneIndex].halted else { return nil }
        prefetchUpcomingSends(lane: laneIndex)
        while let context = lanes[laneIndex].pop() {
            let index = Int(context >> 16)
            let tokenIndex = Int(context & 0xFFFF)
            guard index < jobs.count, let record = jobs[index] else { continue }
            let job = record.job
            // Read where it is needed: the usual send (no collapse id) reads it once, into the request.
            var token: String { job.tokens[tokenIndex] }
            if let collapseID = job.template.collapseID {
                let key = DeliveryRules.collapseKey(collapseID, job.tokens.token(at: tokenIndex))
                if queuedCollapse[record.queue][key] == context { queuedCollapse[record.queue][key] = nil }
                if !record.isSuperseded(tokenIndex), let newest = acceptedCollapse[record.queue][key], newest > job.originID {
                    // A resend must not deliver an older update after a newer one was accepted.
                    record.markSuperseded(tokenIndex)
                }
            }
            if record.isSuperseded(tokenIndex) {
                queueCounters[record.queue].apps[record.lane].superseded += 1
                noteSuperseded(record, tokenIndex: tokenIndex, now: now)
                complete(index, now: now)
                continue
            }
            if DeliveryRules.hasExpired(job.template.expiration, by: now) {
                record.deadLetters.append((token, "expired", DeliveryRules.expiredWhileWaitingMessage(job.template.expiration), 0,
                                           record.attemptsBefore(tokenIndex)))
                complete(index, now: now)
                continue
            }
            if !tokenBackoff.isEmpty, deferForTokenBackoff(record, tokenIndex: tokenIndex, now: now) {
                complete(index, now: now)
                continue
            }
            if !sandboxTokens.isEmpty, routeToSandbox(record, context: context, lane: laneIndex) { continue }
            queueCounters[record.queue].notificationsSent += 1
            countSend(job.effectivePriority, queue: record.queue, lane: record.lane)
            // The request names the job for everything but its token and apns-id: one retain,
            // where a copy of the template retained each of its references.
            return NotificationSend(request: job.request(tokenAt: tokenIndex, context: context, attempts: record.attemptsBefore(tokenIndex)),
                                    entryID: job.entryID)
        }
        return nil
    }

    /// The pool had no slot for the send with `context` after all (the send itself was handed
    /// over to the pool and is gone): it goes back first in line.
    public func sendRefused(context: UInt64, lane laneIndex: Int) {
        guard let record = jobRecord(for: context) else { lanes[laneIndex].pushFront(context); return }
        lanes[laneIndex].pushFront(context, urgent: isUrgent(queue: record.queue))
        queueCounters[record.queue].notificationsSent -= 1
        countSend(record.job.effectivePriority, queue: record.queue, lane: record.lane, by: -1)
        guard let collapseID = record.job.template.collapseID else { return }
        let key = DeliveryRules.collapseKey(collapseID, record.job.tokens.token(at: Int(context & 0xFFFF)))
        if queuedCollapse[record.queue][key] == nil { queuedCollapse[record.queue][key] = context }
    }

    // MARK: events: APNs answered

    /// APNs' answer (or the transport's verdict) for the notification sent with `context`, after
    /// `attempts` counted attempts as the pool reports them. Returns true when the notification
    /// was put first in its lane to be resent at once: the caller should offer that lane slots.
    /// `uniqueID` is the answer's `apns-unique-id`, when it had one (written to the results stream).
    @discardableResult
    public func answered(context: UInt64, attempts reported: Int, outcome: DeliveryOutcome, now: Int64,
                         uniqueID: UUIDBits? = nil) -> Bool {
        let index = Int(context >> 16)
        let tokenIndex = Int(context & 0xFFFF)
        guard index < jobs.count, let record = jobs[index], tokenIndex < record.tokenCount else { return false }
        // Read where they are needed: the usual answer (accepted, no collapse id) touches the record alone.
        var job: Job { record.job }
        var token: String { job.tokens[tokenIndex] }
        let before = record.attemptsBefore(tokenIndex)
        let attempts: Int
        if case .credentialsRejected = outcome {
            // Not the notification's fault: whatever the pool counted, no attempt is spent.
            attempts = before
        } else {
            attempts = max(before, reported)
        }
        switch outcome {
        case .accepted:
            if !record.onOtherEnvironment.isEmpty { acceptedOnOtherEnvironment(record, tokenIndex: tokenIndex) }
            queueCounters[record.queue].apps[record.lane].accepted += 1
            if record.receipts {
                noteResult(record, tokenIndex: tokenIndex, status: ResultEntry.Status.accepted, reason: nil, httpStatus: 200,
                           uniqueID: uniqueID, attempts: attempts, now: now)
            }
            queueCounters[record.queue].apps[record.lane].endToEndLatency.record(milliseconds: now.subtractingSaturating(record.enqueuedAt))
            if record.hasCollapseID, let collapseID = job.template.collapseID {
                let key = DeliveryRules.collapseKey(collapseID, job.tokens.token(at: tokenIndex))
                if acceptedCollapse[record.queue].count > 200_000 { acceptedCollapse[record.queue].removeAll() }
                if (acceptedCollapse[record.queue][key] ?? StreamEntryID(milliseconds: 0, sequence: 0)) < job.originID {
                    acceptedCollapse[record.queue][key] = job.originID
                }
            }
        case .deadToken(let status, let reason, let timestamp):
            if reason == .badDeviceToken, sandboxLanes[record.lane] != nil,
               tryOtherEnvironment(record, index: index, tokenIndex: tokenIndex, attempts: before, now: now) {
                return true
            }
            queueCounters[record.queue].apps[record.lane].deadTokens += 1
            if record.receipts {
                noteResult(record, tokenIndex: tokenIndex, status: ResultEntry.Status.deadToken, reason: reason.rawValue,
                           httpStatus: status, uniqueID: uniqueID, attempts: attempts, now: now)
            }
            record.feedback.append(FeedbackEntry.Draft(token: token, topic: job.template.topic, reason: reason.rawValue,
                                                       timestamp: timestamp, job: job.origin))
            record.feedback[record.feedback.count - 1].isChannel = job.template.isBroadcast
        case .permanent(let status, let reason):
            let word = reason?.rawValue ?? "Status\(status)"
            if status == 0 {
                // Herald's own verdict, before APNs saw it (e.g. headers larger than the header area).
                record.deadLetters.append((token, word, "Herald did not send the notification: its request headers do not fit in the 16 KiB header area of a request.", 0, attempts))
            } else {
                record.deadLetters.append((token, word, "APNs rejected the notification: \(status) \(word).", status, attempts))
            }
        case .retryTokenLater(let reason):
            retryLater(record, token: token, attempts: attempts, status: 429, reason: reason?.rawValue ?? "TooManyRequests",
                       delay: tokenThrottled(token, attempts: attempts, now: now), now: now)
        case .retryOnAnotherConnection(let cause):
            let (status, word) = DeliveryRules.describe(cause)
            if !cause.countsAsAttempt || attempts <= policy.immediateRetries {
                if resendNow(record, index: index, tokenIndex: tokenIndex, attempts: attempts, status: status, reason: word, now: now) {
                    return true
                }
            } else {
                retryLater(record, token: token, attempts: attempts, status: status, reason: word,
                           delay: Backoff.reconnect.delayMilliseconds(afterFailures: max(1, attempts), using: &random), now: now)
            }
        case .refreshProviderToken:
            // The pool already resent once with a fresh token; this is the answer after that.
            retryLater(record, token: token, attempts: attempts, status: 403, reason: "ExpiredProviderToken",
                       delay: Backoff.reconnect.delayMilliseconds(afterFailures: max(1, attempts), using: &random), now: now)
        case .providerTokenUpdatesThrottled:
            retryLater(record, token: token, attempts: attempts, status: 429, reason: "TooManyProviderTokenUpdates",
                       delay: policy.tokenUpdatesThrottledMilliseconds, now: now)
        case .credentialsRejected:
            park(record, token: token, attempts: attempts, delay: policy.credentialsRetryMilliseconds, now: now)
        }
        complete(index, now: now)
        return false
    }

    /// What a retry's reason says about a transport cause: (status, word).
    static func describe(_ cause: RetryCause) -> (Int, String) {
        switch cause {
        case .status(let status, let reason): return (status, reason?.rawValue ?? "Status\(status)")
        case .goAway: return (0, "GoAway")
        case .streamReset(let code): return (0, "StreamReset\(code)")
        case .connectionLost: return (0, "ConnectionLost")
        case .refusedStream: return (0, "RefusedStream")
        case .responseTimeout: return (0, "ResponseTimeout")
        }
    }

    /// A counted transport or 5xx failure within `immediateRetries`: first in line again on the
    /// pool, unless the notification is spent, expired, or the worker cannot send it now (then
    /// the retry set). Returns true when it was queued (no outcome yet).
    private func resendNow(_ record: JobRecord, index: Int, tokenIndex: Int, attempts: Int, status: Int, reason: String,
                           now: Int64) -> Bool {
        let token = record.job.tokens[tokenIndex]
        if let verdict = giveUp(record, attempts: attempts, status: status, reason: reason, dueAt: now, now: now) {
            record.deadLetters.append((token, verdict.reason, verdict.message, status, attempts))
            return false
        }
        let lane = sendLane(record, tokenIndex: tokenIndex)
        if draining || lanes[lane].halted {
            // Nothing more is sent by this worker (or for this app): the retry set, due now.
            retryLater(record, token: token, attempts: attempts, status: status, reason: reason,
                       delay: lanes[lane].halted ? policy.credentialsRetryMilliseconds : 0, now: now)
            return false
        }
        record.setAttempts(tokenIndex, attempts)
        lanes[lane].pushFront(UInt64(index) << 16 | UInt64(tokenIndex), urgent: isUrgent(queue: record.queue))
        return true
    }

    private func retryLater(_ record: JobRecord, token: String, attempts: Int, status: Int, reason: String, delay: Int64, now: Int64) {
        if let verdict = giveUp(record, attempts: attempts, status: status, reason: reason, dueAt: now.addingSaturating(max(0, delay)), now: now) {
            record.deadLetters.append((token, verdict.reason, verdict.message, status, attempts))
            return
        }
        if record.job.template.expiration == 0 {
            record.deadLetters.append((token, "expired",
                                       "The notification has apns-expiration 0 (deliver now or never) and APNs did not take it; the answer was \(status) \(reason).", status, attempts))
            return
        }
        record.retryTokens.append(token)
        record.retryAttempts = max(record.retryAttempts, attempts)
        record.retryDelay = max(record.retryDelay, delay)
    }

    /// Why a notification that failed with `status reason` cannot be tried again at `dueAt`, if so.
    private func giveUp(_ record: JobRecord, attempts: Int, status: Int, reason: String, dueAt: Int64, now: Int64)
        -> (reason: String, message: String)? {
        if attempts >= policy.maxAttempts {
            return ("max_attempts", "Gave up after \(attempts) attempts (--max-attempts \(policy.maxAttempts)); the last answer was \(status) \(reason).")
        }
        if let expiration = record.job.template.expiration, DeliveryRules.hasExpired(expiration, by: dueAt) {
            return ("expired", "The notification's apns-expiration (\(expiration)) passes before it could be retried; the last answer was \(status) \(reason).")
        }
        return nil
    }

    /// Whether apns-expiration `expiration` (UNIX seconds; 0 means "now or never", not a time)
    /// has passed by `milliseconds` (saturating: a value too large to be a time in ms is "far away").
    static func hasExpired(_ expiration: Int64?, by milliseconds: Int64) -> Bool {
        guard let expiration, expiration > 0 else { return false }
        return expiration.multipliedSaturating(by: 1000) <= milliseconds
    }

    static func expiredWhenReadMessage(_ expiration: Int64?) -> String {
        "The notification's apns-expiration (\(expiration ?? 0)) had passed when the worker read it; it was never sent."
    }

    static func expiredWhileWaitingMessage(_ expiration: Int64?) -> String {
        "The notification's apns-expiration (\(expiration ?? 0)) passed while it waited for a stream slot; it was not sent."
    }

    /// A token back to the retry set without a counted failure (no attempt spent), unless its
    /// apns-expiration passes before it would be due.
    @discardableResult
    func park(_ record: JobRecord, token: String, attempts: Int, delay: Int64, now: Int64) -> Bool {
        if let expiration = record.job.template.expiration, DeliveryRules.hasExpired(expiration, by: now.addingSaturating(max(0, delay))) {
            record.deadLetters.append((token, "expired",
                                       "The notification's apns-expiration (\(expiration)) passes before it could be sent again.", 0, attempts))
            return false
        }
        record.retryTokens.append(token)
        record.retryAttempts = max(record.retryAttempts, attempts)
        record.handedBack += 1
        record.retryDelay = max(record.retryDelay, delay)
        return true
    }

    func complete(_ index: Int, now: Int64) {
        guard let record = jobs[index] else { return }
        record.remaining -= 1
        if record.remaining <= 0 { finish(index, now: now) }
    }

    // MARK: events: credentials, drain

    /// APNs refused `lane`'s credentials: every token of that app not yet answered (queued here,
    /// or `unsent` ones the pool held for resending) goes to the retry set, no attempt spent.
    /// Returns how many were parked.
    @discardableResult
    public func credentialsHalted(lane laneIndex: Int, unsent: [UInt64], now: Int64) -> Int {
        lanes[laneIndex].halted = true
        var contexts = Array(lanes[laneIndex].takeAll())
        contexts.append(contentsOf: unsent)
        return handBack(contexts, delay: policy.credentialsRetryMilliseconds, now: now)
    }

    /// `lane`'s credentials work again: its jobs are read and sent again.
    public func credentialsResumed(lane laneIndex: Int) {
        lanes[laneIndex].halted = false
    }

    /// Stops sending: every token still waiting for a slot goes back to the retry set, due now, so
    /// other workers take it at once; tokens taken in later are handed back the same way.
    /// Returns how many were handed back.
    @discardableResult
    public func drain(now: Int64) -> Int {
        draining = true
        var contexts: [UInt64] = []
        for index in lanes.indices { contexts.append(contentsOf: lanes[index].takeAll()) }
        return handBack(contexts, delay: 0, now: now)
    }

    /// Puts unsent tokens in their jobs' retry entries (no attempt spent), each due after `delay`,
    /// and completes them; returns how many were handed back (superseded ones are not).
    private func handBack(_ contexts: [UInt64], delay: Int64, now: Int64) -> Int {
        var handedBack = 0
        for context in contexts {
            let index = Int(context >> 16)
            guard index < jobs.count, let record = jobs[index] else { continue }
            let tokenIndex = Int(context & 0xFFFF)
            forgetQueued(record, tokenIndex: tokenIndex, context: context)
            if record.isSuperseded(tokenIndex) {
                queueCounters[record.queue].apps[record.lane].superseded += 1
                noteSuperseded(record, tokenIndex: tokenIndex, now: now)
            } else {
                if park(record, token: record.job.tokens[tokenIndex], attempts: record.attemptsBefore(tokenIndex), delay: delay, now: now) {
                    handedBack += 1
                }
            }
            complete(index, now: now)
        }
        return handedBack
    }

    /// A token leaves its lane unsent: a newer job for its collapse id must no longer find it there
    /// (its job slot is reused once the job finishes).
    private func forgetQueued(_ record: JobRecord, tokenIndex: Int, context: UInt64) {
        guard let collapseID = record.job.template.collapseID else { return }
        let key = DeliveryRules.collapseKey(collapseID, record.job.tokens.token(at: tokenIndex))
        if queuedCollapse[record.queue][key] == context { queuedCollapse[record.queue][key] = nil }
    }

    // MARK: finishing entries

    private func finish(_ index: Int, now: Int64) {
        // Moved out of the table (no retain and release of the record).
        guard let record = jobs[index].take() else { return }
        freeJobIndices.append(index)
        // Nothing holds a record once it left the table; its writes are built below before reuse.
        defer {
            freeRecords.append(record)
            freeJobAddresses.append(record.jobAddress)
        }
        let queue = record.queue
        queueCounters[queue].jobsFinished += 1
        let dueAt = now.addingSaturating(record.retryDelay)
        if !record.retryTokens.isEmpty, DeliveryRules.hasExpired(record.job.template.expiration, by: dueAt) {
            let job = record.job
            // The job ends later than its tokens were put back: its retry would now be due after its expiration.
            for token in record.retryTokens {
                record.deadLetters.append((token, "expired",
                                           "The notification's apns-expiration (\(job.template.expiration ?? 0)) passes before it could be retried.",
                                           0, record.retryAttempts))
            }
            record.retryTokens = []
            record.handedBack = 0
        }
        if record.receipts && !record.deadLetters.isEmpty { addDeadLetterResults(record, now: now) }
        if record.onlyAcknowledgement {
            // Every token accepted or superseded (the usual job): only the acknowledgement.
            addFinishing(EntryOutcome(entryID: record.entryID), queue: queue)
            return
        }
        let job = record.job
        var writes: [OutcomeWrite] = []
        for draft in record.feedback { writes.append(.feedback(draft)) }
        for draft in record.results { writes.append(.result(draft)) }
        // One dead-letter entry per reason, holding the tokens that got it.
        var order: [(reason: String, message: String, status: Int, attempts: Int, tokens: [String])] = []
        for entry in record.deadLetters {
            if let position = order.firstIndex(where: { $0.reason == entry.reason }) {
                order[position].tokens.append(entry.token)
                order[position].attempts = max(order[position].attempts, entry.attempts)
            } else {
                order.append((entry.reason, entry.message, entry.status, entry.attempts, [entry.token]))
            }
        }
        for group in order {
            queueCounters[queue].apps[record.lane].deadLettered += group.tokens.count
            queueCounters[queue].deadLetteredByReason[DeadLetterText.countingKey(reason: group.reason), default: 0] += group.tokens.count
            // Some of a fan-out job's tokens: like a retry, the letter carries the id its apns-ids
            // derive from as id_base, so a requeued letter of one token does not send the raw id.
            let idBase = job.explicitAPNsID == nil && job.apnsIDBase != job.origin ? job.apnsIDBase : nil
            writes.append(.deadLetter(DeadLetter.Draft(
                fields: job.fields, tokens: group.tokens, reason: group.reason, message: group.message, status: group.status,
                attempts: group.attempts, failedAt: now, origin: job.origin, idBase: idBase)))
        }
        if !record.retryTokens.isEmpty {
            queueCounters[queue].apps[record.lane].retried += record.retryTokens.count - record.handedBack
            queueCounters[queue].apps[record.lane].handedBack += record.handedBack
            let retryID = "\(job.entryID)/\(record.retryAttempts)/\(UInt32.random(in: .min ... .max, using: &random))"
            writes.append(.retry(RetryEntry(job: job, tokens: record.retryTokens, attempts: record.retryAttempts, retryID: retryID,
                                            dueAt: dueAt, lane: retryLane(queue: queue))))
        }
        addFinishing(EntryOutcome(entryID: job.entryID, writes: writes), queue: queue)
    }

    private func addFinishing(_ outcome: EntryOutcome, queue: Int) {
        finishing[queue].append(outcome)
        finishingCount += 1
    }

    /// A malformed or hopeless entry: dead-letter it whole, counted for `lane`'s app (nil: a job
    /// that belongs to none of the worker's apps, or whose `app` field could not be read).
    private func deadLetterEntry(_ id: StreamEntryID, queue: Int, lane: Int?, fields: [(name: String, value: [UInt8])], reason: String,
                                 message: String, now: Int64, extra: [(String, String)] = []) {
        if let lane { queueCounters[queue].apps[lane].deadLettered += 1 } else { queueCounters[queue].unattributedDeadLettered += 1 }
        queueCounters[queue].deadLetteredByReason[DeadLetterText.countingKey(reason: reason), default: 0] += 1
        queueCounters[queue].jobsFinished += 1
        // Extra fields (what was cut) ride along after the job's own, like any field of the job.
        let withExtra = extra.isEmpty ? fields : fields + extra.map { ($0.0, Array($0.1.utf8)) }
        let draft = DeadLetter.Draft(fields: withExtra, tokens: nil, reason: reason, message: message, status: 0, attempts: 0,
                                     failedAt: now)
        var writes: [OutcomeWrite] = [.deadLetter(draft)]
        appendEntryResults(to: &writes, entryID: id, queue: queue, fields: fields, reason: reason, now: now)
        addFinishing(EntryOutcome(entryID: id, writes: writes), queue: queue)
    }

    // MARK: scheduled sends

    /// A job whose `deliver_at` is after `now`: nothing of it is sent. Its valid tokens go to the
    /// scheduled set, due at `deliverAt`, with no attempt spent, marked `scheduled` so the entry
    /// the promote script writes back is sent when read, whatever the reading worker's clock says
    /// (a worker whose clock runs behind cannot hold it again: no loop between workers). Invalid
    /// tokens are dead-lettered now, as on any read. If the job's apns-expiration passes by
    /// `deliverAt`, it could never be sent: its tokens are dead-lettered `expired` now.
    private func hold(_ job: Job, until deliverAt: Int64, lane: Int, queue: Int, now: Int64) {
        queueCounters[queue].jobsFinished += 1
        let attempts = max(0, job.attempts)
        let idBase = job.explicitAPNsID == nil && job.apnsIDBase != job.origin ? job.apnsIDBase : nil
        var writes: [OutcomeWrite] = []
        func deadLetter(_ tokens: [String], reason: String, message: String) {
            queueCounters[queue].apps[lane].deadLettered += tokens.count
            queueCounters[queue].deadLetteredByReason[DeadLetterText.countingKey(reason: reason), default: 0] += tokens.count
            writes.append(.deadLetter(DeadLetter.Draft(fields: job.fields, tokens: tokens, reason: reason, message: message, status: 0,
                                                       attempts: attempts, failedAt: now, origin: job.origin, idBase: idBase)))
            // A job that ends here (nothing of it sent) still owes each token its receipt.
            if wantsResults(queue: queue) || job.wantsReceipt {
                let fanOut = job.tokens.count + job.invalidTokens.count > 1
                for token in tokens {
                    writes.append(.result(ResultEntry.Draft(
                        job: job.origin, token: token, index: fanOut ? job.tokens.firstIndex(of: token) : nil,
                        status: ResultEntry.Status.deadLettered, reason: reason, httpStatus: 0, apnsID: nil, uniqueID: nil,
                        at: now, attempts: attempts)))
                }
            }
        }
        var invalid = job.invalidTokens[...]
        while let first = invalid.first {
            let code = first.error.code
            deadLetter(invalid.filter { $0.error.code == code }.map(\.token), reason: code, message: first.error.description)
            invalid = invalid.filter { $0.error.code != code }[...]
        }
        if !job.tokens.isEmpty {
            if DeliveryRules.hasExpired(job.template.expiration, by: deliverAt) {
                deadLetter(job.tokens.array, reason: "expired",
                           message: "The notification's apns-expiration (\(job.template.expiration ?? 0)) passes before its deliver_at "
                               + "(\(deliverAt), \(DeliverAt.format(deliverAt))); it was never sent.")
            } else {
                queueCounters[queue].apps[lane].scheduled += job.tokens.count
                let retryID = "\(job.entryID)/s/\(UInt32.random(in: .min ... .max, using: &random))"
                writes.append(.retry(RetryEntry(job: job, tokens: job.tokens.array, attempts: attempts, retryID: retryID, dueAt: deliverAt,
                                                lane: retryLane(queue: queue), scheduled: true)))
            }
        }
        addFinishing(EntryOutcome(entryID: job.entryID, writes: writes), queue: queue)
    }

    // MARK: events: writes

    /// The end of a loop tick: every entry of one queue finished since that queue's last batch,
    /// with its writes, as one batch to write and acknowledge in one transaction on that queue's
    /// keys (`batch.queue`); nil when no queue has any. Call until nil: each queue gets its own
    /// batch (a transaction never spans two queues, which may live on different Redis nodes).
    /// Its entries stay held until `confirmed`.
    public func takeBatch() -> OutcomeBatch? {
        guard finishingCount > 0 else { return nil }
        for step in 0..<finishing.count {
            let queue = (nextBatchQueue + step) % finishing.count
            guard !finishing[queue].isEmpty else { continue }
            var entries = spareEntryArrays.popLast() ?? []
            swap(&entries, &finishing[queue])
            let batch = OutcomeBatch(sequence: nextBatchSequence, entries: entries, queue: queue)
            nextBatchSequence += 1
            finishingCount -= entries.count
            nextBatchQueue = (queue + 1) % finishing.count
            unconfirmed.append(batch)
            return batch
        }
        return nil
    }

    /// Redis confirmed batch `sequence` (EXEC answered): its entries are released (each passed to
    /// `each` first, when given).
    public func confirmed(_ sequence: UInt64, each: ((StreamEntryID) -> Void)? = nil) {
        guard let position = unconfirmed.firstIndex(where: { $0.sequence == sequence }) else { return }
        var batch = unconfirmed.remove(at: position)
        // Each removal's slot is loaded a few entries ahead (`StreamEntryIDSet.prefetch`).
        let ahead = 8
        for index in 0..<min(ahead, batch.entries.count) { heldEntries[batch.queue].prefetch(batch.entries[index].entryID) }
        for index in batch.entries.indices {
            if index + ahead < batch.entries.count { heldEntries[batch.queue].prefetch(batch.entries[index + ahead].entryID) }
            let entryID = batch.entries[index].entryID
            heldEntries[batch.queue].remove(entryID)
            each?(entryID)
        }
        // Unless someone else still holds the array (then emptying it allocates anew), its
        // storage serves a later batch; two spares cover a batch in flight and one being built.
        guard spareEntryArrays.count < 2, batch.entries.capacity <= 65_536 else { return }
        var entries = batch.takeEntries()
        entries.removeAll(keepingCapacity: true)
        spareEntryArrays.append(entries)
    }

    /// `queue`'s Redis connection is back after it was lost: the batches of that queue it never
    /// confirmed, to write again (in order) before anything of it is read; their entries stay
    /// held meanwhile.
    public func redisReconnected(queue: Int = 0) -> [OutcomeBatch] {
        unconfirmed.filter { $0.queue == queue }
    }
}

extension DeliveryRules {
    /// Requests a job's lines, every line its allocation (`Job.allocationBytes`) touches from
    /// wherever it starts: freeing a job reads every reference it holds, the last ones at its end
    /// (seven or eight lines; a fixed six left the last line or two to be waited on).
    @inline(__always)
    static func prefetchJob(at address: UnsafeRawPointer) {
        let end = UInt(bitPattern: address) &+ UInt(Job.allocationBytes)
        var line = UInt(bitPattern: address) & ~63
        while line < end {
            prefetchForWrite(UnsafeRawPointer(bitPattern: line).unsafelyUnwrapped)
            line &+= 64
        }
    }

    /// Prefetches the lines of the finished job held by the record `upcoming` places below the
    /// top of `freeRecords` (the next one `admit` takes is at 0), and the record's own three lines
    /// (it is about 140 bytes), which `reuse` rewrites.
    @inline(__always)
    private func prefetchFinishedJob(upcoming: Int) {
        let position = freeJobAddresses.count - 1 - upcoming
        guard position >= 0 else { return }
        DeliveryRules.prefetchJob(at: freeJobAddresses[position])
        freeRecords.withUnsafeBufferPointer { records in
            guard position < records.count else { return }
            // The reference's bits, read as an address: nothing retained, nothing of the record read.
            let record = UnsafeRawPointer(records.baseAddress! + position).load(as: UnsafeRawPointer.self)
            for line in 0..<3 { prefetchForWrite(record + 64 * line) }
        }
    }

    /// Requests what the next sends of `laneIndex` read, a few sends ahead: with thousands of
    /// tokens queued, their table entries, records and jobs have left the caches, and each send
    /// waited on the three in turn (the table, then the record, then the job). Each call moves
    /// every upcoming send one step along: the table entry of the third, the record of the second
    /// (its entry was requested a call before), and the job of the next (its record was).
    @inline(__always)
    private func prefetchUpcomingSends(lane laneIndex: Int) {
        jobs.withUnsafeBufferPointer { table in
            if let context = lanes[laneIndex].peek(ahead: 3), let entry = DeliveryRules.entry(of: context, in: table) {
                prefetchForRead(entry)
            }
            if let context = lanes[laneIndex].peek(ahead: 2), let record = DeliveryRules.record(of: context, in: table) {
                for line in 0..<3 { prefetchForRead(record + 64 * line) }
            }
            if let context = lanes[laneIndex].peek(ahead: 1), let record = DeliveryRules.record(of: context, in: table) {
                DeliveryRules.prefetchJob(at: DeliveryRules.jobAddress(ofRecordAt: record))
            }
        }
    }

    /// Where the jobs-table entry of `context` lies, if the table has one, for prefetch hints.
    @inline(__always)
    static func entry(of context: UInt64, in table: UnsafeBufferPointer<JobRecord?>) -> UnsafeRawPointer? {
        let index = Int(context >> 16)
        guard index < table.count, let base = table.baseAddress else { return nil }
        return UnsafeRawPointer(base + index)
    }

    /// The record at `context`'s entry, as an address: an optional reference is one pointer,
    /// nil as zero, so its bits are read and nothing is retained.
    @inline(__always)
    static func record(of context: UInt64, in table: UnsafeBufferPointer<JobRecord?>) -> UnsafeRawPointer? {
        entry(of: context, in: table).flatMap { UnsafeRawPointer(bitPattern: $0.load(as: UInt.self)) }
    }

    /// The address of the job held by the record at `record` (read without retaining either).
    @inline(__always)
    static func jobAddress(ofRecordAt record: UnsafeRawPointer) -> UnsafeRawPointer {
        Unmanaged<JobRecord>.fromOpaque(record)._withUnsafeGuaranteedRef { $0.jobAddress }
    }

    /// Prefetches the objects owned by the finished job of the next record `admit` takes.
    @inline(__always)
    private func prefetchFinishedJobsObjects() {
        guard let address = freeJobAddresses.last else { return }
        Unmanaged<Job>.fromOpaque(address)._withUnsafeGuaranteedRef { $0.prefetchOwnedObjects { prefetchForWrite($0) } }
    }
}

extension DeliveryRules: CompletionPrefetching {
    /// Starts loading the record and the job of each context about to be answered, all of them
    /// before the first answer is read: with thousands of notifications in flight, both have left
    /// the caches by then, and loaded one answer at a time each waited on its own. The table is
    /// read as addresses: binding a record would retain it, a write to the very line being loaded.
    public func prefetch(contexts: UnsafeBufferPointer<UInt64>) {
        jobs.withUnsafeBufferPointer { table in
            // A record's fields fill about two lines; three cover them wherever it starts.
            for context in contexts {
                guard let record = DeliveryRules.record(of: context, in: table) else { continue }
                for line in 0..<3 { prefetchForWrite(record + 64 * line) }
            }
            for context in contexts {
                guard let record = DeliveryRules.record(of: context, in: table) else { continue }
                DeliveryRules.prefetchJob(at: DeliveryRules.jobAddress(ofRecordAt: record))
            }
        }
    }
}
