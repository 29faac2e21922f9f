import APNs
import Queue

/// A POST /v1/notifications body turned into job fields, each job checked as `herald enqueue`
/// checks it (`EnqueueCheck`), before anything reaches Redis.
///
/// The body is one job (a JSON object of job fields) or a batch (`{"notifications": [job, …]}`);
/// either may name its queue with `"queue"`. A job's `payload` is an object (its text is kept
/// byte for byte, not re-encoded) or a string holding the JSON. A batch is all or nothing: one
/// invalid job refuses the request, with every invalid job's reasons by index.
struct NotificationRequest {
    /// The queue named in the body, if any.
    var queue: String?
    var jobs: [BatchEnqueue.Fields]
    /// True for `{"notifications": […]}`, false for a single job.
    var isBatch: Bool

    /// One reason a job is refused.
    struct Reason {
        var code: String
        var message: String
        var json: JSONValue { .object([("code", .string(code)), ("message", .string(message))]) }
    }

    /// Parses and checks `body`; throws 400 (not JSON, wrong shape), 413 (more than `maxBatch`
    /// jobs) or 422 (invalid jobs, with their reasons).
    static func parse(_ body: [UInt8], maxBatch: Int) throws(APIError) -> NotificationRequest {
        var result: Result<NotificationRequest, APIError> = .failure(.malformed("empty body"))
        body.withUnsafeBufferPointer { buffer in
            result = parse(JSONScanner(buffer), maxBatch: maxBatch)
        }
        return try result.get()
    }

    private static func parse(_ json: JSONScanner, maxBatch: Int) -> Result<NotificationRequest, APIError> {
        let root: JSONScanner.Value
        do {
            root = try json.validate()
        } catch {
            return .failure(.malformed("The body is not JSON: \(error). Send one notification as a JSON object, or a batch as {\"notifications\":[…]}."))
        }
        guard root.kind == .object else {
            return .failure(.malformed("The body is a JSON \(root.kind.rawValue); send one notification as a JSON object, or a batch as {\"notifications\":[…]}."))
        }
        guard let list = json.member("notifications", of: root) else {
            // One job; `queue` may sit beside its fields.
            var queue: String? = nil
            var reasons: [Reason] = []
            if let value = json.member("queue", of: root) {
                guard let name = json.string(value) else {
                    return .failure(.malformed("`queue` must be a string, not a \(value.kind.rawValue)."))
                }
                queue = name
            }
            let fields = jobFields(json, root, reasons: &reasons, skipping: "queue")
            if !reasons.isEmpty {
                return .failure(invalid([(0, reasons)], total: 1, batch: false))
            }
            return .success(NotificationRequest(queue: queue, jobs: [fields], isBatch: false))
        }
        // A batch: `notifications` and optionally `queue`, nothing else.
        var queue: String? = nil
        var stray: String? = nil
        try? json.forEachMember(of: root) { name, value in
            if json.textEquals(name, "notifications") { return }
            if json.textEquals(name, "queue") {
                queue = json.string(value)
                if queue == nil { stray = "`queue` must be a string, not a \(value.kind.rawValue)." }
                return
            }
            if stray == nil {
                stray = "A batch holds only `notifications` (and `queue`); \(quotedName(json, name)) is not allowed beside them. "
                    + "Put job fields inside each notification."
            }
        }
        if let stray { return .failure(.malformed(stray)) }
        guard list.kind == .array else {
            return .failure(.malformed("`notifications` must be an array of notifications, not a \(list.kind.rawValue)."))
        }
        var elements: [JSONScanner.Value] = []
        var tooMany = false
        try? json.forEachElement(of: list) { element in
            if elements.count < maxBatch { elements.append(element) } else { tooMany = true }
        }
        if tooMany {
            return .failure(APIError(.contentTooLarge, "batch_too_large",
                                     "The batch holds more than \(maxBatch) notifications, the most one request may carry (--max-batch). Split it into several requests."))
        }
        guard !elements.isEmpty else { return .failure(.malformed("`notifications` is empty; send at least one notification.")) }
        var jobs: [BatchEnqueue.Fields] = []
        jobs.reserveCapacity(elements.count)
        var invalidJobs: [(Int, [Reason])] = []
        for (index, element) in elements.enumerated() {
            var reasons: [Reason] = []
            guard element.kind == .object else {
                invalidJobs.append((index, [Reason(code: "not_an_object", message: "A notification must be a JSON object of job fields, not a \(element.kind.rawValue).")]))
                continue
            }
            let fields = jobFields(json, element, reasons: &reasons, skipping: nil)
            if reasons.isEmpty { jobs.append(fields) } else { invalidJobs.append((index, reasons)) }
        }
        if !invalidJobs.isEmpty { return .failure(invalid(invalidJobs, total: elements.count, batch: true)) }
        return .success(NotificationRequest(queue: queue, jobs: jobs, isBatch: true))
    }

    private static func invalid(_ jobs: [(Int, [Reason])], total: Int, batch: Bool) -> APIError {
        let message = batch
            ? "\(jobs.count) of \(total) notifications are invalid; nothing was enqueued (a batch is all or nothing). Fix them and send the batch again."
            : "The notification is invalid; nothing was enqueued."
        return APIError(.unprocessableContent, "invalid_notifications", message, extra: [
            ("invalid", .array(jobs.map { index, reasons in
                .object([("index", .int(index)), ("reasons", .array(reasons.map(\.json)))])
            })),
        ])
    }

    static let allowedList = EnqueueCheck.producerFields.joined(separator: ", ")

    /// The job fields of one object, or the reasons it cannot be a job.
    private static func jobFields(_ json: JSONScanner, _ object: JSONScanner.Value, reasons: inout [Reason],
                                  skipping: StaticString?) -> BatchEnqueue.Fields {
        // One slot per producer field: a repeated member replaces the earlier one, as in JSON.
        var slots = [[UInt8]?](repeating: nil, count: EnqueueCheck.producerFields.count)
        try? json.forEachMember(of: object) { name, value in
            if let skipping, json.textEquals(name, skipping) { return }
            guard let slot = slotIndex(json, name) else {
                let text = quotedName(json, name)
                if JobField.herald.contains(json.string(JSONScanner.Value(kind: .string, range: name)) ?? "") {
                    reasons.append(Reason(code: "reserved_field", message: "\(text) is Herald's own field; producers must not set it."))
                } else {
                    reasons.append(Reason(code: "unknown_field", message: "\(text) is not a job field; the fields are \(allowedList)."))
                }
                return
            }
            let field = EnqueueCheck.producerFields[slot]
            switch value.kind {
            case .null:
                slots[slot] = nil
            case .string:
                slots[slot] = Array((json.string(value) ?? "").utf8)
            case .object where field == JobField.payload:
                slots[slot] = Array(UnsafeBufferPointer(rebasing: json.bytes[value.range]))
            case .number where field == JobField.priority || field == JobField.expiration || field == JobField.deliverAt:
                guard let number = NotificationRequest.wholeNumber(json, value) else {
                    reasons.append(Reason(code: "bad_field_type", message: "`\(field)` must be a whole number."))
                    return
                }
                slots[slot] = Array(String(number).utf8)
            case .array where field == JobField.tokens:
                var tokens: [UInt8] = []
                var bad = false
                try? json.forEachElement(of: value) { element in
                    guard let token = json.string(element), !token.utf8.contains(UInt8(ascii: ",")) else { bad = true; return }
                    if !tokens.isEmpty { tokens.append(UInt8(ascii: ",")) }
                    tokens.append(contentsOf: token.utf8)
                }
                if bad {
                    reasons.append(Reason(code: "bad_field_type", message: "`tokens` must be an array of hex device tokens (strings), or one comma-separated string."))
                    return
                }
                slots[slot] = tokens
            default:
                reasons.append(Reason(code: "bad_field_type", message: "`\(field)` must be \(expectedType(field)), not a \(value.kind.rawValue)."))
            }
        }
        guard reasons.isEmpty else { return [] }
        var fields: BatchEnqueue.Fields = []
        fields.reserveCapacity(4)
        for (slot, value) in slots.enumerated() {
            if let value { fields.append((EnqueueCheck.producerFields[slot], value)) }
        }
        if JobLane.of(bytes: fields) == nil {
            reasons.append(Reason(code: "bad_lane", message: "`lane` must be \"urgent\" or \"bulk\" (or absent: alert and voip at priority 10 are urgent, the rest bulk)."))
        }
        for problem in EnqueueCheck.problems(fields) {
            reasons.append(Reason(code: problem.code, message: problem.description))
        }
        return fields
    }

    /// An integer, also when written with a zero fraction or an exponent (`10.0`, `1e1`): JSON
    /// does not tell them apart, and neither does JSON Schema's `integer`.
    static func wholeNumber(_ json: JSONScanner, _ value: JSONScanner.Value) -> Int64? {
        if let number = json.int64(value) { return number }
        guard let double = json.double(value), double.rounded() == double, abs(double) < 9.0e15 else { return nil }
        return Int64(double)
    }

    private static func expectedType(_ field: String) -> String {
        switch field {
        case JobField.payload: "a JSON object (or a string holding one)"
        case JobField.priority, JobField.expiration: "a whole number (or a string holding one)"
        case JobField.deliverAt: "ms since the epoch (a whole number) or an RFC 3339 time (a string)"
        case JobField.tokens: "an array of hex device tokens (or one comma-separated string)"
        default: "a string"
        }
    }

    private static func slotIndex(_ json: JSONScanner, _ name: Range<Int>) -> Int? {
        for (index, field) in EnqueueCheck.producerFields.enumerated() where json.stringEquals(JSONScanner.Value(kind: .string, range: name), field) {
            return index
        }
        return nil
    }

    /// A member name for a message: decoded, cut to 40 characters, in backquotes.
    private static func quotedName(_ json: JSONScanner, _ name: Range<Int>) -> String {
        let text = json.string(JSONScanner.Value(kind: .string, range: name)) ?? ""
        return "`" + DeadLetterText.escaped(text) + "`"
    }
}
