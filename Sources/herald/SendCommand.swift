import APNs
import ArgumentParser

import Glibc
import HeraldConfig
import Logging
import Transport
import Worker

struct SendCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send notifications once through the connection pool and print each APNs response.",
        discussion: """
            The first thing to try against the sandbox:
              herald send --environment sandbox --bundle-id com.example.app \\
                --team-id ABCDE12345 --key-id KEY1234567 --key-file AuthKey.p8 \\
                --token <hex> --payload '{"aps":{"alert":"Hello"}}'

            It takes the same notification flags as `herald enqueue`. With --config (the worker's \
            file) and --app NAME it sends as that app: its credentials, environment and bundle id. \
            With --count N each token gets N notifications, pipelined over the pool (a quick \
            throughput check); with --quiet only the summary is printed.

            Exits 0 when APNs accepted every notification, 1 when it rejected some, 65 for a \
            notification Herald would refuse, 69 when APNs cannot be reached or --timeout passes, \
            78 for missing or refused credentials.
            """)

    @OptionGroup(title: "APNs") var target: APNsTargetOptions
    @OptionGroup(title: "Provider-token credentials") var credentials: CredentialsOptions
    @OptionGroup(title: "Notification") var notification: NotificationOptions
    @Option(help: "The worker's YAML or JSON config file, for --app (env HERALD_CONFIG; default none: flags and HERALD_* only).")
    var config: String?
    @Flag(help: "Print only the summary (default: one line per notification).") var quiet = false
    @Option(help: "Give up after this many seconds, 1 to 86400.") var timeout = 60
    @OptionGroup(title: "Logging") var log: LogOptions

    func validate() throws {
        guard (1...86_400).contains(timeout) else { throw ValidationError("--timeout must be 1 to 86400 seconds, not \(timeout)") }
    }

    /// `--count` broadcasts to `channelID`, checked as the worker checks a broadcast job.
    func broadcasts(channelID: String, bundleID: String, payload: [UInt8], random: inout SystemRandomNumberGenerator) throws -> [Notification] {
        if let error = Notification.channelIDError(channelID) {
            throw CommandFailure.badJobData("--channel \(channelID) is not a channel id (\(error)): give the id exactly as APNs returned it when the channel was created")
        }
        return try (0..<notification.count).map { _ in
            var item = Notification(
                deviceToken: channelID, topic: bundleID, pushType: .liveactivity, priority: notification.priority,
                expiration: notification.expiration, apnsID: notification.apnsID ?? UUIDString.make(high: random.next(), low: random.next()),
                payload: payload)
            item.isBroadcast = true
            do throws(NotificationError) {
                try item.validateBroadcast()
            } catch {
                throw CommandFailure.badJobData("the broadcast to channel \(channelID) is invalid (\(error.code)): \(error)")
            }
            return item
        }
    }

    func run() throws {
        let logger = try log.makeLogger(label: "herald.send", defaultLevel: .warning)
        let file = try CommandFailure.configuring { try (config ?? environmentValue("CONFIG")).map(ConfigFile.load) }
        let appName = notification.app ?? WorkerApp.defaultName
        let apps = try Herald.resolveApps(file: file, target: target, credentials: credentials, bundleID: notification.bundleID)
        guard let app = apps.first(where: { $0.name == appName }) else {
            throw CommandFailure.configuration(file == nil
                ? "--app \(appName) needs the config file that defines it: give --config FILE (or HERALD_CONFIG)"
                : "no app \(appName) in the config file; it has: \(apps.map(\.name).joined(separator: ", "))")
        }
        guard let resolvedTopic = notification.topic ?? app.defaults.bundleID.map({ notification.pushType.topic(bundleID: $0) }) else {
            throw ValidationError("give --bundle-id (or --topic): APNs needs the app's topic")
        }
        let tokens = notification.tokens
        let count = notification.count
        let payload = Array(notification.payload.utf8)
        var random = SystemRandomNumberGenerator()
        // Every request names one template (the notification without its token and apns-id),
        // each with its own token and apns-id: no copy of the notification per send.
        var requests: [PendingRequest] = []
        requests.reserveCapacity(tokens.count * count)
        if let channelID = notification.channelID {
            let items = try broadcasts(channelID: channelID, bundleID: Notification.broadcastBundleID(fromTopic: resolvedTopic),
                                       payload: payload, random: &random)
            if let first = items.first {
                let shared = NotificationTemplate(template: first)
                for item in items { requests.append(Self.request(item, from: shared, context: requests.count)) }
            }
        }
        let shared = NotificationTemplate(template: Notification(
            deviceToken: "", topic: resolvedTopic, pushType: notification.pushType, priority: notification.priority,
            expiration: notification.expiration, collapseID: notification.collapseID, payload: payload))
        for token in tokens {
            for _ in 0..<count {
                let item = Notification(
                    deviceToken: token, topic: resolvedTopic, pushType: notification.pushType, priority: notification.priority,
                    expiration: notification.expiration, collapseID: notification.collapseID,
                    apnsID: notification.apnsID ?? UUIDString.make(high: random.next(), low: random.next()),
                    payload: payload)
                do {
                    try item.validate(bundleID: app.defaults.bundleID)
                } catch {
                    throw CommandFailure.badJobData("the notification for \(redacted(token)) is invalid (\(error.code)): \(error)")
                }
                requests.append(Self.request(item, from: shared, context: requests.count))
            }
        }

        let loop = try EventLoop()
        let tokenSource = try app.credentials?.tokenSource(time: .system, logger: logger)
        let pool = try CommandFailure.configuring {
            // A broadcast goes to the app's broadcast host when it has one, as the worker sends it.
            try ConnectionPool(loop: loop, configuration: notification.channelID != nil ? (app.broadcastPool ?? app.pool) : app.pool,
                               tokens: tokenSource, logger: logger)
        }
        let session = SendSession(loop: loop, pool: pool, requests: requests, quiet: quiet)
        pool.delegate = session
        let signals = try SignalWatcher(loop: loop) { _ in
            session.interrupted = true
            loop.stop()
        }
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
        // Ctrl-C: the shell's convention (128 + SIGINT), not a failure of APNs.
        if session.interrupted { throw ExitCode(130) }
        if let refused = session.credentialsRefused {
            throw CommandFailure.configuration("APNs refused the credentials: \(refused). Check --team-id, --key-id and --key-file (or the app's certificate).")
        }
        if let unreachable = session.unreachable { throw CommandFailure.unavailable(unreachable) }
        if session.timedOut || session.completed < requests.count {
            throw CommandFailure.unavailable("\(requests.count - session.completed) of \(requests.count) notifications unanswered"
                + (session.timedOut ? " after --timeout \(timeout) s" : ""))
        }
        if session.accepted < requests.count { throw ExitCode(ExitStatus.failure.rawValue) }
    }

    /// The request for `item`, naming `shared` (which holds all of `item` but its token and apns-id).
    static func request(_ item: Notification, from shared: NotificationTemplate, context: Int) -> PendingRequest {
        PendingRequest(source: shared, token: item.token, apnsIDBits: nil, apnsIDText: item.apnsID, context: UInt64(context))
    }
}

/// Feeds notifications to the pool as slots free up and prints what APNs answered.
final class SendSession: ConnectionPoolDelegate {
    let loop: EventLoop
    let pool: ConnectionPool
    /// One request per notification to send, in order (each's context is its index).
    let requests: [PendingRequest]
    let quiet: Bool
    var next = 0
    var completed = 0
    var accepted = 0
    var outcomes: [String: Int] = [:]
    var startedAt: Int64 = 0
    var finishedAt: Int64 = 0
    var timedOut = false
    /// SIGINT or SIGTERM ended the run.
    var interrupted = false
    /// Why no connection could be made at all (APNs unavailable).
    var unreachable: String?
    /// Why the pool stopped sending: APNs refused the credentials.
    var credentialsRefused: String?

    init(loop: EventLoop, pool: ConnectionPool, requests: [PendingRequest], quiet: Bool) {
        self.loop = loop
        self.pool = pool
        self.requests = requests
        self.quiet = quiet
    }

    func poolHasFreeSlots(_ pool: ConnectionPool) {
        var free = pool.freeSlots
        while free > 0, next < requests.count {
            guard pool.send(requests[next]) else { break }
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
        case .permanent(let status, let reason):
            word = "\(status) \(reason?.rawValue ?? "")"
        case .credentialsRejected(let status, let reason):
            word = "\(status) \(reason?.rawValue ?? "")"
            if credentialsRefused == nil { credentialsRefused = word }
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
            let subject = request.source.template.isBroadcast ? "channel " + request.token.string : redacted(request.token.string)
            print("\(subject) apns-id=\(request.apnsID ?? "-") \(word)")
        }
        if completed == requests.count {
            finishedAt = EventLoop.monotonicMilliseconds()
            loop.stop()
        }
    }

    /// Gives up early when no connection can be made at all (every connection failed twice and
    /// none ever came up), instead of retrying until --timeout.
    func watchConnections() {
        loop.schedule(afterMilliseconds: 1000) { [self] in
            if completed == 0, pool.readyConnections == 0, pool.connectionFailures >= 2 * pool.configuration.connections {
                let reason = "cannot reach APNs at \(pool.configuration.host):\(pool.configuration.port): "
                    + (pool.lastConnectionError.map { "\($0)" } ?? "every connection failed")
                unreachable = reason
                print("stopped: \(reason)")
                loop.stop()
                return
            }
            if completed < requests.count { watchConnections() }
        }
    }

    func pool(_ pool: ConnectionPool, stoppedSending reason: String) {
        credentialsRefused = reason
        print("stopped: \(reason)")
        loop.stop()
    }

    func printSummary() {
        let end = finishedAt > 0 ? finishedAt : EventLoop.monotonicMilliseconds()
        let seconds = Double(max(1, end - startedAt)) / 1000
        print("sent \(requests.count), answered \(completed), accepted \(accepted) in \(formatSeconds(seconds)) s"
              + " (\(Int(Double(completed) / seconds)) notifications/s)")
        for (word, count) in outcomes.sorted(by: { $0.key < $1.key }) where word != "200" {
            print("  \(count) × \(word)")
        }
        if timedOut { print("timed out with \(requests.count - completed) unanswered") }
    }
}

/// Seconds with three decimals, without Foundation.
func formatSeconds(_ seconds: Double) -> String {
    let milliseconds = Int((seconds * 1000).rounded())
    let fraction = String(milliseconds % 1000)
    return "\(milliseconds / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
}
