import Glibc
import Transport

/// Runs Redis commands for one-shot tools (`herald stats`, `dead-letters`, `feedback tail`) and
/// tests: a `RedisConnection` on a private `EventLoop` that the calling thread turns until the
/// replies it waits for have arrived. Commands of one `pipeline` call go out in one write.
///
/// Not for the worker: it blocks its thread. Not thread-safe: one thread uses it.
public final class BlockingRedisClient: RedisCommandExecutor, RedisConnectionDelegate {
    /// Where the commands go: the configured Redis, or the master Sentinel named at the last connect.
    public private(set) var endpoint: RedisEndpoint
    private let loop: EventLoop
    /// With `--sentinel`: asked for the master before every connect.
    private var sentinel: RedisSentinelResolver?
    /// Why the sentinels named no master at the last connect.
    private var sentinelError: RedisError?
    private var connection: RedisConnection?
    /// Whether the current connection ever became ready (tells "unreachable" from "lost").
    private var everReady = false
    /// Why the current connection closed, as the delegate heard it.
    private var closeError: RedisError?
    private var signals: SignalWatcher?
    /// Set by SIGINT/SIGTERM once `stopOnSignals()` was called.
    public private(set) var interrupted = false

    /// Creates the loop and starts connecting; the first command waits for the connection.
    /// With `sentinel`, `endpoint` gives only the credentials and database: the master's address
    /// comes from the sentinels, asked again on every `reconnect()`.
    public init(endpoint: RedisEndpoint, sentinel: SentinelConfiguration? = nil) throws {
        self.endpoint = endpoint
        do {
            loop = try EventLoop()
        } catch {
            throw QueueToolError.invalidArgument("cannot create an event loop: \(error)")
        }
        self.sentinel = sentinel.map { RedisSentinelResolver(loop: loop, configuration: $0, base: endpoint) }
        connect()
    }

    deinit {
        connection?.delegate = nil
        connection?.close()
    }

    /// From now on SIGINT and SIGTERM end the current wait with `QueueToolError.interrupted`
    /// (used by `feedback tail --follow`). Call before starting other threads.
    public func stopOnSignals() throws {
        guard signals == nil else { return }
        do {
            signals = try SignalWatcher(loop: loop) { [weak self] _ in
                guard let self else { return }
                self.interrupted = true
                self.loop.stop()
            }
        } catch {
            throw QueueToolError.invalidArgument("cannot watch signals: \(error)")
        }
    }

    /// Drops the current connection (if any) and starts a new one.
    public func reconnect() {
        connection?.delegate = nil
        connection?.close()
        connect()
    }

    private func connect() {
        everReady = false
        closeError = nil
        sentinelError = nil
        if let sentinel {
            switch sentinel.resolveTurningLoop(interrupted: { interrupted }) {
            case .success(let master):
                endpoint = master
            case .failure(let error):
                sentinelError = error
                connection = nil
                return
            case nil:
                connection = nil
                return  // interrupted
            }
        }
        let connection = RedisConnection(loop: loop, endpoint: endpoint)
        connection.delegate = self
        self.connection = connection
        connection.connect()
    }

    public func redisConnectionIsReady(_ connection: RedisConnection) {
        guard connection === self.connection else { return }
        everReady = true
    }

    public func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        guard connection === self.connection else { return }
        if closeError == nil { closeError = error }
        loop.stop()
    }

    /// Turns the loop for `milliseconds` (a pause that still hears SIGINT after `stopOnSignals()`).
    public func idle(milliseconds: Int64) throws {
        var done = false
        let loop = self.loop
        loop.refreshNow()
        let timer = loop.schedule(afterMilliseconds: milliseconds) {
            done = true
            loop.stop()
        }
        while !done && !interrupted { loop.run() }
        loop.cancel(timer)
        if interrupted { throw QueueToolError.interrupted }
    }

    /// Whether the last connection is gone (a new command would fail until `reconnect()`).
    public var isClosed: Bool { closeError != nil || sentinelError != nil }

    private final class Wait {
        var replies: [RedisReply?]
        var remaining: Int
        var failure: RedisError?
        var timedOut = false
        init(count: Int) {
            replies = Array(repeating: nil, count: count)
            remaining = count
        }
    }

    public func pipeline(_ commands: [[RedisArgument]], timeoutMilliseconds: Int64) throws -> [RedisReply] {
        guard !commands.isEmpty else { return [] }
        if interrupted { throw QueueToolError.interrupted }
        if let sentinelError, let sentinel { throw QueueToolError.masterNotFound(sentinel.configuration, sentinelError) }
        guard let connection else { throw QueueToolError.connectionLost(endpoint: endpoint.description, cause: "not connected") }
        if let closeError { throw toolError(closeError) }
        let wait = Wait(count: commands.count)
        let loop = self.loop
        for (index, command) in commands.enumerated() {
            connection.send(command) { result in
                switch result {
                case .success(let reply): wait.replies[index] = reply
                case .failure(let error): if wait.failure == nil { wait.failure = error }
                }
                wait.remaining -= 1
                if wait.remaining == 0 { loop.stop() }
            }
        }
        // The loop's clock is read once per turn: after the client sat idle (the API's lanes wait
        // between requests) it is stale, and the timeout would be due at once.
        loop.refreshNow()
        let timer = loop.schedule(afterMilliseconds: timeoutMilliseconds) { [weak self] in
            guard wait.remaining > 0 else { return }
            wait.timedOut = true
            self?.connection?.close()
            loop.stop()
        }
        while wait.remaining > 0 && !wait.timedOut && !interrupted {
            loop.run()
        }
        loop.cancel(timer)
        if wait.timedOut {
            throw QueueToolError.timedOut(endpoint: endpoint.description, command: RedisCommandText.name(commands[0]),
                                          seconds: Int((timeoutMilliseconds + 999) / 1000))
        }
        if interrupted && wait.remaining > 0 {
            // The connection has commands in flight: it cannot be used for anything else.
            connection.delegate = nil
            connection.close()
            closeError = .connectionLost("interrupted")
            throw QueueToolError.interrupted
        }
        if let failure = wait.failure { throw toolError(closeError ?? failure) }
        return wait.replies.map { $0 ?? .null }
    }

    /// A transport failure, worded by whether Redis was ever reached.
    private func toolError(_ error: RedisError) -> QueueToolError {
        if case .authenticationFailed(let message) = error {
            return .authenticationFailed(endpoint: endpoint.description, message: message)
        }
        let cause = QueueToolErrorText.cause(of: error, endpoint: endpoint)
        if !everReady { return .unreachable(endpoint: endpoint.description, cause: cause) }
        switch error {
        case .connectFailed, .authenticationFailed, .invalidURL: return .unreachable(endpoint: endpoint.description, cause: cause)
        default: break
        }
        return .connectionLost(endpoint: endpoint.description, cause: cause)
    }
}

/// Shortens the resolver's error for `QueueToolError.masterNotFound`.
enum SentinelToolText {
    static func cause(_ error: RedisError) -> String {
        switch error {
        case .connectFailed(let message), .connectionLost(let message), .protocolError(let message), .server(let message):
            return message
        case .authenticationFailed, .invalidURL:
            return error.description
        }
    }
}

/// Shortens `RedisError` texts for messages that already name the endpoint.
enum QueueToolErrorText {
    static func cause(of error: RedisError, endpoint: RedisEndpoint) -> String {
        var text: String
        switch error {
        case .connectFailed(let message), .connectionLost(let message), .protocolError(let message), .server(let message):
            text = message
        case .authenticationFailed, .invalidURL:
            text = error.description
        }
        for prefix in ["cannot connect to Redis: ", "lost the connection to Redis: ", endpoint.description + ": "] {
            while text.hasPrefix(prefix) { text = String(text.dropFirst(prefix.count)) }
        }
        // SystemError's wording for a failed name lookup, which carries no errno.
        if text.hasSuffix(" failed: Success (errno 0)") { text = String(text.dropLast(" failed: Success (errno 0)".count)) }
        return text
    }
}
