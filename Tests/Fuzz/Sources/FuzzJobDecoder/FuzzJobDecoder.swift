import APNs
import Queue
import Transport

/// A stream entry as a producer could write it: the input split on NUL bytes into
/// name, value, name, value, … (a trailing odd part is a name with an empty value), decoded as
/// the worker decodes every entry it reads. A decoded job must hold only tokens and a template
/// that pass the checks it was decoded with (a broadcast: its channel id and the broadcast
/// rules), and build each token's notification.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let parts = bytes.split(separator: 0, omittingEmptySubsequences: false)
    var fields: [(name: String, value: [UInt8])] = []
    var index = 0
    while index < parts.count {
        let name = String(decoding: parts[index], as: UTF8.self)
        let value = index + 1 < parts.count ? Array(parts[index + 1]) : []
        fields.append((name, value))
        index += 2
    }
    let entryID = StreamEntryID(milliseconds: 1_700_000_000_000, sequence: 7)
    for defaults in [JobDefaults(), JobDefaults(bundleID: "com.example.app", apnsIDNamespace: "default")] {
        guard case .success(let job) = JobDecoder.decode(entryID: entryID, fields: fields, defaults: defaults) else {
            continue
        }
        guard !job.tokens.isEmpty || !job.invalidTokens.isEmpty else { fatalError("a job with no tokens at all") }
        // The job keeps the entry's fields (packed) for its dead letter or retry: byte for byte.
        let kept = job.fields
        guard kept.count == fields.count,
              zip(kept, fields).allSatisfy({ FieldName.bytes($0.name) == FieldName.bytes($1.name) && $0.value == $1.value }) else {
            fatalError("a decoded job does not keep its entry's fields as written")
        }
        for token in job.tokens {
            let notification = job.notification(forToken: token)
            if job.template.isBroadcast {
                // A broadcast's one "token" is its channel id, held to the channel rules instead.
                guard job.tokens.count == 1 else { fatalError("a broadcast job with \(job.tokens.count) channels") }
                if let error = Notification.channelIDError(token) { fatalError("decoded broadcast kept a bad channel id: \(error)") }
                do { try notification.validateBroadcast() } catch { fatalError("a decoded broadcast is invalid: \(error)") }
            } else {
                if let error = Notification.deviceTokenError(token) { fatalError("decoded job kept a bad token: \(error)") }
                do { try notification.validate() } catch { fatalError("a decoded job's notification is invalid: \(error)") }
            }
            guard let apnsID = notification.apnsID, UUIDString.isCanonical(apnsID) else {
                fatalError("a decoded job's notification has no canonical apns-id")
            }
        }
        // A packed token (the worker's form of a 64-digit token) spells the producer's token,
        // folded to lowercase, and addresses its request with the apns-id that text gives.
        let given = givenTokens(fields)
        for index in job.tokens.indices {
            // The worker's request names the job and carries the token and apns-id: the
            // notification it stands for is the one built from the token's text.
            let addressed = job.request(tokenAt: index, context: UInt64(index), attempts: job.attempts).notification
            let text = job.tokens[index]
            if job.tokens.token(at: index).isPacked, !given.contains(text) {
                fatalError("a packed token does not spell any token the entry gave")
            }
            let expected = job.notification(forToken: text)
            guard addressed.deviceToken == text, addressed.apnsID == expected.apnsID, addressed.topic == expected.topic,
                  Array(addressed.payload) == Array(expected.payload), addressed.isBroadcast == expected.isBroadcast else {
                fatalError("the worker's request for a token differs from the notification built from its text")
            }
        }
        _ = job.origin
        _ = job.apnsIDBase
        _ = job.enqueuedAt
    }
    return 0
}

/// The tokens an entry's `token` and `tokens` fields name, trimmed of spaces and folded to
/// lowercase as the decoder folds them (read here apart from the decoder).
func givenTokens(_ fields: [(name: String, value: [UInt8])]) -> Set<String> {
    var tokens = Set<String>()
    for field in fields where field.name == "token" || field.name == "tokens" {
        let parts = field.name == "token" ? [field.value[...]] : field.value.split(separator: 0x2C)
        for part in parts {
            let trimmed = part.drop(while: { $0 == 0x20 }).reversed().drop(while: { $0 == 0x20 }).reversed()
            let folded = trimmed.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            tokens.insert(String(decoding: folded, as: UTF8.self))
        }
    }
    return tokens
}
