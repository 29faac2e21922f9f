import ArgumentParser
import Glibc
import Yams

/// `--config herald.yaml` (YAML or JSON): settings for real deployments, several apps among them.
///
/// Precedence, highest first: command-line flags, `HERALD_*` environment variables, this file,
/// built-in defaults. Flags and environment variables describe the app named `default`; the file
/// may describe any number of apps, each with its own bundle id, environment, credentials and
/// pool. Secrets are read from files, never written in this file.
struct ConfigFile: Decodable, Equatable {
    var redis: String?
    /// A file holding the Redis password (the URL in `redis` should carry none).
    var redisPasswordFile: String?
    var queue: String?
    var batch: Int?
    var claimIdle: Int?
    var maxAttempts: Int?
    var maxDeliveries: Int?
    var drainTimeout: Int?
    var threads: Int?
    var metricsPort: Int?
    var metricsHost: String?
    var logLevel: String?
    var logFormat: String?
    var apps: [String: App]?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case redis, queue, batch, threads, apps
        case redisPasswordFile = "redis_password_file"
        case claimIdle = "claim_idle"
        case maxAttempts = "max_attempts"
        case maxDeliveries = "max_deliveries"
        case drainTimeout = "drain_timeout"
        case metricsPort = "metrics_port"
        case metricsHost = "metrics_host"
        case logLevel = "log_level"
        case logFormat = "log_format"
    }

    /// One app: where its notifications go and how it authenticates.
    struct App: Decodable, Equatable {
        var bundleID: String?
        var environment: String?
        var apnsHost: String?
        var apnsPort: Int?
        var caFile: String?
        var connections: Int?
        var maxStreams: Int?
        /// Token auth.
        var teamID: String?
        var keyID: String?
        var keyFile: String?
        var tokenRefreshMinutes: Int?
        /// Certificate auth: PEM certificate and key, or a PKCS#12 file with its password in a file.
        var certificateFile: String?
        var privateKeyFile: String?
        var pkcs12File: String?
        var pkcs12PasswordFile: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case environment, connections
            case bundleID = "bundle_id"
            case apnsHost = "apns_host"
            case apnsPort = "apns_port"
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

    /// Reads and checks the file; errors say which file and what is wrong.
    static func load(_ path: String) throws -> ConfigFile {
        let text = try readFile(path)
        do {
            let file = try YAMLDecoder().decode(ConfigFile.self, from: text)
            // Decoding skips keys it does not know: a misspelt `drain_timout` would silently leave
            // the default in force. Every key must be one Herald reads.
            let unknown = try ConfigFile.unknownKeys(in: text)
            if !unknown.isEmpty {
                throw ValidationError("the config file \(path) has unknown keys: \(unknown.joined(separator: ", ")) "
                    + "(settings: \(CodingKeys.allCases.map(\.rawValue).joined(separator: ", "));"
                    + " app settings: \(App.CodingKeys.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            return file
        } catch let error as ValidationError {
            throw error
        } catch let error as DecodingError {
            throw ValidationError("the config file \(path) is not valid: \(ConfigFile.explain(error))")
        } catch {
            throw ValidationError("the config file \(path) is not valid YAML or JSON: \(error)")
        }
    }

    /// Keys of the file's mappings that no setting reads, as dotted paths (`apps.legacy.key_fil`).
    static func unknownKeys(in text: String) throws -> [String] {
        guard let root = try Yams.compose(yaml: text)?.mapping else { return [] }
        var unknown: [String] = []
        for (key, value) in root {
            guard let name = key.string else { continue }
            guard CodingKeys(rawValue: name) != nil else { unknown.append(name); continue }
            guard name == CodingKeys.apps.rawValue, let apps = value.mapping else { continue }
            for (appKey, app) in apps {
                guard let appName = appKey.string, let settings = app.mapping else { continue }
                for (settingKey, _) in settings {
                    if let setting = settingKey.string, App.CodingKeys(rawValue: setting) == nil {
                        unknown.append("apps.\(appName).\(setting)")
                    }
                }
            }
        }
        return unknown
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

/// Warns when a secret file can be read by others than its owner; never prints its content.
func checkSecretFilePermissions(_ path: String, warn: (String) -> Void) {
    var info = stat()
    guard stat(path, &info) == 0 else { return }
    // World-readable is always wrong; group-readable only when the group is not Herald's own
    // (Kubernetes mounts secrets with the pod's fsGroup).
    let worldReadable = info.st_mode & 0o004 != 0
    let foreignGroupReadable = info.st_mode & 0o040 != 0 && info.st_gid != getegid()
    if worldReadable || foreignGroupReadable {
        let mode = String(info.st_mode & 0o777, radix: 8)
        warn("the secret file \(path) is readable by \(worldReadable ? "everyone" : "another group") (mode \(mode)); run: chmod 600 \(path)")
    }
}

/// Reads a secret (e.g. a PKCS#12 password) from a file, without its trailing newline.
func readSecretFile(_ path: String, warn: (String) -> Void) throws -> String {
    checkSecretFilePermissions(path, warn: warn)
    var text = try readFile(path)
    while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
    return text
}
