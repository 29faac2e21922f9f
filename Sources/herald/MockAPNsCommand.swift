import APNs
import ArgumentParser
import Glibc
import Logging
import MockAPNs
import Observability
import Transport

struct MockAPNsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-apns",
        abstract: "Run Herald's APNs emulator: HTTP/2 over TLS, APNs' rules and reasons, injectable faults.",
        discussion: """
            Prints `listening on HOST:PORT` when ready. Counts (accepted per apns-id, duplicates, \
            rejections by reason, connections, streams) are served at GET /_herald/stats and written \
            as JSON to --stats-out on SIGTERM or SIGINT. Between independent benchmark runs, \
            /_herald/forget-ids (POST over HTTP/2, or GET on --stats-port) drops the table of accepted \
            apns-ids but keeps every count, so each run works against a table of its own ids only.

            Faults change while running through /_herald/... on the emulator's port (GET or POST \
            over HTTP/2) and on --stats-port (GET): latency/MS, max-streams/N, stall/RATE, \
            stall-next/N, reset-streams/CODE:RATE|off, garbage-body/KIND[:RATE]|off, \
            ignore-ping/on|off, reject-tokens/on|off, withhold-window/on|off. GET /_herald/faults shows the faults in force. \
            With --measure-latency, GET /_herald/timeline gives the latency per window of time \
            (--timeline-window-ms, --timeline-over-ms). \
            Each injected fault is counted in the stats (streams_stalled, streams_reset, \
            garbage_bodies, pings_ignored, tokens_rejected, settings_sent).
            """)

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on; 0 picks a free one.") var port = 2197
    @Option(help: "PEM certificate to present (default: a self-signed one generated at start).") var cert: String?
    @Option(help: "PEM private key for --cert (default: the generated certificate's).") var key: String?
    @Option(name: .customLong("cert-out"), help: "Write the certificate clients must trust here (use it as their --ca-file; default: not written).") var certOut: String?
    @Option(name: .customLong("jwt-key"), help: "Public key PEM or .p8 that signs provider tokens (default none: signatures are not checked).") var jwtKey: String?
    @Option(name: .customLong("write-key"), help: "Generate a new .p8 key, write it here, and verify tokens against it, for local trials (default: no key written).") var writeKey: String?
    @Option(name: .customLong("team-id"), help: "Team id tokens must carry (with --jwt-key; with --write-key default TEAM000001).") var teamID: String?
    @Option(name: .customLong("key-id"), help: "Key id tokens must carry (with --jwt-key; with --write-key default KEY0000001).") var keyID: String?
    @Option(name: .customLong("client-ca"), help: "Accept clients whose certificate verifies against this PEM file without a provider token, certificate auth (default none: no client certificates asked for).") var clientCA: String?
    @Option(name: .customLong("bundle-id"), help: "When set, apns-topic must be this bundle id plus the push type's suffix (default: any topic).") var bundleID: String?
    @Option(name: .customLong("max-streams"), help: "Concurrent streams allowed after the first valid request.") var maxStreams: UInt32 = 1000
    @Option(name: .customLong("latency-ms"), help: "Delay before every answer, in milliseconds.") var latencyMilliseconds: Int64 = 0
    @Option(name: .customLong("error"), help: "Inject STATUS:REASON:RATE, e.g. 503:ServiceUnavailable:0.01 (repeatable; default none).") var errors: [String] = []
    @Option(name: .customLong("unregistered-prefix"), help: "Device tokens with this hex prefix are always 410 Unregistered (default none).") var unregisteredPrefix: String?
    @Option(name: .customLong("throttle-prefix"), help: "Device tokens with this hex prefix get 429 TooManyRequests for their first --throttle-count requests (default none).") var throttlePrefix: String?
    @Option(name: .customLong("throttle-count"), help: "How many requests per --throttle-prefix token get 429 before it is accepted.") var throttleCount = 1
    @Option(name: .customLong("throttle-window-ms"), help: "After a 429 to a --throttle-prefix token, its requests within this many milliseconds get 429 too, each starting the window again (default 0: only the first --throttle-count).") var throttleWindowMilliseconds: Int64 = 0
    @Option(name: .customLong("bad-token-prefix"), help: "Device tokens with one of these comma-separated hex prefixes get 400 BadDeviceToken, as tokens of the other APNs environment do (default none).") var badTokenPrefix: String?
    @Option(name: .customLong("goaway-after"), help: "Each connection sends GOAWAY (Shutdown) after this many streams (default: never).") var goAwayAfter: Int?
    @Option(name: .customLong("disconnect-after"), help: "Each connection is dropped without GOAWAY after this many streams (default: never).") var disconnectAfter: Int?
    @Option(name: .customLong("stall"), help: "Leave this share (0 to 1) of requests unanswered: no HEADERS, no RST_STREAM; PINGs and other streams are still answered.") var stall: Double = 0
    @Option(name: .customLong("stall-next"), help: "Leave the next N requests unanswered.") var stallNext = 0
    @Option(name: .customLong("reset-streams"), help: "Reset CODE:RATE of streams instead of answering, e.g. REFUSED_STREAM:0.1 or INTERNAL_ERROR:0.01 (an HTTP/2 error code name or number; default: never).") var resetStreams: String?
    @Option(name: .customLong("garbage-body"), help: "Send KIND[:RATE] of error answers with a garbage body; KIND is text, binary, oversized (1 MiB), unknown-reason or long-reason (10 KiB) (default: never).") var garbageBody: String?
    @Flag(name: .customLong("ignore-ping"), help: "Do not acknowledge PING frames.") var ignorePing = false
    @Flag(name: .customLong("reject-tokens"), help: "Answer every request with a provider token 403 InvalidProviderToken (until /_herald/reject-tokens/off).") var rejectTokens = false
    @Flag(name: .customLong("withhold-window"), help: "Never send WINDOW_UPDATE on connections accepted while on: each takes 65,535 bytes of DATA in all (until /_herald/withhold-window/off).") var withholdWindow = false
    @Option(name: .customLong("channels-port"), help: "Serve the broadcast channel management API (/1/apps/BUNDLE/channels, TLS + HTTP/2, same certificate and token checks) on this port; 0 picks a free one and prints `channels on HOST:PORT`; -1 serves none (default 0).") var channelsPort = 0
    @Option(name: .customLong("max-channels"), help: "Channels one bundle id may hold before creating another is 400 CannotCreateChannelConfig (default 10000, APNs' limit per app and environment).") var maxChannels = 10_000
    @Flag(name: .customLong("broadcast-disabled"), help: "Answer broadcasts and channel requests 400 FeatureNotEnabled, as APNs does for an app without broadcast push (default: enabled).") var broadcastDisabled = false
    @Flag(name: .customLong("unique-ids"), help: "Add apns-unique-id to device-push answers too, as APNs' sandbox does (default: broadcast answers only).") var uniqueIDs = false
    @Option(name: .customLong("stats-out"), help: "Write the counts as JSON here on exit (default: only printed).") var statsOut: String?
    @Option(name: .customLong("stats-port"), help: "Also serve GET /_herald/stats over plain HTTP/1.1 on this port of --host (0 picks one; prints `stats on HOST:PORT`; default: not served).") var statsPort: Int?
    @Option(name: .customLong("expect-notifications"), help: "Make room for this many apns-ids up front, so counting them never pauses a benchmark.") var expectNotifications = 0
    @Flag(name: .customLong("measure-latency"), help: "Record enqueue-to-answer latency of accepted requests from the payload's top-level \"t\" (ms or µs since the epoch), and from \"s\" (a paced producer's schedule) when present; percentiles go into the stats.") var measureLatency = false
    @Option(name: .customLong("timeline-window-ms"), help: "With --measure-latency: the width of the windows of the latency timeline (GET /_herald/timeline: answers, mean and largest latency, and answers over --timeline-over-ms, per window; the last 65,536 windows are kept).") var timelineWindowMilliseconds: Int64 = 10
    @Option(name: .customLong("timeline-over-ms"), help: "With --measure-latency: answers slower than this count as over in the timeline.") var timelineOverMilliseconds: Int64 = 5
    @OptionGroup var log: LogOptions

    func run() throws {
        let logger = try log.makeLogger(label: "herald.mock-apns")
        var configuration = MockAPNsConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.certificateFile = cert
        configuration.keyFile = key
        configuration.certificateOut = certOut
        configuration.bundleID = bundleID
        configuration.clientCAFile = clientCA
        configuration.maxStreams = maxStreams
        configuration.latencyMilliseconds = latencyMilliseconds
        configuration.injectedErrors = try errors.map {
            guard let error = InjectedError(argument: $0) else {
                throw ValidationError("--error takes STATUS:REASON:RATE with a rate from 0 to 1, e.g. 503:ServiceUnavailable:0.01; got \($0)")
            }
            return error
        }
        configuration.unregisteredPrefix = unregisteredPrefix?.lowercased()
        configuration.throttlePrefix = throttlePrefix?.lowercased()
        configuration.throttleCount = throttleCount
        guard throttleWindowMilliseconds >= 0 else { throw ValidationError("--throttle-window-ms must be 0 or more; got \(throttleWindowMilliseconds)") }
        configuration.throttleWindowMilliseconds = throttleWindowMilliseconds
        configuration.badTokenPrefixes = try (badTokenPrefix ?? "").split(separator: ",").map {
            let prefix = String($0.filter { $0 != " " }).lowercased()
            guard !prefix.isEmpty, prefix.count <= 64, prefix.allSatisfy(\.isHexDigit) else {
                throw ValidationError("--bad-token-prefix takes comma-separated hex prefixes, e.g. 5b,dd; got \($0)")
            }
            return prefix
        }
        configuration.goAwayAfterStreams = goAwayAfter
        configuration.disconnectAfterStreams = disconnectAfter
        configuration.teamID = teamID
        configuration.keyID = keyID
        configuration.measureLatency = measureLatency
        guard (1...3_600_000).contains(timelineWindowMilliseconds) else {
            throw ValidationError("--timeline-window-ms takes 1 to 3600000; got \(timelineWindowMilliseconds)")
        }
        guard (0...3_600_000).contains(timelineOverMilliseconds) else {
            throw ValidationError("--timeline-over-ms takes 0 to 3600000; got \(timelineOverMilliseconds)")
        }
        configuration.timelineWindowMilliseconds = timelineWindowMilliseconds
        configuration.timelineOverMilliseconds = timelineOverMilliseconds
        guard channelsPort >= -1, channelsPort <= 65_535 else { throw ValidationError("--channels-port takes 0 to 65535, or -1 for none; got \(channelsPort)") }
        guard maxChannels >= 1 else { throw ValidationError("--max-channels takes 1 or more; got \(maxChannels)") }
        configuration.channelsPort = channelsPort < 0 ? nil : channelsPort
        configuration.maxChannelsPerApp = maxChannels
        configuration.broadcastDisabled = broadcastDisabled
        configuration.uniqueIDs = uniqueIDs
        guard (0...1).contains(stall) else { throw ValidationError("--stall takes a share from 0 to 1; got \(stall)") }
        guard stallNext >= 0 else { throw ValidationError("--stall-next takes a count of 0 or more; got \(stallNext)") }
        configuration.faults.stallRate = stall
        configuration.faults.stallNext = stallNext
        if let resetStreams {
            guard let reset = InjectedReset(argument: resetStreams) else {
                throw ValidationError("--reset-streams takes CODE:RATE, e.g. REFUSED_STREAM:0.1 or 2:0.5; got \(resetStreams)")
            }
            configuration.faults.reset = reset
        }
        if let garbageBody {
            guard let garbage = InjectedGarbageBody(argument: garbageBody) else {
                let kinds = GarbageBodyKind.allCases.map(\.rawValue).joined(separator: ", ")
                throw ValidationError("--garbage-body takes KIND or KIND:RATE with KIND one of \(kinds); got \(garbageBody)")
            }
            configuration.faults.garbageBody = garbage
        }
        configuration.faults.ignorePing = ignorePing
        configuration.faults.rejectTokens = rejectTokens
        configuration.faults.withholdWindow = withholdWindow
        configuration.expectedNotifications = max(0, expectNotifications)
        if let writeKey {
            let pem = try ES256PrivateKey.generateP8()
            try writeFile(writeKey, pem, mode: 0o600)
            configuration.jwtKeyPEM = pem
            configuration.teamID = teamID ?? "TEAM000001"
            configuration.keyID = keyID ?? "KEY0000001"
        } else if let jwtKey {
            configuration.jwtKeyPEM = try CommandFailure.configuring { try readFile(jwtKey) }
        } else {
            logger.warning("no --jwt-key: provider-token signatures are not checked")
        }

        let loop = try EventLoop()
        var stopping = false
        let server = try MockAPNsServer(loop: loop, configuration: configuration, logger: logger)
        let signals = try SignalWatcher(loop: loop) { _ in
            if stopping { return }
            stopping = true
            loop.stop()
        }
        try server.start()
        var statsServer: MetricsHTTPServer? = nil
        if let statsPort {
            // Plain HTTP for scripts and the load generator, which speak no HTTP/2.
            // The same control paths as on the emulator's port (MockAPNsServer.control(path:)).
            let plain = MetricsHTTPServer(loop: loop) { path in
                guard path.hasPrefix("/_herald/") else {
                    return MetricsHTTPServer.Response(status: 404, body: Array("try /_herald/stats\n".utf8))
                }
                let (status, body) = server.control(path: path)
                return MetricsHTTPServer.Response(status: status, contentType: "application/json", body: Array(body.utf8))
            }
            try plain.start(host: host, port: statsPort)
            statsServer = plain
        }
        print("listening on \(host):\(server.port)")
        if server.channelsPort > 0 { print("channels on \(host):\(server.channelsPort)") }
        if let statsServer { print("stats on \(host):\(statsServer.port)") }
        fflush(nil)
        loop.run()
        _ = signals
        statsServer?.stop()
        let json = server.currentStatistics.json()
        server.stop()
        if let statsOut { try writeFile(statsOut, json + "\n", mode: 0o644) }
        print(json)
    }
}

/// A whole small text file, or a usage error naming it.
func readFile(_ path: String) throws -> String {
    do { return try PEMFile.read(path: path) } catch { throw ValidationError("\(error)") }
}

/// Replaces a file with `text`, with `mode` set before anything is written.
func writeFile(_ path: String, _ text: String, mode: mode_t) throws {
    do { try PEMFile.write(text, to: path, mode: mode) } catch { throw ValidationError("\(error)") }
}
