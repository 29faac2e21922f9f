import APNs
import ArgumentParser

import Glibc
import Logging
import Transport
import Worker

struct SendCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send notifications once through the connection pool and print each APNs response.",
        discussion: """
            The first thing to try against the sandbox:
              herald send --environment sandbox --team-id ABCDE12345 --key-id KEY1234567 \\
                --key-file AuthKey_KEY1234567.p8 --bundle-id com.example.app --token <hex> \\
                --payload '{"aps":{"alert":"Hello"}}'
            With --count N each token gets N notifications, pipelined over the pool (a quick
            throughput check); with --quiet only the summary is printed.
            """)

    @OptionGroup var target: APNsTargetOptions
    @OptionGroup var credentials: CredentialsOptions

    @Option(name: .customLong("token"), help: "Device token, hex (repeatable).") var tokens: [String] = []
    @Option(help: "JSON payload.") var payload = #"{"aps":{"alert":"Hello from Herald"}}"#
    @Option(name: .customLong("bundle-id"), help: "App bundle id; the topic is this plus the push type's suffix (env HERALD_BUNDLE_ID).") var bundleID: String?
    @Option(help: "apns-topic, when it is not the bundle id plus the push type's suffix.") var topic: String?
    @Option(name: .customLong("push-type"), help: "apns-push-type.") var pushType = "alert"
    @Option(help: "apns-priority: 10, 5 or 1.") var priority: Int?
    @Option(help: "apns-expiration, UNIX seconds (0: try once).") var expiration: Int64?
    @Option(name: .customLong("collapse-id"), help: "apns-collapse-id.") var collapseID: String?
    @Option(name: .customLong("apns-id"), help: "apns-id (canonical lowercase UUID); generated when absent.") var apnsID: String?
    @Option(help: "Notifications per token.") var count = 1
    @Flag(help: "Print only the summary.") var quiet = false
    @Option(help: "Give up after this many seconds.") var timeout = 60
    @Option(name: .customLong("log-level")) var logLevel: String?

    func run() throws {
        let logger = try makeLogger(label: "herald.send", level: logLevel ?? "warning")
        guard !tokens.isEmpty else { throw ValidationError("give at least one --token") }
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        guard let type = PushType(rawValue: pushType) else {
            throw ValidationError("unknown --push-type \(pushType); one of: \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let resolvedTopic = topic ?? (bundleID ?? environmentValue("BUNDLE_ID")).map({ type.topic(bundleID: $0) }) else {
            throw ValidationError("give --bundle-id (or --topic): APNs needs the app's topic")
        }
        var priorityValue: Priority? = nil
        if let priority {
            guard let value = Priority(rawValue: priority) else { throw ValidationError("--priority must be 10, 5 or 1") }
            priorityValue = value
        }
        var random = SystemRandomNumberGenerator()
        var notifications: [Notification] = []
        notifications.reserveCapacity(tokens.count * count)
        for token in tokens {
            for _ in 0..<count {
                let notification = Notification(
                    deviceToken: token, topic: resolvedTopic, pushType: type, priority: priorityValue,
                    expiration: expiration, collapseID: collapseID,
                    apnsID: apnsID ?? UUIDString.make(high: random.next(), low: random.next()),
                    payload: Array(payload.utf8))
                do {
                    try notification.validate()
                } catch {
                    throw ValidationError("the notification for \(redacted(token)) is invalid (\(error.code)): \(error)")
                }
                notifications.append(notification)
            }
        }

        let loop = try EventLoop()
        let tokenSource = try credentials.tokenSource(time: .system, logger: logger)
        let pool = try ConnectionPool(loop: loop, configuration: try target.poolConfiguration(), tokens: tokenSource, logger: logger)
        let session = SendSession(loop: loop, pool: pool, notifications: notifications, quiet: quiet)
        pool.delegate = session
        let signals = try SignalWatcher(loop: loop) { _ in loop.stop() }
        guard (1...86_400).contains(timeout) else { throw ValidationError("--timeout must be 1 to 86400 seconds, not \(timeout)") }
        loop.schedule(afterMilliseconds: Int64(timeout) * 1000) {
            session.timedOut = true
            loop.stop()
        }
        session.startedAt = EventLoop.monotonicMilliseconds()
        session.watchConnections()
        pool.start()
        loop.run()
        _ = signals
        pool.stop()
        session.printSummary()
        if session.timedOut || session.completed < notifications.count || session.stoppedReason != nil {
            throw ExitCode(2)
        }
        if session.accepted < notifications.count { throw ExitCode(1) }
    }
}

/// Feeds notifications to the pool as slots free up and prints what APNs answered.
final class SendSession: ConnectionPoolDelegate {
    let loop: EventLoop
    let pool: ConnectionPool
    let notifications: [Notification]
    let quiet: Bool
    var next = 0
    var completed = 0
    var accepted = 0
    var outcomes: [String: Int] = [:]
    var startedAt: Int64 = 0
    var finishedAt: Int64 = 0
    var timedOut = false
    var stoppedReason: String?

    init(loop: EventLoop, pool: ConnectionPool, notifications: [Notification], quiet: Bool) {
        self.loop = loop
        self.pool = pool
        self.notifications = notifications
        self.quiet = quiet
    }

    func poolHasFreeSlots(_ pool: ConnectionPool) {
        var free = pool.freeSlots
        while free > 0, next < notifications.count {
            guard pool.send(PendingRequest(notification: notifications[next], context: UInt64(next))) else { break }
            next += 1
            free -= 1
        }
    }

    func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome) {
        if case .retryOnAnotherConnection = outcome, request.attempts <= 2, pool.freeSlots > 0, pool.send(request) {
            return  // a transport failure or 5xx: resent at once, twice at most, as the worker does
        }
        completed += 1
        let word: String
        switch outcome {
        case .accepted:
            accepted += 1
            word = "200"
        case .permanent(let status, let reason), .credentialsRejected(let status, let reason):
            word = "\(status) \(reason?.rawValue ?? "")"
        case .deadToken(let status, let reason, let timestamp):
            word = "\(status) \(reason.rawValue)" + (timestamp.map { " timestamp=\($0)" } ?? "")
        case .retryTokenLater(let reason):
            word = "429 \(reason?.rawValue ?? "TooManyRequests")"
        case .providerTokenUpdatesThrottled:
            word = "429 TooManyProviderTokenUpdates"
        case .refreshProviderToken:
            word = "403 ExpiredProviderToken"
        case .retryOnAnotherConnection(let cause):
            word = "not delivered (\(cause))"
        }
        outcomes[word, default: 0] += 1
        if !quiet {
            print("\(redacted(request.notification.deviceToken)) apns-id=\(request.notification.apnsID ?? "-") \(word)")
        }
        if completed == notifications.count {
            finishedAt = EventLoop.monotonicMilliseconds()
            loop.stop()
        }
    }

    /// Gives up early when no connection can be made at all (every connection failed twice and
    /// none ever came up), instead of retrying until --timeout.
    func watchConnections() {
        loop.schedule(afterMilliseconds: 1000) { [self] in
            if completed == 0, pool.readyConnections == 0, pool.connectionFailures >= 2 * pool.configuration.connections {
                stoppedReason = "cannot reach APNs at \(pool.configuration.host):\(pool.configuration.port): "
                    + (pool.lastConnectionError.map { "\($0)" } ?? "every connection failed")
                print("stopped: \(stoppedReason!)")
                loop.stop()
                return
            }
            if completed < notifications.count { watchConnections() }
        }
    }

    func pool(_ pool: ConnectionPool, stoppedSending reason: String) {
        stoppedReason = reason
        print("stopped: \(reason)")
        loop.stop()
    }

    func printSummary() {
        let end = finishedAt > 0 ? finishedAt : EventLoop.monotonicMilliseconds()
        let seconds = Double(max(1, end - startedAt)) / 1000
        print("sent \(notifications.count), answered \(completed), accepted \(accepted) in \(formatSeconds(seconds)) s"
              + " (\(Int(Double(completed) / seconds)) notifications/s)")
        for (word, count) in outcomes.sorted(by: { $0.key < $1.key }) where word != "200" {
            print("  \(count) × \(word)")
        }
        if timedOut { print("timed out with \(notifications.count - completed) unanswered") }
    }
}

/// Seconds with three decimals, without Foundation.
func formatSeconds(_ seconds: Double) -> String {
    let milliseconds = Int((seconds * 1000).rounded())
    let fraction = String(milliseconds % 1000)
    return "\(milliseconds / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
}
