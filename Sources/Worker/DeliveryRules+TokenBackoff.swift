import APNs

extension DeliveryRules {
    /// A notification whose device token backs off after a 429: parked in the retry set, due when
    /// the token's backoff ends, with no attempt spent (it was never sent). Returns false when
    /// the token is not backing off (send it). Parking rather than holding it in memory keeps the
    /// worker's memory bounded by its read-ahead however many notifications a throttled token has.
    func deferForTokenBackoff(_ record: JobRecord, tokenIndex: Int, now: Int64) -> Bool {
        // Looked up as the job keeps it: this runs before every send while any token backs off.
        guard let until = tokenBackoff.until(record.job.tokens.token(at: tokenIndex), now: now) else { return false }
        queueCounters[record.queue].tokenBackoffDeferred += 1
        park(record, token: record.job.tokens[tokenIndex], attempts: record.attemptsBefore(tokenIndex), delay: until - now, now: now)
        return true
    }

    /// A 429 TooManyRequests for `token` after `attempts`: the token backs off (its consecutive
    /// 429s lengthen it along `Backoff.tokenRetry`), and the notification is retried when the
    /// backoff ends. Returns the notification's retry delay (ms).
    func tokenThrottled(_ token: String, attempts: Int, now: Int64) -> Int64 {
        let jobDelay = Backoff.tokenRetry.delayMilliseconds(afterFailures: max(1, attempts), using: &random)
        let until = tokenBackoff.throttled(token, now: now) { strikes in
            strikes <= 1 ? jobDelay : Backoff.tokenRetry.delayMilliseconds(afterFailures: strikes, using: &random)
        }
        return max(jobDelay, until - now)
    }

    /// Tokens backing off right now, after forgetting those whose backoff passed (for the gauge).
    public func tokensBackingOff(now: Int64) -> Int {
        tokenBackoff.removeExpired(now: now)
    }
}
