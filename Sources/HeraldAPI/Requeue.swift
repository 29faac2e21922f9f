import APNs
import Queue
import Transport

/// The body of POST /v1/queues/{queue}/dead-letters/requeue: which dead letters go back. Every
/// member is optional; `{}` (or no body) means every dead letter, up to `limit`, as
/// `herald dead-letters requeue` without filters.
struct RequeueRequest: Sendable {
    var ids: [StreamEntryID]?
    var reasons: Set<String>?
    var limit: Int?

    static func parse(_ body: [UInt8]) throws(APIError) -> RequeueRequest {
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return RequeueRequest() }
        var result: Result<RequeueRequest, APIError> = .success(RequeueRequest())
        body.withUnsafeBufferPointer { buffer in
            let json = JSONScanner(buffer)
            let root: JSONScanner.Value
            do {
                root = try json.validate()
            } catch {
                result = .failure(.malformed("The body is not JSON: \(error). Send {\"ids\":[…]}, {\"reasons\":[…]}, {\"limit\":N} or {}."))
                return
            }
            guard root.kind == .object else {
                result = .failure(.malformed("The body must be a JSON object such as {\"reasons\":[\"bad_priority\"],\"limit\":100}."))
                return
            }
            var request = RequeueRequest()
            var problem: String?
            try? json.forEachMember(of: root) { name, value in
                guard problem == nil else { return }
                if json.textEquals(name, "ids") {
                    var ids: [StreamEntryID] = []
                    try? json.forEachElement(of: value) { element in
                        if let text = json.string(element), let id = StreamEntryID(text) { ids.append(id) } else { problem = problem ?? "`ids` must be an array of entry ids like \"1718000000000-0\"." }
                    }
                    if value.kind != .array { problem = "`ids` must be an array of entry ids like \"1718000000000-0\"." }
                    if ids.count > APIConfiguration.maxRequeue { problem = "`ids` lists more than \(APIConfiguration.maxRequeue) ids; send several requests." }
                    request.ids = ids
                } else if json.textEquals(name, "reasons") {
                    var reasons = Set<String>()
                    try? json.forEachElement(of: value) { element in
                        if let text = json.string(element) { reasons.insert(text) } else { problem = problem ?? "`reasons` must be an array of reason codes like \"bad_priority\"." }
                    }
                    if value.kind != .array { problem = "`reasons` must be an array of reason codes like \"bad_priority\"." }
                    request.reasons = reasons.isEmpty ? nil : reasons
                } else if json.textEquals(name, "limit") {
                    guard let limit = NotificationRequest.wholeNumber(json, value), (1...Int64(APIConfiguration.maxRequeue)).contains(limit) else {
                        problem = "`limit` must be a whole number from 1 to \(APIConfiguration.maxRequeue)."
                        return
                    }
                    request.limit = Int(limit)
                } else {
                    problem = "\(DeadLetterText.quoted(json.string(JSONScanner.Value(kind: .string, range: name)) ?? "")) is not a member of a requeue request; the members are ids, reasons and limit."
                }
            }
            if let problem { result = .failure(.malformed(problem)) } else { result = .success(request) }
        }
        return try result.get()
    }
}

/// What a requeue did, letter by letter.
struct RequeueResult: Sendable {
    struct Item: Sendable {
        var id: StreamEntryID
        var reason: String
        /// The new job's entry id; nil when the letter was gone (requeued or purged meanwhile)
        /// or held no job fields.
        var newID: String?
        var skipped: String?
        /// Why the worker will dead-letter it again, if it will (`EnqueueCheck`).
        var stillInvalid: String?
    }

    var items: [Item] = []
    var missing: [StreamEntryID] = []
    var more = false

    /// As `herald dead-letters requeue`: oldest first, a hundred at a time, each atomically.
    static func run(redis: any RedisCommandExecutor, keys: QueueKeys, ask: RequeueRequest, limit: Int) throws -> RequeueResult {
        let tools = DeadLetterTools(redis: redis, keys: keys)
        var result = RequeueResult()
        var batch: [DeadLetter] = []
        var matched = 0
        func flush() throws {
            guard !batch.isEmpty else { return }
            for (letter, newID) in zip(batch, try tools.requeue(batch)) {
                let problem = EnqueueCheck.problems(letter.jobFields).first
                result.items.append(Item(id: letter.id, reason: letter.reason, newID: newID,
                                         skipped: newID == nil ? "no longer in \(keys.dead) (requeued or purged meanwhile)" : nil,
                                         stillInvalid: newID == nil ? nil : problem?.code))
            }
            batch.removeAll(keepingCapacity: true)
        }
        result.missing = try tools.forEach(DeadLetterFilter(reasons: ask.reasons, ids: ask.ids)) { letter in
            if matched >= limit {
                result.more = true
                return false
            }
            matched += 1
            guard !letter.jobFields.isEmpty else {
                result.items.append(Item(id: letter.id, reason: letter.reason, newID: nil, skipped: "it holds no job fields to requeue", stillInvalid: nil))
                return true
            }
            batch.append(letter)
            if batch.count >= 100 { try flush() }
            return true
        }
        try flush()
        return result
    }

    func json(keys: QueueKeys) -> JSONValue {
        .object([
            ("queue", .string(keys.queue)),
            ("stream", .string(keys.jobs)),
            ("requeued", .int(items.filter { $0.newID != nil }.count)),
            ("skipped", .int(items.filter { $0.newID == nil }.count)),
            ("more", .bool(more)),
            ("missing", .array(missing.map { .string($0.description) })),
            ("items", .array(items.map { item in
                .object([
                    ("id", .string(item.id.description)),
                    ("reason", .string(item.reason)),
                    ("new_id", .optional(item.newID)),
                    ("skipped", .optional(item.skipped)),
                    ("still_invalid", .optional(item.stillInvalid)),
                ])
            })),
        ])
    }
}
