import APNs
import ArgumentParser
import Glibc
import HeraldConfig
import Logging
import Observability
import Transport
import Worker

/// Reads `HERALD_<NAME>` from the environment: every flag below has one, flags win.
func environment(_ name: String) -> String? {
    guard let value = getenv("HERALD_" + name) else { return nil }
    let text = String(cString: value)
    return text.isEmpty ? nil : text
}

/// Which APNs service: production (api.push.apple.com) or sandbox (api.sandbox.push.apple.com),
/// for development builds of an app.
enum APNsEnvironment: String, ExpressibleByArgument, CaseIterable {
    /// `both`: production first; a 400 BadDeviceToken from it is tried once on sandbox (worker only).
    case production, sandbox, both
}

/// swift-log's levels, as a closed set so help and shell completion list them.
enum LogLevelOption: String, ExpressibleByArgument, CaseIterable {
    case trace, debug, info, notice, warning, error, critical
}

extension LogFormat: ExpressibleByArgument {}

extension PushType: ExpressibleByArgument {}

extension Priority: ExpressibleByArgument {
    public init?(argument: String) {
        guard let value = Int(argument) else { return nil }
        self.init(rawValue: value)
    }

    public var defaultValueDescription: String { String(rawValue) }

    public static var allValueStrings: [String] { allCases.map { String($0.rawValue) } }
}

/// `--log-level` and `--log-format`, the same in every command that logs.
struct LogOptions: ParsableArguments {
    @Option(name: .customLong("log-level"), help: "Least severe level logged (env HERALD_LOG_LEVEL; default info, warning for send).")
    var level: LogLevelOption?

    @Option(name: .customLong("log-format"), help: "Log line format on standard error (env HERALD_LOG_FORMAT; default text).")
    var format: LogFormat?

    /// The logger, from the flags, else HERALD_LOG_LEVEL and HERALD_LOG_FORMAT, else the config
    /// file's (`fileLevel`, `fileFormat`), else `defaultLevel` and text.
    func makeLogger(label: String, defaultLevel: LogLevelOption = .info, fileLevel: String? = nil, fileFormat: String? = nil) throws -> Logger {
        try Herald.makeLogger(label: label, level: level?.rawValue, format: format?.rawValue,
                              fileLevel: fileLevel, fileFormat: fileFormat, defaultLevel: defaultLevel)
    }
}

/// Where APNs is and how many connections and streams to use.
struct APNsTargetOptions: ParsableArguments {
    @Option(help: "APNs environment: production, sandbox, or both (the worker sends to production and tries a token production calls BadDeviceToken once on sandbox; other commands use production); picks the APNs host unless --apns-host is given (env HERALD_ENVIRONMENT; default production).")
    var environment: APNsEnvironment?

    @Option(name: .customLong("apns-host"), help: "Override the APNs host, e.g. 127.0.0.1 for the emulator (env HERALD_APNS_HOST; default api.push.apple.com, or api.sandbox.push.apple.com with --environment sandbox).")
    var apnsHost: String?

    @Option(name: .customLong("apns-port"), help: "Override the APNs port (env HERALD_APNS_PORT; default 443).")
    var apnsPort: Int?

    @Option(name: .customLong("apns-broadcast-host"), help: "Send Live Activity broadcasts (jobs with channel_id, --channel) to this host over a pool of their own, e.g. api-broadcast.push.apple.com (env HERALD_APNS_BROADCAST_HOST; default none: broadcasts go over the app's push connections to --apns-host).")
    var apnsBroadcastHost: String?

    @Option(name: .customLong("apns-broadcast-port"), help: "The broadcast host's port, with --apns-broadcast-host (env HERALD_APNS_BROADCAST_PORT; default 443).")
    var apnsBroadcastPort: Int?

    @Option(name: .customLong("ca-file"), help: "An extra trusted CA certificate (PEM), e.g. the emulator's (env HERALD_CA_FILE; default none: the system's CAs). Verification is always on.")
    var caFile: String?

    @Option(help: "HTTP/2 connections per app, 1 to 64 (env HERALD_CONNECTIONS; default 4).")
    var connections: Int?

    @Option(name: .customLong("max-streams"), help: "Herald's cap on concurrent streams per connection, 1 to 10000; APNs' own limit applies too (env HERALD_MAX_STREAMS; default 1000).")
    var maxStreams: Int?

    @Option(name: .customLong("response-timeout"),
            help: "Seconds a notification waits for APNs' answer before its stream is reset and it is retried as an attempt with an unknown outcome, 1 to 3600 (env HERALD_RESPONSE_TIMEOUT; default 30).")
    var responseTimeout: Int?

    @Option(name: .customLong("ping-interval"),
            help: "Seconds a connection may go without input before a PING checks it; an unanswered PING closes it after as long again, at most 10 s. 1 to 3600 (env HERALD_PING_INTERVAL; default 60).")
    var pingInterval: Int?

    /// `--ping-interval` (or HERALD_PING_INTERVAL) in milliseconds, checked.
    func pingIntervalMilliseconds() throws -> Int64 {
        let seconds = try pingInterval ?? intEnvironment("PING_INTERVAL") ?? 60
        guard (1...3600).contains(seconds) else { throw ValidationError("--ping-interval must be 1 to 3600 seconds, not \(seconds)") }
        return Int64(seconds) * 1000
    }

    /// `--response-timeout` (or HERALD_RESPONSE_TIMEOUT) in milliseconds, checked.
    func responseTimeoutMilliseconds() throws -> Int64 {
        let seconds = try responseTimeout ?? intEnvironment("RESPONSE_TIMEOUT") ?? 30
        guard (1...3600).contains(seconds) else { throw ValidationError("--response-timeout must be 1 to 3600 seconds, not \(seconds)") }
        return Int64(seconds) * 1000
    }

    /// Flags, then HERALD_* variables, then the config file's app (`file`), then defaults.
    func poolConfiguration(file: ConfigFile.App? = nil) throws -> PoolConfiguration {
        var configuration = try APNsTargetOptions.poolConfiguration(
            environment: environment?.rawValue ?? environmentValue("ENVIRONMENT") ?? file?.environment,
            host: apnsHost ?? environmentValue("APNS_HOST") ?? file?.apnsHost,
            port: try apnsPort ?? intEnvironment("APNS_PORT") ?? file?.apnsPort,
            caFile: caFile ?? environmentValue("CA_FILE") ?? file?.caFile,
            connections: try connections ?? intEnvironment("CONNECTIONS") ?? file?.connections,
            maxStreams: try maxStreams ?? intEnvironment("MAX_STREAMS") ?? file?.maxStreams)
        configuration.responseTimeoutMilliseconds = try responseTimeoutMilliseconds()
        configuration.pingIntervalMilliseconds = try pingIntervalMilliseconds()
        return configuration
    }

    /// With environment `both`: the sandbox pool beside `production` (same connections, streams,
    /// CA and timeouts; its own host and port, from `sandbox`'s flags, HERALD_* or the file).
    /// Nil for one environment.
    func sandboxPoolConfiguration(production: PoolConfiguration, sandbox: SandboxTargetOptions?,
                                  file: ConfigFile.App? = nil) throws -> PoolConfiguration? {
        try APNsTargetOptions.sandboxPoolConfiguration(
            environment: environment?.rawValue ?? environmentValue("ENVIRONMENT") ?? file?.environment, production: production,
            host: sandbox?.apnsSandboxHost ?? environmentValue("APNS_SANDBOX_HOST") ?? file?.apnsSandboxHost,
            port: try sandbox?.apnsSandboxPort ?? intEnvironment("APNS_SANDBOX_PORT") ?? file?.apnsSandboxPort)
    }

    /// With a broadcast host: the pool broadcasts go to (one connection; the app's streams, CA and
    /// timeouts; its own host and port, from the flags, HERALD_* or the file). Nil without one.
    func broadcastPoolConfiguration(push: PoolConfiguration, file: ConfigFile.App? = nil) throws -> PoolConfiguration? {
        try APNsTargetOptions.broadcastPoolConfiguration(
            push: push, host: apnsBroadcastHost ?? environmentValue("APNS_BROADCAST_HOST") ?? file?.broadcastHost,
            port: try apnsBroadcastPort ?? intEnvironment("APNS_BROADCAST_PORT") ?? file?.broadcastPort)
    }

    static func broadcastPoolConfiguration(push: PoolConfiguration, host: String?, port: Int?) throws -> PoolConfiguration? {
        guard let host else {
            guard port == nil else {
                throw CommandFailure.configuration("a broadcast port (\(port!)) was given without a broadcast host: set --apns-broadcast-host (HERALD_APNS_BROADCAST_HOST, or broadcast_host in the config file) too")
            }
            return nil
        }
        guard !host.isEmpty else {
            throw CommandFailure.configuration("the broadcast host is empty: name a host (e.g. api-broadcast.push.apple.com) or leave it unset to send broadcasts over the push connections")
        }
        var pool = push
        pool.host = host
        pool.port = port ?? 443
        pool.connections = 1
        guard (1...65_535).contains(pool.port) else { throw ValidationError("the broadcast APNs port must be 1 to 65535, not \(pool.port)") }
        return pool
    }

    static func sandboxPoolConfiguration(environment: String?, production: PoolConfiguration, host: String?, port: Int?) throws -> PoolConfiguration? {
        guard environment == APNsEnvironment.both.rawValue else { return nil }
        var sandbox = production
        sandbox.host = host ?? PoolConfiguration.sandboxHost
        sandbox.port = port ?? 443
        guard (1...65_535).contains(sandbox.port) else { throw ValidationError("the sandbox APNs port must be 1 to 65535, not \(sandbox.port)") }
        return sandbox
    }

    static func poolConfiguration(environment: String?, host: String?, port: Int?, caFile: String?,
                                  connections: Int?, maxStreams: Int?) throws -> PoolConfiguration {
        let environmentName = environment ?? "production"
        guard let apnsEnvironment = APNsEnvironment(rawValue: environmentName) else {
            throw CommandFailure.configuration("the APNs environment (HERALD_ENVIRONMENT or environment) must be production, sandbox or both, not \(environmentName)")
        }
        let host = host ?? (apnsEnvironment == .sandbox ? PoolConfiguration.sandboxHost : PoolConfiguration.productionHost)
        let connections = connections ?? 4
        let maxStreams = maxStreams ?? 1000
        guard (1...64).contains(connections) else { throw ValidationError("connections must be 1 to 64, not \(connections)") }
        guard (1...10_000).contains(maxStreams) else { throw ValidationError("max streams must be 1 to 10000, not \(maxStreams)") }
        return PoolConfiguration(host: host, port: port ?? 443, connections: connections, maxStreams: maxStreams, caFile: caFile)
    }
}

/// The sandbox host of an app with both environments (`--environment both`): the worker's only,
/// since `herald send` sends to production alone.
struct SandboxTargetOptions: ParsableArguments {
    @Option(name: .customLong("apns-sandbox-host"), help: "With --environment both: override the sandbox APNs host (env HERALD_APNS_SANDBOX_HOST; default api.sandbox.push.apple.com). --apns-host then names the production host.")
    var apnsSandboxHost: String?

    @Option(name: .customLong("apns-sandbox-port"), help: "With --environment both: override the sandbox APNs port (env HERALD_APNS_SANDBOX_PORT; default 443).")
    var apnsSandboxPort: Int?
}

/// The provider-token credentials of one app.
struct CredentialsOptions: ParsableArguments {
    @Option(name: .customLong("team-id"), help: "Apple developer team id, 10 characters (env HERALD_TEAM_ID; required for token auth, no default).")
    var teamID: String?

    @Option(name: .customLong("key-id"), help: "Key id of the .p8 signing key, 10 characters (env HERALD_KEY_ID; required for token auth, no default).")
    var keyID: String?

    @Option(name: .customLong("key-file"), help: "Path of the .p8 provider-token key (env HERALD_KEY_FILE; required for token auth, no default).")
    var keyFile: String?

    @Option(name: .customLong("token-refresh-minutes"), help: "Provider-token refresh interval, 20 to 60 minutes (env HERALD_TOKEN_REFRESH_MINUTES; default \(ProviderTokenSource.defaultRefreshMinutes)).")
    var tokenRefreshMinutes: Int?

    /// The token source, or an error that says exactly what is missing and how to try locally.
    func tokenSource(time: TimeSource, logger: Logger) throws -> ProviderTokenSource {
        try resolved().tokenSource(time: time, logger: logger)
    }

    /// True when a flag or HERALD_* variable names any token credential.
    var anyGiven: Bool {
        teamID != nil || keyID != nil || keyFile != nil
            || environmentValue("TEAM_ID") != nil || environmentValue("KEY_ID") != nil || environmentValue("KEY_FILE") != nil
    }

    /// The credentials with environment and config-file fallbacks applied, checked for presence.
    func resolved(file app: ConfigFile.App? = nil, appName: String = "default") throws -> ResolvedCredentials {
        try CredentialsOptions.resolved(
            team: teamID ?? environmentValue("TEAM_ID") ?? app?.teamID, key: keyID ?? environmentValue("KEY_ID") ?? app?.keyID,
            file: keyFile ?? environmentValue("KEY_FILE") ?? app?.keyFile,
            minutes: try tokenRefreshMinutes ?? intEnvironment("TOKEN_REFRESH_MINUTES") ?? app?.tokenRefreshMinutes, appName: appName)
    }

    /// The credentials of a config file's app other than `default`: the flags and HERALD_*
    /// variables describe `default` only, so they are not read here. (A `CredentialsOptions()`
    /// made by hand cannot be read either: its options were never parsed.)
    static func resolved(fileApp app: ConfigFile.App?, appName: String) throws -> ResolvedCredentials {
        try resolved(team: app?.teamID, key: app?.keyID, file: app?.keyFile, minutes: app?.tokenRefreshMinutes, appName: appName)
    }

    private static func resolved(team: String?, key: String?, file: String?, minutes: Int?, appName: String) throws -> ResolvedCredentials {
        var missing: [String] = []
        if team == nil { missing.append("--team-id (HERALD_TEAM_ID)") }
        if key == nil { missing.append("--key-id (HERALD_KEY_ID)") }
        if file == nil { missing.append("--key-file (HERALD_KEY_FILE)") }
        guard let team, let key, let file else {
            throw CommandFailure.configuration("""
                no APNs credentials for app "\(appName)": missing \(missing.joined(separator: ", ")) \
                (or, in a --config file, team_id/key_id/key_file or certificate_file/private_key_file or pkcs12_file).
                To try Herald locally without Apple credentials, run `make demo`, or start the emulator \
                with `herald mock-apns --cert-out /tmp/mock.pem --write-key /tmp/mock.p8` and point Herald at it \
                with --apns-host 127.0.0.1 --apns-port <port> --ca-file /tmp/mock.pem --key-file /tmp/mock.p8 \
                --team-id TEAM000001 --key-id KEY0000001.
                """)
        }
        checkSecretFilePermissions(file, warn: printWarning)
        let signer: ProviderTokenSigner
        do {
            signer = try ProviderTokenSigner(teamID: team, keyID: key, key: try ES256PrivateKey(pemFile: file))
        } catch {
            throw CommandFailure.configuration("app \"\(appName)\": \(error) (the .p8 key from --key-file, HERALD_KEY_FILE or key_file; "
                + "the ids from --team-id/--key-id, HERALD_TEAM_ID/HERALD_KEY_ID or team_id/key_id)")
        }
        let minutes = minutes ?? ProviderTokenSource.defaultRefreshMinutes
        return ResolvedCredentials(signer: signer, refreshMinutes: minutes, teamID: team, keyID: key, keyFile: file)
    }
}

/// Credentials loaded and checked once, from which each event loop makes its own token source.
struct ResolvedCredentials: Sendable {
    let signer: ProviderTokenSigner
    let refreshMinutes: Int
    let teamID: String
    let keyID: String
    let keyFile: String

    /// Reads the key file again: a halted app probes with what the file holds now, so fixing the
    /// file needs no restart. The error names the file, never its content.
    var reloader: CredentialsReloader {
        { [teamID, keyID, keyFile] in
            let key = try ES256PrivateKey(pemFile: keyFile)
            return try ProviderTokenSigner(teamID: teamID, keyID: keyID, key: key)
        }
    }

    func tokenSource(time: TimeSource, logger: Logger) throws -> ProviderTokenSource {
        try ProviderTokenSource(signer: signer, refreshMinutes: refreshMinutes, time: time, logger: logger)
    }
}

func environmentValue(_ name: String) -> String? { environment(name) }

func intEnvironment(_ name: String) throws -> Int? {
    guard let text = environment(name) else { return nil }
    guard let value = Int(text) else { throw CommandFailure.configuration("HERALD_\(name) must be a whole number, not \(text)") }
    return value
}

extension Herald {
    static func environmentValue(_ name: String) -> String? { environment(name) }
}

extension Herald {
    /// Logging to standard error, at the level and in the format the flags (`level`, `format`,
    /// already checked by the parser), else HERALD_LOG_LEVEL and HERALD_LOG_FORMAT, else the
    /// config file say; a bad value from the environment or the file is a configuration error.
    static func makeLogger(label: String, level: String?, format: String?, fileLevel: String? = nil, fileFormat: String? = nil,
                           defaultLevel: LogLevelOption = .info) throws -> Logger {
        let formatName = format ?? environment("LOG_FORMAT") ?? fileFormat ?? "text"
        guard let logFormat = LogFormat(rawValue: formatName) else {
            throw CommandFailure.configuration("the log format (HERALD_LOG_FORMAT or log_format) must be text, json or logfmt, not \(formatName)")
        }
        let levelName = level ?? environment("LOG_LEVEL") ?? fileLevel ?? defaultLevel.rawValue
        guard let logLevel = Logger.Level(rawValue: levelName) else {
            throw CommandFailure.configuration("the log level (HERALD_LOG_LEVEL or log_level) must be "
                + LogLevelOption.allCases.map(\.rawValue).joined(separator: ", ") + ", not \(levelName)")
        }
        return bootstrapLogging(label: label, format: logFormat, level: logLevel)
    }
}

/// Points swift-log at Herald's line handler, once per process.
func bootstrapLogging(label: String, format logFormat: LogFormat, level logLevel: Logger.Level) -> Logger {
    LoggingSystem.bootstrap { label in
        var handler = LineLogHandler(label: label, format: logFormat)
        handler.logLevel = logLevel
        return handler
    }
    var logger = Logger(label: label)
    logger.logLevel = logLevel
    return logger
}

/// A device token shortened for logs and output: the first 8 hex digits.
func redacted(_ token: String) -> String {
    token.count <= 8 ? token : String(token.prefix(8)) + "…"
}

/// A warning on standard error, before logging is set up (one write, never a secret).
func printWarning(_ message: String) {
    let bytes = Array("warning: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}
