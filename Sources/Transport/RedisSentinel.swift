import APNs

/// Where Redis Sentinel runs and which master to ask it for: `--sentinel host:port,host:port
/// --sentinel-master NAME`.
///
/// The sentinels only say *where* the master is; the connection made to it takes its user,
/// password, database (and anything else) from the Redis endpoint the operator configured, with
/// the host and port replaced. The sentinels' own password (`requirepass` in sentinel.conf) is
/// separate from the data password.
public struct SentinelConfiguration: Sendable, Equatable {
    /// One sentinel's address.
    public struct Address: Sendable, Equatable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// Sentinel's own port, used when an address names none.
    public static let defaultPort = 26379
    /// More would only slow down a failing resolution; deployments run 3 or 5.
    public static let maximumSentinels = 16

    public var sentinels: [Address]
    public var masterName: String
    /// The sentinels' password (their `requirepass`), never logged.
    public var password: String?

    public init(sentinels: [Address], masterName: String, password: String? = nil) {
        self.sentinels = sentinels
        self.masterName = masterName
        self.password = password
    }

    /// Parses `--sentinel` and `--sentinel-master`; errors say which part is wrong and how it
    /// should look.
    public init(list: String, masterName: String, password: String? = nil) throws(RedisError) {
        self.init(sentinels: try SentinelConfiguration.parseAddresses(list), masterName: masterName, password: password)
        if let problem = SentinelConfiguration.problem(withMasterName: masterName) { throw .invalidURL(problem) }
    }

    /// `host:port,host:port` (IPv6 addresses in brackets, the port defaults to 26379).
    public static func parseAddresses(_ list: String) throws(RedisError) -> [Address] {
        var addresses: [Address] = []
        for item in list.split(separator: ",", omittingEmptySubsequences: false) {
            let text = item.trimmingSpaces
            guard !text.isEmpty else {
                throw .invalidURL("the sentinel list has an empty entry; give host:port,host:port (e.g. 10.0.0.1:26379,10.0.0.2:26379)")
            }
            var host: Substring
            var portText: Substring? = nil
            if text.hasPrefix("[") {
                guard let close = text.firstIndex(of: "]") else {
                    throw .invalidURL("the IPv6 sentinel address \(RedisEndpoint.quoted(text)) has no closing ]")
                }
                host = text[text.index(after: text.startIndex)..<close]
                let after = text[text.index(after: close)...]
                if after.hasPrefix(":") {
                    portText = after.dropFirst()
                } else if !after.isEmpty {
                    throw .invalidURL("unexpected text after the IPv6 sentinel address: \(RedisEndpoint.quoted(after))")
                }
            } else {
                let colons = text.reduce(0) { $0 + ($1 == ":" ? 1 : 0) }
                if colons > 1 {
                    throw .invalidURL("an IPv6 sentinel address goes in brackets ([::1]:26379), got \(RedisEndpoint.quoted(text))")
                }
                if let colon = text.firstIndex(of: ":") {
                    host = text[..<colon]
                    portText = text[text.index(after: colon)...]
                } else {
                    host = text
                }
            }
            var port = defaultPort
            if let portText {
                guard !portText.isEmpty, portText.utf8.count <= 5, portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                      let value = Int(portText), (1...65535).contains(value) else {
                    throw .invalidURL("the port of sentinel \(RedisEndpoint.quoted(text)) must be 1 to 65535")
                }
                port = value
            }
            if let problem = RedisEndpoint.problem(withHost: host) {
                throw .invalidURL("sentinel \(RedisEndpoint.quoted(text)): \(problem)")
            }
            addresses.append(Address(host: String(host), port: port))
        }
        guard addresses.count <= maximumSentinels else {
            throw .invalidURL("the sentinel list names \(addresses.count) sentinels; at most \(maximumSentinels) are accepted")
        }
        return addresses
    }

    /// Why `name` cannot be a Sentinel master name, or nil.
    public static func problem(withMasterName name: String) -> String? {
        if name.isEmpty { return "the Sentinel master name is empty (the NAME of `sentinel monitor NAME host port quorum`)" }
        if name.utf8.count > 256 { return "the Sentinel master name is longer than 256 bytes" }
        if name.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) {
            return "the Sentinel master name may not hold spaces or control characters, got \(RedisEndpoint.quoted(name))"
        }
        return nil
    }

    /// How a sentinel is logged in to: its password, no user, database 0.
    func endpoint(of address: Address) -> RedisEndpoint {
        RedisEndpoint(host: address.host, port: address.port, password: password)
    }

    /// With Sentinel, the Redis URL may carry the user, password and database but no host or
    /// port (`redis://herald:@/2`): parsed with a stand-in host that the sentinels' answer
    /// replaces. Nil gives the defaults (no user, no password, database 0).
    public static func masterEndpoint(url: String?) throws(RedisError) -> RedisEndpoint {
        guard let url else { return RedisEndpoint(host: standInHost) }
        guard let scheme = url.firstRange(of: "://") else { return try RedisEndpoint(url: url) }  // its own error
        let rest = url[scheme.upperBound...]
        let hostStart = rest.lastIndex(of: "@").map { rest.index(after: $0) } ?? rest.startIndex
        let afterCredentials = rest[hostStart...]
        guard afterCredentials.isEmpty || afterCredentials.hasPrefix("/") else {
            throw .invalidURL("--sentinel finds the master by itself, so the Redis URL (--redis, HERALD_REDIS or the config file's redis) "
                + "may not name a host or port, got \(RedisEndpoint.redact(url)); keep only the user and database, "
                + "e.g. redis://herald:@/2, or leave the URL out")
        }
        return try RedisEndpoint(url: String(url[..<hostStart]) + standInHost + afterCredentials)
    }

    /// Shown only until the sentinels named the master (and in a message if they never do).
    public static let standInHost = "sentinel-master.invalid"

    /// `NAME via host:port,host:port`, for logs and messages (never the password).
    public var summary: String { "\(masterName) via \(sentinels.map(\.description).joined(separator: ","))" }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var text = self
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        return text
    }
}

/// Finds the current Redis master through Redis Sentinel, checks it, and hears of failovers.
///
/// `resolve` asks the sentinels in order (`SENTINEL get-master-addr-by-name`), starting with the
/// one that answered last time and moving on when one is down, does not know the name, or names
/// an address that is not a master: a sentinel that was partitioned away during a failover still
/// names the old master, which comes back as a replica, so every answer is checked with `ROLE` on
/// a connection made with the data credentials. `watch` subscribes to `+switch-master` on one
/// sentinel (rotating and backing off when it drops) so that a failover is heard of at once
/// instead of when the old master's connection fails. Loop-confined; nothing here is on the
/// per-notification path (one resolution per reconnect).
public final class RedisSentinelResolver {
    public let loop: EventLoop
    public let configuration: SentinelConfiguration
    /// The configured Redis endpoint: credentials and database for the master; its host and port
    /// are replaced by the master's.
    public let base: RedisEndpoint
    /// How long one sentinel, or one candidate's `ROLE`, may take before the next is tried.
    public var attemptTimeoutMilliseconds: Int64 = 3_000
    /// The master the last successful resolution found.
    public private(set) var current: RedisEndpoint?
    /// Index of the sentinel to ask first: the last one that answered well.
    private var first = 0
    private var attempt: Attempt?

    public init(loop: EventLoop, configuration: SentinelConfiguration, base: RedisEndpoint) {
        precondition(!configuration.sentinels.isEmpty, "Sentinel needs at least one sentinel address")
        self.loop = loop
        self.configuration = configuration
        self.base = base
    }

    deinit {
        attempt?.cancel()
        watcher?.stop()
    }

    // MARK: resolving

    /// Finds the master and checks its role; the completion runs on the loop, never inside this
    /// call. A resolution already under way is replaced (its completion gets nothing).
    public func resolve(_ completion: @escaping (Result<RedisEndpoint, RedisError>) -> Void) {
        attempt?.cancel()
        let attempt = Attempt(resolver: self, completion: completion)
        self.attempt = attempt
        loop.schedule(afterMilliseconds: 0) { [weak attempt] in attempt?.next() }
    }

    /// For one-shot tools on a private loop that nothing else turns: resolves, turning the loop
    /// until the answer is in (or `interrupted` says to give up, after a `loop.stop()`).
    public func resolveTurningLoop(interrupted: () -> Bool = { false }) -> Result<RedisEndpoint, RedisError>? {
        var result: Result<RedisEndpoint, RedisError>? = nil
        let loop = self.loop
        resolve { outcome in
            result = outcome
            loop.stop()
        }
        while result == nil && !interrupted() { loop.run() }
        return result
    }

    fileprivate func finished(_ attempt: Attempt, _ result: Result<RedisEndpoint, RedisError>, sentinelIndex: Int?) {
        guard attempt === self.attempt else { return }
        self.attempt = nil
        if case .success(let endpoint) = result {
            current = endpoint
            if let sentinelIndex { first = sentinelIndex }
        }
        attempt.completion(result)
    }

    /// Replies of a Redis that is not (or not yet) a writable master: after a failover the old
    /// master comes back as a replica (`READONLY`), a restarted one loads its data (`LOADING`), a
    /// replica that lost its master with `replica-serve-stale-data no` says `MASTERDOWN`, and a
    /// master with `min-replicas-to-write` that lost its replicas says `NOREPLICAS`. The worker
    /// reconnects (resolving again through the sentinels) on these, with backoff, instead of
    /// sending the same command again at once.
    public static func meansNotWritableMaster(_ message: String) -> Bool {
        message.hasPrefix("READONLY") || message.hasPrefix("LOADING") || message.hasPrefix("MASTERDOWN")
            || message.hasPrefix("NOREPLICAS")
    }

    /// One resolution: the sentinels in turn from `first`, each error kept for the final message.
    fileprivate final class Attempt: RedisConnectionDelegate {
        weak var resolver: RedisSentinelResolver?
        let completion: (Result<RedisEndpoint, RedisError>) -> Void
        private var tried = 0
        private var errors: [String] = []
        private var connection: RedisConnection?
        private var timer: EventLoop.TimerID?
        private var cancelled = false
        /// Talking to the master a sentinel named (not to a sentinel).
        private var checking = false

        init(resolver: RedisSentinelResolver, completion: @escaping (Result<RedisEndpoint, RedisError>) -> Void) {
            self.resolver = resolver
            self.completion = completion
        }

        func cancel() {
            cancelled = true
            closeConnection()
        }

        private func closeConnection() {
            if let timer, let loop = resolver?.loop { loop.cancel(timer) }
            timer = nil
            connection?.delegate = nil
            connection?.close()
            connection = nil
        }

        /// Asks the next sentinel, or gives up with every sentinel's answer.
        func next() {
            guard !cancelled, let resolver else { return }
            closeConnection()
            checking = false
            let configuration = resolver.configuration
            guard tried < configuration.sentinels.count else {
                resolver.finished(self, .failure(.connectFailed(
                    "no sentinel named a usable master \(RedisEndpoint.quoted(configuration.masterName)): "
                        + errors.joined(separator: "; "))), sentinelIndex: nil)
                return
            }
            let index = (resolver.first + tried) % configuration.sentinels.count
            tried += 1
            let address = configuration.sentinels[index]
            let sentinel = open(configuration.endpoint(of: address), what: "sentinel \(address)")
            sentinel.send(["SENTINEL", "get-master-addr-by-name", configuration.masterName]) { [weak self] result in
                self?.sentinelAnswered(result, address: address, index: index)
            }
        }

        private func open(_ endpoint: RedisEndpoint, what: String) -> RedisConnection {
            let loop = resolver!.loop
            let connection = RedisConnection(loop: loop, endpoint: endpoint)
            connection.connectTimeoutMilliseconds = resolver!.attemptTimeoutMilliseconds
            connection.delegate = self
            self.connection = connection
            let timeout = resolver!.attemptTimeoutMilliseconds
            timer = loop.schedule(afterMilliseconds: timeout) { [weak self, weak connection] in
                guard let self, let connection, connection === self.connection else { return }
                self.timer = nil
                self.errors.append("\(what): no answer within \(timeout) ms")
                self.next()
            }
            connection.connect()
            return connection
        }

        private func sentinelAnswered(_ result: Result<RedisReply, RedisError>, address: SentinelConfiguration.Address, index: Int) {
            guard !cancelled, let resolver else { return }
            let name = RedisEndpoint.quoted(resolver.configuration.masterName)
            switch result {
            case .success(.array(let parts)) where parts.count == 2:
                guard let host = parts[0].string, RedisEndpoint.problem(withHost: host) == nil,
                      let portText = parts[1].string, let port = Int(portText), (1...65535).contains(port) else {
                    errors.append("sentinel \(address) answered an address that is not host and port")
                    next()
                    return
                }
                check(host: host, port: port, sentinel: address, index: index)
            case .success(.null), .success(.array([])):
                errors.append("sentinel \(address) monitors no master named \(name) (check --sentinel-master against the `sentinel monitor` lines of sentinel.conf)")
                next()
            case .success(.error(let message)):
                if message.hasPrefix("NOAUTH") || message.hasPrefix("WRONGPASS") {
                    errors.append("sentinel \(address) refused authentication: \(message) (give the sentinels' password with --sentinel-password-file or HERALD_SENTINEL_PASSWORD)")
                } else if message.contains("unknown command") {
                    errors.append("\(address) is not a sentinel (\(message)); sentinels listen on port \(SentinelConfiguration.defaultPort) by default")
                } else {
                    errors.append("sentinel \(address): \(message)")
                }
                next()
            case .success(let other):
                errors.append("sentinel \(address) answered something unexpected: \(RedisEndpoint.quoted(String(describing: other)))")
                next()
            case .failure:
                break  // the delegate heard why
            }
        }

        /// Connects to the named master with the data credentials and asks `ROLE`.
        private func check(host: String, port: Int, sentinel: SentinelConfiguration.Address, index: Int) {
            guard let resolver else { return }
            closeConnection()
            checking = true
            var endpoint = resolver.base
            endpoint.host = host
            endpoint.port = port
            let candidate = SentinelConfiguration.Address(host: host, port: port)
            let connection = open(endpoint, what: "master \(candidate) named by sentinel \(sentinel)")
            connection.send(["ROLE"]) { [weak self] result in
                guard let self, !self.cancelled, let resolver = self.resolver else { return }
                switch result {
                case .success(.array(let parts)) where parts.first?.string == "master":
                    self.closeConnection()
                    resolver.finished(self, .success(endpoint), sentinelIndex: index)
                case .success(.array(let parts)):
                    let role = parts.first?.string ?? "?"
                    self.errors.append("sentinel \(sentinel) names \(candidate), which says its role is \(RedisEndpoint.quoted(role)), not master (a stale sentinel, or a failover under way)")
                    self.next()
                case .success(.error(let message)):
                    self.errors.append("master \(candidate) named by sentinel \(sentinel) refused ROLE: \(message) (an ACL user for Herald needs +role)")
                    self.next()
                case .success(let other):
                    self.errors.append("master \(candidate) answered ROLE with \(RedisEndpoint.quoted(String(describing: other)))")
                    self.next()
                case .failure:
                    break  // the delegate heard why
                }
            }
        }

        func redisConnectionIsReady(_ connection: RedisConnection) {}

        func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
            guard connection === self.connection, !cancelled, let resolver else { return }
            if case .authenticationFailed = error, checking {
                // The master refused the data credentials: every sentinel would lead to the same refusal.
                closeConnection()
                resolver.finished(self, .failure(error), sentinelIndex: nil)
                return
            }
            let address = SentinelConfiguration.Address(host: connection.endpoint.host, port: connection.endpoint.port)
            var text = "\(checking ? "master" : "sentinel") \(address): \(SentinelText.cause(error, endpoint: connection.endpoint))"
            if case .authenticationFailed = error {
                text += " (give the sentinels' password with --sentinel-password-file or HERALD_SENTINEL_PASSWORD)"
            }
            errors.append(text)
            next()
        }
    }

    // MARK: watching for failovers

    private var watcher: Watcher?

    /// Subscribes to `+switch-master` on one sentinel (the first that accepts, rotating on loss)
    /// and calls `onSwitch` with the new master's endpoint when the watched master moves.
    public func watch(logger: @escaping (String) -> Void = { _ in }, onSwitch: @escaping (RedisEndpoint) -> Void) {
        watcher?.stop()
        let watcher = Watcher(resolver: self, log: logger, onSwitch: onSwitch)
        self.watcher = watcher
        watcher.start()
    }

    public func stopWatching() {
        watcher?.stop()
        watcher = nil
    }

    /// The subscription: one connection, replaced with backoff when it drops; a PING every
    /// `pingIntervalMilliseconds` finds a sentinel that went silent.
    fileprivate final class Watcher: RedisConnectionDelegate {
        weak var resolver: RedisSentinelResolver?
        let log: (String) -> Void
        let onSwitch: (RedisEndpoint) -> Void
        private var connection: RedisConnection?
        private var index = 0
        private var failures = 0
        private var timer: EventLoop.TimerID?
        private var pingTimer: EventLoop.TimerID?
        private var awaitingPong = false
        private var stopped = false
        private var random = SystemRandomNumberGenerator()
        static let pingIntervalMilliseconds: Int64 = 10_000

        init(resolver: RedisSentinelResolver, log: @escaping (String) -> Void, onSwitch: @escaping (RedisEndpoint) -> Void) {
            self.resolver = resolver
            self.log = log
            self.onSwitch = onSwitch
            index = resolver.first
        }

        func start() {
            guard !stopped, let resolver else { return }
            timer = nil
            let configuration = resolver.configuration
            let address = configuration.sentinels[index % configuration.sentinels.count]
            let connection = RedisConnection(loop: resolver.loop, endpoint: configuration.endpoint(of: address))
            connection.connectTimeoutMilliseconds = resolver.attemptTimeoutMilliseconds
            connection.delegate = self
            connection.onUnsolicitedReply = { [weak self] reply in self?.received(reply) }
            self.connection = connection
            awaitingPong = false
            connection.send(["SUBSCRIBE", "+switch-master"]) { [weak self] result in
                if case .success(let reply) = result { self?.received(reply) }
            }
            connection.connect()
            schedulePing()
        }

        func stop() {
            stopped = true
            if let resolver {
                if let timer { resolver.loop.cancel(timer) }
                if let pingTimer { resolver.loop.cancel(pingTimer) }
            }
            timer = nil
            pingTimer = nil
            connection?.delegate = nil
            connection?.close()
            connection = nil
        }

        private func schedulePing() {
            guard let resolver else { return }
            if let pingTimer { resolver.loop.cancel(pingTimer) }
            pingTimer = resolver.loop.schedule(afterMilliseconds: Watcher.pingIntervalMilliseconds) { [weak self] in
                guard let self, !self.stopped, let connection = self.connection else { return }
                self.pingTimer = nil
                if self.awaitingPong {
                    connection.close()  // silent for a whole interval: the delegate replaces it
                    return
                }
                if connection.isReady {
                    self.awaitingPong = true
                    connection.send(["PING"]) { [weak self] result in
                        if case .success(let reply) = result { self?.received(reply) }
                    }
                }
                self.schedulePing()
            }
        }

        /// Pub/sub replies in order or not (a message may arrive where PING's answer was awaited):
        /// each is recognised by its first element.
        private func received(_ reply: RedisReply) {
            guard case .array(let parts) = reply, let kind = parts.first?.string else {
                if case .error(let message) = reply {
                    log("sentinel refused the +switch-master subscription: \(message)")
                    connection?.close()
                }
                return
            }
            switch kind {
            case "pong":
                awaitingPong = false
            case "subscribe":
                if failures > 0 { log("watching +switch-master again") }
                failures = 0
            case "message" where parts.count == 3:
                guard let text = parts[2].string, let resolver else { return }
                // "<master name> <old ip> <old port> <new ip> <new port>"
                let words = text.split(separator: " ")
                guard words.count == 5, words[0] == resolver.configuration.masterName, let port = Int(words[4]),
                      (1...65535).contains(port), RedisEndpoint.problem(withHost: words[3]) == nil else { return }
                var endpoint = resolver.base
                endpoint.host = String(words[3])
                endpoint.port = port
                onSwitch(endpoint)
            default:
                break
            }
        }

        func redisConnectionIsReady(_ connection: RedisConnection) {}

        func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
            guard connection === self.connection, !stopped, let resolver else { return }
            self.connection = nil
            failures += 1
            index += 1  // the next sentinel
            let delay = Backoff.reconnect.delayMilliseconds(afterFailures: failures, using: &random)
            if failures == 1 || failures % 10 == 0 {
                let address = SentinelConfiguration.Address(host: connection.endpoint.host, port: connection.endpoint.port)
                log("no +switch-master subscription on sentinel \(address) (\(SentinelText.cause(error, endpoint: connection.endpoint))); "
                    + "trying the next sentinel in \(delay) ms")
            }
            timer = resolver.loop.schedule(afterMilliseconds: delay) { [weak self] in self?.start() }
        }
    }
}

/// Shortens `RedisError` texts inside the resolver's messages.
enum SentinelText {
    static func cause(_ error: RedisError, endpoint: RedisEndpoint) -> String {
        var text: String
        switch error {
        case .connectFailed(let message), .connectionLost(let message), .protocolError(let message), .server(let message):
            text = message
        case .authenticationFailed, .invalidURL:
            text = error.description
        }
        var stripped = true
        while stripped {
            stripped = false
            for prefix in ["cannot connect to Redis: ", "lost the connection to Redis: ", endpoint.description + ": "] where text.hasPrefix(prefix) {
                text = String(text.dropFirst(prefix.count))
                stripped = true
            }
        }
        return text
    }
}
