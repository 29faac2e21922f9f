import APNs
import Transport

/// The fields Herald reads from a job entry; any other field is ignored (and counted).
public enum JobField {
    public static let token = "token"
    public static let tokens = "tokens"
    public static let payload = "payload"
    public static let topic = "topic"
    public static let pushType = "push_type"
    public static let priority = "priority"
    public static let expiration = "expiration"
    public static let collapseID = "collapse_id"
    public static let id = "id"
    public static let app = "app"
    /// A broadcast's Live Activity channel (base64 text, as APNs created it); instead of `token`.
    public static let channelID = "channel_id"
    /// Herald's own: sends that counted as attempts before this entry was written (retries).
    public static let attempts = "attempts"
    /// Herald's own: the entry id the job was first enqueued as (keeps apns-ids stable on retries).
    public static let origin = "origin"
    /// Herald's own: makes each retry-set member unique.
    public static let retryID = "retry_id"
    /// Herald's own: the enqueue time of the original job, ms (end-to-end latency across retries).
    public static let enqueuedAt = "enqueued_at"
    /// Herald's own: a fan-out job's `id`, carried by its retries so each token keeps the apns-id
    /// derived from it (a retry holding one token must not send the raw `id`).
    public static let idBase = "id_base"
    /// When the job may be sent: ms since the epoch or RFC 3339 text (see `DeliverAt`).
    public static let deliverAt = "deliver_at"
    /// Herald's own: written on a job held for its `deliver_at` (the due ms), so the promoted
    /// entry is sent when read, whatever the reading worker's clock says (no hold loop on skew).
    public static let scheduled = "scheduled"

    /// `1` (or `true`): write this job's outcomes to the results stream even when results are
    /// off for its queue.
    public static let receipt = "receipt"

    static let known: Set<String> = [token, tokens, payload, topic, pushType, priority, expiration, collapseID, id, app,
                                     channelID, attempts, origin, retryID, enqueuedAt, idBase, JobLane.field, receipt, deliverAt, scheduled]
    /// Fields Herald writes itself and replaces when it re-queues a job.
    public static let herald: Set<String> = [attempts, origin, retryID, enqueuedAt, idBase]
}

/// The ranges Herald accepts for the numbers in its own fields (`attempts`, `enqueued_at`,
/// `origin`). Anything outside is dead-lettered by the decoder, so the worker's sums and
/// products on them (attempt counts, latencies, due times) can never overflow.
public enum JobLimits {
    /// The most attempts a job may say were already made (`--max-attempts` is far below).
    public static let maxAttempts = 1000
    /// 9999-12-31 23:59:59.999 UTC in ms since the epoch: the latest `enqueued_at` and `origin` time.
    public static let maxTimestampMilliseconds: Int64 = 253_402_300_799_999
}

/// What a worker needs to know to build jobs: defaults for fields a job leaves out.
public struct JobDefaults: Sendable {
    /// The app's bundle id: the topic is this plus the push type's suffix when a job names none.
    public var bundleID: String?
    /// At most this many tokens in one job.
    public var maxTokensPerJob = 10_000
    /// Mixed into derived apns-ids (the worker uses its queue name), so equal entry ids of two
    /// queues never give one token the same apns-id.
    public var apnsIDNamespace = "" {
        didSet { apnsIDSeed = StableID.Seed(namespace: apnsIDNamespace) }
    }
    /// `apnsIDNamespace` hashed once, here, instead of for every notification.
    public private(set) var apnsIDSeed = StableID.Seed(namespace: "")

    public init(bundleID: String? = nil, apnsIDNamespace: String = "") {
        self.bundleID = bundleID
        self.apnsIDNamespace = apnsIDNamespace
        apnsIDSeed = StableID.Seed(namespace: apnsIDNamespace)
    }
}

/// One job read from the stream, decoded and validated: a notification template and its tokens.
///
/// A class, not a struct: the worker holds each job in its table and reads it once per token,
/// and a struct of a dozen references would be copied (and each reference retained) each time.
/// Immutable once decoded. A `NotificationTemplate`: each send's request names the job itself
/// for everything but its token and apns-id (see `PendingRequest`).
public final class Job: NotificationTemplate, @unchecked Sendable {
    /// At least the bytes of a job's object with malloc's rounding (all a job touches): the
    /// worker requests this many bytes' lines before it frees or reads a job that has left the
    /// caches. A test checks it against the object's size with malloc's rounding.
    public static let allocationBytes = 424

    public let entryID: StreamEntryID
    /// The entry's fields as read, kept for dead-letter and retry entries (the payload is a
    /// slice of the same buffer).
    public let packedFields: StreamFields
    /// The entry's fields as (name, value) pairs (copies, for dead-letter and retry entries).
    public var fields: [(name: String, value: [UInt8])] { packedFields.pairs }
    /// The entry id the job was first enqueued as (itself unless this is a retry).
    public var origin: String { originText ?? entryID.description }
    /// The `origin` field as written, when the entry carried one (a retry); otherwise the
    /// origin is the entry's own id and no text is kept for it (it is spelled only when needed).
    let originText: String?
    /// `origin` parsed (the entry's own id when `origin` is not an entry id): orders collapsible updates.
    public let originID: StreamEntryID
    /// Enqueue time of the original job, in ms since the epoch.
    public let enqueuedAt: Int64
    /// Valid device tokens to send to.
    public let tokens: JobTokens
    /// Tokens that failed validation, with why: dead-lettered, never sent.
    public let invalidTokens: [(token: String, error: NotificationError)]
    /// The job's own `id`, when it gave one for a single notification: sent as the apns-id.
    public let explicitAPNsID: String?
    /// What apns-ids are derived from with the token: a fan-out job's `id`, or else `origin`.
    public var apnsIDBase: String { apnsIDBaseText ?? entryID.description }
    /// `apnsIDBase` when it is not simply this entry's own id.
    let apnsIDBaseText: String?
    /// The defaults' namespace as hashed for derived apns-ids (`JobDefaults.apnsIDSeed`).
    let apnsIDSeed: StableID.Seed
    /// Attempts already made before this entry (from a retry).
    public let attempts: Int
    /// Fields Herald does not know.
    public let unknownFields: Int
    /// `deliver_at` in ms since the epoch; nil when the job has none or was already held for it
    /// (it carries `scheduled`): such a job is sent when read.
    public let deliverAt: Int64?

    init(
        entryID: StreamEntryID, fields: StreamFields, originText: String?, originID: StreamEntryID,
        enqueuedAt: Int64, tokens: JobTokens, invalidTokens: [(token: String, error: NotificationError)],
        template: Notification, explicitAPNsID: String?, apnsIDBaseText: String?, apnsIDSeed: StableID.Seed,
        attempts: Int, unknownFields: Int, deliverAt: Int64? = nil, wantsReceipt: Bool
    ) {
        self.entryID = entryID
        self.packedFields = fields
        self.originText = originText
        self.originID = originID
        self.enqueuedAt = enqueuedAt
        self.tokens = tokens
        self.invalidTokens = invalidTokens
        self.explicitAPNsID = explicitAPNsID
        self.apnsIDBaseText = apnsIDBaseText
        self.apnsIDSeed = apnsIDSeed
        self.attempts = attempts
        self.unknownFields = unknownFields
        self.deliverAt = deliverAt
        self.wantsReceipt = wantsReceipt
        super.init(template: template)
    }

    /// The notification for `token`, with its stable apns-id.
    public func notification(forToken token: String) -> Notification {
        var notification = template
        notification.deviceToken = token
        setAPNsID(&notification)
        return notification
    }

    /// The priority the job's notifications are sent with (`Notification.effectivePriority`).
    /// Read through this from another module: `job.template.effectivePriority` there copied the
    /// whole template first (a retain and release of each of its references) to read two bytes.
    public var effectivePriority: Priority { template.effectivePriority }

    /// The request for `tokens[index]`: it names this job for everything but the token and the
    /// apns-id (its stable one, or the job's own `id`). Built here, where the tokens' storage is
    /// read in place: read from another module, the token list was copied (retained) first.
    @inline(__always)
    public func request(tokenAt index: Int, context: UInt64, attempts: Int) -> PendingRequest {
        let token = tokens.token(at: index)
        return PendingRequest(source: self, token: token, apnsIDBits: derivedAPNsIDBits(for: token),
                              apnsIDText: explicitAPNsID, context: context, attempts: attempts)
    }

    /// The stable apns-id of `notification`'s device token (or the job's own `id`).
    private func setAPNsID(_ notification: inout Notification) {
        if let explicitAPNsID {
            notification.apnsID = explicitAPNsID
        } else {
            notification.apnsIDBits = derivedAPNsIDBits(for: notification.token)
        }
    }

    /// The apns-id of the send to `token` as bits, derived from the job's origin (or fan-out
    /// `id`) and the token: the same on every retry and every worker. Nil when the job gave its
    /// own `id` (`explicitAPNsID`), which is then sent as is.
    @inline(__always)
    public func derivedAPNsIDBits(for token: DeviceToken) -> UUIDBits? {
        if explicitAPNsID != nil { return nil }
        if let apnsIDBaseText {
            return StableID.bits(seed: apnsIDSeed, origin: apnsIDBaseText, token: token)
        }
        // The same id as hashing `entryID.description`, without building that string.
        return StableID.bits(seed: apnsIDSeed, origin: entryID, token: token)
    }

    /// Starts loading the headers of the objects freeing this job releases (its fields' storage
    /// and its token), so a job whose own lines are already loaded is freed without waiting on
    /// them. A hint: nothing changes, nothing is retained.
    @inline(__always)
    public func prefetchOwnedObjects(_ prefetch: (UnsafeRawPointer) -> Void) {
        if let storage = packedFields.storageHeader { prefetch(storage) }
        if let token = tokens.storageHeader { prefetch(token) }
    }

    /// Whether the job asks for receipts (its first `receipt` field is `1` or `true`): read by
    /// the decoder in its pass over the fields.
    public let wantsReceipt: Bool

    /// Whether a `receipt` field's value asks for receipts: `1` or `true`.
    static func asksForReceipt(_ value: UnsafeRawBufferPointer) -> Bool {
        value.elementsEqual("1".utf8) || value.elementsEqual("true".utf8)
    }

    /// The value of field `name`, if present.
    public func field(_ name: String) -> [UInt8]? {
        packedFields.firstValue(name).map { Array($0) }
    }
}
