import APNs
import Queue

/// Apps with both APNs environments (`environment: both`): a device token belongs to exactly one
/// of them, and APNs answers a token sent to the other one 400 BadDeviceToken, which would report
/// a good token as dead. So such an answer from production is tried once on the app's sandbox
/// pool: accepted there, the notification is delivered and a `wrong_environment` feedback entry
/// names the environment that took it (the backend should fix its record of the token); refused
/// there too, the token is dead as usual. The second try spends no attempt (APNs did not fail
/// the notification; Herald asked the wrong environment). Each loop remembers the last
/// `sandboxTokenCapacity` tokens sandbox accepted that way and sends their later notifications
/// straight to sandbox (still with a `wrong_environment` entry each: the backend's record is
/// still wrong), so a sandbox token costs production one request per loop, not one per
/// notification.
extension DeliveryRules {
    /// The feedback reason of a notification accepted only by the app's other environment.
    public static let wrongEnvironmentReason = "wrong_environment"
    /// Sandbox tokens each loop remembers (oldest forgotten first): about 100 bytes each.
    public static let sandboxTokenCapacity = 65_536

    /// A notification popped from a production lane whose token sandbox accepted before: queued
    /// on the app's sandbox lane instead (unless that pool cannot send now). Returns true when moved.
    func routeToSandbox(_ record: JobRecord, context: UInt64, lane laneIndex: Int) -> Bool {
        guard laneIndex == record.lane, let twin = sandboxLanes[laneIndex], !lanes[twin].halted else { return false }
        let tokenIndex = Int(context & 0xFFFF)
        guard sandboxTokens.contains(record.job.tokens.token(at: tokenIndex)) else { return false }
        if record.onOtherEnvironment.isEmpty { record.onOtherEnvironment = Array(repeating: false, count: record.job.tokens.count) }
        guard !record.onOtherEnvironment[tokenIndex] else { return false }
        record.onOtherEnvironment[tokenIndex] = true
        lanes[twin].append(context, urgent: isUrgent(queue: record.queue))
        return true
    }

    /// The lane a token is (to be) sent on: its job's app lane, that app's broadcast lane for a
    /// broadcast when the app has a broadcast host, or its sandbox lane once production called
    /// the token a bad device token.
    func sendLane(_ record: JobRecord, tokenIndex: Int) -> Int {
        if !broadcastLanes.isEmpty, record.job.template.isBroadcast, let broadcast = broadcastLanes[record.lane] { return broadcast }
        guard !record.onOtherEnvironment.isEmpty, record.onOtherEnvironment[tokenIndex], let twin = sandboxLanes[record.lane] else {
            return record.lane
        }
        return twin
    }

    /// Production answered BadDeviceToken: queue the token first on the sandbox lane, unless it
    /// was already tried there (then it is dead). Returns true when it was queued or parked (no
    /// outcome yet), or parked in the retry set and completed because the sandbox pool cannot send now.
    func tryOtherEnvironment(_ record: JobRecord, index: Int, tokenIndex: Int, attempts: Int, now: Int64) -> Bool {
        guard let twin = sandboxLanes[record.lane] else { return false }
        if record.onOtherEnvironment.isEmpty { record.onOtherEnvironment = Array(repeating: false, count: record.job.tokens.count) }
        guard !record.onOtherEnvironment[tokenIndex] else {
            // Refused by sandbox too: dead in both; no longer sent straight to sandbox.
            sandboxTokens.remove(record.job.tokens[tokenIndex])
            return false
        }
        if draining || lanes[twin].halted {
            // Not now: back to the retry set with no attempt spent; it starts on production again.
            park(record, token: record.job.tokens[tokenIndex], attempts: attempts,
                 delay: draining ? 0 : policy.credentialsRetryMilliseconds, now: now)
            complete(index, now: now)
            return true
        }
        record.onOtherEnvironment[tokenIndex] = true
        record.setAttempts(tokenIndex, attempts)
        lanes[twin].pushFront(UInt64(index) << 16 | UInt64(tokenIndex), urgent: isUrgent(queue: record.queue))
        return true
    }

    /// Accepted: when by the other environment, the feedback entry that says so.
    func acceptedOnOtherEnvironment(_ record: JobRecord, tokenIndex: Int) {
        guard record.onOtherEnvironment[tokenIndex] else { return }
        queueCounters[record.queue].apps[record.lane].wrongEnvironment += 1
        sandboxTokens.insert(record.job.tokens[tokenIndex])
        var draft = FeedbackEntry.Draft(token: record.job.tokens[tokenIndex], topic: record.job.template.topic,
                                        reason: DeliveryRules.wrongEnvironmentReason, timestamp: nil, job: record.job.origin)
        draft.environment = "sandbox"
        record.feedback.append(draft)
    }

    /// The sandbox lane of `lane`'s app, when it has both environments.
    public func sandboxLane(of lane: Int) -> Int? { sandboxLanes[lane] }
}
