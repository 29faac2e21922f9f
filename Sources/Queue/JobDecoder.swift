import APNs
import Glibc

/// Turns a stream entry's fields into a validated `Job`, or says precisely what is wrong.
/// Called once per job on the worker's loop; no Foundation, no JSON parse beyond validation.
public enum JobDecoder {
    /// Decodes fields given as (name, value) pairs (packed first: the tools' and tests' way in).
    public static func decode(entryID: StreamEntryID, fields: [(name: String, value: [UInt8])], defaults: JobDefaults) -> Result<Job, JobError> {
        decode(entryID: entryID, fields: StreamFields(fields), defaults: defaults)
    }

    /// The fields Herald reads, by their name's bytes (see `JobField`).
    enum Known { case token, tokens, payload, topic, pushType, priority, expiration, collapseID, id, attempts, origin,
                      enqueuedAt, idBase, channelID, ignored, deliverAt, scheduled, receipt }

    /// Which known field `name` is, compared byte for byte (nil: a field Herald does not know).
    static func known(_ name: UnsafeRawBufferPointer) -> Known? {
        @inline(__always) func equals(_ literal: StaticString) -> Bool {
            literal.utf8CodeUnitCount == name.count
                && memcmp(literal.utf8Start, name.baseAddress!, name.count) == 0
        }
        guard !name.isEmpty else { return nil }
        switch name.count {
        case 2: return equals("id") ? .id : nil
        case 3: return equals("app") ? .ignored : nil
        case 4: return equals("lane") ? .ignored : nil
        case 5: return equals("token") ? .token : equals("topic") ? .topic : nil
        case 6: return equals("tokens") ? .tokens : equals("origin") ? .origin : nil
        case 7: return equals("payload") ? .payload : equals("id_base") ? .idBase : equals("receipt") ? .receipt : nil
        case 8: return equals("priority") ? .priority : equals("attempts") ? .attempts : equals("retry_id") ? .ignored : nil
        case 9: return equals("push_type") ? .pushType : equals("scheduled") ? .scheduled : nil
        case 10: return equals("expiration") ? .expiration : equals("channel_id") ? .channelID : equals("deliver_at") ? .deliverAt : nil
        case 11: return equals("collapse_id") ? .collapseID : equals("enqueued_at") ? .enqueuedAt : nil
        default: return nil
        }
    }

    public static func decode(entryID: StreamEntryID, fields: StreamFields, defaults: JobDefaults) -> Result<Job, JobError> {
        // Where each value lies in the packed buffer: read in place (text, the token) where a
        // slice would retain and release the buffer once per field. Only the payload, which the
        // job keeps, and the rare fields below become slices.
        var token: Range<Int>? = nil
        var tokens: Range<Int>? = nil
        var payloadRange: Range<Int>? = nil
        var topic: String? = nil
        var pushTypeText: String? = nil
        var priorityText: String? = nil
        var expirationText: String? = nil
        var collapseID: String? = nil
        var id: String? = nil
        var attemptsText: String? = nil
        var origin: String? = nil
        var enqueuedAtText: String? = nil
        var idBase: String? = nil
        var channelIDRange: Range<Int>? = nil
        var deliverAtRange: Range<Int>? = nil
        var scheduled = false
        var receipt: Range<Int>? = nil
        var unknown = 0
        for index in 0..<fields.count {
            guard let kind = fields.withName(at: index, known) else {
                unknown += 1
                continue
            }
            let value = fields.valueRange(index)
            switch kind {
            case .token: token = value
            case .tokens: tokens = value
            case .payload: payloadRange = value
            case .topic: topic = fields.withBytes(value, text)
            case .pushType: pushTypeText = fields.withBytes(value, text)
            case .priority: priorityText = fields.withBytes(value, text)
            case .expiration: expirationText = fields.withBytes(value, text)
            case .collapseID: collapseID = fields.withBytes(value, text)
            case .id: id = fields.withBytes(value, text)
            case .attempts: attemptsText = fields.withBytes(value, text)
            case .origin: origin = fields.withBytes(value, text)
            case .enqueuedAt: enqueuedAtText = fields.withBytes(value, text)
            case .idBase: idBase = fields.withBytes(value, text)
            case .channelID: channelIDRange = value
            case .ignored: break
            case .deliverAt: deliverAtRange = value
            case .scheduled: scheduled = !value.isEmpty
            // The first one counts (as `StreamFields.firstValue` reads it).
            case .receipt: if receipt == nil { receipt = value }
            }
        }
        guard let payloadRange, !payloadRange.isEmpty else { return .failure(.missingPayload) }
        // Read here, in the one pass over the names: a lookup by name afterwards cost about 115
        // instructions a job.
        let wantsReceipt = receipt.map { fields.withBytes($0, Job.asksForReceipt) } ?? false
        let payload = fields.slice(payloadRange)
        // Herald's own numbers, range-checked so no sum or product on them can overflow later.
        var attempts = 0
        if let attemptsText, !attemptsText.isEmpty {
            guard let value = Int(attemptsText), (0...JobLimits.maxAttempts).contains(value) else {
                return .failure(.badAttempts(attemptsText))
            }
            attempts = value
        }
        var enqueuedAt: Int64? = nil
        if let enqueuedAtText, !enqueuedAtText.isEmpty {
            guard let value = Int64(enqueuedAtText), (0...JobLimits.maxTimestampMilliseconds).contains(value) else {
                return .failure(.badEnqueuedAt(enqueuedAtText))
            }
            enqueuedAt = value
        }
        var originID: StreamEntryID? = nil
        if let origin, !origin.isEmpty {
            guard let parsed = StreamEntryID(bytes: origin.utf8),
                  parsed.milliseconds <= UInt64(JobLimits.maxTimestampMilliseconds) else {
                return .failure(.badOrigin(origin))
            }
            originID = parsed
        } else {
            origin = nil
        }
        // Checked even when the job was already held for it (`scheduled`): a dead letter of a bad value says so at once.
        var deliverAt: Int64? = nil
        if let deliverAtRange, !deliverAtRange.isEmpty {
            let deliverAtBytes = fields.slice(deliverAtRange)
            guard let value = DeliverAt.parse(Array(deliverAtBytes)) else { return .failure(.badDeliverAt(text(deliverAtBytes))) }
            if !scheduled { deliverAt = value }
        }
        var tokenList: [DeviceToken] = []
        // Tokens are hex; APNs and the feedback stream use lowercase, so fold once here. A
        // 64-digit token is packed into 32 bytes: no string per job. The usual job (`token`
        // only) keeps its token without a list: no array per job.
        var single: DeviceToken? = nil
        if let token, !token.isEmpty {
            let folded = fields.withBytes(token, DeviceToken.init(lowercasing:))
            if tokens == nil { single = folded } else { tokenList.append(folded) }
        }
        if let tokensRange = tokens {
            let tokens = fields.slice(tokensRange)
            // Room for the usual fan-out field (64 hex digits and a comma each) at once, not by doubling.
            tokenList.reserveCapacity(tokenList.count + tokens.count / 65 + 1)
            for part in tokens.split(separator: 0x2C, omittingEmptySubsequences: true) {
                // Trimmed by index, so the token stays a contiguous slice: a reversed view made
                // `String(decoding:)` copy it into a temporary array first (two allocations a token).
                guard let first = part.firstIndex(where: { $0 != 0x20 }), let last = part.lastIndex(where: { $0 != 0x20 }) else { continue }
                tokenList.append(DeviceToken(lowercasing: part[first...last]))
            }
        }
        if tokenList.isEmpty, single == nil, channelIDRange == nil { return .failure(.missingToken) }
        if tokenList.count > defaults.maxTokensPerJob {
            return .failure(.tooManyTokens(count: tokenList.count, limit: defaults.maxTokensPerJob))
        }
        let pushType: PushType
        if let pushTypeText, !pushTypeText.isEmpty {
            guard let parsed = PushType(rawValue: pushTypeText) else { return .failure(.unknownPushType(pushTypeText)) }
            pushType = parsed
        } else {
            pushType = .alert
        }
        var priority: Priority? = nil
        if let priorityText, !priorityText.isEmpty {
            guard let value = Int(priorityText), let parsed = Priority(rawValue: value) else { return .failure(.badPriority(priorityText)) }
            priority = parsed
        }
        var expiration: Int64? = nil
        if let expirationText, !expirationText.isEmpty {
            guard let value = Int64(expirationText) else { return .failure(.badExpiration(expirationText)) }
            expiration = value
        }
        if let id, !id.isEmpty, !UUIDString.isCanonical(id) { return .failure(.badAPNsID(id)) }
        if let channelIDRange {
            return decodeBroadcast(entryID: entryID, fields: fields, channelID: fields.slice(channelIDRange), hasTokens: !tokenList.isEmpty || single != nil,
                                   pushTypeText: pushTypeText, topic: topic, priority: priority, expiration: expiration,
                                   collapseID: collapseID, payload: payload, id: id, idBase: idBase, origin: origin,
                                   originID: originID, enqueuedAt: enqueuedAt, attempts: attempts, unknown: unknown, defaults: defaults,
                                   wantsReceipt: wantsReceipt)
        }
        guard let resolvedTopic = (topic.flatMap { $0.isEmpty ? nil : $0 }) ?? defaults.bundleID.map({ pushType.topic(bundleID: $0) }) else {
            return .failure(.noTopic)
        }
        let collapse = collapseID.flatMap { $0.isEmpty ? nil : $0 }
        if single != nil || tokenList.count == 1 {
            // One token (the usual job): no second list.
            let only = single ?? tokenList[0]
            // The template never holds the token (the job keeps it in `tokens`): built with it
            // and emptied in `makeJob`, it was copied whole on the way (a retain and release of
            // each of its references). Checked in `validate`'s order: the token, then the rest.
            if let error = Notification.deviceTokenError(only) { return .failure(.notification(error)) }
            let template = Notification(deviceToken: "", topic: resolvedTopic, pushType: pushType, priority: priority,
                                        expiration: expiration, collapseID: collapse, apnsID: nil, payload: payload)
            if let error = Notification.validationErrorApartFromToken(of: template, bundleID: defaults.bundleID) {
                return .failure(.notification(error))
            }
            return makeJob(entryID: entryID, fields: fields, tokens: JobTokens(only), invalid: [], template: consume template,
                           id: id, idBase: idBase, origin: origin, originID: originID, enqueuedAt: enqueuedAt, attempts: attempts,
                           unknown: unknown, defaults: defaults, deliverAt: deliverAt, wantsReceipt: wantsReceipt)
        }
        var template = Notification(deviceToken: "", topic: resolvedTopic, pushType: pushType, priority: priority,
                                    expiration: expiration, collapseID: collapse, apnsID: nil, payload: [])
        // Given its payload afterwards on purpose: built with it, the optimizer laid `decode` out so
        // that the one-token path above cost about 100 instructions more a job (callgrind, `decode`).
        template.payload = payload
        var valid: [DeviceToken] = []
        valid.reserveCapacity(tokenList.count)
        var invalid: [(String, NotificationError)] = []
        // The whole notification is checked once; the other tokens only as tokens.
        var checkedTemplate = false
        for candidate in tokenList {
            // A single token is checked by validate() below; only fan-out tokens need the quick check.
            if tokenList.count > 1, let error = Notification.deviceTokenError(candidate) {
                invalid.append((candidate.string, error))
                continue
            }
            if !checkedTemplate {
                template.token = candidate
                do { try template.validate(bundleID: defaults.bundleID) } catch { return .failure(.notification(error)) }
                checkedTemplate = true
            }
            valid.append(candidate)
        }
        if !checkedTemplate, tokenList.count == 1, let only = invalid.first {
            return .failure(.notification(only.1))
        }
        template.token = DeviceToken("")
        return makeJob(entryID: entryID, fields: fields, tokens: JobTokens(valid), invalid: invalid, template: template,
                       id: id, idBase: idBase, origin: origin, originID: originID, enqueuedAt: enqueuedAt, attempts: attempts,
                       unknown: unknown, defaults: defaults, deliverAt: deliverAt, wantsReceipt: wantsReceipt)
    }

    static func makeJob(
        entryID: StreamEntryID, fields: StreamFields, tokens: JobTokens,
        invalid: [(String, NotificationError)], template: consuming Notification, id: String?, idBase: String?,
        origin: String?, originID: StreamEntryID?, enqueuedAt: Int64?, attempts: Int, unknown: Int, defaults: JobDefaults,
        deliverAt: Int64? = nil, wantsReceipt: Bool
    ) -> Result<Job, JobError> {
        let originID = originID ?? entryID
        let explicitID = id.flatMap { $0.isEmpty ? nil : $0 }
        let idBase = idBase.flatMap { $0.isEmpty ? nil : $0 }
        return .success(Job(
            entryID: entryID, fields: fields, originText: origin, originID: originID,
            // An entry id is any UInt64 a producer gave XADD; latency sums need it within Int64.
            enqueuedAt: enqueuedAt ?? Int64(min(originID.milliseconds, UInt64(JobLimits.maxTimestampMilliseconds))),
            tokens: tokens, invalidTokens: invalid, template: consume template,
            // A job's own `id` is sent as is only for a single notification; fan-out derives from it.
            explicitAPNsID: tokens.count + invalid.count == 1 && idBase == nil ? explicitID : nil,
            apnsIDBaseText: idBase ?? explicitID ?? origin,
            apnsIDSeed: defaults.apnsIDSeed,
            attempts: attempts, unknownFields: unknown, deliverAt: deliverAt, wantsReceipt: wantsReceipt))
    }

    @inline(__always)
    static func text(_ bytes: ArraySlice<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }

    @inline(__always)
    static func text(_ bytes: UnsafeRawBufferPointer) -> String {
        String(decoding: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
    }
}

extension Notification {
    /// `validateAllButDeviceToken(bundleID:)`'s error, or nil. No `catch` block
    /// around the template in the decoder: the template must stay consumable there. Borrowed,
    /// so it can never be copied on the way.
    fileprivate static func validationErrorApartFromToken(of notification: borrowing Notification, bundleID: String?) -> NotificationError? {
        do {
            try notification.validateAllButDeviceToken(bundleID: bundleID)
            return nil
        } catch {
            return error
        }
    }
}
