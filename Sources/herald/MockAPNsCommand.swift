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
            apns-ids but keeps every count, so each run works against a table of its own ids only. \
            GET /_herald/latency/MS on --stats-port sets the added round trip for requests from then on.
            """)

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 picks a free one).") var port = 2197
    @Option(help: "PEM certificate to present (default: a self-signed one generated at start).") var cert: String?
    @Option(help: "PEM private key for --cert.") var key: String?
    @Option(name: .customLong("cert-out"), help: "Write the certificate clients must trust (use it as their --ca-file).") var certOut: String?
    @Option(name: .customLong("jwt-key"), help: "Public key PEM or .p8 that signs provider tokens; without it signatures are not checked.") var jwtKey: String?
    @Option(name: .customLong("write-key"), help: "Generate a new .p8 key, write it here, and verify tokens against it (for local trials).") var writeKey: String?
    @Option(name: .customLong("team-id"), help: "Team id tokens must carry (with --jwt-key).") var teamID: String?
    @Option(name: .customLong("key-id"), help: "Key id tokens must carry (with --jwt-key).") var keyID: String?
    @Option(name: .customLong("client-ca"), help: "Accept clients whose certificate verifies against this PEM file without a provider token (certificate auth).") var clientCA: String?
    @Option(name: .customLong("bundle-id"), help: "When set, apns-topic must be this bundle id plus the push type's suffix.") var bundleID: String?
    @Option(name: .customLong("max-streams"), help: "Concurrent streams allowed after the first valid request.") var maxStreams: UInt32 = 1000
    @Option(name: .customLong("latency-ms"), help: "Delay before every answer, in milliseconds.") var latencyMilliseconds: Int64 = 0
    @Option(name: .customLong("error"), help: "Inject STATUS:REASON:RATE, e.g. 503:ServiceUnavailable:0.01 (repeatable).") var errors: [String] = []
    @Option(name: .customLong("unregistered-prefix"), help: "Device tokens with this hex prefix are always 410 Unregistered.") var unregisteredPrefix: String?
    @Option(name: .customLong("throttle-prefix"), help: "Device tokens with this hex prefix get 429 TooManyRequests for their first --throttle-count requests.") var throttlePrefix: String?
    @Option(name: .customLong("throttle-count")) var throttleCount = 1
    @Option(name: .customLong("goaway-after"), help: "Each connection sends GOAWAY (Shutdown) after this many streams.") var goAwayAfter: Int?
    @Option(name: .customLong("disconnect-after"), help: "Each connection is dropped without GOAWAY after this many streams.") var disconnectAfter: Int?
    @Option(name: .customLong("stats-out"), help: "Write the counts as JSON here on exit.") var statsOut: String?
    @Option(name: .customLong("stats-port"), help: "Also serve GET /_herald/stats over plain HTTP/1.1 on this port of --host (0 picks one; prints `stats on HOST:PORT`).") var statsPort: Int?
    @Option(name: .customLong("expect-notifications"), help: "Make room for this many apns-ids up front, so counting them never pauses a benchmark.") var expectNotifications = 0
    @Flag(name: .customLong("measure-latency"), help: "Record enqueue-to-answer latency of accepted requests from the payload's top-level \"t\" (ms or µs since the epoch); percentiles go into the stats.") var measureLatency = false
    @Option(name: .customLong("log-level")) var logLevel: String?

    func run() throws {
        let logger = try makeLogger(label: "herald.mock-apns", level: logLevel)
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
        configuration.goAwayAfterStreams = goAwayAfter
        configuration.disconnectAfterStreams = disconnectAfter
        configuration.teamID = teamID
        configuration.keyID = keyID
        configuration.measureLatency = measureLatency
        configuration.expectedNotifications = max(0, expectNotifications)
        if let writeKey {
            let pem = try ES256PrivateKey.generateP8()
            try writeFile(writeKey, pem, mode: 0o600)
            configuration.jwtKeyPEM = pem
            configuration.teamID = teamID ?? "TEAM000001"
            configuration.keyID = keyID ?? "KEY0000001"
        } else if let jwtKey {
            configuration.jwtKeyPEM = try readFile(jwtKey)
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
            let plain = MetricsHTTPServer(loop: loop) { path in
                switch path {
                case "/_herald/stats":
                    return MetricsHTTPServer.Response(status: 200, contentType: "application/json", body: Array(server.currentStatistics.json().utf8))
                case "/_herald/forget-ids":
                    // Between independent benchmark runs (see MockAPNsServer.forgetAcceptedIDs).
                    server.forgetAcceptedIDs()
                    return MetricsHTTPServer.Response(status: 200, contentType: "application/json", body: Array("{}".utf8))
                case let path where path.hasPrefix("/_herald/latency/"):
                    // GET /_herald/latency/MS: the added round trip for requests from now on.
                    guard let milliseconds = Int64(path.dropFirst("/_herald/latency/".count)), milliseconds >= 0 else {
                        return MetricsHTTPServer.Response(status: 400, body: Array("want /_herald/latency/MILLISECONDS\n".utf8))
                    }
                    server.setLatency(milliseconds: milliseconds)
                    return MetricsHTTPServer.Response(status: 200, contentType: "application/json",
                                                      body: Array("{\"latency_ms\":\(server.latencyMilliseconds)}".utf8))
                default:
                    return MetricsHTTPServer.Response(status: 404, body: Array("try /_herald/stats\n".utf8))
                }
            }
            try plain.start(host: host, port: statsPort)
            statsServer = plain
        }
        print("listening on \(host):\(server.port)")
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
