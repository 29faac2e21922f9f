import ArgumentParser
import HeraldConfig
import Queue
import Transport

/// Which Redis and which queue.
struct QueueOptions: ParsableArguments {
    @Option(help: "Redis URL, redis://[user@]host[:port][/db], rediss://… for TLS, or redis+cluster://host:port,host:port/ for a Redis Cluster (env HERALD_REDIS; default redis://127.0.0.1:6379). Give the password with --redis-password-file or HERALD_REDIS_PASSWORD, not here: the command line is visible to every local user.")
    var redis: String?

    @Option(name: .customLong("redis-ca-file"), help: "With a rediss:// URL: the PEM CA certificate(s) Redis' certificate must chain to, trusted instead of the system store (env HERALD_REDIS_CA_FILE; default the system store). Verification is always on.")
    var redisCAFile: String?

    @Option(name: .customLong("redis-cert"), help: "With a rediss:// URL: a PEM client certificate for Redis' tls-auth-clients, with --redis-key (env HERALD_REDIS_CERT; default none).")
    var redisCert: String?

    @Option(name: .customLong("redis-key"), help: "The PEM private key of --redis-cert (env HERALD_REDIS_KEY; default none).")
    var redisKey: String?

    @Option(name: .customLong("redis-password-file"), help: "A file holding the Redis password (env HERALD_REDIS_PASSWORD_FILE; or HERALD_REDIS_PASSWORD holding the password itself). Wins over a password in the URL (default: the URL's password, if any).")
    var redisPasswordFile: String?

    @Flag(name: .customLong("redis-cluster"),
          help: "The --redis URL is a node of a Redis Cluster: each queue's commands go to the master of its slot (env HERALD_REDIS_CLUSTER=true; default off). A redis+cluster://host:port,host:port/ URL implies it.")
    var redisCluster = false

    @Option(help: "Queue name: keys are herald:{QUEUE}:jobs, :retry, :dead, :feedback (env HERALD_QUEUE; default default). With --shards, the shards' base name.")
    var queue: String?

    @Option(help: "Redis Sentinel addresses, host:port,host:port (env HERALD_SENTINEL; none by default; the port defaults to 26379). Herald asks them for the master --sentinel-master names and follows failovers. Replaces the host of --redis: with --sentinel, --redis may give only the user and database (redis://herald:@/2).")
    var sentinel: String?

    @Option(name: .customLong("sentinel-master"), help: "The master's name in the sentinels' `sentinel monitor` line (env HERALD_SENTINEL_MASTER; required with --sentinel).")
    var sentinelMaster: String?

    @Option(name: .customLong("sentinel-password-file"), help: "A file holding the sentinels' own password, their requirepass (env HERALD_SENTINEL_PASSWORD_FILE, or HERALD_SENTINEL_PASSWORD holding it; none by default). Separate from the Redis password.")
    var sentinelPasswordFile: String?

    @Option(help: "Several queues, comma-separated, e.g. a,b,c (env HERALD_QUEUES; default: --queue alone). Excludes --queue and --shards.")
    var queues: String?

    @Option(help: "Shard queues QUEUE-0 … QUEUE-(N-1), QUEUE being --queue; producers pick one by the device token's CRC-32 mod N, see docs/job-format.md (env HERALD_SHARDS; default: not sharded). 1 to 256.")
    var shards: Int?

    /// The endpoint with its password from, highest first: --redis-password-file,
    /// HERALD_REDIS_PASSWORD_FILE, HERALD_REDIS_PASSWORD, the config file's `redis_password_file`
    /// (`configPasswordFile`), the URL.
    func endpoint(configPasswordFile: String? = nil, configTLS: RedisTLS? = nil) throws -> RedisEndpoint {
        let url = redis ?? environmentValue("REDIS") ?? "redis://127.0.0.1:6379"
        if RedisClusterSeeds.isClusterURL(url) {
            // A tool given a cluster URL talks to the first seed unless it routes (`blockingClient`).
            return try clusterSeeds(configPasswordFile: configPasswordFile).endpoints[0]
        }
        return try target(configPasswordFile: configPasswordFile, configTLS: configTLS).endpoint
    }

    /// The Redis endpoint (with `sentinel`: only its credentials and database) and the Sentinel
    /// settings, each from flags, then HERALD_* variables, then the config file's values (which
    /// `herald worker` copies into these options), then defaults. A Redis host and a sentinel
    /// list together are refused: the sentinels say where the master is. With a `rediss://` URL
    /// the endpoint carries the TLS files (`configTLS`: the config file's), so the master the
    /// sentinels name is reached over TLS too.
    func target(configPasswordFile: String? = nil, configSentinelPasswordFile: String? = nil, configTLS: RedisTLS? = nil)
        throws -> (endpoint: RedisEndpoint, sentinel: SentinelConfiguration?) {
        let sentinelList = sentinel ?? environmentValue("SENTINEL")
        let masterName = sentinelMaster ?? environmentValue("SENTINEL_MASTER")
        let urlGiven = redis ?? environmentValue("REDIS")
        var sentinelConfiguration: SentinelConfiguration? = nil
        var endpoint: RedisEndpoint
        if sentinelList != nil || masterName != nil {
            guard let sentinelList, let masterName else {
                throw ValidationError(sentinelList == nil
                    ? "--sentinel-master (HERALD_SENTINEL_MASTER) needs --sentinel host:port,host:port (HERALD_SENTINEL): the sentinels to ask for it"
                    : "--sentinel (HERALD_SENTINEL) needs --sentinel-master NAME (HERALD_SENTINEL_MASTER): the name in the sentinels' `sentinel monitor NAME ...` line")
            }
            do {
                sentinelConfiguration = try SentinelConfiguration(list: sentinelList, masterName: masterName)
            } catch {
                guard case .invalidURL(let problem) = error else { throw ValidationError(error.description) }
                throw ValidationError("invalid --sentinel or --sentinel-master (HERALD_SENTINEL, HERALD_SENTINEL_MASTER): \(problem)")
            }
            do {
                endpoint = try SentinelConfiguration.masterEndpoint(url: urlGiven)
            } catch {
                throw ValidationError(error.description)
            }
            sentinelConfiguration?.password = try SentinelPassword.resolve(flagFile: sentinelPasswordFile, configFile: configSentinelPasswordFile)
        } else {
            do {
                endpoint = try RedisEndpoint(url: urlGiven ?? "redis://127.0.0.1:6379")
            } catch {
                throw ValidationError(error.description)
            }
        }
        if redis != nil && endpoint.password != nil {
            printWarning("the Redis password in --redis is visible to every local user (ps, /proc/PID/cmdline); "
                + "give it with --redis-password-file or HERALD_REDIS_PASSWORD instead")
        }
        if let password = try RedisPassword.resolve(flagFile: redisPasswordFile, configFile: configPasswordFile) {
            endpoint.password = password
        }
        let files = RedisTLS(caFile: redisCAFile ?? environmentValue("REDIS_CA_FILE") ?? configTLS?.caFile,
                             certificateFile: redisCert ?? environmentValue("REDIS_CERT") ?? configTLS?.certificateFile,
                             keyFile: redisKey ?? environmentValue("REDIS_KEY") ?? configTLS?.keyFile)
        endpoint.tls = try RedisTLSOptions.resolve(files, secure: endpoint.tls != nil)
        return (endpoint, sentinelConfiguration)
    }

    /// Whether the Redis is a cluster: `--redis-cluster`, HERALD_REDIS_CLUSTER, the config
    /// file's `redis_cluster` (`configCluster`), or a `redis+cluster://` URL.
    func isCluster(configCluster: Bool? = nil, url configURL: String? = nil) throws -> Bool {
        let url = redis ?? environmentValue("REDIS") ?? configURL ?? ""
        var cluster = configCluster ?? false
        if let text = environmentValue("REDIS_CLUSTER") {
            switch text.lowercased() {
            case "1", "true", "yes", "on": cluster = true
            case "0", "false", "no", "off": cluster = false
            default: throw ValidationError("HERALD_REDIS_CLUSTER must be true or false, not \(text)")
            }
        }
        if redisCluster || RedisClusterSeeds.isClusterURL(url) { cluster = true }
        if cluster && (sentinel ?? environmentValue("SENTINEL")) != nil {
            throw ValidationError("a Redis Cluster (--redis-cluster, redis+cluster://) and --sentinel exclude each other: "
                + "a cluster fails over by itself; give its nodes in --redis")
        }
        return cluster
    }

    /// The cluster's seed nodes with the password resolved as for `endpoint(configPasswordFile:)`.
    func clusterSeeds(configPasswordFile: String? = nil, configURL: String? = nil) throws -> RedisClusterSeeds {
        let url = redis ?? environmentValue("REDIS") ?? configURL ?? "redis://127.0.0.1:6379"
        do {
            var seeds: RedisClusterSeeds
            if RedisClusterSeeds.isClusterURL(url) {
                seeds = try RedisClusterSeeds(url: url)
            } else {
                seeds = try RedisClusterSeeds(endpoints: [try RedisEndpoint(url: url)])
            }
            if redis != nil && seeds.endpoints[0].password != nil {
                printWarning("the Redis password in --redis is visible to every local user (ps, /proc/PID/cmdline); "
                    + "give it with --redis-password-file or HERALD_REDIS_PASSWORD instead")
            }
            if let password = try RedisPassword.resolve(flagFile: redisPasswordFile, configFile: configPasswordFile) {
                var endpoints = seeds.endpoints
                for index in endpoints.indices { endpoints[index].password = password }
                seeds = try RedisClusterSeeds(endpoints: endpoints)
            }
            return seeds
        } catch let error as RedisError {
            throw ValidationError(error.description)
        }
    }

    func keys() -> QueueKeys {
        QueueKeys(queue: queue ?? environmentValue("QUEUE") ?? QueueKeys.defaultQueue)
    }

    /// Whether a flag or HERALD_* variable chooses the queues (--queue, --queues, --shards).
    var selectsQueues: Bool {
        queue != nil || queues != nil || shards != nil
            || environmentValue("QUEUE") != nil || environmentValue("QUEUES") != nil || environmentValue("SHARDS") != nil
    }

    /// Every queue named by --queue, --queues or --shards (flags, then HERALD_QUEUE, HERALD_QUEUES,
    /// HERALD_SHARDS; then `file`'s queue, queues and shards, taken together and only when neither
    /// flags nor variables choose any), checked.
    func queueKeys(file: ConfigFile? = nil) throws -> [QueueKeys] {
        let selection: Result<[String], QueueSelectionError>
        if selectsQueues || file == nil {
            selection = QueueShards.resolve(queue: queue ?? environmentValue("QUEUE"), queues: queues ?? environmentValue("QUEUES"),
                                            shards: try shards ?? intEnvironment("SHARDS"))
        } else {
            selection = QueueShards.resolve(queue: file?.queue, queues: file?.queues.map { $0.joined(separator: ",") },
                                            shards: file?.shards)
        }
        switch selection {
        case .success(let names): return names.map { QueueKeys(queue: $0) }
        case .failure(let error): throw ValidationError(error.description)
        }
    }

    /// For commands that work on one queue: an error naming the command when several are chosen.
    func singleQueue(for command: String) throws -> QueueKeys {
        let all = try queueKeys()
        guard all.count == 1 else {
            throw ValidationError("herald \(command) works on one queue at a time: give --queue NAME (one of \(all.map(\.queue).joined(separator: ", ")))")
        }
        return all[0]
    }
}

/// Where the sentinels' password comes from: --sentinel-password-file, HERALD_SENTINEL_PASSWORD_FILE,
/// HERALD_SENTINEL_PASSWORD, the config file's `sentinel_password_file`.
enum SentinelPassword {
    static func resolve(flagFile: String?, configFile: String?,
                        environment: (String) -> String? = environmentValue) throws -> String? {
        if let path = flagFile ?? environment("SENTINEL_PASSWORD_FILE") { return try read(path) }
        if let password = environment("SENTINEL_PASSWORD") { return password }
        if let path = configFile { return try read(path) }
        return nil
    }

    private static func read(_ path: String) throws -> String {
        let password = try readSecretFile(path, warn: printWarning)
        guard !password.isEmpty else { throw ValidationError("the sentinel password file \(path) is empty") }
        return password
    }
}

/// Where the Redis password comes from when it is not in the URL.
enum RedisPassword {
    /// The password from the first source given (see `QueueOptions.endpoint`), or nil when none
    /// is; an unreadable or empty file is an error that names the file, never its content.
    static func resolve(flagFile: String?, configFile: String?,
                        environment: (String) -> String? = environmentValue) throws -> String? {
        if let path = flagFile ?? environment("REDIS_PASSWORD_FILE") { return try read(path) }
        if let password = environment("REDIS_PASSWORD") { return password }
        if let path = configFile { return try read(path) }
        return nil
    }

    private static func read(_ path: String) throws -> String {
        let password = try readSecretFile(path, warn: printWarning)
        guard !password.isEmpty else { throw ValidationError("the Redis password file \(path) is empty") }
        return password
    }
}

/// The TLS files of a Redis endpoint, checked once at start-up.
enum RedisTLSOptions {
    /// The endpoint's TLS settings: nil for a plain `redis://` URL (TLS files with one are an
    /// error, not silently unused); for `rediss://`, the files, loaded once so that a missing or
    /// unreadable one is a start-up error that names it.
    static func resolve(_ files: RedisTLS, secure: Bool) throws -> RedisTLS? {
        let given = [files.caFile.map { _ in "--redis-ca-file" }, files.certificateFile.map { _ in "--redis-cert" },
                     files.keyFile.map { _ in "--redis-key" }].compactMap { $0 }
        guard secure else {
            if !given.isEmpty {
                throw ValidationError("\(given.joined(separator: ", ")) (or HERALD_REDIS_CA_FILE, HERALD_REDIS_CERT, HERALD_REDIS_KEY, "
                    + "redis_ca_file, redis_cert, redis_key) need a TLS URL: use rediss:// instead of redis://")
            }
            return nil
        }
        if let key = files.keyFile { checkSecretFilePermissions(key, warn: printWarning) }
        do {
            _ = try files.makeContext()
        } catch {
            throw ValidationError("cannot set up TLS for Redis: \(error)")
        }
        return files
    }
}
