import Yams

/// `--config herald.yaml` (YAML or JSON): settings for real deployments, several apps among them.
///
/// Precedence, highest first: command-line flags, `HERALD_*` environment variables, this file,
/// built-in defaults. Flags and environment variables describe the app named `default`; the file
/// may describe any number of apps, each with its own bundle id, environment, credentials and
/// pool. Secrets are read from files, never written in this file.
///
/// A library of its own so that parsing is reachable without the command line (the fuzz targets
/// in Tests/Fuzz); `herald worker` reads the file and calls `parse(_:path:)`.
public struct ConfigFile: Decodable, Equatable, Sendable {
    public var redis: String?
    /// A file holding the Redis password (the URL in `redis` should carry none).
    public var redisPasswordFile: String?
    /// With a `rediss://` URL: the CA file Redis' certificate must chain to (else the system store).
    public var redisCAFile: String?
    /// With a `rediss://` URL: the client certificate and key for Redis' `tls-auth-clients`.
    public var redisCert: String?
    public var redisKey: String?
    /// `redis` is a node of a Redis Cluster (also implied by a `redis+cluster://` URL).
    public var redisCluster: Bool?
    /// Redis Sentinel: `host:port,host:port` and the master's name; `redis` then names no host.
    public var sentinel: String?
    public var sentinelMaster: String?
    /// A file holding the sentinels' own password.
    public var sentinelPasswordFile: String?
    public var queue: String?
    /// Several queues for one worker (`--queues`); excludes `shards`.
    public var queues: [String]?
    /// `queue`-0 … `queue`-(N-1) (`--shards`).
    public var shards: Int?
    public var batch: Int?
    public var claimIdle: Int?
    public var idleConsumerTimeout: Int?
    public var maxAttempts: Int?
    public var maxDeliveries: Int?
    public var drainTimeout: Int?
    /// Device tokens a worker loop remembers as backed off after 429 (`--token-backoff-capacity`).
    public var tokenBackoffCapacity: Int?
    public var threads: Int?
    public var metricsPort: Int?
    public var metricsHost: String?
    public var logLevel: String?
    public var logFormat: String?
    /// `results: true` (every queue the worker reads), `false`, or a list of queue names: whose
    /// every notification outcome goes to the queue's results stream.
    public var results: ResultsSetting?
    public var resultsMaxLength: Int?
    public var apps: [String: App]?

    public enum CodingKeys: String, CodingKey, CaseIterable {
        case redis, queue, queues, shards, batch, threads, apps
        case redisPasswordFile = "redis_password_file"
        case redisCAFile = "redis_ca_file"
        case redisCert = "redis_cert"
        case redisKey = "redis_key"
        case redisCluster = "redis_cluster"
        case sentinel
        case sentinelMaster = "sentinel_master"
        case sentinelPasswordFile = "sentinel_password_file"
        case claimIdle = "claim_idle"
        case idleConsumerTimeout = "idle_consumer_timeout"
        case maxAttempts = "max_attempts"
        case maxDeliveries = "max_deliveries"
        case drainTimeout = "drain_timeout"
        case tokenBackoffCapacity = "token_backoff_capacity"
        case metricsPort = "metrics_port"
        case metricsHost = "metrics_host"
        case logLevel = "log_level"
        case logFormat = "log_format"
        case results
        case resultsMaxLength = "results_max_length"
    }

    /// The `results:` setting: a boolean or a list of queue names.
    public enum ResultsSetting: Decodable, Equatable, Sendable {
        case enabled(Bool)
        case queues([String])

        public init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let flag = try? container.decode(Bool.self) {
                self = .enabled(flag)
            } else if let names = try? container.decode([String].self) {
                self = .queues(names)
            } else {
                throw DecodingError.typeMismatch(ResultsSetting.self, .init(
                    codingPath: decoder.codingPath, debugDescription: "results should be true, false, or a list of queue names"))
            }
        }
    }

    /// One app: where its notifications go and how it authenticates.
    public struct App: Decodable, Equatable, Sendable {
        public var bundleID: String?
        public var environment: String?
        public var apnsHost: String?
        public var apnsPort: Int?
        /// With `environment: both`: the sandbox host and port (`apns_host` names production's).
        public var apnsSandboxHost: String?
        public var apnsSandboxPort: Int?
        /// Where Live Activity broadcasts go, when not over the push connections (Apple's pages
        /// name both the push host and `api-broadcast.push.apple.com`).
        public var broadcastHost: String?
        public var broadcastPort: Int?
        public var caFile: String?
        public var connections: Int?
        public var maxStreams: Int?
        /// Token auth.
        public var teamID: String?
        public var keyID: String?
        public var keyFile: String?
        public var tokenRefreshMinutes: Int?
        /// Certificate auth: PEM certificate and key, or a PKCS#12 file with its password in a file.
        public var certificateFile: String?
        public var privateKeyFile: String?
        public var pkcs12File: String?
        public var pkcs12PasswordFile: String?

        public enum CodingKeys: String, CodingKey, CaseIterable {
            case environment, connections
            case bundleID = "bundle_id"
            case apnsHost = "apns_host"
            case apnsPort = "apns_port"
            case apnsSandboxHost = "apns_sandbox_host"
            case apnsSandboxPort = "apns_sandbox_port"
            case broadcastHost = "broadcast_host"
            case broadcastPort = "broadcast_port"
            case caFile = "ca_file"
            case maxStreams = "max_streams"
            case teamID = "team_id"
            case keyID = "key_id"
            case keyFile = "key_file"
            case tokenRefreshMinutes = "token_refresh_minutes"
            case certificateFile = "certificate_file"
            case privateKeyFile = "private_key_file"
            case pkcs12File = "pkcs12_file"
            case pkcs12PasswordFile = "pkcs12_password_file"
        }
    }

    /// Parses and checks the text of the file at `path` (named in the errors only); errors say
    /// what is wrong.
    public static func parse(_ text: String, path: String) throws(ConfigFileError) -> ConfigFile {
        // Counted before the YAML library builds the document: aliases (merge keys among them)
        // nested under an app would multiply into billions of settings to decode, and an alias
        // used as a key into billions of values to hash while building.
        if ConfigFile.expandedValueCount(text, limit: maximumValues) == nil {
            throw ConfigFileError("the config file \(path) is not valid: it holds more than \(maximumValues) values once its aliases are expanded")
        }
        do {
            let root = try Yams.compose(yaml: text)
            // Screened before decoding: the YAML library traps on overflowing base-60 numbers.
            if let root, let refusal = ConfigFile.screen(root) {
                throw ConfigFileError("the config file \(path) is not valid: \(refusal)")
            }
            let file = try YAMLDecoder().decode(ConfigFile.self, from: text)
            // Decoding skips keys it does not know: a misspelt `drain_timout` would silently leave
            // the default in force. Every key must be one Herald reads.
            let unknown = root.map(ConfigFile.unknownKeys) ?? []
            if !unknown.isEmpty {
                throw ConfigFileError("the config file \(path) has unknown keys: \(unknown.joined(separator: ", ")) "
                    + "(settings: \(CodingKeys.allCases.map(\.rawValue).joined(separator: ", "));"
                    + " app settings: \(App.CodingKeys.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            return file
        } catch let error as ConfigFileError {
            throw error
        } catch let error as DecodingError {
            throw ConfigFileError("the config file \(path) is not valid: \(ConfigFile.explain(error))")
        } catch {
            throw ConfigFileError("the config file \(path) is not valid YAML or JSON: \(error)")
        }
    }

    /// Keys of the file's mappings that no setting reads, as dotted paths (`apps.legacy.key_fil`).
    /// Keys brought in by merge keys (`<<: *shared`) are checked as if written in place.
    static func unknownKeys(in document: Node) -> [String] {
        guard let root = document.mapping else { return [] }
        var unknown: [String] = []
        for (key, value) in settings(of: root) {
            guard let name = key.string else { continue }
            guard CodingKeys(rawValue: name) != nil else { unknown.append(name); continue }
            guard name == CodingKeys.apps.rawValue, let apps = value.mapping else { continue }
            for (appKey, app) in settings(of: apps) {
                guard let appName = appKey.string, let appSettings = app.mapping else { continue }
                for (settingKey, _) in settings(of: appSettings) {
                    if let setting = settingKey.string, App.CodingKeys(rawValue: setting) == nil {
                        unknown.append("apps.\(appName).\(setting)")
                    }
                }
            }
        }
        return unknown
    }

    /// A mapping's pairs with its merge keys (`<<: *a` or `<<: [*a, *b]`) replaced by the pairs
    /// they bring in, as decoding reads them. The nesting is bounded by `maximumValues`, which
    /// `parse` checked first.
    static func settings(of mapping: Node.Mapping) -> [(key: Node, value: Node)] {
        var pairs: [(key: Node, value: Node)] = []
        for (key, value) in mapping {
            guard key.tag.rawValue == Tag.Name.merge.rawValue else { pairs.append((key, value)); continue }
            switch value {
            case .mapping(let merged): pairs += settings(of: merged)
            case .sequence(let sequence): for case .mapping(let merged) in sequence { pairs += settings(of: merged) }
            default: continue
            }
        }
        return pairs
    }

    /// The most values (scalars, mappings and sequences, counted again wherever an alias repeats
    /// them) a config file may hold: far above any real file's, far below what nested aliases
    /// (`b: [*a, *a, …]`, `c: [*b, *b, …]`) can multiply into.
    public static let maximumValues = 100_000

    /// Why the composed `document` cannot be decoded safely, or nil: plain scalars that decoding
    /// as an integer would read as base-60 numbers (`1:30` is 90, as YAML 1.1 has it) too large
    /// for an `Int`. The YAML library computes those with trapping arithmetic, so a file holding
    /// one would crash the worker instead of being refused. Each is named by its dotted path
    /// (`apps.shop.connections: 1:0:0:0:0:0:0:0:0:0:0`). The walk visits aliased nodes again
    /// wherever they are used: `parse` refused documents that expand past `maximumValues` first.
    static func screen(_ document: Node) -> String? {
        var tooLarge: [String] = []
        var pending: [(node: Node, path: String)] = [(document, "")]
        while let (node, path) = pending.popLast() {
            switch node {
            case .scalar(let scalar):
                guard scalar.style == .plain || scalar.style == .any, baseSixtyOverflows(scalar.string) else { continue }
                tooLarge.append("\(path.isEmpty ? "the document" : path): \(scalar.string.prefix(40))")
            case .mapping(let mapping):
                for (key, value) in mapping {
                    let name = key.string ?? "?"
                    pending.append((value, path.isEmpty ? name : path + "." + name))
                }
            case .sequence(let sequence):
                for (index, element) in sequence.enumerated() { pending.append((element, "\(path)[\(index)]")) }
            case .alias:
                continue
            }
        }
        guard !tooLarge.isEmpty else { return nil }
        return "\(tooLarge.sorted().joined(separator: ", ")) read as base-60 numbers (YAML reads digits separated "
            + "by colons, as in 1:30, that way) whose computation overflows a 64-bit integer (too large, or "
            + "eleven or more groups); write the value in decimal, or quote it if it is text"
    }

    /// Whether `text`, read as the YAML library reads an integer, is a base-60 number whose
    /// arithmetic overflows.
    static func baseSixtyOverflows(_ text: String) -> Bool {
        let withSign = text.replacingOccurrences(of: "_", with: "")
        let negative = withSign.hasPrefix("-")
        let unsigned = withSign.dropFirst(negative || withSign.hasPrefix("+") ? 1 : 0)
        guard withSign != "0", !unsigned.hasPrefix("0"), unsigned.contains(":") else { return false }
        var groups: [Int] = []
        for group in unsigned.split(separator: ":", omittingEmptySubsequences: false) {
            guard let value = Int(group, radix: 10) else { return false }
            groups.append(value)
        }
        var base = 1
        var value = 0
        for group in groups.reversed() {
            let (product, productOverflow) = group.multipliedReportingOverflow(by: base)
            let (sum, sumOverflow) = value.addingReportingOverflow(product)
            let (nextBase, baseOverflow) = base.multipliedReportingOverflow(by: 60)
            if productOverflow || sumOverflow || baseOverflow { return true }
            (value, base) = (sum, nextBase)
        }
        return (negative ? -1 : 1).multipliedReportingOverflow(by: value).overflow
    }

    static func explain(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String { keys.map(\.stringValue).joined(separator: ".") }
        switch error {
        case .typeMismatch(let type, let context): return "\(path(context.codingPath)) should be \(type)"
        case .valueNotFound(let type, let context): return "\(path(context.codingPath)) should be \(type)"
        case .keyNotFound(let key, let context): return "missing \(path(context.codingPath + [key]))"
        case .dataCorrupted(let context): return "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}

/// Why a config file was refused, in words for the operator (the file's path included).
public struct ConfigFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) { self.description = description }
}
