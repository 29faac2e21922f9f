/// A queue's two lanes: the bulk stream (`QueueKeys.jobs`, what a plain `XADD` writes) and the
/// urgent stream (`QueueKeys.urgentJobs`), which the worker reads first within a share that keeps
/// bulk moving. Not to be confused with the worker's per-app send queues (`AppLane`): a lane here
/// is a Redis stream of one queue.
public enum JobLane: String, Sendable, CaseIterable {
    case bulk
    case urgent

    /// The job field that names a lane: the producer tools accept it (`herald enqueue --lane`,
    /// the API's `lane`), and the worker writes it into the retry member of a job read from the
    /// urgent stream, so a retry goes back to the urgent stream (`QueueScripts.promoteDueRetriesByLane`).
    public static let field = "lane"

    /// The lane a producer tool picks when the job names none: urgent for what a person waits
    /// for, i.e. an `alert` or `voip` notification sent at priority 10 (given, or left out:
    /// APNs' default for both). Everything else (background, Live Activity updates, priority 5
    /// or 1 alerts, unknown push types, which the worker dead-letters anyway) is bulk.
    public static func route(pushType: String?, priority: String?) -> JobLane {
        let type = pushType.flatMap { $0.isEmpty ? nil : $0 } ?? "alert"
        guard type == "alert" || type == "voip" else { return .bulk }
        guard let priority, !priority.isEmpty else { return .urgent }
        return priority == "10" ? .urgent : .bulk
    }

    /// The lane of a job's fields: its `lane` field when it names one, else `route` by its
    /// `push_type` and `priority`. Nil when the `lane` field names no lane (the tools refuse it).
    public static func of(_ fields: [(name: String, value: String)]) -> JobLane? {
        if let named = fields.last(where: { $0.name == field }), !named.value.isEmpty {
            return JobLane(rawValue: named.value)
        }
        return route(pushType: fields.last { $0.name == JobField.pushType }?.value,
                     priority: fields.last { $0.name == JobField.priority }?.value)
    }

    /// The lane of a job's fields as bytes (what the producer tools hold); see `of`.
    public static func of(bytes fields: [(name: String, value: [UInt8])]) -> JobLane? {
        of(fields.compactMap { field in
            field.name == JobLane.field || field.name == JobField.pushType || field.name == JobField.priority
                ? (field.name, String(decoding: field.value, as: UTF8.self)) : nil
        })
    }

    /// The stream of `keys`' queue that holds this lane.
    public func stream(_ keys: QueueKeys) -> String {
        self == .urgent ? keys.urgentJobs : keys.jobs
    }
}

extension QueueScripts {
    /// One retry set per queue serves both lanes, so the tools that read it (`herald stats`,
    /// the dead-letter and scheduling tools) see every retry of the queue in one place.
    /// The same script as `promoteDueRetries`, which moves a member with `lane` = `urgent` into
    /// KEYS[3] when it is given.
    public static let promoteDueRetriesByLane = promoteDueRetries
}

extension QueueStats.UrgentLane {
    /// The `urgent` member of a queue's stats JSON (`herald stats --json`, `GET /v1/queues/{queue}`).
    public func json(keys: QueueKeys) -> JSONValue {
        .object([
            ("jobs", .string(keys.urgentJobs)),
            ("depth", .int(depth)),
            ("pending", .optional(group?.pending)),
            ("lag", .optional(group?.lag)),
            ("lag_exact", group.map { .bool($0.lagIsExact) } ?? .null),
            ("oldest_pending_id", .optional(group?.oldestPendingID)),
            ("oldest_pending_age_ms", .optional(group?.oldestPendingAge)),
            ("consumers", .int(group?.consumers.count ?? 0)),
        ])
    }
}
